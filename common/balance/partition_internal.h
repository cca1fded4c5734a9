// Partition algorithms over "units": rows, or whole groups of rows. Used by
// partition.cc; exposed for tests and benchmarks that compare algorithms.
#ifndef TDOCK_COMMON_BALANCE_PARTITION_INTERNAL_H_
#define TDOCK_COMMON_BALANCE_PARTITION_INTERNAL_H_

#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tdock::internal {

// One partition problem. Plain view: the caller owns the spans.
struct UnitProblem {
  // Cost of each unit; finite and >= 0.
  absl::Span<const double> costs;
  // Unit ids 0..n-1 sorted by (cost, id) ascending.
  absl::Span<const int> ascending;
  // Number of parts, >= 1.
  int k = 1;
  // When true every part gets floor(n/k) or ceil(n/k) units.
  bool equal_count = false;
};

// Unit ids sorted by (cost, id) ascending.
std::vector<int> SortAscending(absl::Span<const double> costs);

// Each returns part_of[unit] in [0, k).
std::vector<int> KarmarkarKarp(const UnitProblem& problem);
std::vector<int> GreedyLpt(const UnitProblem& problem);

// Improves *part_of in place by swaps and moves between the heaviest part and
// lighter ones, until no such step lowers the heaviest part or `deadline`
// passes. Never raises the maximum part cost; with equal_count the multiset
// of part sizes is kept.
void Refine(const UnitProblem& problem, absl::Time deadline,
            std::vector<int>* part_of);

// A lower bound on the heaviest part of any partition: total / k (rounded up
// when every cost is a whole number), the largest unit, and with equal counts
// the largest unit plus the floor(n/k) - 1 smallest others.
double LowerBound(const UnitProblem& problem);

// Cost sum of each part.
std::vector<double> UnitPartCosts(const UnitProblem& problem,
                                  absl::Span<const int> part_of);

}  // namespace tdock::internal

#endif  // TDOCK_COMMON_BALANCE_PARTITION_INTERNAL_H_
