#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "common/balance/cost_model.h"
#include "common/balance/partition.h"
#include "common/balance/partition_internal.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// Long-tail token counts as RL rollouts produce: lognormal (median ~1100,
// mean ~1800), capped at `cap`, at least 1.
std::vector<int64_t> LongTail(int n, uint64_t seed, double cap = 16384) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(7.0, 1.0);
  std::vector<int64_t> out(n);
  for (int64_t& l : out) {
    l = static_cast<int64_t>(std::clamp(std::round(dist(rng)), 1.0, cap));
  }
  return out;
}

std::vector<double> AsCosts(const std::vector<int64_t>& lengths) {
  return CostModel{}.Costs(lengths);
}

double MaxPart(absl::Span<const double> costs,
               const std::vector<std::vector<int>>& parts) {
  const std::vector<double> sums = PartCosts(costs, parts);
  return *std::max_element(sums.begin(), sums.end());
}

// Every row 0..n-1 appears exactly once; parts are ascending inside.
void ExpectExactCover(const std::vector<std::vector<int>>& parts, int n) {
  std::vector<int> seen(n, 0);
  for (const std::vector<int>& part : parts) {
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    for (int row : part) {
      ASSERT_GE(row, 0);
      ASSERT_LT(row, n);
      ++seen[row];
    }
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "row " << i;
}

// Part sizes are floor(n/k) or ceil(n/k), with exactly n % k at the ceiling.
void ExpectEqualSizes(const std::vector<std::vector<int>>& parts, int n) {
  const int k = static_cast<int>(parts.size());
  int at_ceiling = 0;
  for (const std::vector<int>& part : parts) {
    const int size = static_cast<int>(part.size());
    EXPECT_TRUE(size == n / k || (n % k != 0 && size == n / k + 1)) << size;
    if (n % k != 0 && size == n / k + 1) ++at_ceiling;
  }
  EXPECT_EQ(at_ceiling, n % k);
}

PartitionOptions Options(PartitionConstraint constraint,
                         PartitionAlgorithm algorithm, bool refine = true) {
  PartitionOptions options;
  options.constraint = constraint;
  options.algorithm = algorithm;
  options.refine = refine;
  options.time_budget = absl::InfiniteDuration();  // deterministic tests
  return options;
}

struct Shape {
  int n;
  int k;
};
const Shape kShapes[] = {{64, 8},    {100, 8},   {256, 8},  {1000, 8},
                         {1024, 64}, {2048, 64}, {3000, 64}, {4096, 64},
                         {65, 64},   {500, 7}};

// Property: on seeded long-tail inputs every algorithm, with and without the
// size constraint, covers each row exactly once and keeps sizes equal (±1)
// when asked; kAuto is never worse than plain KK or plain greedy LPT.
TEST(Partition, CoversRowsKeepsSizesNeverWorseThanKkOrGreedy) {
  const PartitionConstraint constraints[] = {PartitionConstraint::kEqualSize,
                                             PartitionConstraint::kNone};
  for (const Shape& shape : kShapes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const std::vector<double> costs = AsCosts(LongTail(shape.n, seed));
      for (PartitionConstraint c : constraints) {
        SCOPED_TRACE(testing::Message() << "n=" << shape.n << " k=" << shape.k
                                        << " seed=" << seed << " constraint="
                                        << static_cast<int>(c));
        double best_plain = std::numeric_limits<double>::infinity();
        for (PartitionAlgorithm a : {PartitionAlgorithm::kKarmarkarKarp,
                                     PartitionAlgorithm::kGreedy}) {
          ASSERT_OK_AND_ASSIGN(auto plain,
                               Partition(costs, shape.k, Options(c, a, false)));
          ASSERT_OK_AND_ASSIGN(auto refined,
                               Partition(costs, shape.k, Options(c, a)));
          for (const auto* parts : {&plain, &refined}) {
            ASSERT_EQ(parts->size(), static_cast<size_t>(shape.k));
            ExpectExactCover(*parts, shape.n);
            if (c != PartitionConstraint::kNone) {
              ExpectEqualSizes(*parts, shape.n);
            }
          }
          // Refinement never makes a result worse.
          EXPECT_LE(MaxPart(costs, refined), MaxPart(costs, plain));
          best_plain = std::min(best_plain, MaxPart(costs, plain));
        }
        ASSERT_OK_AND_ASSIGN(
            auto automatic,
            Partition(costs, shape.k, Options(c, PartitionAlgorithm::kAuto)));
        ExpectExactCover(automatic, shape.n);
        if (c != PartitionConstraint::kNone) ExpectEqualSizes(automatic, shape.n);
        EXPECT_LE(MaxPart(costs, automatic), best_plain);
      }
    }
  }
}

// Property: with at least 32 rows per part, kAuto's heaviest part is within
// 1.02× of the lower bound max(total / k, largest row), equal sizes or not.
TEST(Partition, WithinTwoPercentOfLowerBoundAtThirtyTwoRowsPerPart) {
  const Shape shapes[] = {{256, 8}, {1024, 8}, {2048, 64}, {4096, 64},
                          {16384, 64}};
  for (const Shape& shape : shapes) {
    for (uint64_t seed = 11; seed <= 15; ++seed) {
      const std::vector<double> costs = AsCosts(LongTail(shape.n, seed));
      const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
      const double bound = std::max(
          total / shape.k, *std::max_element(costs.begin(), costs.end()));
      for (PartitionConstraint c :
           {PartitionConstraint::kEqualSize, PartitionConstraint::kNone}) {
        ASSERT_OK_AND_ASSIGN(
            auto parts,
            Partition(costs, shape.k, Options(c, PartitionAlgorithm::kAuto)));
        EXPECT_LE(MaxPart(costs, parts), 1.02 * bound)
            << "n=" << shape.n << " k=" << shape.k << " seed=" << seed;
      }
    }
  }
}

// Same input, same options: same partition (deterministic tie-breaks), for
// inputs full of ties as well.
TEST(Partition, Deterministic) {
  std::vector<double> costs = AsCosts(LongTail(3000, 7));
  for (int i = 0; i < 3000; i += 3) costs[i] = 512;  // many ties
  for (PartitionAlgorithm a :
       {PartitionAlgorithm::kKarmarkarKarp, PartitionAlgorithm::kGreedy,
        PartitionAlgorithm::kAuto}) {
    const PartitionOptions options = Options(PartitionConstraint::kNone, a);
    ASSERT_OK_AND_ASSIGN(auto first, Partition(costs, 16, options));
    ASSERT_OK_AND_ASSIGN(auto second, Partition(costs, 16, options));
    EXPECT_EQ(first, second);
  }
}

// verl's micro-batch example: [100, 900, 50, 950, 400, 600] in two parts by
// largest differencing gives {1, 5} and {0, 2, 3, 4}, 1500 tokens each.
TEST(Partition, KarmarkarKarpWorkedExample) {
  const std::vector<double> costs = {100, 900, 50, 950, 400, 600};
  ASSERT_OK_AND_ASSIGN(
      auto parts,
      Partition(costs, 2,
                Options(PartitionConstraint::kNone,
                        PartitionAlgorithm::kKarmarkarKarp, false)));
  EXPECT_EQ(parts, (std::vector<std::vector<int>>{{0, 2, 3, 4}, {1, 5}}));
}

// Equal groups: rows [i*g, (i+1)*g) land in one part, and parts hold equal
// numbers of groups (±1 when groups do not divide by k).
TEST(Partition, EqualGroupsKeepGroupsWhole) {
  const int g = 4;
  for (int groups : {64, 70}) {
    const std::vector<double> costs = AsCosts(LongTail(groups * g, 3));
    PartitionOptions options =
        Options(PartitionConstraint::kEqualGroups, PartitionAlgorithm::kAuto);
    options.group_size = g;
    ASSERT_OK_AND_ASSIGN(auto parts, Partition(costs, 8, options));
    ExpectExactCover(parts, groups * g);
    for (const std::vector<int>& part : parts) {
      ASSERT_EQ(part.size() % g, 0u);
      const int held = static_cast<int>(part.size()) / g;
      EXPECT_TRUE(held == groups / 8 || (groups % 8 != 0 && held == groups / 8 + 1));
      for (size_t i = 0; i < part.size(); i += g) {
        EXPECT_EQ(part[i] % g, 0);
        for (int j = 1; j < g; ++j) EXPECT_EQ(part[i + j], part[i] + j);
      }
    }
  }
}

// Groups of unequal sizes (an agent loop's sessions, groups after drops):
// each stays in one part, parts hold equal numbers of groups (±1), and the
// split is as balanced as the groups allow.
TEST(Partition, GroupsOfUnequalSizesKeptWhole) {
  std::vector<int> sizes;
  for (int u = 0; u < 67; ++u) sizes.push_back(1 + (u * 7) % 9);
  int rows = 0;
  std::vector<int> first_of;  // row -> first row of its group
  for (int size : sizes) {
    for (int i = 0; i < size; ++i) first_of.push_back(rows);
    rows += size;
  }
  const std::vector<double> costs = AsCosts(LongTail(rows, 5));
  PartitionOptions options = Options(PartitionConstraint::kEqualGroups, PartitionAlgorithm::kAuto);
  options.group_sizes = sizes;
  ASSERT_OK_AND_ASSIGN(auto parts, Partition(costs, 4, options));
  ExpectExactCover(parts, rows);
  double total = 0, heaviest = 0, largest_group = 0;
  for (double c : costs) total += c;
  for (const std::vector<int>& part : parts) {
    std::set<int> groups;
    for (int row : part) groups.insert(first_of[row]);
    EXPECT_TRUE(groups.size() == 16 || groups.size() == 17) << groups.size();
    for (int first : groups) {  // every row of each group it holds
      for (int row = first; row < rows && first_of[row] == first; ++row) {
        EXPECT_TRUE(std::binary_search(part.begin(), part.end(), row)) << row;
      }
    }
    double sum = 0;
    for (int row : part) sum += costs[row];
    heaviest = std::max(heaviest, sum);
  }
  for (size_t r = 0, u = 0; u < sizes.size(); r += sizes[u++]) {
    double group = 0;
    for (int i = 0; i < sizes[u]; ++i) group += costs[r + i];
    largest_group = std::max(largest_group, group);
  }
  EXPECT_LE(heaviest, total / 4 + largest_group);
}

// Fewer rows than parts: each row alone, the remaining parts empty and last.
TEST(Partition, FewerRowsThanParts) {
  const std::vector<double> costs = {5, 1, 3};
  for (PartitionConstraint c :
       {PartitionConstraint::kEqualSize, PartitionConstraint::kNone}) {
    ASSERT_OK_AND_ASSIGN(auto parts,
                         Partition(costs, 5, Options(c, PartitionAlgorithm::kAuto)));
    ASSERT_EQ(parts.size(), 5u);
    ExpectExactCover(parts, 3);
    for (int p = 0; p < 3; ++p) EXPECT_EQ(parts[p].size(), 1u);
    EXPECT_TRUE(parts[3].empty());
    EXPECT_TRUE(parts[4].empty());
  }
}

// Zero-cost rows are placed like any other, and still split evenly by count.
TEST(Partition, ZeroLengthRows) {
  std::vector<double> costs(40, 0.0);
  costs[7] = 100;
  ASSERT_OK_AND_ASSIGN(
      auto parts,
      Partition(costs, 4,
                Options(PartitionConstraint::kEqualSize, PartitionAlgorithm::kAuto)));
  ExpectExactCover(parts, 40);
  ExpectEqualSizes(parts, 40);
  EXPECT_EQ(MaxPart(costs, parts), 100);
}

// All rows equal: every part carries the same cost.
TEST(Partition, AllEqual) {
  const std::vector<double> costs(96, 1000);
  for (PartitionAlgorithm a :
       {PartitionAlgorithm::kKarmarkarKarp, PartitionAlgorithm::kGreedy,
        PartitionAlgorithm::kAuto}) {
    ASSERT_OK_AND_ASSIGN(
        auto parts, Partition(costs, 8, Options(PartitionConstraint::kNone, a)));
    for (double sum : PartCosts(costs, parts)) EXPECT_EQ(sum, 12000);
  }
}

// One huge row: its part holds nothing else when sizes are free, and only the
// smallest rows when sizes are equal.
TEST(Partition, OneHugeRow) {
  std::vector<double> costs = AsCosts(LongTail(64, 5, 2000));
  costs[10] = 1e6;
  ASSERT_OK_AND_ASSIGN(
      auto free_parts,
      Partition(costs, 4, Options(PartitionConstraint::kNone, PartitionAlgorithm::kAuto)));
  EXPECT_EQ(MaxPart(costs, free_parts), 1e6);
  ASSERT_OK_AND_ASSIGN(
      auto equal_parts,
      Partition(costs, 4, Options(PartitionConstraint::kEqualSize,
                                  PartitionAlgorithm::kAuto)));
  ExpectEqualSizes(equal_parts, 64);
  std::vector<double> others = costs;
  others.erase(others.begin() + 10);
  std::sort(others.begin(), others.end());
  const double best = 1e6 + std::accumulate(others.begin(), others.begin() + 15, 0.0);
  EXPECT_EQ(MaxPart(costs, equal_parts), best);
}

// k = 1: one part with every row; no rows: k empty parts.
TEST(Partition, OnePartAndNoRows) {
  const std::vector<double> costs = AsCosts(LongTail(10, 1));
  ASSERT_OK_AND_ASSIGN(auto one, Partition(costs, 1));
  ASSERT_EQ(one.size(), 1u);
  std::vector<int> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(one[0], all);
  ASSERT_OK_AND_ASSIGN(auto none, Partition({}, 3));
  EXPECT_EQ(none, (std::vector<std::vector<int>>(3)));
}

// Each bad input gets its own INVALID_ARGUMENT naming the field or row.
TEST(Partition, RejectsBadInput) {
  const std::vector<double> costs = {1, 2, 3, 4};
  EXPECT_STATUS(Partition(costs, 0), absl::StatusCode::kInvalidArgument, "k=0");
  EXPECT_STATUS(Partition({1, -2, 3}, 2), absl::StatusCode::kInvalidArgument,
                "cost of row 1 is -2");
  EXPECT_STATUS(Partition({1, std::nan(""), 3}, 2),
                absl::StatusCode::kInvalidArgument, "cost of row 1");
  PartitionOptions groups;
  groups.constraint = PartitionConstraint::kEqualGroups;
  groups.group_size = 3;
  EXPECT_STATUS(Partition(costs, 2, groups), absl::StatusCode::kInvalidArgument,
                "multiple of group_size");
  PartitionOptions sizes = groups;
  sizes.group_sizes = {1, 2};
  EXPECT_STATUS(Partition(costs, 2, sizes), absl::StatusCode::kInvalidArgument,
                "sizes sum to 3");
  sizes.group_sizes = {4, 0};
  EXPECT_STATUS(Partition(costs, 2, sizes), absl::StatusCode::kInvalidArgument,
                "group_sizes[1] is 0");
  PartitionOptions stray_sizes;
  stray_sizes.group_sizes = {4};
  EXPECT_STATUS(Partition(costs, 2, stray_sizes), absl::StatusCode::kInvalidArgument,
                "group_sizes needs constraint kEqualGroups");
  PartitionOptions stray;
  stray.group_size = 2;
  EXPECT_STATUS(Partition(costs, 2, stray), absl::StatusCode::kInvalidArgument,
                "needs constraint kEqualGroups");
  PartitionOptions zero_group;
  zero_group.constraint = PartitionConstraint::kEqualGroups;
  zero_group.group_size = 0;
  EXPECT_STATUS(Partition(costs, 2, zero_group),
                absl::StatusCode::kInvalidArgument, "group_size 0");
  PartitionOptions negative;
  negative.time_budget = absl::Milliseconds(-1);
  EXPECT_STATUS(Partition(costs, 2, negative), absl::StatusCode::kInvalidArgument,
                "time_budget");
  PartitionOptions bad_algorithm;
  bad_algorithm.algorithm = static_cast<PartitionAlgorithm>(9);
  EXPECT_STATUS(Partition(costs, 2, bad_algorithm),
                absl::StatusCode::kInvalidArgument, "algorithm 9");
  PartitionOptions bad_constraint;
  bad_constraint.constraint = static_cast<PartitionConstraint>(9);
  EXPECT_STATUS(Partition(costs, 2, bad_constraint),
                absl::StatusCode::kInvalidArgument, "constraint 9");
}

// The radix sort orders by (cost, id) exactly like a comparison sort, with
// ties, zeros, -0.0, fractions and large values.
TEST(PartitionInternal, SortAscendingMatchesComparisonSort) {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int> pick(0, 5);
  std::vector<double> costs(5000);
  for (double& c : costs) {
    const double choices[] = {0.0, -0.0, 1.5, 1e15, 7, 1e-300};
    c = pick(rng) == 0 ? static_cast<double>(rng() % 100000) / 8 : choices[pick(rng)];
  }
  std::vector<int> expected(costs.size());
  std::iota(expected.begin(), expected.end(), 0);
  std::sort(expected.begin(), expected.end(), [&](int x, int y) {
    return costs[x] != costs[y] ? costs[x] < costs[y] : x < y;
  });
  EXPECT_EQ(internal::SortAscending(costs), expected);
}

// Brute force over every assignment of small inputs: the lower bound that
// kAuto trusts to stop early never exceeds the true optimum.
TEST(PartitionInternal, LowerBoundNeverAboveOptimum) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 5 + trial % 5;
    const int k = 2 + trial % 2;
    std::vector<double> costs(n);
    for (double& c : costs) c = static_cast<double>(rng() % 50);
    for (bool equal : {false, true}) {
      double optimum = std::numeric_limits<double>::infinity();
      for (int code = 0; code < static_cast<int>(std::pow(k, n)); ++code) {
        std::vector<double> sums(k, 0.0);
        std::vector<int> sizes(k, 0);
        for (int i = 0, c = code; i < n; ++i, c /= k) {
          sums[c % k] += costs[i];
          ++sizes[c % k];
        }
        const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
        if (equal && *hi - *lo > 1) continue;
        optimum = std::min(optimum, *std::max_element(sums.begin(), sums.end()));
      }
      const std::vector<int> ascending = internal::SortAscending(costs);
      internal::UnitProblem problem{costs, ascending, k, equal};
      EXPECT_LE(internal::LowerBound(problem), optimum) << "trial " << trial;
    }
  }
}

// The cost model weighs the quadratic term and rejects unusable weights.
TEST(CostModel, CostsAndValidation) {
  const CostModel cost{2, 0.5};
  EXPECT_OK(cost.Validate());
  EXPECT_EQ(cost.Cost(10), 2 * 10 + 0.5 * 100);
  EXPECT_EQ(cost.Costs({0, 4}), (std::vector<double>{0, 16}));
  EXPECT_STATUS((CostModel{-1, 0}).Validate(),
                absl::StatusCode::kInvalidArgument, "a=-1");
  EXPECT_STATUS((CostModel{0, 0}).Validate(),
                absl::StatusCode::kInvalidArgument, "zero cost");
  EXPECT_STATUS((CostModel{1, std::numeric_limits<double>::infinity()}).Validate(),
                absl::StatusCode::kInvalidArgument, "finite");
  EXPECT_STATUS(ValidateLengths({3, 0, -5}), absl::StatusCode::kInvalidArgument,
                "row 2 has negative length -5");
}

}  // namespace
}  // namespace tdock
