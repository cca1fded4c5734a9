#include "common/balance/partition.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/balance/partition_internal.h"
#include "common/status.h"

namespace tdock {
namespace {

// Indices are int; keep well inside that range.
constexpr int64_t kMaxRows = int64_t{1} << 30;
constexpr int kMaxParts = 1 << 20;

absl::Status ValidateCosts(absl::Span<const double> costs) {
  if (static_cast<int64_t>(costs.size()) > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition of ", costs.size(), " rows exceeds the limit ", kMaxRows));
  }
  double total = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost of row ", i, " is ", costs[i], "; must be finite and >= 0"));
    }
    total += costs[i];
  }
  if (!std::isfinite(total)) {  // every part sum stays finite below this
    return absl::InvalidArgumentError(
        "partition costs sum beyond the double range; scale them down");
  }
  return absl::OkStatus();
}

std::vector<double> GroupCosts(absl::Span<const double> costs, absl::Span<const int> sizes) {
  std::vector<double> out(sizes.size(), 0.0);
  size_t row = 0;
  for (size_t u = 0; u < sizes.size(); ++u) {
    for (int i = 0; i < sizes[u]; ++i) out[u] += costs[row++];
  }
  return out;
}

// The groups' sizes: group_sizes, or groups of group_size; empty when every
// row is its own unit.
absl::StatusOr<std::vector<int>> GroupSizes(size_t rows, const PartitionOptions& options) {
  if (!options.group_sizes.empty()) {
    int64_t sum = 0;
    for (int size : options.group_sizes) sum += size;
    if (sum != static_cast<int64_t>(rows)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "partition of ", rows, " rows into groups whose sizes sum to ", sum));
    }
    return options.group_sizes;
  }
  const int g = options.group_size;
  if (rows % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition of ", rows, " rows into groups of ", g, ": ", rows % g,
                     " rows left over (rows must be a multiple of group_size)"));
  }
  if (g == 1) return std::vector<int>();
  return std::vector<int>(rows / g, g);
}

// Max part cost first, then spread (max - min); lower is better.
bool Better(const internal::UnitProblem& problem, absl::Span<const int> x,
            absl::Span<const int> y) {
  const std::vector<double> cx = internal::UnitPartCosts(problem, x);
  const std::vector<double> cy = internal::UnitPartCosts(problem, y);
  const auto [xmin, xmax] = std::minmax_element(cx.begin(), cx.end());
  const auto [ymin, ymax] = std::minmax_element(cy.begin(), cy.end());
  if (*xmax != *ymax) return *xmax < *ymax;
  return *xmax - *xmin < *ymax - *ymin;
}

std::vector<int> Construct(const internal::UnitProblem& problem,
                           PartitionAlgorithm algorithm, bool refine,
                           absl::Time deadline) {
  std::vector<int> part_of = algorithm == PartitionAlgorithm::kGreedy
                                 ? internal::GreedyLpt(problem)
                                 : internal::KarmarkarKarp(problem);
  if (refine) internal::Refine(problem, deadline, &part_of);
  return part_of;
}

double MaxOf(const internal::UnitProblem& problem, absl::Span<const int> x) {
  const std::vector<double> sums = internal::UnitPartCosts(problem, x);
  return *std::max_element(sums.begin(), sums.end());
}

// kAuto: greedy LPT, refined (the cheaper one); then Karmarkar–Karp, refined,
// unless the first already meets the lower bound (no partition can beat it);
// the better wins, the first on ties.
std::vector<int> Solve(const internal::UnitProblem& problem,
                       const PartitionOptions& options) {
  const absl::Time deadline = absl::Now() + options.time_budget;
  if (options.algorithm != PartitionAlgorithm::kAuto) {
    return Construct(problem, options.algorithm, options.refine, deadline);
  }
  std::vector<int> greedy =
      Construct(problem, PartitionAlgorithm::kGreedy, options.refine, deadline);
  if (MaxOf(problem, greedy) <= internal::LowerBound(problem)) return greedy;
  std::vector<int> kk = Construct(
      problem, PartitionAlgorithm::kKarmarkarKarp, options.refine, deadline);
  return Better(problem, kk, greedy) ? kk : greedy;
}

// Unit assignment to row lists: unit u covers the next sizes[u] rows (one
// row when `sizes` is empty).
std::vector<std::vector<int>> Expand(absl::Span<const int> part_of, int k,
                                     absl::Span<const int> sizes) {
  std::vector<std::vector<int>> parts(k);
  std::vector<int> count(k, 0);
  for (size_t u = 0; u < part_of.size(); ++u) count[part_of[u]] += sizes.empty() ? 1 : sizes[u];
  for (int p = 0; p < k; ++p) parts[p].reserve(count[p]);
  int row = 0;
  for (size_t u = 0; u < part_of.size(); ++u) {
    const int size = sizes.empty() ? 1 : sizes[u];
    for (int i = 0; i < size; ++i) parts[part_of[u]].push_back(row++);
  }
  std::sort(parts.begin(), parts.end(),
            [](const std::vector<int>& x, const std::vector<int>& y) {
              if (x.empty() || y.empty()) return !x.empty() && y.empty();
              return x.front() < y.front();
            });
  return parts;
}

}  // namespace

absl::Status PartitionOptions::Validate() const {
  switch (constraint) {
    case PartitionConstraint::kNone:
    case PartitionConstraint::kEqualSize:
    case PartitionConstraint::kEqualGroups:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "partition constraint ", static_cast<int>(constraint), " unknown"));
  }
  switch (algorithm) {
    case PartitionAlgorithm::kAuto:
    case PartitionAlgorithm::kKarmarkarKarp:
    case PartitionAlgorithm::kGreedy:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "partition algorithm ", static_cast<int>(algorithm), " unknown"));
  }
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition group_size ", group_size, " must be >= 1"));
  }
  if (group_size != 1 && constraint != PartitionConstraint::kEqualGroups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition group_size ", group_size,
        " needs constraint kEqualGroups (group_size applies to no other)"));
  }
  if (!group_sizes.empty() && constraint != PartitionConstraint::kEqualGroups) {
    return absl::InvalidArgumentError(
        "partition group_sizes needs constraint kEqualGroups (they apply to no other)");
  }
  for (size_t u = 0; u < group_sizes.size(); ++u) {
    if (group_sizes[u] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "partition group_sizes[", u, "] is ", group_sizes[u], "; must be >= 1"));
    }
  }
  if (time_budget < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition time_budget ",
                     absl::FormatDuration(time_budget), " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<int>>> Partition(
    absl::Span<const double> costs, int k, const PartitionOptions& options) {
  if (k < 1 || k > kMaxParts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition into k=", k, " parts; k must be in [1, ", kMaxParts, "]"));
  }
  TDOCK_RETURN_IF_ERROR(options.Validate());
  TDOCK_RETURN_IF_ERROR(ValidateCosts(costs));
  TDOCK_ASSIGN_OR_RETURN(const std::vector<int> sizes, GroupSizes(costs.size(), options));
  const std::vector<double> group_costs =
      sizes.empty() ? std::vector<double>() : GroupCosts(costs, sizes);
  internal::UnitProblem problem;
  problem.costs = sizes.empty() ? costs : absl::MakeConstSpan(group_costs);
  const std::vector<int> ascending = internal::SortAscending(problem.costs);
  problem.ascending = ascending;
  problem.k = k;
  problem.equal_count = options.constraint != PartitionConstraint::kNone;
  return Expand(Solve(problem, options), k, sizes);
}

std::vector<double> PartCosts(absl::Span<const double> costs,
                              absl::Span<const std::vector<int>> parts) {
  std::vector<double> out;
  out.reserve(parts.size());
  for (const std::vector<int>& part : parts) {
    double sum = 0;
    for (int row : part) sum += costs[row];
    out.push_back(sum);
  }
  return out;
}

namespace internal {

// Stable LSD radix sort on the bits of the costs: for non-negative doubles
// the IEEE-754 bit pattern orders like the value. Starting from id order,
// stability breaks ties by id. Bytes equal in every key are skipped, which
// for token counts is most of them.
std::vector<int> SortAscending(absl::Span<const double> costs) {
  struct Keyed {
    uint64_t key;
    int id;
  };
  const size_t n = costs.size();
  std::vector<Keyed> items(n), buffer(n);
  std::array<std::array<size_t, 256>, 8> counts{};
  for (size_t i = 0; i < n; ++i) {
    // + 0.0 turns -0.0 into +0.0; costs are validated to be >= 0.
    items[i] = Keyed{std::bit_cast<uint64_t>(costs[i] + 0.0), static_cast<int>(i)};
    for (int b = 0; b < 8; ++b) ++counts[b][(items[i].key >> (8 * b)) & 0xff];
  }
  for (int b = 0; b < 8; ++b) {
    const size_t first = (items.empty() ? 0 : (items[0].key >> (8 * b)) & 0xff);
    if (counts[b][first] == n) continue;  // byte b is the same in every key
    std::array<size_t, 256> start;
    size_t sum = 0;
    for (int v = 0; v < 256; ++v) {
      start[v] = sum;
      sum += counts[b][v];
    }
    for (const Keyed& item : items) {
      buffer[start[(item.key >> (8 * b)) & 0xff]++] = item;
    }
    items.swap(buffer);
  }
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = items[i].id;
  return order;
}

double LowerBound(const UnitProblem& problem) {
  const absl::Span<const double> c = problem.costs;
  const size_t n = c.size();
  if (n == 0) return 0;
  double total = 0;
  bool integral = true;
  for (double v : c) {
    total += v;
    integral = integral && v == std::floor(v) && v < 0x1p52;
  }
  double bound = total / problem.k;
  if (integral && total < 0x1p52) bound = std::ceil(bound);
  const double largest = c[problem.ascending[n - 1]];
  bound = std::max(bound, largest);
  if (problem.equal_count) {
    // The largest unit's part holds at least floor(n/k) units.
    double with_smallest = largest;
    const size_t others = n / problem.k == 0 ? 0 : n / problem.k - 1;
    for (size_t i = 0; i < others && i + 1 < n; ++i) {
      with_smallest += c[problem.ascending[i]];
    }
    bound = std::max(bound, with_smallest);
  }
  return bound;
}

std::vector<double> UnitPartCosts(const UnitProblem& problem,
                                  absl::Span<const int> part_of) {
  std::vector<double> sums(problem.k, 0.0);
  for (size_t u = 0; u < part_of.size(); ++u) {
    sums[part_of[u]] += problem.costs[u];
  }
  return sums;
}

}  // namespace internal
}  // namespace tdock
