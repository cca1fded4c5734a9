#include "common/balance/round.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {
namespace {

std::vector<int64_t> Gather(absl::Span<const int64_t> lengths,
                            absl::Span<const int> rows) {
  std::vector<int64_t> out;
  out.reserve(rows.size());
  for (int row : rows) out.push_back(lengths[row]);
  return out;
}

// Plans every rank's micro-batches; with same_count_across_ranks, replans the
// ranks below the round's largest count with min_count raised to it. A
// replan may come out above that count (the budget rules); then the others
// follow, so the largest count only grows and the loop ends.
absl::StatusOr<std::vector<MicroBatchPlan>> PlanRanks(
    const std::vector<std::vector<int64_t>>& rank_lengths,
    const RoundOptions& options) {
  const int dp = static_cast<int>(rank_lengths.size());
  std::vector<MicroBatchPlan> plans(dp);
  std::vector<int> planned_with(dp, -1);  // min_count of the current plan
  int count = options.micro_batch->min_count;
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < dp; ++r) {
      if (planned_with[r] >= 0 &&
          static_cast<int>(plans[r].micro_batches.size()) >= count) {
        continue;
      }
      MicroBatchOptions mb = *options.micro_batch;
      mb.min_count = count;
      absl::StatusOr<MicroBatchPlan> plan =
          PlanMicroBatches(rank_lengths[r], mb, options.cost);
      if (!plan.ok()) {
        return absl::Status(plan.status().code(),
                            absl::StrCat("rank ", r, ": ", plan.status().message()));
      }
      plans[r] = *std::move(plan);
      planned_with[r] = count;
      const int got = static_cast<int>(plans[r].micro_batches.size());
      if (options.same_count_across_ranks && got > count) {
        count = got;
        changed = true;
      }
    }
  }
  return plans;
}

// Fills every part short of the largest with positions past the round's
// rows (appended to the part), each a repeat of one of the round's rows,
// lightest first (ties: the lower position), cycling; returns the row each
// repeat repeats.
std::vector<int> Repeats(const std::vector<double>& costs, std::vector<std::vector<int>>& parts) {
  std::vector<int> repeats;
  if (costs.empty()) return repeats;
  size_t target = 0;
  for (const std::vector<int>& part : parts) target = std::max(target, part.size());
  std::vector<int> lightest(costs.size());
  std::iota(lightest.begin(), lightest.end(), 0);
  std::stable_sort(lightest.begin(), lightest.end(),
                   [&](int a, int b) { return costs[a] < costs[b]; });
  const int rows = static_cast<int>(costs.size());
  for (std::vector<int>& part : parts) {
    while (part.size() < target) {
      part.push_back(rows + static_cast<int>(repeats.size()));
      repeats.push_back(lightest[repeats.size() % lightest.size()]);
    }
  }
  return repeats;
}

// Rank rows and micro-batch rows as round positions.
RankPlan ToRankPlan(absl::Span<const int> part, MicroBatchPlan* plan) {
  RankPlan rank;
  rank.rows.reserve(part.size());
  if (plan == nullptr) {
    rank.rows.assign(part.begin(), part.end());
    return rank;
  }
  for (MicroBatch& mb : plan->micro_batches) {
    for (int& row : mb.rows) {
      row = part[row];
      rank.rows.push_back(row);
    }
    rank.micro_batches.push_back(std::move(mb));
  }
  return rank;
}

}  // namespace

absl::Status RoundOptions::Validate() const {
  if (dp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("round dp_size ", dp_size, " must be >= 1"));
  }
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("round group_size ", group_size, " must be >= 1"));
  }
  if (time_budget < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("round time_budget ", absl::FormatDuration(time_budget),
                     " is negative"));
  }
  TDOCK_RETURN_IF_ERROR(cost.Validate());
  if (micro_batch.has_value()) TDOCK_RETURN_IF_ERROR(micro_batch->Validate());
  return absl::OkStatus();
}

absl::StatusOr<RoundPlan> PlanRound(absl::Span<const int64_t> lengths,
                                    const RoundOptions& options) {
  TDOCK_RETURN_IF_ERROR(options.Validate());
  TDOCK_ASSIGN_OR_RETURN(const std::vector<double> costs,
                         RowCosts(options.cost, lengths));
  if (options.micro_batch.has_value()) {
    TDOCK_RETURN_IF_ERROR(CheckRowsFitBudget(lengths, *options.micro_batch));
  }
  PartitionOptions partition;
  partition.constraint = options.group_size > 1 || !options.group_sizes.empty()
                             ? PartitionConstraint::kEqualGroups
                             : PartitionConstraint::kEqualSize;
  partition.group_size = options.group_size;
  partition.group_sizes = options.group_sizes;
  partition.algorithm = options.algorithm;
  partition.time_budget = options.time_budget;
  TDOCK_ASSIGN_OR_RETURN(std::vector<std::vector<int>> parts,
                         Partition(costs, options.dp_size, partition));
  RoundPlan round;
  std::vector<int64_t> padded_lengths;
  std::vector<double> padded_costs;
  if (options.pad_repeat) {
    round.repeats = Repeats(costs, parts);
    padded_lengths.assign(lengths.begin(), lengths.end());
    padded_costs = costs;
    for (int row : round.repeats) {
      padded_lengths.push_back(lengths[row]);
      padded_costs.push_back(costs[row]);
    }
    lengths = padded_lengths;
  }
  const std::vector<double>& row_costs = options.pad_repeat ? padded_costs : costs;

  std::vector<std::vector<int64_t>> rank_lengths;
  for (const std::vector<int>& part : parts) {
    rank_lengths.push_back(Gather(lengths, part));
  }
  std::vector<MicroBatchPlan> plans;
  if (options.micro_batch.has_value()) {
    TDOCK_ASSIGN_OR_RETURN(plans, PlanRanks(rank_lengths, options));
  }
  BalanceStatsBuilder stats;
  for (size_t r = 0; r < parts.size(); ++r) {
    RankPlan rank = ToRankPlan(parts[r], plans.empty() ? nullptr : &plans[r]);
    for (int row : rank.rows) {
      rank.cost += row_costs[row];
      rank.tokens += lengths[row];
    }
    stats.AddRank(rank.cost, rank.tokens);
    for (const MicroBatch& mb : rank.micro_batches) stats.AddMicroBatch(mb);
    round.ranks.push_back(std::move(rank));
  }
  round.stats = stats.Build();
  return round;
}

}  // namespace tdock
