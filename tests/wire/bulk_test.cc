// The bulk framing (proto/tdock/v1/bulk.h) against protobuf's generated
// classes: each reads the other's bytes, for any split of the input into
// segments; column data stays in place; malformed input is an error that
// names the message or column at fault, never a crash.
#include "proto/tdock/v1/bulk.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"
#include "tests/test_util.h"
#include "tests/wire/bulk_test_util.h"

namespace tdock::bulk {
namespace {

// ---- decoding protobuf's bytes

// A small PutRequest decodes identically when split at every pair of byte
// positions (which covers every single split and empty segments).
TEST(BulkDecode, ProtobufPutAtEverySplit) {
  const v1::PutRequest want = SmallPut();
  const std::string bytes = want.SerializeAsString();
  for (size_t i = 0; i <= bytes.size(); ++i) {
    for (size_t j = i; j <= bytes.size(); ++j) {
      ASSERT_OK_AND_ASSIGN(Decoded<v1::PutRequest> got, DecodePut(SplitAt(bytes, {i, j})));
      ExpectDecodedAs(want, got);
      for (const ByteSpan& s : got.columns[0].segments)
        ASSERT_TRUE(Within(s, bytes));
      if (HasFailure()) return;
    }
  }
}

// A GetResponse of many rows decodes identically under random splits.
TEST(BulkDecode, ProtobufBatchRandomSplits) {
  const v1::GetResponse want = LargeBatch(500, 300, 2);
  const std::string bytes = want.SerializeAsString();
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> got,
                         DecodeBatch(RandomSplit(bytes, rng, 40)));
    ExpectDecodedAs(want, got);
    if (HasFailure()) return;
  }
}

// Column data crossing a segment boundary becomes one span per segment, each
// pointing into the input (nothing copied).
TEST(BulkDecode, DataSpansPointIntoSegments) {
  std::mt19937_64 rng(4);
  v1::PutRequest p;
  FillColumn(p.add_columns(), "x", v1::UINT8, {100}, 1, rng);
  const std::string bytes = p.SerializeAsString();
  const size_t data_start = bytes.size() - 100;
  ASSERT_OK_AND_ASSIGN(
      Decoded<v1::PutRequest> got,
      DecodePut(SplitAt(bytes, {data_start + 10, data_start + 60})));
  ASSERT_EQ(got.columns[0].segments.size(), 3u);
  EXPECT_EQ(got.columns[0].segments[0].data(), bytes.data() + data_start);
  EXPECT_EQ(got.columns[0].segments[0].size(), 10u);
  EXPECT_EQ(got.columns[0].segments[1].data(), bytes.data() + data_start + 10);
  EXPECT_EQ(got.columns[0].segments[2].size(), 40u);
}

// Repeated int64 fields are read packed and unpacked, and repeated
// occurrences append, as protobuf does; unknown fields of wire types 0, 1, 2
// and 5 are skipped at the top level and inside columns.
TEST(BulkDecode, UnpackedRepeatedAndUnknownFields) {
  const std::string unknown = Tag(10, 0) + Varint(1234567) + Tag(11, 1) +
                              "12345678" + Len(12, "skip me") + Tag(13, 5) +
                              "abcd";
  const std::string column = unknown + Len(1, "c") + Tag(3, 0) + Varint(0) +
                             Len(3, Varint(2)) + Tag(3, 0) + Varint(3) +
                             Len(15, "xyz");
  const std::string bytes = Tag(3, 0) + Varint(5) + unknown +
                            Len(3, Varint(6) + Varint(7)) + Tag(3, 0) +
                            Varint(8) + Len(15, column) + Len(1, "d");
  v1::PutRequest want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  ASSERT_EQ(want.rows_size(), 4);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    ASSERT_OK_AND_ASSIGN(Decoded<v1::PutRequest> got, DecodePut(RandomSplit(bytes, rng, 8)));
    ExpectDecodedAs(want, got);
  }
}

// A singular field that occurs twice keeps its last value, as in protobuf.
TEST(BulkDecode, LastValueWins) {
  const std::string column =
      Len(15, "first") + Len(1, "a") + Len(1, "b") + Len(15, "second");
  const std::string bytes =
      Tag(1, 0) + Varint(4) + Tag(1, 0) + Varint(9) + Len(15, column);
  v1::GetResponse want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> got, DecodeBatch(Whole(bytes)));
  ExpectDecodedAs(want, got);
  EXPECT_EQ(got.header.step(), 9);
}

// A BALANCED share (round, micro-batches, balance stats) decodes identically
// when split at every pair of byte positions.
TEST(BulkDecode, ProtobufBalancedBatchAtEverySplit) {
  v1::GetResponse want = BalancedBatch(12);
  want.clear_columns();  // keep the message small: pairs of splits are O(n²)
  const std::string bytes = want.SerializeAsString();
  for (size_t i = 0; i <= bytes.size(); ++i) {
    for (size_t j = i; j <= bytes.size(); ++j) {
      ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> got,
                           DecodeBatch(SplitAt(bytes, {i, j})));
      ExpectDecodedAs(want, got);
      if (HasFailure()) return;
    }
  }
}

// Submessages of the header are protobuf's own business: a second balance
// merges into the first and micro-batches append, unknown fields inside both
// are skipped, whatever the split.
TEST(BulkDecode, BalanceMergesAndUnknownSubfieldsSkipped) {
  ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> none, DecodeBatch(Whole(Tag(1, 0) + Varint(3))));
  EXPECT_FALSE(none.header.has_balance());
  const std::string unknown =
      Tag(20, 0) + Varint(7) + Tag(21, 1) + "12345678" + Len(22, "x");
  const std::string bytes =
      Len(8, "") + Len(7, unknown + Tag(2, 0) + Varint(5)) +
      Len(8, Tag(11, 0) + Varint(100) + unknown + Tag(13, 1) +
                 std::string("\0\0\0\0\0\0\xf0\x3f", 8)) +
      Tag(6, 0) + Varint(3) + Len(7, Tag(1, 0) + Varint(5)) +
      Len(8, Tag(11, 0) + Varint(200) + Tag(12, 0) + Varint(300));
  v1::GetResponse want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  ASSERT_EQ(want.micro_batches_size(), 2);
  ASSERT_EQ(want.balance().tokens(), 200);
  ASSERT_EQ(want.balance().padding_ratio(), 1.0);
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 50; ++trial) {
    ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> got,
                         DecodeBatch(RandomSplit(bytes, rng, 8)));
    ExpectDecodedAs(want, got);
  }
  ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> empty, DecodeBatch(Whole(Len(8, ""))));
  EXPECT_TRUE(empty.header.has_balance());
}

// No segments at all, or only empty ones, is the empty message.
TEST(BulkDecode, EmptyInput) {
  ASSERT_OK_AND_ASSIGN(Decoded<v1::PutRequest> put, DecodePut({}));
  EXPECT_TRUE(put.header.dock().empty());
  EXPECT_TRUE(put.columns.empty());
  const std::vector<ByteSpan> empties(3, ByteSpan());
  ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> batch, DecodeBatch(empties));
  EXPECT_EQ(batch.header.rows_size(), 0);
  EXPECT_FALSE(batch.header.end_of_step());
}

// ---- encoding

// EncodePut writes exactly protobuf's bytes, which protobuf parses back.
TEST(BulkEncode, PutMatchesProtobufBytes) {
  const v1::PutRequest want = SmallPut();
  const Encoded encoded = EncodeOf(want);
  const std::string bytes = Concat(encoded);
  EXPECT_EQ(bytes, want.SerializeAsString());
  EXPECT_EQ(encoded.size(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(encoded.pieces.size(), 1u);  // small: all owned, merged
}

// The default message encodes to nothing; an empty column is still a
// (zero-length) entry, as protobuf writes it.
TEST(BulkEncode, EmptyMessages) {
  EXPECT_EQ(EncodePut(v1::PutRequest(), {}).size(), 0);
  EXPECT_EQ(EncodeBatch(v1::GetResponse(), {}).size(), 0);
  const std::vector<PackedColumn> one_empty(1);
  const std::string bytes = Concat(EncodeBatch(v1::GetResponse(), one_empty));
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.columns_size(), 1);
  EXPECT_EQ(bytes, parsed.SerializeAsString());
}

// A batch of several MiB: large segments are borrowed (pieces point at the
// caller's buffer), small ones copied, zero-length rows and segments kept
// right; protobuf parses the result into the same values, and the decoder
// reads it back split anywhere.
TEST(BulkEncode, LargeBatchBorrowsPayload) {
  std::mt19937_64 rng(6);
  const std::string payload = RandomBytes(rng, 3 << 20);
  v1::GetResponse header;
  header.set_step(99);
  header.set_timed_out(true);
  for (int i = 0; i < 1000; ++i) {
    header.add_rows(i);
    header.add_token_counts(int64_t{1} << (i % 40));
  }
  std::vector<PackedColumn> columns(2);
  PackedColumn& big = columns[0];
  big.name = "response_ids";
  big.dtype = DType::kUint8;
  big.offsets.push_back(0);
  for (int i = 0; i < 1000; ++i) {
    big.offsets.push_back(i == 999 ? 3 << 20 : big.offsets.back() + (i % 3 == 0 ? 0 : 3000));
  }
  const size_t cuts[] = {0, 1 << 20, (1 << 20) + 10, (1 << 20) + 10, 2 << 20, 3 << 20};
  for (int i = 0; i + 1 < 6; ++i) {
    big.segments.emplace_back(payload.data() + cuts[i], cuts[i + 1] - cuts[i]);
  }
  PackedColumn& tiny = columns[1];
  tiny.name = "rewards";
  tiny.dtype = DType::kFloat32;
  tiny.offsets = {0, 1, 2};
  for (int i = 0; i < 2; ++i) tiny.segments.emplace_back(payload.data() + 4 * i, 4);

  const Encoded encoded = EncodeBatch(header, columns);
  int64_t borrowed = 0;
  for (const Encoded::Piece& p : encoded.pieces) {
    if (!p.borrowed) continue;
    EXPECT_TRUE(Within(p.bytes, payload));
    borrowed += static_cast<int64_t>(p.bytes.size());
  }
  EXPECT_EQ(borrowed, (3 << 20) - 10);  // all but the 10-byte segment
  EXPECT_EQ(encoded.pieces.size(), 6u);  // header, borrowed, copy, 2 borrowed, tail
  const std::string bytes = Concat(encoded);
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.SerializeAsString(), bytes);  // byte-identical to protobuf
  EXPECT_EQ(parsed.columns(0).data(), payload);
  EXPECT_EQ(parsed.columns(1).data(), payload.substr(0, 8));
  std::mt19937_64 split_rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> back,
                         DecodeBatch(RandomSplit(bytes, split_rng, 100)));
    ExpectDecodedAs(parsed, back);
  }
}

// A BALANCED share encodes to exactly protobuf's bytes (fields in number
// order, columns last), and protobuf's bytes decode back to the same message.
TEST(BulkEncode, BalancedBatchMatchesProtobufBytes) {
  for (uint64_t seed : {14, 15, 16}) {
    v1::GetResponse want = BalancedBatch(seed);
    if (seed == 15) want.clear_balance();
    if (seed == 16) {
      want.clear_micro_batches();
      want.set_round(int64_t{1} << 50);
      *want.mutable_balance() = v1::BalanceStats();  // present, empty
    }
    const std::string bytes = Concat(EncodeOf(want));
    EXPECT_EQ(bytes, want.SerializeAsString()) << seed;
    std::mt19937_64 rng(seed);
    ASSERT_OK_AND_ASSIGN(Decoded<v1::GetResponse> back, DecodeBatch(RandomSplit(bytes, rng, 20)));
    ExpectDecodedAs(want, back);
  }
}

// EncodePut then DecodePut returns the same message (many rows, random data).
TEST(BulkEncode, PutRoundTrip) {
  const v1::GetResponse g = LargeBatch(2000, 64, 8);
  v1::PutRequest want;
  want.set_dock("d");
  want.set_step(int64_t{1} << 40);
  *want.mutable_rows() = g.rows();
  *want.mutable_columns() = g.columns();
  const std::string bytes = Concat(EncodeOf(want));
  EXPECT_EQ(bytes, want.SerializeAsString());
  std::mt19937_64 rng(9);
  ASSERT_OK_AND_ASSIGN(Decoded<v1::PutRequest> back, DecodePut(RandomSplit(bytes, rng, 30)));
  ExpectDecodedAs(want, back);
}

// Whether every owned (non-borrowed) piece lies inside one of e.owned.
bool OwnedPiecesInside(const Encoded& e) {
  for (const Encoded::Piece& p : e.pieces) {
    if (p.borrowed) continue;
    if (std::none_of(e.owned.begin(), e.owned.end(),
                     [&p](const std::string& o) { return Within(p.bytes, o); })) {
      return false;
    }
  }
  return true;
}

// Encoded is move-only, and a moved one (constructed or assigned from a source
// that is then destroyed) yields the same bytes, its owned pieces pointing
// into its own storage. Checked for a message whose few header bytes fit a
// short string's inline buffer and for one with a borrowed payload.
TEST(BulkEncode, MovedEncodedKeepsItsBytes) {
  static_assert(!std::is_copy_constructible_v<Encoded>);
  static_assert(!std::is_copy_assignable_v<Encoded>);
  static_assert(std::is_nothrow_move_constructible_v<Encoded>);
  static_assert(std::is_nothrow_move_assignable_v<Encoded>);
  std::mt19937_64 rng(11);
  const std::string payload = RandomBytes(rng, 4096);
  v1::GetResponse header;
  header.set_step(3);
  header.add_rows(7);
  std::vector<PackedColumn> columns(1);
  columns[0].name = "ids";
  columns[0].dtype = DType::kUint8;
  columns[0].offsets = {0, 4096};
  columns[0].segments.emplace_back(payload.data(), payload.size());
  for (size_t n : {size_t{0}, size_t{1}}) {
    const absl::Span<const PackedColumn> cols = absl::MakeConstSpan(columns).first(n);
    auto source = std::make_unique<Encoded>(EncodeBatch(header, cols));
    const std::string want = Concat(*source);
    ASSERT_FALSE(want.empty());
    Encoded constructed(std::move(*source));
    source.reset();
    EXPECT_EQ(Concat(constructed), want);
    EXPECT_TRUE(OwnedPiecesInside(constructed));

    auto assigned = std::make_unique<Encoded>(EncodeBatch(header, columns));
    *assigned = std::move(constructed);
    constructed = EncodePut(v1::PutRequest(), {});  // reuse the moved-from object
    EXPECT_EQ(constructed.size(), 0);
    Encoded final_owner = std::move(*assigned);
    assigned.reset();
    EXPECT_EQ(Concat(final_owner), want);
    EXPECT_EQ(final_owner.size(), static_cast<int64_t>(want.size()));
    EXPECT_TRUE(OwnedPiecesInside(final_owner));
  }
  EXPECT_LT(Concat(EncodeBatch(header, {})).size(), 16u);  // short-string sized
}

// ---- malformed input

// Every proper prefix of a message with a column is refused or decodes
// without reading past it (a prefix can end between fields); none crashes.
TEST(BulkMalformed, EveryTruncationIsSafe) {
  const std::string bytes = SmallPut().SerializeAsString();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    absl::StatusOr<Decoded<v1::PutRequest>> got = DecodePut(Whole(prefix));
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << n;
      EXPECT_TRUE(absl::StartsWith(got.status().message(), "PutRequest")) << got.status();
      continue;
    }
    for (const PackedColumn& c : got->columns) {
      for (const ByteSpan& s : c.segments) EXPECT_TRUE(Within(s, prefix)) << n;
    }
  }
}

// Each malformed input is refused with a message naming the message or the
// column and what is wrong.
TEST(BulkMalformed, ErrorsNameTheFieldAtFault) {
  const struct {
    std::string bytes;
    std::string message;
  } cases[] = {
      {Tag(15, 0) + Varint(1), "PutRequest.columns: wire type 0, not length-delimited"},
      {Tag(15, 2) + Varint(50) + "abc", "PutRequest.columns[0]: length 50 exceeds the 3 bytes left"},
      {Tag(15, 2) + Varint(uint64_t{1} << 62), "PutRequest.columns[0]: length 4611686018427387904 exceeds the 0 bytes left"},
      {Len(15, Len(1, "a")) + Len(15, Tag(15, 5) + "abcd"),
       "PutRequest.columns[1].data: wire type 5, not length-delimited"},
      {Len(15, Tag(15, 2) + Varint(9) + "abc"),
       "PutRequest.columns[0].data: length 9 exceeds the 3 bytes left"},
      {Len(15, Tag(2, 0) + Varint(77)), "PutRequest.columns[0].dtype: unknown DType value 77"},
      {Len(15, Len(3, Varint(1) + "\xff")), "PutRequest.columns[0]: its name, dtype or offsets do not parse"},
      {Len(1, "\xff"), "PutRequest: its fields do not parse"},  // dock: not UTF-8
      {Tag(3, 5) + "abcd", "PutRequest.rows: wire type 5 does not fit its type int64"},
      {Tag(13, 3), "PutRequest field 13: group wire type 3 (tdock.v1 has no groups)"},
      {Tag(13, 7), "PutRequest field 13: invalid wire type 7"},
      {Tag(2, 0) + "\xff\xff", "PutRequest.step: truncated varint"},
      {Tag(4, 1) + "1234", "PutRequest.wait_ms: wire type 1 does not fit its type int64"},
      {Tag(1, 2) + Varint(1000) + "grpo", "PutRequest.dock: length 1000 exceeds the 4 bytes left"},
      {std::string("\0", 1), "PutRequest: invalid tag 0"},
      {std::string("\x80", 1), "PutRequest: truncated tag"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Decoded<v1::PutRequest>> got = DecodePut(Whole(c.bytes));
    ASSERT_FALSE(got.ok()) << c.message;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.message);
  }
}

}  // namespace
}  // namespace tdock::bulk
