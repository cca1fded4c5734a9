#include "server/dock/round_dispatcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/refusal.h"

namespace tdock::internal {
namespace {

// The round over the draft's first `units` units; `largest` receives its
// largest share's response size (with a response limit).
absl::StatusOr<Round> Plan(const RoundDraft& draft, size_t units, int64_t& largest) {
  size_t rows = 0;
  for (size_t u = 0; u < units; ++u) rows += draft.unit_sizes[u];
  RoundOptions options = draft.options;
  if (!options.group_sizes.empty()) options.group_sizes.resize(units);
  absl::StatusOr<RoundPlan> planned =
      PlanRound(absl::MakeConstSpan(draft.lengths).first(rows), options);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(draft.who, ": ", planned.status().message()));
  }
  Round round;
  round.stats = planned->stats;
  largest = 0;
  const int real = static_cast<int>(rows);
  for (const RankPlan& rank : planned->ranks) {
    RoundShare share;
    std::vector<int> order = rank.rows;
    if (!rank.micro_batches.empty()) share.micro_batches = MicroBatchRanges(rank.micro_batches, order);
    share.rows.reserve(order.size());
    int64_t bytes = draft.fixed_bytes;
    for (int position : order) {
      if (position >= real) {  // pad: repeat
        share.repeats.push_back(static_cast<int64_t>(share.rows.size()));
        position = planned->repeats[position - real];
      }
      share.rows.push_back(draft.rows[position]);
      if (draft.max_batch_bytes > 0) bytes += draft.row_bytes[position];
    }
    largest = std::max(largest, bytes);
    round.ranks.push_back(std::move(share));
  }
  return round;
}

}  // namespace

std::vector<MicroBatchInfo> MicroBatchRanges(const std::vector<MicroBatch>& micro_batches,
                                   std::vector<int>& order) {
  std::vector<MicroBatchInfo> out;
  order.clear();
  for (const MicroBatch& mb : micro_batches) {
    MicroBatchInfo info;
    info.begin = static_cast<int64_t>(order.size());
    order.insert(order.end(), mb.rows.begin(), mb.rows.end());
    info.end = static_cast<int64_t>(order.size());
    info.padded_len = mb.padded_len;
    info.tokens = mb.tokens;
    info.padded_tokens = mb.padded_tokens;
    out.push_back(info);
  }
  return out;
}

FormedRound FormRound(const RoundDraft& draft) {
  FormedRound formed;
  size_t units = draft.units.size();
  for (;;) {
    formed.kept = units;
    int64_t largest = 0;
    formed.round = Plan(draft, units, largest);
    if (!formed.round.ok() || draft.max_batch_bytes <= 0) return formed;
    if (largest <= draft.max_batch_bytes) return formed;
    // A share would not fit one response: a smaller round, in proportion
    // (the units left out go back, for the next round).
    const int64_t n = static_cast<int64_t>(units);
    const int64_t keep = std::min(n - 1, n * draft.max_batch_bytes / largest);
    if (keep < 1) {
      formed.kept = 0;
      formed.round = CapacityError(absl::StrCat(
          draft.who, ": ", draft.whole_groups ? "group " : "row ", draft.units.front(),
          " alone is larger than one response carries (", draft.max_batch_bytes, " bytes)"));
      return formed;
    }
    units = static_cast<size_t>(keep);
  }
}

}  // namespace tdock::internal
