// Helpers shared by the wire codec tests: splitting bytes into segments,
// protobuf wire bytes written by hand, sample messages, and field-by-field
// comparison of the codec's messages with protobuf's.
#ifndef TDOCK_TESTS_WIRE_WIRE_TEST_UTIL_H_
#define TDOCK_TESTS_WIRE_WIRE_TEST_UTIL_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/wire.h"
#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"

namespace tdock::wire {

inline std::vector<ByteSpan> Whole(const std::string& s) {
  return {ByteSpan(s.data(), s.size())};
}

// Splits `s` at the sorted positions `cuts` (duplicates give empty segments).
inline std::vector<ByteSpan> SplitAt(const std::string& s,
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

inline std::vector<ByteSpan> RandomSplit(const std::string& s,
                                         std::mt19937_64& rng, int max_cuts) {
  std::uniform_int_distribution<size_t> pos(0, s.size());
  std::vector<size_t> cuts(
      std::uniform_int_distribution<int>(0, max_cuts)(rng));
  for (size_t& c : cuts) c = pos(rng);
  std::sort(cuts.begin(), cuts.end());
  return SplitAt(s, cuts);
}

inline std::string Concat(absl::Span<const ByteSpan> spans) {
  std::string out;
  for (const ByteSpan& s : spans) out.append(s.data(), s.size());
  return out;
}

inline std::string Concat(const Encoded& e) {
  std::string out;
  for (const Encoded::Piece& p : e.pieces)
    out.append(p.bytes.data(), p.bytes.size());
  return out;
}

inline bool Within(ByteSpan span, const std::string& buffer) {
  return span.data() >= buffer.data() &&
         span.data() + span.size() <= buffer.data() + buffer.size();
}

inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Protobuf wire bytes by hand, for inputs protobuf would never write.
inline std::string Varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s.push_back(static_cast<char>(v | 0x80));
  s.push_back(static_cast<char>(v));
  return s;
}
inline std::string Tag(uint32_t field, uint32_t wire_type) {
  return Varint(field << 3 | wire_type);
}
inline std::string Len(uint32_t field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

inline void FillColumn(v1::PackedColumn* c, const std::string& name,
                       v1::DType dtype, const std::vector<int64_t>& lengths,
                       int item_bytes, std::mt19937_64& rng) {
  c->set_name(name);
  c->set_dtype(dtype);
  int64_t total = 0;
  c->add_offsets(0);
  for (int64_t len : lengths) c->add_offsets(total += len);
  c->set_data(RandomBytes(rng, static_cast<size_t>(total * item_bytes)));
}

inline void ExpectColumnEq(const v1::PackedColumn& want,
                           const PackedColumn& got) {
  EXPECT_EQ(got.name, want.name());
  EXPECT_EQ(static_cast<int>(got.dtype), static_cast<int>(want.dtype()));
  EXPECT_EQ(got.offsets,
            std::vector<int64_t>(want.offsets().begin(), want.offsets().end()));
  EXPECT_EQ(Concat(got.segments), want.data());
  EXPECT_EQ(got.data_bytes(), static_cast<int64_t>(want.data().size()));
  for (const ByteSpan& s : got.segments) EXPECT_FALSE(s.empty());
}

inline void ExpectPutEq(const v1::PutRequest& want, const PutMessage& got) {
  EXPECT_EQ(got.dock, want.dock());
  EXPECT_EQ(got.step, want.step());
  EXPECT_EQ(got.rows,
            std::vector<int64_t>(want.rows().begin(), want.rows().end()));
  EXPECT_EQ(got.wait_ms, want.wait_ms());
  EXPECT_EQ(got.ack_lease, want.ack_lease());
  ASSERT_EQ(got.columns.size(), static_cast<size_t>(want.columns_size()));
  for (int i = 0; i < want.columns_size(); ++i)
    ExpectColumnEq(want.columns(i), got.columns[i]);
}

// Doubles compare by bit pattern, so that -0.0 and NaN payloads count.
inline void ExpectSameDouble(double want, double got, const char* field) {
  EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
      << field << ": got " << got << ", want " << want;
}

inline void ExpectBalanceEq(const v1::BalanceStats& want,
                            const BalanceMessage& got) {
  ExpectSameDouble(want.rank_cost_min(), got.rank_cost_min, "rank_cost_min");
  ExpectSameDouble(want.rank_cost_max(), got.rank_cost_max, "rank_cost_max");
  ExpectSameDouble(want.rank_cost_mean(), got.rank_cost_mean, "rank_cost_mean");
  ExpectSameDouble(want.rank_tokens_min(), got.rank_tokens_min,
                   "rank_tokens_min");
  ExpectSameDouble(want.rank_tokens_max(), got.rank_tokens_max,
                   "rank_tokens_max");
  ExpectSameDouble(want.rank_tokens_mean(), got.rank_tokens_mean,
                   "rank_tokens_mean");
  ExpectSameDouble(want.micro_batch_tokens_min(), got.micro_batch_tokens_min,
                   "micro_batch_tokens_min");
  ExpectSameDouble(want.micro_batch_tokens_max(), got.micro_batch_tokens_max,
                   "micro_batch_tokens_max");
  ExpectSameDouble(want.micro_batch_tokens_mean(), got.micro_batch_tokens_mean,
                   "micro_batch_tokens_mean");
  EXPECT_EQ(got.micro_batches, want.micro_batches());
  EXPECT_EQ(got.tokens, want.tokens());
  EXPECT_EQ(got.padded_tokens, want.padded_tokens());
  ExpectSameDouble(want.padding_ratio(), got.padding_ratio, "padding_ratio");
}

inline void ExpectBatchEq(const v1::GetResponse& want,
                          const BatchMessage& got) {
  EXPECT_EQ(got.step, want.step());
  EXPECT_EQ(got.rows,
            std::vector<int64_t>(want.rows().begin(), want.rows().end()));
  EXPECT_EQ(got.token_counts, std::vector<int64_t>(want.token_counts().begin(),
                                                   want.token_counts().end()));
  EXPECT_EQ(got.end_of_step, want.end_of_step());
  EXPECT_EQ(got.timed_out, want.timed_out());
  EXPECT_EQ(got.round, want.round());
  EXPECT_EQ(got.lease_id, want.lease_id());
  EXPECT_EQ(got.lease_ms, want.lease_ms());
  ASSERT_EQ(got.micro_batches.size(),
            static_cast<size_t>(want.micro_batches_size()));
  for (int i = 0; i < want.micro_batches_size(); ++i) {
    const v1::MicroBatch& w = want.micro_batches(i);
    const MicroBatchMessage& g = got.micro_batches[i];
    EXPECT_EQ(g.begin, w.begin()) << i;
    EXPECT_EQ(g.end, w.end()) << i;
    EXPECT_EQ(g.padded_len, w.padded_len()) << i;
    EXPECT_EQ(g.tokens, w.tokens()) << i;
    EXPECT_EQ(g.padded_tokens, w.padded_tokens()) << i;
  }
  ASSERT_EQ(got.balance.has_value(), want.has_balance());
  if (want.has_balance()) ExpectBalanceEq(want.balance(), *got.balance);
  ASSERT_EQ(got.columns.size(), static_cast<size_t>(want.columns_size()));
  for (int i = 0; i < want.columns_size(); ++i)
    ExpectColumnEq(want.columns(i), got.columns[i]);
}

inline v1::PutRequest SmallPut() {
  std::mt19937_64 rng(1);
  v1::PutRequest p;
  p.set_dock("grpo");
  p.set_step(-3);  // negative: a 10-byte varint
  p.add_rows(0);
  p.add_rows(300);
  p.set_wait_ms(1000);
  p.set_ack_lease(~uint64_t{0} - 5);  // every bit of the 64: a 10-byte varint
  FillColumn(p.add_columns(), "response_ids", v1::INT32, {2, 0}, 4, rng);
  p.add_columns()->set_name("empty");  // no dtype, offsets or data
  return p;
}

inline v1::GetResponse LargeBatch(int rows, int max_len, uint64_t seed) {
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

// A BALANCED consumer's share: a round, micro-batches (one all zero, which
// protobuf still writes as an empty submessage) and balance stats whose
// doubles include -0.0, a subnormal, a NaN and 1e300, with two columns.
inline v1::GetResponse BalancedBatch(uint64_t seed) {
  v1::GetResponse g = LargeBatch(40, 50, seed);
  g.set_round(-1);  // negative: a 10-byte varint
  g.set_lease_id(uint64_t{1} << 63);
  g.set_lease_ms(60'000);
  int64_t begin = 0;
  for (int64_t end : {0, 13, 27, 40}) {
    v1::MicroBatch* mb = g.add_micro_batches();
    mb->set_begin(begin);
    mb->set_end(end);
    if (end > begin) {
      mb->set_padded_len(128 * end);
      mb->set_tokens(1000 + end);
      mb->set_padded_tokens((end - begin) * 128 * end);
    }
    begin = end;
  }
  v1::BalanceStats* b = g.mutable_balance();
  b->set_rank_cost_min(-0.0);
  b->set_rank_cost_max(1e300);
  b->set_rank_cost_mean(std::numeric_limits<double>::denorm_min());
  b->set_rank_tokens_min(1234.5);
  b->set_rank_tokens_max(std::numeric_limits<double>::quiet_NaN());
  b->set_micro_batch_tokens_min(1);
  b->set_micro_batch_tokens_mean(2.25);
  b->set_micro_batches(int64_t{1} << 40);
  b->set_tokens(-5);
  b->set_padding_ratio(1.0625);
  return g;
}

// The codec's view of a protobuf GetResponse; column data borrowed from `g`.

// A protobuf PackedColumn as a codec column whose data points into it.
inline PackedColumn ToPacked(const v1::PackedColumn& c) {
  PackedColumn col;
  col.name = c.name();
  col.dtype = static_cast<DType>(c.dtype());
  col.offsets.assign(c.offsets().begin(), c.offsets().end());
  if (!c.data().empty()) col.segments.emplace_back(c.data().data(), c.data().size());
  return col;
}

inline BatchMessage ToBatchMessage(const v1::GetResponse& g) {
  BatchMessage m;
  m.step = g.step();
  m.rows.assign(g.rows().begin(), g.rows().end());
  m.token_counts.assign(g.token_counts().begin(), g.token_counts().end());
  m.end_of_step = g.end_of_step();
  m.timed_out = g.timed_out();
  m.round = g.round();
  m.lease_id = g.lease_id();
  m.lease_ms = g.lease_ms();
  for (const v1::MicroBatch& mb : g.micro_batches()) {
    m.micro_batches.push_back({mb.begin(), mb.end(), mb.padded_len(),
                               mb.tokens(), mb.padded_tokens()});
  }
  if (g.has_balance()) {
    const v1::BalanceStats& b = g.balance();
    m.balance = BalanceMessage{b.rank_cost_min(),
                               b.rank_cost_max(),
                               b.rank_cost_mean(),
                               b.rank_tokens_min(),
                               b.rank_tokens_max(),
                               b.rank_tokens_mean(),
                               b.micro_batch_tokens_min(),
                               b.micro_batch_tokens_max(),
                               b.micro_batch_tokens_mean(),
                               b.micro_batches(),
                               b.tokens(),
                               b.padded_tokens(),
                               b.padding_ratio()};
  }
  for (const v1::PackedColumn& c : g.columns()) m.columns.push_back(ToPacked(c));
  return m;
}

}  // namespace tdock::wire

#endif  // TDOCK_TESTS_WIRE_WIRE_TEST_UTIL_H_
