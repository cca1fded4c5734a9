// Batch metadata (common/batch_meta.h) to and from tdock.v1 messages: the one
// place where its fields meet the wire's.
#include "absl/time/time.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {
namespace {

// GetResponse and SampleResponse: the same fields under the same names.
template <typename Response>
void MetaToProto(const BatchMeta& meta, Response* out) {
  out->set_step(meta.step);
  out->mutable_rows()->Assign(meta.rows.begin(), meta.rows.end());
  out->mutable_token_counts()->Assign(meta.token_counts.begin(), meta.token_counts.end());
  out->set_end_of_step(meta.end_of_step);
  out->set_timed_out(meta.timed_out);
  out->set_round(meta.round);
  out->clear_micro_batches();
  out->mutable_micro_batches()->Reserve(static_cast<int>(meta.micro_batches.size()));
  for (const MicroBatchInfo& mb : meta.micro_batches) {
    v1::MicroBatch* m = out->add_micro_batches();
    m->set_begin(mb.begin);
    m->set_end(mb.end);
    m->set_padded_len(mb.padded_len);
    m->set_tokens(mb.tokens);
    m->set_padded_tokens(mb.padded_tokens);
  }
  if (meta.balance.has_value()) {
    ToProto(*meta.balance, out->mutable_balance());
  } else {
    out->clear_balance();
  }
  out->set_lease_id(meta.lease_id);
  out->set_lease_ms(absl::ToInt64Milliseconds(meta.lease));
  out->mutable_keys()->Assign(meta.keys.begin(), meta.keys.end());
  out->mutable_versions()->Assign(meta.versions.begin(), meta.versions.end());
  out->mutable_repeats()->Assign(meta.repeats.begin(), meta.repeats.end());
}

template <typename Response>
BatchMeta MetaFromProto(const Response& in) {
  BatchMeta meta;
  meta.step = in.step();
  meta.rows.assign(in.rows().begin(), in.rows().end());
  meta.token_counts.assign(in.token_counts().begin(), in.token_counts().end());
  meta.keys.assign(in.keys().begin(), in.keys().end());
  meta.versions.assign(in.versions().begin(), in.versions().end());
  meta.repeats.assign(in.repeats().begin(), in.repeats().end());
  meta.end_of_step = in.end_of_step();
  meta.timed_out = in.timed_out();
  meta.round = in.round();
  meta.micro_batches.reserve(static_cast<size_t>(in.micro_batches_size()));
  for (const v1::MicroBatch& m : in.micro_batches()) {
    meta.micro_batches.push_back({.begin = m.begin(),
                                  .end = m.end(),
                                  .padded_len = m.padded_len(),
                                  .tokens = m.tokens(),
                                  .padded_tokens = m.padded_tokens()});
  }
  if (in.has_balance()) meta.balance = FromProto(in.balance());
  meta.lease_id = in.lease_id();
  meta.lease = absl::Milliseconds(in.lease_ms());
  return meta;
}

}  // namespace

v1::ListRowsResponse ToProto(const RowListing& listing) {
  v1::ListRowsResponse out;
  out.set_step(listing.step);
  out.set_sealed(listing.sealed);
  for (const RowState& row : listing.rows) {
    v1::RowState& r = *out.add_rows();
    r.set_row(row.row);
    r.set_key(row.key);
    r.set_group(row.group);
    r.mutable_written()->Assign(row.written.begin(), row.written.end());
    r.mutable_taken()->Assign(row.taken.begin(), row.taken.end());
    r.set_dropped(ToProto(row.dropped));
    r.set_version(row.version);
    for (const auto& [column, data] : row.cells) {
      v1::RowCell& cell = *r.add_cells();
      cell.set_column(column);
      cell.set_data(data);
    }
  }
  return out;
}

RowListing FromProto(const v1::ListRowsResponse& in) {
  RowListing listing;
  listing.step = in.step();
  listing.sealed = in.sealed();
  for (const v1::RowState& r : in.rows()) {
    listing.rows.push_back({r.row(), r.key(), r.group(),
                            std::vector<std::string>(r.written().begin(), r.written().end()),
                            std::vector<std::string>(r.taken().begin(), r.taken().end()),
                            FromProto(r.dropped()), r.version()});
    for (const v1::RowCell& cell : r.cells()) {
      listing.rows.back().cells.emplace_back(cell.column(), cell.data());
    }
  }
  return listing;
}

void ToProto(const BatchMeta& meta, v1::GetResponse* out) {
  MetaToProto(meta, out);
  out->set_cell_locations(meta.cell_locations);
}
void ToProto(const BatchMeta& meta, v1::SampleResponse* out) { MetaToProto(meta, out); }
BatchMeta FromProto(const v1::GetResponse& in) {
  BatchMeta meta = MetaFromProto(in);
  meta.cell_locations = in.cell_locations();
  return meta;
}
BatchMeta FromProto(const v1::SampleResponse& in) { return MetaFromProto(in); }

void ToProto(const BalanceStats& stats, v1::BalanceStats* out) {
  out->set_rank_cost_min(stats.rank_cost.min);
  out->set_rank_cost_max(stats.rank_cost.max);
  out->set_rank_cost_mean(stats.rank_cost.mean);
  out->set_rank_tokens_min(stats.rank_tokens.min);
  out->set_rank_tokens_max(stats.rank_tokens.max);
  out->set_rank_tokens_mean(stats.rank_tokens.mean);
  out->set_micro_batch_cost_min(stats.micro_batch_cost.min);
  out->set_micro_batch_cost_max(stats.micro_batch_cost.max);
  out->set_micro_batch_cost_mean(stats.micro_batch_cost.mean);
  out->set_micro_batch_tokens_min(stats.micro_batch_tokens.min);
  out->set_micro_batch_tokens_max(stats.micro_batch_tokens.max);
  out->set_micro_batch_tokens_mean(stats.micro_batch_tokens.mean);
  out->set_micro_batches(stats.micro_batches);
  out->set_tokens(stats.tokens);
  out->set_padded_tokens(stats.padded_tokens);
  out->set_padding_ratio(stats.padding_ratio);
}

BalanceStats FromProto(const v1::BalanceStats& in) {
  BalanceStats stats;
  stats.rank_cost = {in.rank_cost_min(), in.rank_cost_max(), in.rank_cost_mean()};
  stats.rank_tokens = {in.rank_tokens_min(), in.rank_tokens_max(), in.rank_tokens_mean()};
  stats.micro_batch_cost = {in.micro_batch_cost_min(), in.micro_batch_cost_max(),
                            in.micro_batch_cost_mean()};
  stats.micro_batch_tokens = {in.micro_batch_tokens_min(), in.micro_batch_tokens_max(),
                              in.micro_batch_tokens_mean()};
  stats.micro_batches = in.micro_batches();
  stats.tokens = in.tokens();
  stats.padded_tokens = in.padded_tokens();
  stats.padding_ratio = in.padding_ratio();
  return stats;
}

}  // namespace tdock
