// Helpers of the bulk framing's tests: splitting bytes into segments,
// protobuf wire bytes written by hand, sample messages, and the comparison of
// decoded messages with protobuf's.
#ifndef TDOCK_TESTS_WIRE_BULK_TEST_UTIL_H_
#define TDOCK_TESTS_WIRE_BULK_TEST_UTIL_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "proto/tdock/v1/bulk.h"
#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"

namespace tdock::bulk {

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

// A decoded message as protobuf's class again: its header with the columns
// added back, their data copied out of the segments.
template <typename Message>
Message Rebuilt(const Decoded<Message>& decoded) {
  Message m = decoded.header;
  for (const PackedColumn& c : decoded.columns) {
    v1::PackedColumn* out = m.add_columns();
    out->set_name(c.name);
    out->set_dtype(static_cast<v1::DType>(c.dtype));
    out->mutable_offsets()->Assign(c.offsets.begin(), c.offsets.end());
    out->set_data(Concat(c.segments));
  }
  return m;
}

// Same fields, compared as protobuf's bytes (doubles bit for bit, so -0.0
// and NaN count); unknown fields are not compared. Every column segment is
// non-empty.
template <typename Message>
void ExpectDecodedAs(Message want, const Decoded<Message>& got) {
  Message rebuilt = Rebuilt(got);
  want.DiscardUnknownFields();
  rebuilt.DiscardUnknownFields();
  EXPECT_EQ(rebuilt.SerializeAsString(), want.SerializeAsString());
  for (const PackedColumn& c : got.columns) {
    for (const ByteSpan& s : c.segments) EXPECT_FALSE(s.empty());
  }
}

// A protobuf message split into what the encoder takes: its header (no
// columns) and its columns, whose data points into `m`.
template <typename Message>
struct Parts {
  Message header;
  std::vector<PackedColumn> columns;
};
template <typename Message>
Parts<Message> Split(const Message& m) {
  Parts<Message> parts{m, {}};
  parts.header.clear_columns();
  for (const v1::PackedColumn& c : m.columns()) {
    PackedColumn& col = parts.columns.emplace_back();
    col.name = c.name();
    col.dtype = static_cast<DType>(c.dtype());
    col.offsets.assign(c.offsets().begin(), c.offsets().end());
    if (!c.data().empty()) col.segments.emplace_back(c.data().data(), c.data().size());
  }
  return parts;
}
inline Encoded EncodeOf(const v1::PutRequest& m) {
  const Parts<v1::PutRequest> parts = Split(m);
  return EncodePut(parts.header, parts.columns);
}
inline Encoded EncodeOf(const v1::GetResponse& m) {
  const Parts<v1::GetResponse> parts = Split(m);
  return EncodeBatch(parts.header, parts.columns);
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
  b->set_micro_batch_cost_max(-1e-300);
  return g;
}

}  // namespace tdock::bulk

#endif  // TDOCK_TESTS_WIRE_BULK_TEST_UTIL_H_
