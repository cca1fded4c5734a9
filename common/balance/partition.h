// Balanced partitioning: split rows with given costs into k parts whose cost
// sums are as close as possible, optionally with equal row counts (one part
// per data-parallel rank) or with whole groups of rows kept together.
//
//   std::vector<double> costs = CostModel{}.Costs(lengths);
//   PartitionOptions options;              // equal sizes, best algorithm
//   TDOCK_ASSIGN_OR_RETURN(std::vector<std::vector<int>> parts,
//                          Partition(costs, /*k=*/8, options));
//   // parts[r] lists the row indices of rank r, ascending.
//
// Algorithms:
//   kKarmarkarKarp  largest differencing method. With equal sizes the rows,
//                   sorted, are cut into windows of k that each start as a
//                   k-set state; states are merged by largest difference
//                   (heaviest set of one with the lightest of the other), so
//                   every part keeps the same row count. Deterministic.
//   kGreedy         longest processing time first: rows by decreasing cost,
//                   each to the lightest part that still has room.
//   kAuto           greedy, refined; then Karmarkar–Karp, refined, unless
//                   the first already meets a lower bound on the optimum
//                   (nothing can beat it); the better result is kept.
// Refinement (on by default) then repeatedly swaps rows between the heaviest
// part and a lighter one, or moves a row where sizes allow, whenever that
// lowers the pair's maximum. It never raises the heaviest part's cost, so the
// refined result is never worse than the one it starts from.
//
// Pure functions: thread-safe, no shared state.
#ifndef TDOCK_COMMON_BALANCE_PARTITION_H_
#define TDOCK_COMMON_BALANCE_PARTITION_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tdock {

enum class PartitionConstraint {
  kNone = 0,       // parts may hold any number of rows
  kEqualSize = 1,  // every part holds floor(n/k) or ceil(n/k) rows
  // Rows [i*g, (i+1)*g) (g = group_size) stay in one part, and every part
  // holds floor or ceil of (n/g)/k groups (or consecutive groups of the
  // sizes group_sizes lists).
  kEqualGroups = 2,
};

enum class PartitionAlgorithm {
  kAuto = 0,
  kKarmarkarKarp = 1,
  kGreedy = 2,
};

struct PartitionOptions {
  // Default: kEqualSize.
  PartitionConstraint constraint = PartitionConstraint::kEqualSize;
  // Rows per group; must be 1 unless constraint is kEqualGroups. Default: 1.
  int group_size = 1;
  // kEqualGroups with groups of unequal sizes: the rows come in consecutive
  // groups of these sizes (each >= 1, summing to the row count); overrides
  // group_size. Parts hold equal numbers of groups (±1). Default: empty.
  std::vector<int> group_sizes;
  // Default: kAuto.
  PartitionAlgorithm algorithm = PartitionAlgorithm::kAuto;
  // Run the refinement pass after construction. Default: true.
  bool refine = true;
  // Wall-clock budget for refinement, counted from the call. Constructing a
  // partition always completes; refinement stops at the budget (results then
  // depend on machine speed). Refinement usually converges long before it.
  // Default: 20 ms.
  absl::Duration time_budget = absl::Milliseconds(20);

  // Checks the options alone (not the rows). The message names the field.
  absl::Status Validate() const;
};

// Splits rows 0..costs.size()-1 into exactly k parts. Each row appears in
// exactly one part; row indices within a part are ascending; parts are
// ordered by their smallest row, empty parts last. k may exceed the row count
// (some parts are then empty).
// Errors (INVALID_ARGUMENT): k < 1, bad options, a cost that is negative or
// not finite (naming the row), a row count not divisible by group_size.
absl::StatusOr<std::vector<std::vector<int>>> Partition(
    absl::Span<const double> costs, int k,
    const PartitionOptions& options = PartitionOptions());

// Cost sum of each part. REQUIRES: every index < costs.size().
std::vector<double> PartCosts(absl::Span<const double> costs,
                              absl::Span<const std::vector<int>> parts);

}  // namespace tdock

#endif  // TDOCK_COMMON_BALANCE_PARTITION_H_
