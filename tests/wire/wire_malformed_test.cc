// Malformed wire input: every error names the message and field at fault,
// truncation is rejected exactly when protobuf rejects it, and corrupted bytes
// never make the decoder read outside its input.
#include <random>
#include <string>
#include <vector>

#include "common/wire.h"
#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"
#include "tests/test_util.h"
#include "tests/wire/wire_test_util.h"

namespace tdock::wire {
namespace {

// Every prefix of a valid message is accepted by our decoder exactly when
// protobuf accepts it (truncation inside a field is an error for both).
TEST(WireDecode, PrefixesAgreeWithProtobuf) {
  const std::string bytes = SmallPut().SerializeAsString();
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    v1::PutRequest parsed;
    EXPECT_EQ(DecodePut(Whole(prefix)).ok(), parsed.ParseFromString(prefix))
        << n;
  }
}

// The same for a BALANCED share: truncation inside the round, a micro-batch,
// or a balance double is an error for both decoders.
TEST(WireDecode, BalancedPrefixesAgreeWithProtobuf) {
  const std::string bytes = BalancedBatch(17).SerializeAsString();
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    v1::GetResponse parsed;
    EXPECT_EQ(DecodeBatch(Whole(prefix)).ok(), parsed.ParseFromString(prefix))
        << n;
  }
}

struct BadCase {
  std::string bytes;
  bool batch;  // GetResponse instead of PutRequest
  std::string error;
};

std::vector<BadCase> BadCases() {
  const std::string ten_ff(10, '\xff');
  const std::string ok_column = Len(15, Len(1, "a"));
  return {
      {"\x80", false, "PutRequest: truncated tag"},
      {Tag(2, 0) + "\x80\x80", false, "PutRequest.step: truncated varint"},
      {Tag(2, 0) + ten_ff + "\x01", false,
       "PutRequest.step: varint longer than 10 bytes"},
      {Tag(2, 0) + std::string(9, '\xff') + "\x02", false,
       "PutRequest.step: varint longer"},
      {ten_ff + "\x01", false, "PutRequest: tag longer than 10 bytes"},
      {Tag(1, 2) + Varint(5) + "ab", false,
       "PutRequest.dock: length 5 exceeds the 2 bytes"},
      {Tag(1, 2), false, "PutRequest.dock: truncated length"},
      {Len(2, "x"), false, "PutRequest.step: wire type 2, expected 0"},
      {Tag(1, 0) + Varint(1), false,
       "PutRequest.dock: wire type 0, expected 2"},
      {Len(5, "7"), false, "PutRequest.ack_lease: wire type 2, expected 0"},
      {Tag(5, 0) + "\xff\xff", false, "PutRequest.ack_lease: truncated varint"},
      {Tag(3, 5) + "abcd", false,
       "PutRequest.rows: wire type 5, expected 0 or 2"},
      {Tag(9, 3), false, "PutRequest.<field 9>: group wire type 3"},
      {Tag(9, 4), false, "PutRequest.<field 9>: group wire type 4"},
      {Tag(9, 6), false, "PutRequest.<field 9>: invalid wire type 6"},
      {Tag(9, 7), false, "PutRequest.<field 9>: invalid wire type 7"},
      {std::string("\0", 1), false, "PutRequest: invalid tag 0"},
      {Varint(uint64_t{1} << 35), false, "PutRequest: invalid tag"},
      {Tag(9, 1) + "1234567", false, "PutRequest.<field 9>: truncated fixed64"},
      {Tag(9, 5) + "123", false, "PutRequest.<field 9>: truncated fixed32"},
      {Tag(15, 0) + Varint(1), false,
       "PutRequest.columns[0]: wire type 0, expected 2"},
      {Tag(15, 2) + Varint(10) + "abc", false,
       "PutRequest.columns[0]: length 10 exceeds"},
      {ok_column + Len(15, "\x80"), false,
       "PutRequest.columns[1]: truncated tag"},
      {Len(15, Tag(15, 2) + Varint(5) + "ab") + Len(1, "dock"), false,
       "PutRequest.columns[0].data: length 5 exceeds the 2 bytes"},
      {ok_column + Len(15, Len(3, Varint(1) + "\x80")), false,
       "PutRequest.columns[1].offsets: truncated varint"},
      {Len(15, Tag(3, 2) + Varint(4) + "\x01") + Len(1, "dock"), false,
       "PutRequest.columns[0].offsets: length 4 exceeds"},
      {Len(15, Tag(2, 0) + Varint(99)), false,
       "PutRequest.columns[0].dtype: unknown DType value 99"},
      {Len(15, Tag(1, 0) + Varint(1)), false,
       "PutRequest.columns[0].name: wire type 0, expected 2"},
      {Len(15, Tag(9, 3)), false,
       "PutRequest.columns[0].<field 9>: group wire type 3"},
      {Len(3, Varint(1) + "\x80"), true,
       "GetResponse.token_counts: truncated varint"},
      {Tag(4, 2) + Varint(0), true,
       "GetResponse.end_of_step: wire type 2, expected 0"},
      {Len(15, Tag(15, 0) + Varint(1)), true,
       "GetResponse.columns[0].data: wire type 0"},
      {Len(6, ""), true, "GetResponse.round: wire type 2, expected 0"},
      {Len(9, ""), true, "GetResponse.lease_id: wire type 2, expected 0"},
      {Tag(10, 1) + "12345678", true, "GetResponse.lease_ms: wire type 1, expected 0"},
      {Tag(6, 0) + "\xff", true, "GetResponse.round: truncated varint"},
      {Tag(7, 0) + Varint(1), true,
       "GetResponse.micro_batches[0]: wire type 0, expected 2"},
      {Tag(7, 2) + Varint(5) + "ab", true,
       "GetResponse.micro_batches[0]: length 5 exceeds the 2 bytes"},
      {Len(7, "") + Len(7, "\x80"), true,
       "GetResponse.micro_batches[1]: truncated tag"},
      {Len(7, "") + Len(7, Tag(2, 0) + "\x80") + Tag(1, 0) + Varint(1), true,
       "GetResponse.micro_batches[1].end: truncated varint"},
      {Len(7, Tag(3, 1) + "12345678"), true,
       "GetResponse.micro_batches[0].padded_len: wire type 1, expected 0"},
      {Len(7, Tag(9, 3)), true,
       "GetResponse.micro_batches[0].<field 9>: group wire type 3"},
      {Tag(8, 0) + Varint(0), true,
       "GetResponse.balance: wire type 0, expected 2"},
      {Len(8, "\x80"), true, "GetResponse.balance: truncated tag"},
      {Len(8, Tag(2, 1) + "1234") + Tag(1, 0) + Varint(1), true,
       "GetResponse.balance.rank_cost_max: truncated fixed64"},
      {Len(8, Tag(13, 0) + Varint(1)), true,
       "GetResponse.balance.padding_ratio: wire type 0, expected 1"},
      {Len(8, Tag(10, 1) + "12345678"), true,
       "GetResponse.balance.micro_batches: wire type 1, expected 0"},
      {Len(8, Tag(14, 3)), true,
       "GetResponse.balance.<field 14>: group wire type 3"},
  };
}

// Each malformed input is rejected with INVALID_ARGUMENT naming the message
// and field, the same way for every single split of its bytes.
TEST(WireDecode, MalformedInputsNameTheField) {
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.error);
    for (size_t cut = 0; cut <= c.bytes.size(); ++cut) {
      const std::vector<ByteSpan> segments = SplitAt(c.bytes, {cut});
      if (c.batch) {
        EXPECT_STATUS(DecodeBatch(segments), absl::StatusCode::kInvalidArgument,
                      c.error);
      } else {
        EXPECT_STATUS(DecodePut(segments), absl::StatusCode::kInvalidArgument,
                      c.error);
      }
    }
  }
}

// Corrupts three random bytes of `valid` many times (seeded) and decodes each
// result under a random split: it is rejected as INVALID_ARGUMENT or decodes
// to spans that all lie within the corrupted buffer.
void CorruptAndDecode(const std::string& valid) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes = valid;
    for (int k = 0; k < 3; ++k) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    absl::StatusOr<BatchMessage> got = DecodeBatch(RandomSplit(bytes, rng, 5));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    for (const PackedColumn& c : got->columns) {
      for (const ByteSpan& s : c.segments) ASSERT_TRUE(Within(s, bytes));
    }
  }
}

// Random corruption of a valid message, with or without micro-batches and
// balance stats, never reads outside the input: the decoder either rejects
// it or returns spans within the buffer.
TEST(WireDecode, CorruptedInputStaysInBounds) {
  for (const std::string& valid : {LargeBatch(20, 10, 10).SerializeAsString(),
                                   BalancedBatch(18).SerializeAsString()}) {
    CorruptAndDecode(valid);
  }
}

}  // namespace
}  // namespace tdock::wire

namespace tdock::wire {
namespace {

// A packed repeated field with more entries than any step can have is
// refused before the decoder reserves memory for it (a hostile request must
// not make the server allocate gigabytes).
TEST(WireDecode, RepeatedFieldCountIsCapped) {
  const std::string many(static_cast<size_t>((1 << 24) + 2), '\x01');
  const std::string bytes = Tag(3, 2) + Varint(many.size()) + many;
  EXPECT_STATUS(DecodePut(Whole(bytes)), absl::StatusCode::kInvalidArgument,
                "PutRequest.rows: more than 16777217 entries");
}

}  // namespace
}  // namespace tdock::wire
