// The hand-written wire codec against protobuf's generated classes: each reads
// the other's bytes, for any split of the input into segments, and malformed
// input gets an error naming the field.
#include "common/wire.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"
#include "tests/test_util.h"

namespace tdock::wire {
namespace {

// ---- helpers

std::vector<ByteSpan> Whole(const std::string& s) {
  return {ByteSpan(s.data(), s.size())};
}

// Splits `s` at the sorted positions `cuts` (duplicates give empty segments).
std::vector<ByteSpan> SplitAt(const std::string& s,
                              const std::vector<size_t>& cuts) {
  std::vector<ByteSpan> out;
  size_t begin = 0;
  for (size_t cut : cuts) {
    out.emplace_back(s.data() + begin, cut - begin);
    begin = cut;
  }
  out.emplace_back(s.data() + begin, s.size() - begin);
  return out;
}

std::vector<ByteSpan> RandomSplit(const std::string& s, std::mt19937_64& rng,
                                  int max_cuts) {
  std::uniform_int_distribution<size_t> pos(0, s.size());
  std::vector<size_t> cuts(
      std::uniform_int_distribution<int>(0, max_cuts)(rng));
  for (size_t& c : cuts) c = pos(rng);
  std::sort(cuts.begin(), cuts.end());
  return SplitAt(s, cuts);
}

std::string Concat(absl::Span<const ByteSpan> spans) {
  std::string out;
  for (const ByteSpan& s : spans) out.append(s.data(), s.size());
  return out;
}

std::string Concat(const Encoded& e) {
  std::string out;
  for (const Encoded::Piece& p : e.pieces)
    out.append(p.bytes.data(), p.bytes.size());
  return out;
}

bool Within(ByteSpan span, const std::string& buffer) {
  return span.data() >= buffer.data() &&
         span.data() + span.size() <= buffer.data() + buffer.size();
}

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Protobuf wire bytes by hand, for inputs protobuf would never write.
std::string Varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s.push_back(static_cast<char>(v | 0x80));
  s.push_back(static_cast<char>(v));
  return s;
}
std::string Tag(uint32_t field, uint32_t wire_type) {
  return Varint(field << 3 | wire_type);
}
std::string Len(uint32_t field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

void FillColumn(v1::PackedColumn* c, const std::string& name, v1::DType dtype,
                const std::vector<int64_t>& lengths, int item_bytes,
                std::mt19937_64& rng) {
  c->set_name(name);
  c->set_dtype(dtype);
  int64_t total = 0;
  c->add_offsets(0);
  for (int64_t len : lengths) c->add_offsets(total += len);
  c->set_data(RandomBytes(rng, static_cast<size_t>(total * item_bytes)));
}

void ExpectColumnEq(const v1::PackedColumn& want, const PackedColumn& got) {
  EXPECT_EQ(got.name, want.name());
  EXPECT_EQ(static_cast<int>(got.dtype), static_cast<int>(want.dtype()));
  EXPECT_EQ(got.offsets,
            std::vector<int64_t>(want.offsets().begin(), want.offsets().end()));
  EXPECT_EQ(Concat(got.segments), want.data());
  EXPECT_EQ(got.data_bytes(), static_cast<int64_t>(want.data().size()));
  for (const ByteSpan& s : got.segments) EXPECT_FALSE(s.empty());
}

void ExpectPutEq(const v1::PutRequest& want, const PutMessage& got) {
  EXPECT_EQ(got.dock, want.dock());
  EXPECT_EQ(got.step, want.step());
  EXPECT_EQ(got.rows,
            std::vector<int64_t>(want.rows().begin(), want.rows().end()));
  EXPECT_EQ(got.wait_ms, want.wait_ms());
  ASSERT_EQ(got.columns.size(), static_cast<size_t>(want.columns_size()));
  for (int i = 0; i < want.columns_size(); ++i)
    ExpectColumnEq(want.columns(i), got.columns[i]);
}

void ExpectBatchEq(const v1::GetResponse& want, const BatchMessage& got) {
  EXPECT_EQ(got.step, want.step());
  EXPECT_EQ(got.rows,
            std::vector<int64_t>(want.rows().begin(), want.rows().end()));
  EXPECT_EQ(got.token_counts, std::vector<int64_t>(want.token_counts().begin(),
                                                   want.token_counts().end()));
  EXPECT_EQ(got.end_of_step, want.end_of_step());
  EXPECT_EQ(got.timed_out, want.timed_out());
  ASSERT_EQ(got.columns.size(), static_cast<size_t>(want.columns_size()));
  for (int i = 0; i < want.columns_size(); ++i)
    ExpectColumnEq(want.columns(i), got.columns[i]);
}

v1::PutRequest SmallPut() {
  std::mt19937_64 rng(1);
  v1::PutRequest p;
  p.set_dock("grpo");
  p.set_step(-3);  // negative: a 10-byte varint
  p.add_rows(0);
  p.add_rows(300);
  p.set_wait_ms(1000);
  FillColumn(p.add_columns(), "response_ids", v1::INT32, {2, 0}, 4, rng);
  p.add_columns()->set_name("empty");  // no dtype, offsets or data
  return p;
}

v1::GetResponse LargeBatch(int rows, int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  v1::GetResponse g;
  g.set_step(12);
  std::vector<int64_t> lengths(rows);
  for (int i = 0; i < rows; ++i) {
    g.add_rows(i * 7);
    lengths[i] = std::uniform_int_distribution<int>(0, max_len)(rng);
    g.add_token_counts(lengths[i] + 5);
  }
  g.set_end_of_step(true);
  FillColumn(g.add_columns(), "response_ids", v1::INT32, lengths, 4, rng);
  FillColumn(g.add_columns(), "old_log_prob", v1::FLOAT32, lengths, 4, rng);
  FillColumn(g.add_columns(), "rewards", v1::BFLOAT16,
             std::vector<int64_t>(rows, 1), 2, rng);
  return g;
}

// ---- decoding protobuf's bytes

// A small PutRequest decodes identically when split at every pair of byte
// positions (which covers every single split and empty segments).
TEST(WireDecode, ProtobufPutAtEverySplit) {
  const v1::PutRequest want = SmallPut();
  const std::string bytes = want.SerializeAsString();
  for (size_t i = 0; i <= bytes.size(); ++i) {
    for (size_t j = i; j <= bytes.size(); ++j) {
      ASSERT_OK_AND_ASSIGN(PutMessage got, DecodePut(SplitAt(bytes, {i, j})));
      ExpectPutEq(want, got);
      for (const ByteSpan& s : got.columns[0].segments)
        ASSERT_TRUE(Within(s, bytes));
      if (HasFailure()) return;
    }
  }
}

// A GetResponse of many rows decodes identically under random splits.
TEST(WireDecode, ProtobufBatchRandomSplits) {
  const v1::GetResponse want = LargeBatch(500, 300, 2);
  const std::string bytes = want.SerializeAsString();
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    ASSERT_OK_AND_ASSIGN(BatchMessage got,
                         DecodeBatch(RandomSplit(bytes, rng, 40)));
    ExpectBatchEq(want, got);
    if (HasFailure()) return;
  }
}

// Column data crossing a segment boundary becomes one span per segment, each
// pointing into the input (nothing copied).
TEST(WireDecode, DataSpansPointIntoSegments) {
  std::mt19937_64 rng(4);
  v1::PutRequest p;
  FillColumn(p.add_columns(), "x", v1::UINT8, {100}, 1, rng);
  const std::string bytes = p.SerializeAsString();
  const size_t data_start = bytes.size() - 100;
  ASSERT_OK_AND_ASSIGN(
      PutMessage got,
      DecodePut(SplitAt(bytes, {data_start + 10, data_start + 60})));
  ASSERT_EQ(got.columns[0].segments.size(), 3u);
  EXPECT_EQ(got.columns[0].segments[0].data(), bytes.data() + data_start);
  EXPECT_EQ(got.columns[0].segments[0].size(), 10u);
  EXPECT_EQ(got.columns[0].segments[1].data(), bytes.data() + data_start + 10);
  EXPECT_EQ(got.columns[0].segments[2].size(), 40u);
}

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

// Repeated int64 fields are read packed and unpacked, and repeated
// occurrences append, as protobuf does; unknown fields of wire types 0, 1, 2
// and 5 are skipped at the top level and inside columns.
TEST(WireDecode, UnpackedRepeatedAndUnknownFields) {
  const std::string unknown = Tag(9, 0) + Varint(1234567) + Tag(10, 1) +
                              "12345678" + Len(11, "skip me") + Tag(12, 5) +
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
    ASSERT_OK_AND_ASSIGN(PutMessage got, DecodePut(RandomSplit(bytes, rng, 8)));
    ExpectPutEq(want, got);
  }
}

// A singular field that occurs twice keeps its last value, as in protobuf.
TEST(WireDecode, LastValueWins) {
  const std::string column =
      Len(15, "first") + Len(1, "a") + Len(1, "b") + Len(15, "second");
  const std::string bytes =
      Tag(1, 0) + Varint(4) + Tag(1, 0) + Varint(9) + Len(15, column);
  v1::GetResponse want;
  ASSERT_TRUE(want.ParseFromString(bytes));
  ASSERT_OK_AND_ASSIGN(BatchMessage got, DecodeBatch(Whole(bytes)));
  ExpectBatchEq(want, got);
  EXPECT_EQ(got.step, 9);
}

// No segments at all, or only empty ones, is the empty message.
TEST(WireDecode, EmptyInput) {
  ASSERT_OK_AND_ASSIGN(PutMessage put, DecodePut({}));
  EXPECT_TRUE(put.dock.empty());
  EXPECT_TRUE(put.columns.empty());
  const std::vector<ByteSpan> empties(3, ByteSpan());
  ASSERT_OK_AND_ASSIGN(BatchMessage batch, DecodeBatch(empties));
  EXPECT_TRUE(batch.rows.empty());
  EXPECT_FALSE(batch.end_of_step);
}

// ---- encoding

PutMessage ToMessage(const v1::PutRequest& p) {
  PutMessage m;
  m.dock = p.dock();
  m.step = p.step();
  m.rows.assign(p.rows().begin(), p.rows().end());
  m.wait_ms = p.wait_ms();
  for (const v1::PackedColumn& c : p.columns()) {
    PackedColumn& col = m.columns.emplace_back();
    col.name = c.name();
    col.dtype = static_cast<DType>(c.dtype());
    col.offsets.assign(c.offsets().begin(), c.offsets().end());
    if (!c.data().empty())
      col.segments.emplace_back(c.data().data(), c.data().size());
  }
  return m;
}

// EncodePut writes exactly protobuf's bytes, which protobuf parses back.
TEST(WireEncode, PutMatchesProtobufBytes) {
  const v1::PutRequest want = SmallPut();
  const Encoded encoded = EncodePut(ToMessage(want));
  const std::string bytes = Concat(encoded);
  EXPECT_EQ(bytes, want.SerializeAsString());
  EXPECT_EQ(encoded.size(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(encoded.pieces.size(), 1u);  // small: all owned, merged
  v1::PutRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.SerializeAsString(), want.SerializeAsString());
}

// The default message encodes to nothing.
TEST(WireEncode, EmptyMessages) {
  EXPECT_EQ(EncodePut(PutMessage()).size(), 0);
  EXPECT_EQ(EncodeBatch(BatchMessage()).size(), 0);
  BatchMessage m;
  m.columns.emplace_back();  // an empty column is still a (zero-length) entry
  const std::string bytes = Concat(EncodeBatch(m));
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.columns_size(), 1);
  EXPECT_EQ(bytes, parsed.SerializeAsString());
}

// A batch of several MiB: large segments are borrowed (pieces point at the
// caller's buffer), small ones copied, zero-length rows and segments kept
// right; protobuf parses the result into the same values, and our decoder
// reads it back split anywhere.
TEST(WireEncode, LargeBatchBorrowsPayload) {
  std::mt19937_64 rng(6);
  const std::string payload = RandomBytes(rng, 3 << 20);
  BatchMessage m;
  m.step = 99;
  m.timed_out = true;
  for (int i = 0; i < 1000; ++i) {
    m.rows.push_back(i);
    m.token_counts.push_back(int64_t{1} << (i % 40));
  }
  PackedColumn& big = m.columns.emplace_back();
  big.name = "response_ids";
  big.dtype = DType::kUint8;
  big.offsets.push_back(0);
  for (int i = 0; i < 1000; ++i) {
    big.offsets.push_back(
        i == 999 ? 3 << 20 : big.offsets.back() + (i % 3 == 0 ? 0 : 3000));
  }
  const size_t cuts[] = {0,       1 << 20, (1 << 20) + 10, (1 << 20) + 10,
                         2 << 20, 3 << 20};
  for (int i = 0; i + 1 < 6; ++i)
    big.segments.emplace_back(payload.data() + cuts[i], cuts[i + 1] - cuts[i]);
  PackedColumn& tiny = m.columns.emplace_back();
  tiny.name = "rewards";
  tiny.dtype = DType::kFloat32;
  tiny.offsets = {0, 1, 2};
  for (int i = 0; i < 2; ++i)
    tiny.segments.emplace_back(payload.data() + 4 * i, 4);

  const Encoded encoded = EncodeBatch(m);
  int64_t borrowed = 0;
  for (const Encoded::Piece& p : encoded.pieces) {
    if (!p.borrowed) continue;
    EXPECT_TRUE(Within(p.bytes, payload));
    borrowed += static_cast<int64_t>(p.bytes.size());
  }
  EXPECT_EQ(borrowed, (3 << 20) - 10);  // all but the 10-byte segment
  EXPECT_EQ(encoded.pieces.size(),
            6u);  // header, borrowed, copy, 2 borrowed, tail
  const std::string bytes = Concat(encoded);
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.SerializeAsString(), bytes);  // byte-identical to protobuf
  EXPECT_EQ(parsed.columns(0).data(), payload);
  EXPECT_EQ(parsed.columns(1).data(), payload.substr(0, 8));
  std::mt19937_64 split_rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    ASSERT_OK_AND_ASSIGN(BatchMessage back,
                         DecodeBatch(RandomSplit(bytes, split_rng, 100)));
    ExpectBatchEq(parsed, back);
  }
}

// EncodePut then DecodePut returns the same message (many rows, random data).
TEST(WireEncode, PutRoundTrip) {
  const v1::GetResponse g = LargeBatch(2000, 64, 8);
  v1::PutRequest want;
  want.set_dock("d");
  want.set_step(int64_t{1} << 40);
  *want.mutable_rows() = g.rows();
  *want.mutable_columns() = g.columns();
  const std::string bytes = Concat(EncodePut(ToMessage(want)));
  EXPECT_EQ(bytes, want.SerializeAsString());
  std::mt19937_64 rng(9);
  ASSERT_OK_AND_ASSIGN(PutMessage back, DecodePut(RandomSplit(bytes, rng, 30)));
  ExpectPutEq(want, back);
}

// Whether every owned (non-borrowed) piece lies inside one of e.owned.
bool OwnedPiecesInside(const Encoded& e) {
  for (const Encoded::Piece& p : e.pieces) {
    if (p.borrowed) continue;
    if (std::none_of(e.owned.begin(), e.owned.end(),
                     [&p](const std::string& o) { return Within(p.bytes, o); }))
      return false;
  }
  return true;
}

// Encoded is move-only, and a moved one (constructed or assigned from a source
// that is then destroyed) yields the same bytes, its owned pieces pointing
// into its own storage. Checked for a message whose few header bytes fit a
// short string's inline buffer and for one with a borrowed payload.
TEST(WireEncode, MovedEncodedKeepsItsBytes) {
  static_assert(!std::is_copy_constructible_v<Encoded>);
  static_assert(!std::is_copy_assignable_v<Encoded>);
  static_assert(std::is_nothrow_move_constructible_v<Encoded>);
  static_assert(std::is_nothrow_move_assignable_v<Encoded>);
  std::mt19937_64 rng(11);
  const std::string payload = RandomBytes(rng, 4096);
  BatchMessage tiny;
  tiny.step = 3;
  tiny.rows = {7};
  BatchMessage large = tiny;
  PackedColumn& column = large.columns.emplace_back();
  column.name = "ids";
  column.dtype = DType::kUint8;
  column.offsets = {0, 4096};
  column.segments.emplace_back(payload.data(), payload.size());
  for (const BatchMessage* m : {&tiny, &large}) {
    auto source = std::make_unique<Encoded>(EncodeBatch(*m));
    const std::string want = Concat(*source);
    ASSERT_FALSE(want.empty());
    Encoded constructed(std::move(*source));
    source.reset();
    EXPECT_EQ(Concat(constructed), want);
    EXPECT_TRUE(OwnedPiecesInside(constructed));

    auto assigned = std::make_unique<Encoded>(EncodeBatch(large));
    *assigned = std::move(constructed);
    constructed = EncodePut(PutMessage());  // reuse the moved-from object
    EXPECT_EQ(constructed.size(), 0);
    Encoded final_owner = std::move(*assigned);
    assigned.reset();
    EXPECT_EQ(Concat(final_owner), want);
    EXPECT_EQ(final_owner.size(), static_cast<int64_t>(want.size()));
    EXPECT_TRUE(OwnedPiecesInside(final_owner));
  }
  EXPECT_LT(Concat(EncodeBatch(tiny)).size(), 16u);  // short-string sized
}

// ---- malformed input

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

// Random corruption of a valid message never reads outside the input: the
// decoder either rejects it or returns spans within the buffer.
TEST(WireDecode, CorruptedInputStaysInBounds) {
  const std::string valid = LargeBatch(20, 10, 10).SerializeAsString();
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

}  // namespace
}  // namespace tdock::wire
