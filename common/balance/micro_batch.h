// Micro-batch planning for the rows one rank trains on: split them into
// micro-batches that never exceed a token budget and, within that, carry
// balanced cost with little padding.
//
//   MicroBatchOptions options;
//   options.max_tokens = 16384;
//   options.round_to = 128;        // TP×CP alignment
//   options.padded = true;         // budget counts rows × padded length
//   TDOCK_ASSIGN_OR_RETURN(MicroBatchPlan plan,
//                          PlanMicroBatches(lengths, options));
//   for (const MicroBatch& mb : plan.micro_batches) Forward(mb.rows);
//
// The load of a micro-batch is what the budget counts: rows × padded length
// when `padded`, else its real tokens (packed, padding removed). Padded
// length is the longest row rounded up to `round_to`.
//
// Planners:
//   kBalanced  packed counting (verl): the smallest count >= max(ceil(total
//              tokens / budget), ceil(rows / max_rows), min_count), a
//              multiple of count_multiple, at which rows spread over that
//              many micro-batches by cost (Karmarkar–Karp or greedy, refined)
//              can be made to fit the budget: rows move out of any
//              micro-batch over it, and the count grows when that fails. It
//              never exceeds the packed planner's count.
//              Padded counting: rows of similar length stay together (mixing
//              lengths wastes the budget on padding). Length-sorted rows are
//              cut into the packed planner's count of contiguous runs, with
//              cut points that minimise the heaviest run's padded load.
//   kPacked    (ROLL) rows by increasing length fill each micro-batch up to
//              the budget; then the heaviest multi-row micro-batches are split
//              in two until the count reaches min_count and divides by
//              count_multiple.
// Either way every micro-batch is checked against max_tokens and max_rows
// before the plan is returned: the budget is never exceeded. Micro-batches
// are empty only when the count forced by min_count/count_multiple exceeds
// what the rows can fill.
//
// Pure functions: thread-safe, no shared state.
#ifndef TDOCK_COMMON_BALANCE_MICRO_BATCH_H_
#define TDOCK_COMMON_BALANCE_MICRO_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/balance/cost_model.h"

namespace tdock {

enum class MicroBatchPlanner {
  kBalanced = 0,
  kPacked = 1,
};

// Order of the micro-batches in the plan, by attention work Σ L².
enum class MicroBatchOrder {
  kHeavyFirst = 0,        // heaviest first (verl's dynamic-bsz balance)
  kSmallestAtEnds = 1,    // lightest first and last, heaviest in the middle:
                          // shorter pipeline warm-up and cool-down
};

struct MicroBatchOptions {
  // Token budget per micro-batch; required, > 0. Default: 0 (unset).
  int64_t max_tokens = 0;
  // Rows per micro-batch at most; 0 = no limit. Default: 0.
  int max_rows = 0;
  // Each micro-batch's length is padded up to a multiple of this. Default: 1.
  int64_t round_to = 1;
  // The count of micro-batches must divide by this (PP/VPP). Default: 1.
  int count_multiple = 1;
  // At least this many micro-batches. Default: 0.
  int min_count = 0;
  // The budget counts rows × padded length (true) or real tokens (false).
  // Default: false.
  bool padded = false;
  // Default: kBalanced.
  MicroBatchPlanner planner = MicroBatchPlanner::kBalanced;
  // Default: kHeavyFirst.
  MicroBatchOrder order = MicroBatchOrder::kHeavyFirst;

  // Checks the options alone. The message names the field.
  absl::Status Validate() const;
  // Budget load of `rows` rows whose longest is `max_length`, holding
  // `tokens` real tokens.
  int64_t Load(int64_t rows, int64_t max_length, int64_t tokens) const;
  // Budget load of one row of `length` tokens alone.
  int64_t RowLoad(int64_t length) const { return Load(1, length, length); }

  bool operator==(const MicroBatchOptions&) const = default;
};

struct MicroBatch {
  // Positions in the planned `lengths`, ascending.
  std::vector<int> rows;
  // Longest row rounded up to round_to; 0 when empty.
  int64_t padded_len = 0;
  // Real tokens: Σ L.
  int64_t tokens = 0;
  // Tokens the micro-batch occupies, as the budget counts them:
  // rows × padded_len when padded, else `tokens` (packed, no padding).
  int64_t padded_tokens = 0;
  // Σ cost(L) under the planner's cost model.
  double cost = 0;
};

struct MicroBatchPlan {
  std::vector<MicroBatch> micro_batches;
};

// Plans micro-batches for `lengths` (token count of each row). `cost` spreads
// rows in the balanced planner and fills MicroBatch::cost.
// Errors (INVALID_ARGUMENT): bad options or cost model, a negative length, a
// row whose own load exceeds max_tokens (naming the row, its length and the
// budget). Nothing is planned on error.
absl::StatusOr<MicroBatchPlan> PlanMicroBatches(
    absl::Span<const int64_t> lengths, const MicroBatchOptions& options,
    const CostModel& cost = CostModel());

// OK when every row fits the budget alone; else the INVALID_ARGUMENT that
// PlanMicroBatches returns, naming the first row at fault.
// REQUIRES: options.Validate() is OK.
absl::Status CheckRowsFitBudget(absl::Span<const int64_t> lengths,
                                const MicroBatchOptions& options);

}  // namespace tdock

#endif  // TDOCK_COMMON_BALANCE_MICRO_BATCH_H_
