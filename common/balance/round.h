// One balanced round: the rows a consumer's D data-parallel ranks train on
// together, split into D parts of equal row counts (or equal whole groups)
// and balanced cost, then each part planned into micro-batches.
//
//   RoundOptions options;
//   options.dp_size = 8;
//   options.group_size = 1;
//   options.micro_batch = MicroBatchOptions{.max_tokens = 16384};
//   TDOCK_ASSIGN_OR_RETURN(RoundPlan round, PlanRound(lengths, options));
//   const RankPlan& mine = round.ranks[rank];
//   // mine.rows: round positions, micro-batch after micro-batch.
//
// Deterministic unless refinement runs into its time budget (see
// PartitionOptions::time_budget). Pure function: thread-safe.
#ifndef TDOCK_COMMON_BALANCE_ROUND_H_
#define TDOCK_COMMON_BALANCE_ROUND_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/balance/cost_model.h"
#include "common/balance/micro_batch.h"
#include "common/balance/partition.h"
#include "common/balance/stats.h"

namespace tdock {

struct RoundOptions {
  // Ranks to balance over, >= 1. Default: 1.
  int dp_size = 1;
  // Rows [i*g, (i+1)*g) stay on one rank and ranks get equal numbers of
  // groups (±1); 1 = equal row counts (±1). Default: 1.
  int group_size = 1;
  // Groups of unequal sizes: the rows come in consecutive groups of these
  // sizes (each >= 1), each kept on one rank, ranks getting equal numbers of
  // groups (±1); overrides group_size. Default: empty.
  std::vector<int> group_sizes;
  // Row cost for both the rank split and the micro-batch spread.
  // Default: a = 1, b = 0.
  CostModel cost;
  // Default: kAuto.
  PartitionAlgorithm algorithm = PartitionAlgorithm::kAuto;
  // Refinement budget of the rank split. Default: 20 ms.
  absl::Duration time_budget = absl::Milliseconds(20);
  // Micro-batch planning per rank; unset = none. Default: unset.
  std::optional<MicroBatchOptions> micro_batch;
  // Raise every rank's micro-batch count to the round's largest (still within
  // the budget), so all ranks step together. Default: true.
  bool same_count_across_ranks = true;
  // Fill every rank short of the round's largest share with repeats of the
  // round's lightest rows (lightest first, cycling), so that every rank gets
  // as many rows; the repeats are planned into micro-batches like any row.
  // Default: false.
  bool pad_repeat = false;

  // Checks the options alone. The message names the field.
  absl::Status Validate() const;
};

struct RankPlan {
  // Round positions of this rank's rows: micro-batch after micro-batch (rows
  // ascending within each) when planned, else ascending. With pad_repeat, a
  // position p >= the round's row count is a repeat of row
  // RoundPlan::repeats[p - row count].
  std::vector<int> rows;
  // Micro-batches; their `rows` are round positions. Empty when not planned.
  std::vector<MicroBatch> micro_batches;
  double cost = 0;
  int64_t tokens = 0;
};

struct RoundPlan {
  // ranks[r] is what rank r gets.
  std::vector<RankPlan> ranks;
  // pad_repeat: the row each repeat repeats (see RankPlan::rows).
  std::vector<int> repeats;
  BalanceStats stats;
};

// Plans a round over `lengths` (token count of each row of the round).
// Errors (INVALID_ARGUMENT): bad options, a negative length, a row count not
// divisible by group_size, a row over the micro-batch budget (naming its
// round position, length and the budget).
absl::StatusOr<RoundPlan> PlanRound(absl::Span<const int64_t> lengths,
                                    const RoundOptions& options);

}  // namespace tdock

#endif  // TDOCK_COMMON_BALANCE_ROUND_H_
