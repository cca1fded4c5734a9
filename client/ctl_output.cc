#include "client/ctl_output.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace tdock::ctl {
namespace {

// Values shown per row in text output before "...".
constexpr size_t kMaxValuesPerRow = 12;

std::string Name(absl::string_view name) { return std::string(name); }

Json CountsToJson(const std::vector<std::pair<std::string, int64_t>>& counts) {
  Json out = Json::object();
  for (const auto& [name, count] : counts) out[name] = count;
  return out;
}

std::string CountsToText(const std::vector<std::pair<std::string, int64_t>>& counts) {
  if (counts.empty()) return "-";
  return absl::StrJoin(counts, " ", [](std::string* out, const auto& count) {
    absl::StrAppend(out, count.first, "=", count.second);
  });
}

std::string BytesText(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", bytes / 1073741824.0);
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  if (bytes >= (int64_t{1} << 10)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrCat(bytes, " B");
}

const char* PlannerName(MicroBatchPlanner planner) {
  return planner == MicroBatchPlanner::kPacked ? "packed" : "balanced";
}

const char* OrderName(MicroBatchOrder order) {
  return order == MicroBatchOrder::kSmallestAtEnds ? "smallest_at_ends" : "heavy_first";
}

// A consumer's micro_batch settings in the keys of the YAML spec; null when
// it has none.
Json MicroBatchSpecToJson(const ConsumerSpec& consumer) {
  if (!consumer.micro_batch.has_value()) return nullptr;
  const MicroBatchOptions& mb = *consumer.micro_batch;
  return {{"max_tokens", mb.max_tokens},
          {"max_rows", mb.max_rows},
          {"round_to", mb.round_to},
          {"count_multiple", mb.count_multiple},
          {"min_count", mb.min_count},
          {"planner", PlannerName(mb.planner)},
          {"order", OrderName(mb.order)},
          {"padded", mb.padded},
          {"same_count_across_ranks", consumer.same_count_across_ranks}};
}

// " cost a=.. b=.." when not the default, then the micro_batch settings.
std::string BalanceSpecToText(const ConsumerSpec& consumer) {
  std::string text;
  if (consumer.cost.a != 1 || consumer.cost.b != 0) {
    absl::StrAppend(&text, " cost a=", consumer.cost.a, " b=", consumer.cost.b);
  }
  if (!consumer.micro_batch.has_value()) return text;
  const MicroBatchOptions& mb = *consumer.micro_batch;
  absl::StrAppend(&text, "\n", std::string(27, ' '), "micro_batch max_tokens ", mb.max_tokens);
  if (mb.max_rows > 0) absl::StrAppend(&text, " max_rows ", mb.max_rows);
  if (mb.round_to > 1) absl::StrAppend(&text, " round_to ", mb.round_to);
  if (mb.count_multiple > 1) absl::StrAppend(&text, " count_multiple ", mb.count_multiple);
  if (mb.min_count > 0) absl::StrAppend(&text, " min_count ", mb.min_count);
  absl::StrAppend(&text, " planner ", PlannerName(mb.planner), " order ", OrderName(mb.order),
                  mb.padded ? " padded" : "");
  if (consumer.policy == Policy::kBalanced) {
    absl::StrAppend(&text, " same_count_across_ranks ",
                    consumer.same_count_across_ranks ? "true" : "false");
  }
  return text;
}

// Row ids of micro-batch `mb` of `batch` (clamped to the rows received).
std::vector<int64_t> MicroBatchRows(const ClientBatch& batch, const MicroBatchInfo& mb) {
  const int64_t n = static_cast<int64_t>(batch.rows.size());
  const int64_t begin = std::clamp<int64_t>(mb.begin, 0, n);
  const int64_t end = std::clamp<int64_t>(mb.end, begin, n);
  return std::vector<int64_t>(batch.rows.begin() + begin, batch.rows.begin() + end);
}

Json MicroBatchesToJson(const ClientBatch& batch) {
  Json out = Json::array();
  for (const MicroBatchInfo& mb : batch.micro_batches) {
    out.push_back({{"begin", mb.begin},
                   {"end", mb.end},
                   {"rows", MicroBatchRows(batch, mb)},
                   {"padded_len", mb.padded_len},
                   {"tokens", mb.tokens},
                   {"padded_tokens", mb.padded_tokens}});
  }
  return out;
}

// The plan lines of `get`'s text: round, micro-batches, balance.
std::string PlanToText(const ClientBatch& batch) {
  std::string text;
  if (batch.round >= 0) absl::StrAppend(&text, "  round:        ", batch.round, "\n");
  if (!batch.micro_batches.empty()) {
    absl::StrAppend(&text, "  micro-batches: ", batch.micro_batches.size(), "\n");
  }
  for (size_t i = 0; i < batch.micro_batches.size(); ++i) {
    const MicroBatchInfo& mb = batch.micro_batches[i];
    absl::StrAppendFormat(&text, "    %d: rows %s; %d tokens, padded_len %d, %d padded tokens\n",
                          i, absl::StrJoin(MicroBatchRows(batch, mb), " "), mb.tokens,
                          mb.padded_len, mb.padded_tokens);
  }
  if (!batch.balance.has_value()) return text;
  const BalanceStats& b = *batch.balance;
  absl::StrAppendFormat(
      &text,
      "  balance: rank tokens min %g max %g mean %g (max/mean %.3f); "
      "rank cost min %g max %g mean %g (max/mean %.3f)\n",
      b.rank_tokens.min, b.rank_tokens.max, b.rank_tokens.mean,
      b.rank_tokens.max_over_mean(), b.rank_cost.min, b.rank_cost.max, b.rank_cost.mean,
      b.rank_cost.max_over_mean());
  absl::StrAppendFormat(
      &text,
      "           %d micro-batches, tokens min %g max %g mean %g; "
      "%d tokens, %d padded (padding ratio %.3f)\n",
      b.micro_batches, b.micro_batch_tokens.min, b.micro_batch_tokens.max,
      b.micro_batch_tokens.mean, b.tokens, b.padded_tokens, b.padding_ratio);
  return text;
}

Json SpreadToJson(const Spread& spread) {
  return {{"min", spread.min},
          {"max", spread.max},
          {"mean", spread.mean},
          {"max_over_mean", spread.max_over_mean()}};
}

}  // namespace

Json BalanceToJson(const BalanceStats& stats) {
  return {{"rank_cost", SpreadToJson(stats.rank_cost)},
          {"rank_tokens", SpreadToJson(stats.rank_tokens)},
          {"micro_batch_cost", SpreadToJson(stats.micro_batch_cost)},
          {"micro_batch_tokens", SpreadToJson(stats.micro_batch_tokens)},
          {"micro_batches", stats.micro_batches},
          {"tokens", stats.tokens},
          {"padded_tokens", stats.padded_tokens},
          {"padding_ratio", stats.padding_ratio}};
}

Json SpecToJson(const DockSpec& spec) {
  Json columns = Json::object();
  for (const ColumnSpec& column : spec.columns) {
    Json out = {{"dtype", Name(ColumnTypeName(column))}};
    if (!column.inner_shape.empty()) out["inner_shape"] = column.inner_shape;
    out["max_len"] = column.max_len;
    out["rewritable"] = column.rewritable;
    columns[column.name] = std::move(out);
  }
  Json consumers = Json::object();
  for (const ConsumerSpec& consumer : spec.consumers) {
    if (consumer.removed) continue;  // its name may be taken again
    consumers[consumer.name] = {{"columns", consumer.columns},
                                {"dispatch_size", consumer.dispatch_size},
                                {"dp_size", consumer.dp_size},
                                {"whole_groups", consumer.whole_groups},
                                {"policy", Name(PolicyName(consumer.policy))},
                                {"seed", consumer.seed},
                                {"cost", {{"a", consumer.cost.a}, {"b", consumer.cost.b}}},
                                {"micro_batch", MicroBatchSpecToJson(consumer)},
                                {"lease_ms", consumer.lease_ms},
                                {"replicas", consumer.replicas},
                                {"optional", consumer.optional},
                                {"joined", consumer.joined},
                                {"stale", StalePolicyName(consumer.stale)},
                                {"order", RowOrderName(consumer.order)},
                                {"pad", RoundPadName(consumer.pad)}};
    if (consumer.max_staleness.has_value()) {
      consumers[consumer.name]["max_staleness"] = *consumer.max_staleness;
    }
  }
  return {{"name", spec.name},
          {"num_prompts", spec.num_prompts},
          {"n_samples_per_prompt", spec.n_samples_per_prompt},
          {"steps_in_flight", spec.steps_in_flight},
          {"length_columns", spec.length_columns},
          {"columns", std::move(columns)},
          {"consumers", std::move(consumers)},
          {"preallocate_bytes", spec.preallocate_bytes},
          {"memory_limit_bytes", spec.memory_limit_bytes},
          {"chunk_bytes", spec.chunk_bytes},
          {"retain_steps", spec.retain_steps},
          {"add_columns_on_write", spec.add_columns_on_write},
          {"max_rows_per_step", spec.max_rows_per_step},
          {"seal_when", spec.seal_when.has_value()
                            ? Json{{"consumer", spec.seal_when->consumer},
                                   {"groups", spec.seal_when->groups},
                                   {"carry", spec.seal_when->carry},
                                   {"carry_columns", spec.seal_when->carry_columns}}
                            : Json()}};
}

Json DocksToJson(const std::vector<DockSummaryInfo>& docks) {
  Json list = Json::array();
  for (const DockSummaryInfo& dock : docks) {
    list.push_back({{"name", dock.name},
                    {"rows_per_step", dock.rows_per_step},
                    {"steps_in_flight", dock.steps_in_flight},
                    {"live_steps", dock.live_steps}});
  }
  return {{"docks", std::move(list)}};
}

namespace {

Json DropsToJson(const std::vector<std::pair<DropReason, int64_t>>& drops) {
  Json out = Json::object();
  for (const auto& [reason, rows] : drops) out[std::string(DropReasonName(reason))] = rows;
  return out;
}

std::string DropsToText(const std::vector<std::pair<DropReason, int64_t>>& drops) {
  std::vector<std::string> parts;
  for (const auto& [reason, rows] : drops) parts.push_back(absl::StrCat(DropReasonName(reason), " ", rows));
  return absl::StrJoin(parts, ", ");
}

}  // namespace

Json StatusToJson(const DockStatusInfo& status) {
  Json staleness = Json::object();
  for (const ConsumerStalenessInfo& consumer : status.staleness) {
    Json buckets = Json::array();
    for (const auto& [max, rows] : consumer.buckets) buckets.push_back({{"max", max}, {"rows", rows}});
    staleness[consumer.consumer] = {{"versioned_rows", consumer.versioned_rows},
                                    {"staleness_sum", consumer.staleness_sum},
                                    {"buckets", std::move(buckets)},
                                    {"stale_rows", consumer.stale_rows}};
  }
  Json leases = Json::object();
  for (const ConsumerLeaseInfo& lease : status.leases) {
    leases[lease.consumer] = {{"leases_in_flight", lease.leases_in_flight},
                              {"rows_in_flight", lease.rows_in_flight},
                              {"expiries", lease.expiries},
                              {"nacks", lease.nacks},
                              {"rows_returned", lease.rows_returned}};
  }
  Json steps = Json::array();
  for (const StepStatusInfo& step : status.steps) {
    steps.push_back({{"step", step.step},
                     {"partition", step.partition},
                     {"ready", CountsToJson(step.ready)},
                     {"consumed", CountsToJson(step.consumed)},
                     {"sealed", step.sealed},
                     {"dropped", DropsToJson(step.dropped)}});
  }
  return {{"spec", SpecToJson(status.spec)},
          {"rows_per_step", status.spec.rows_per_step()},
          {"steps", std::move(steps)},
          {"waiters", CountsToJson(status.waiters)},
          {"arena_bytes_used", status.arena_bytes_used},
          {"arena_bytes_reserved", status.arena_bytes_reserved},
          {"memory_limit_bytes", status.memory_limit_bytes},
          {"parked_puts", status.parked_puts},
          {"leases", std::move(leases)},
          {"staleness", std::move(staleness)},
          {"reservations", {{"live", status.reservations_live},
                            {"parked", status.reservations_parked},
                            {"admission_waits", status.admission_waits},
                            {"admission_wait_seconds", status.admission_wait_seconds}}},
          {"dropped_total", DropsToJson(status.dropped_total)},
          {"version", status.version}};
}

Json BatchToJson(const ClientBatch& batch) {
  Json columns = Json::object();
  for (const PackedColumn& column : batch.columns) {
    Json rows = Json::array();
    for (int64_t i = 0; i < column.rows(); ++i) {
      rows.push_back(RowToJson(batch, column, i));
    }
    columns[column.name] = std::move(rows);
  }
  return {{"step", batch.step},
          {"rows", batch.rows},
          {"missing_rows", batch.missing_rows},
          {"keys", batch.keys},
          {"versions", batch.versions},
          {"repeats", batch.repeats},
          {"token_counts", batch.token_counts},
          {"end_of_step", batch.end_of_step},
          {"timed_out", batch.timed_out},
          {"round", batch.round},
          {"lease_id", batch.lease_id},
          {"lease_ms", absl::ToInt64Milliseconds(batch.lease)},
          {"micro_batches", MicroBatchesToJson(batch)},
          {"balance", batch.balance.has_value() ? BalanceToJson(*batch.balance) : Json(nullptr)},
          {"columns", std::move(columns)}};
}

std::string SpecToText(const DockSpec& spec) {
  std::string text = absl::StrFormat(
      "dock %s: %d prompts x %d samples = %d rows/step%s, %d step(s) in flight\n",
      spec.name, spec.num_prompts, spec.n_samples_per_prompt, spec.planned_rows(),
      spec.rows_per_step() > spec.planned_rows()
          ? absl::StrCat(" (room for ", spec.rows_per_step(), ")")
          : "",
      spec.steps_in_flight);
  absl::StrAppend(&text, "  length columns: ",
                  spec.length_columns.empty() ? "-" : absl::StrJoin(spec.length_columns, ", "),
                  "\n  columns:\n");
  for (const ColumnSpec& column : spec.columns) {
    std::vector<std::string> parts = {absl::StrFormat("    %-20s", column.name),
                                      Name(ColumnTypeName(column))};
    if (!column.inner_shape.empty()) {
      parts.push_back(absl::StrCat("inner_shape [", absl::StrJoin(column.inner_shape, ","), "]"));
    }
    if (column.max_len > 0) parts.push_back(absl::StrCat("max_len ", column.max_len));
    if (column.rewritable) parts.push_back("rewritable");
    absl::StrAppend(&text, absl::StrJoin(parts, " "), "\n");
  }
  absl::StrAppend(&text, "  consumers:\n");
  for (const ConsumerSpec& consumer : spec.consumers) {
    if (consumer.removed) continue;
    absl::StrAppendFormat(
        &text, "    %-20s columns [%s] dispatch_size %d dp_size %d policy %s%s%s%s%s%s%s%s%s\n",
        consumer.name, absl::StrJoin(consumer.columns, ", "), consumer.dispatch_size,
        consumer.dp_size, Name(PolicyName(consumer.policy)),
        consumer.whole_groups ? " whole_groups" : "", BalanceSpecToText(consumer),
        consumer.lease_ms > 0 ? absl::StrCat(" lease_ms ", consumer.lease_ms) : "",
        consumer.replicas > 1 ? absl::StrCat(" replicas ", consumer.replicas) : "",
        consumer.max_staleness.has_value()
            ? absl::StrCat(" max_staleness ", *consumer.max_staleness, " stale ",
                           StalePolicyName(consumer.stale))
            : "",
        consumer.order != RowOrder::kDefault
            ? absl::StrCat(" order ", RowOrderName(consumer.order))
            : "",
        consumer.pad != RoundPad::kNone ? absl::StrCat(" pad ", RoundPadName(consumer.pad)) : "",
        consumer.optional ? (consumer.joined ? " optional (joined)" : " optional (not joined)")
                          : "");
  }
  std::vector<std::string> removed;
  for (const ConsumerSpec& consumer : spec.consumers) {
    if (consumer.removed) removed.push_back(consumer.name);
  }
  if (!removed.empty()) {
    absl::StrAppend(&text, "  removed consumers: ", absl::StrJoin(removed, ", "), "\n");
  }
  if (spec.retain_steps) absl::StrAppend(&text, "  retains steps until released\n");
  if (spec.add_columns_on_write) {
    absl::StrAppend(&text, "  adds the columns a Put writes that it lacks\n");
  }
  if (spec.seal_when.has_value()) {
    absl::StrAppend(&text, "  seals a step once ", spec.seal_when->consumer, " has ",
                    spec.seal_when->groups, " complete groups",
                    spec.seal_when->carry ? ", carrying the other complete groups into the next"
                                            " step\n"
                                          : "\n");
  }
  return text;
}

std::string DocksToText(const std::vector<DockSummaryInfo>& docks) {
  if (docks.empty()) return "no docks\n";
  std::string text = absl::StrFormat("%-24s %10s %16s  %s\n", "NAME", "ROWS/STEP",
                                     "STEPS_IN_FLIGHT", "LIVE_STEPS");
  for (const DockSummaryInfo& dock : docks) {
    absl::StrAppendFormat(
        &text, "%-24s %10d %16d  %s\n", dock.name, dock.rows_per_step,
        dock.steps_in_flight,
        dock.live_steps.empty() ? "-" : absl::StrJoin(dock.live_steps, ","));
  }
  return text;
}

std::string StatusToText(const DockStatusInfo& status) {
  std::string text = SpecToText(status.spec);
  absl::StrAppend(&text, "  steps:", status.steps.empty() ? " none live\n" : "\n");
  for (const StepStatusInfo& step : status.steps) {
    absl::StrAppendFormat(&text, "    step %d (partition %d%s): ready %s; consumed %s%s\n",
                          step.step, step.partition, step.sealed ? ", sealed" : "",
                          CountsToText(step.ready), CountsToText(step.consumed),
                          step.dropped.empty() ? "" : "; dropped " + DropsToText(step.dropped));
  }
  absl::StrAppend(&text, "  waiting gets: ", CountsToText(status.waiters),
                  "; parked puts: ", status.parked_puts, "; version: ", status.version, "\n");
  absl::StrAppend(&text, "  arena: ", BytesText(status.arena_bytes_used), " used, ",
                  BytesText(status.arena_bytes_reserved), " reserved, limit ",
                  status.memory_limit_bytes > 0 ? BytesText(status.memory_limit_bytes)
                                                : "none",
                  "\n");
  if (!status.dropped_total.empty()) {
    absl::StrAppend(&text, "  rows dropped since creation: ", DropsToText(status.dropped_total),
                    "\n");
  }
  for (const ConsumerLeaseInfo& lease : status.leases) {
    absl::StrAppendFormat(&text,
                          "  leases of %s: %d in flight (%d rows); %d expired, %d nacked, "
                          "%d rows handed back\n",
                          lease.consumer, lease.leases_in_flight, lease.rows_in_flight,
                          lease.expiries, lease.nacks, lease.rows_returned);
  }
  if (status.reservations_live > 0 || status.reservations_parked > 0 ||
      status.admission_waits > 0) {
    absl::StrAppendFormat(&text,
                          "  reservations: %d live, %d waiting for admission; %d granted after "
                          "waiting %.3f s in all\n",
                          status.reservations_live, status.reservations_parked,
                          status.admission_waits, status.admission_wait_seconds);
  }
  for (const ConsumerStalenessInfo& consumer : status.staleness) {
    if (consumer.versioned_rows == 0 && consumer.stale_rows == 0) continue;
    std::vector<std::string> buckets;
    for (const auto& [max, rows] : consumer.buckets) {
      if (rows > 0) buckets.push_back(absl::StrCat(max < 0 ? "more" : absl::StrCat("<=", max), ": ", rows));
    }
    absl::StrAppendFormat(
        &text, "  staleness of %s: %d rows with a version, mean %.2f (%s); %d stale rows\n",
        consumer.consumer, consumer.versioned_rows,
        consumer.versioned_rows > 0
            ? static_cast<double>(consumer.staleness_sum) / static_cast<double>(consumer.versioned_rows)
            : 0.0,
        absl::StrJoin(buckets, ", "), consumer.stale_rows);
  }
  return text;
}

std::string BatchToText(const ClientBatch& batch) {
  if (batch.timed_out) return "no rows available within the wait (timed out)\n";
  std::string text = absl::StrFormat("step %d: %d rows%s\n", batch.step, batch.rows.size(),
                                     batch.end_of_step ? ", end of step" : "");
  if (batch.lease_id != 0) {
    absl::StrAppendFormat(&text, "  lease:        %d (acknowledge within %d ms)\n",
                          batch.lease_id, absl::ToInt64Milliseconds(batch.lease));
  }
  if (!batch.missing_rows.empty()) {
    absl::StrAppend(&text, "  missing rows: ", absl::StrJoin(batch.missing_rows, " "),
                    " (cells unreadable)\n");
  }
  absl::StrAppend(&text, "  rows:         ", absl::StrJoin(batch.rows, " "), "\n",
                  "  token counts: ", absl::StrJoin(batch.token_counts, " "), "\n",
                  PlanToText(batch));
  for (const PackedColumn& column : batch.columns) {
    absl::StrAppendFormat(&text, "  %s (%s):\n", column.name, Name(DTypeName(column.dtype)));
    for (int64_t i = 0; i < column.rows(); ++i) {
      const int64_t row = i < static_cast<int64_t>(batch.rows.size()) ? batch.rows[i] : i;
      absl::StrAppendFormat(&text, "    row %d: %s\n", row,
                            RowToText(batch, column, i, kMaxValuesPerRow));
    }
  }
  return text;
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tdock::ctl
