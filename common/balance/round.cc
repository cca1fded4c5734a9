#include "common/balance/round.h"

#include <algorithm>
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

  std::vector<std::vector<int64_t>> rank_lengths;
  for (const std::vector<int>& part : parts) {
    rank_lengths.push_back(Gather(lengths, part));
  }
  std::vector<MicroBatchPlan> plans;
  if (options.micro_batch.has_value()) {
    TDOCK_ASSIGN_OR_RETURN(plans, PlanRanks(rank_lengths, options));
  }
  RoundPlan round;
  BalanceStatsBuilder stats;
  for (size_t r = 0; r < parts.size(); ++r) {
    RankPlan rank = ToRankPlan(parts[r], plans.empty() ? nullptr : &plans[r]);
    for (int row : rank.rows) {
      rank.cost += costs[row];
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
