// The hand-written wire codec against protobuf's generated classes: each reads
// the other's bytes, for any split of the input into segments. Malformed input
// is tested in wire_malformed_test.cc.
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
#include "tests/wire/wire_test_util.h"

namespace tdock::wire {
namespace {

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

// A BALANCED share (round, micro-batches, balance stats) decodes identically
// when split at every pair of byte positions.
TEST(WireDecode, ProtobufBalancedBatchAtEverySplit) {
  v1::GetResponse want = BalancedBatch(12);
  want.clear_columns();  // keep the message small: pairs of splits are O(n²)
  const std::string bytes = want.SerializeAsString();
  for (size_t i = 0; i <= bytes.size(); ++i) {
    for (size_t j = i; j <= bytes.size(); ++j) {
      ASSERT_OK_AND_ASSIGN(BatchMessage got,
                           DecodeBatch(SplitAt(bytes, {i, j})));
      ExpectBatchEq(want, got);
      if (HasFailure()) return;
    }
  }
}

// An absent balance decodes to nullopt, a present empty one to all zeros; a
// second balance merges into the first and micro-batches append, as in
// protobuf; unknown fields inside both submessages are skipped.
TEST(WireDecode, BalanceMergesAndUnknownSubfieldsSkipped) {
  ASSERT_OK_AND_ASSIGN(BatchMessage none,
                       DecodeBatch(Whole(Tag(1, 0) + Varint(3))));
  EXPECT_FALSE(none.balance.has_value());
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
    ASSERT_OK_AND_ASSIGN(BatchMessage got,
                         DecodeBatch(RandomSplit(bytes, rng, 8)));
    ExpectBatchEq(want, got);
  }
  ASSERT_OK_AND_ASSIGN(BatchMessage empty, DecodeBatch(Whole(Len(8, ""))));
  ASSERT_TRUE(empty.balance.has_value());
  EXPECT_EQ(empty.balance->tokens, 0);
  EXPECT_EQ(empty.balance->padding_ratio, 0);
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
  m.ack_lease = p.ack_lease();
  for (const v1::PackedColumn& c : p.columns()) m.columns.push_back(ToPacked(c));
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

// A BALANCED share encodes to exactly protobuf's bytes (fields in number
// order, columns last), and protobuf's bytes decode back to the same message.
TEST(WireEncode, BalancedBatchMatchesProtobufBytes) {
  for (uint64_t seed : {14, 15, 16}) {
    v1::GetResponse want = BalancedBatch(seed);
    if (seed == 15) want.clear_balance();
    if (seed == 16) {
      want.clear_micro_batches();
      want.set_round(int64_t{1} << 50);
      *want.mutable_balance() = v1::BalanceStats();  // present, empty
    }
    const std::string bytes = Concat(EncodeBatch(ToBatchMessage(want)));
    EXPECT_EQ(bytes, want.SerializeAsString()) << seed;
    v1::GetResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    EXPECT_EQ(parsed.has_balance(), want.has_balance());
    std::mt19937_64 rng(seed);
    ASSERT_OK_AND_ASSIGN(BatchMessage back,
                         DecodeBatch(RandomSplit(bytes, rng, 20)));
    ExpectBatchEq(want, back);
  }
}

// A message holding only the new fields encodes like protobuf: a round of 0
// is not written, one of -1 takes a 10-byte varint; a zero micro-batch is an
// empty submessage.
TEST(WireEncode, RoundAndEmptyMicroBatch) {
  BatchMessage m;
  EXPECT_EQ(Concat(EncodeBatch(m)), "");
  m.round = -1;
  m.micro_batches.emplace_back();
  const std::string bytes = Concat(EncodeBatch(m));
  EXPECT_EQ(bytes, Tag(6, 0) + Varint(~uint64_t{0}) + Len(7, ""));
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.round(), -1);
  EXPECT_EQ(parsed.micro_batches_size(), 1);
  EXPECT_EQ(parsed.SerializeAsString(), bytes);
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

}  // namespace
}  // namespace tdock::wire
