#include "common/balance/micro_batch.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/balance/micro_batch_internal.h"
#include "common/balance/partition.h"
#include "common/status.h"

namespace tdock {
namespace {

using internal::Bin;

// Loads stay far from int64 overflow: rows (< 2^31) × lengths (<= 2^40).
constexpr int64_t kMaxTokens = int64_t{1} << 40;
constexpr int kMaxCount = 1 << 20;
constexpr int64_t kMaxRows = int64_t{1} << 30;
constexpr int kNoRow = std::numeric_limits<int>::max();  // sorts empty last

int RoundUpCount(int64_t count, int multiple) {
  return static_cast<int>(internal::RoundUp(count, multiple));
}

// The fewest micro-batches any plan could use: total load over the budget,
// rows over max_rows, min_count; then up to a multiple of count_multiple.
int LowerBoundCount(absl::Span<const int64_t> lengths,
                    const MicroBatchOptions& options) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  int64_t load = 0;
  for (int64_t length : lengths) load += options.RowLoad(length);
  int64_t count = (load + options.max_tokens - 1) / options.max_tokens;
  if (options.max_rows > 0) {
    count = std::max(count, (n + options.max_rows - 1) / options.max_rows);
  }
  count = std::max<int64_t>({count, options.min_count, n > 0 ? 1 : 0});
  return RoundUpCount(count, options.count_multiple);
}

std::vector<Bin> PlanPacked(absl::Span<const int64_t> lengths,
                            const MicroBatchOptions& options) {
  std::vector<Bin> bins = internal::PackFill(lengths, options);
  const int64_t count =
      std::max<int64_t>(static_cast<int64_t>(bins.size()), options.min_count);
  internal::SplitToCount(lengths, options,
                         RoundUpCount(count, options.count_multiple), &bins);
  return bins;
}

// Rows spread over `count` bins by cost, then repaired to fit the budget.
// A max_rows limit is easier to meet from equal row counts, so that is tried
// second when set.
bool TryBalanced(absl::Span<const int64_t> lengths,
                 absl::Span<const double> costs,
                 const MicroBatchOptions& options, int count,
                 std::vector<Bin>* bins) {
  PartitionOptions partition;
  partition.constraint = PartitionConstraint::kNone;
  for (int attempt = 0; attempt < (options.max_rows > 0 ? 2 : 1); ++attempt) {
    if (attempt == 1) partition.constraint = PartitionConstraint::kEqualSize;
    absl::StatusOr<std::vector<std::vector<int>>> parts =
        Partition(costs, count, partition);
    if (!parts.ok()) return false;  // not reached: inputs are validated
    bins->clear();
    for (const std::vector<int>& part : *parts) {
      bins->push_back(internal::MakeBin(lengths, part));
    }
    if (internal::RepairBins(lengths, options, bins)) return true;
  }
  return false;
}

// Padded counting: rows of similar length must share a micro-batch, or
// padding eats the budget. Length-sorted rows are cut into contiguous runs:
// as many as the packed plan makes (the fewest possible for runs), with the
// smallest per-run load limit that still allows that many, found by binary
// search; a greedy fill under a limit makes the fewest runs, so it never
// carries a heavier micro-batch than the packed plan.
std::vector<Bin> PlanBalancedPadded(absl::Span<const int64_t> lengths,
                                    const MicroBatchOptions& options) {
  const size_t count = PlanPacked(lengths, options).size();
  MicroBatchOptions limited = options;
  int64_t lo = 0;
  for (int64_t length : lengths) lo = std::max(lo, options.RowLoad(length));
  int64_t hi = options.max_tokens;
  while (lo < hi) {
    limited.max_tokens = lo + (hi - lo) / 2;
    if (internal::PackFill(lengths, limited).size() <= count) {
      hi = limited.max_tokens;
    } else {
      lo = limited.max_tokens + 1;
    }
  }
  limited.max_tokens = lo;
  std::vector<Bin> bins = internal::PackFill(lengths, limited);
  internal::SplitToCount(lengths, options, static_cast<int>(count), &bins);
  return bins;
}

// Packed counting: the smallest count from the lower bound up at which a
// spread by cost fits the budget. The packed fill's count (split up to a
// valid count) always fits, so it caps the search: past it the packed plan
// is used.
std::vector<Bin> PlanBalanced(absl::Span<const int64_t> lengths,
                              absl::Span<const double> costs,
                              const MicroBatchOptions& options) {
  if (options.padded) return PlanBalancedPadded(lengths, options);
  std::vector<Bin> packed = PlanPacked(lengths, options);
  const int cap = std::max(static_cast<int>(packed.size()),
                           LowerBoundCount(lengths, options));
  std::vector<Bin> bins;
  for (int count = LowerBoundCount(lengths, options); count <= cap;
       count += options.count_multiple) {
    if (TryBalanced(lengths, costs, options, count, &bins)) return bins;
  }
  internal::SplitToCount(lengths, options, cap, &packed);
  return packed;
}

MicroBatch Finish(absl::Span<const int64_t> lengths,
                  absl::Span<const double> costs,
                  const MicroBatchOptions& options, Bin bin) {
  MicroBatch mb;
  std::sort(bin.rows.begin(), bin.rows.end());
  mb.rows = std::move(bin.rows);
  mb.tokens = bin.tokens;
  mb.padded_len =
      mb.rows.empty() ? 0 : internal::RoundUp(bin.max_len, options.round_to);
  mb.padded_tokens =
      options.Load(static_cast<int64_t>(mb.rows.size()), bin.max_len, bin.tokens);
  for (int row : mb.rows) mb.cost += costs[row];
  return mb;
}

// Orders by attention work Σ L², ties by tokens, then by first row (empty
// micro-batches last).
void Order(absl::Span<const int64_t> lengths, MicroBatchOrder order,
           std::vector<MicroBatch>* mbs) {
  auto square_sum = [lengths](const MicroBatch& mb) {
    double sum = 0;
    for (int row : mb.rows) {
      sum += static_cast<double>(lengths[row]) * static_cast<double>(lengths[row]);
    }
    return sum;
  };
  std::vector<std::pair<double, MicroBatch>> keyed;
  keyed.reserve(mbs->size());
  for (MicroBatch& mb : *mbs) keyed.emplace_back(square_sum(mb), std::move(mb));
  std::sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first > y.first;
    if (x.second.tokens != y.second.tokens) return x.second.tokens > y.second.tokens;
    const int fx = x.second.rows.empty() ? kNoRow : x.second.rows.front();
    const int fy = y.second.rows.empty() ? kNoRow : y.second.rows.front();
    return fx < fy;
  });
  const size_t n = keyed.size();
  for (size_t i = 0; i < n; ++i) {
    // Smallest at both ends: from lightest up, alternate front and back.
    size_t pos = i;
    if (order == MicroBatchOrder::kSmallestAtEnds) {
      const size_t rank = n - 1 - i;  // 0 = lightest
      pos = rank % 2 == 0 ? rank / 2 : n - 1 - rank / 2;
    }
    (*mbs)[pos] = std::move(keyed[i].second);
  }
}

// The last line of defence for the budget: every micro-batch's load is
// recomputed from the lengths alone, so no bookkeeping slip can let an
// overfull micro-batch out.
absl::Status Verify(absl::Span<const int64_t> lengths,
                    const MicroBatchOptions& options,
                    const MicroBatchPlan& plan) {
  for (size_t i = 0; i < plan.micro_batches.size(); ++i) {
    const std::vector<int>& rows = plan.micro_batches[i].rows;
    int64_t tokens = 0, longest = 0;
    for (int row : rows) {
      tokens += lengths[row];
      longest = std::max(longest, lengths[row]);
    }
    const int64_t count = static_cast<int64_t>(rows.size());
    const int64_t load = options.Load(count, longest, tokens);
    if (load > options.max_tokens ||
        (options.max_rows > 0 && count > options.max_rows)) {
      return absl::InternalError(absl::StrCat(
          "micro-batch ", i, " holds ", count, " rows and ", load,
          " budget tokens, over max_tokens ", options.max_tokens,
          " or max_rows ", options.max_rows));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MicroBatchOptions::Load(int64_t rows, int64_t max_length,
                                int64_t tokens) const {
  return padded ? rows * internal::RoundUp(max_length, round_to) : tokens;
}

absl::Status MicroBatchOptions::Validate() const {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batch ", parts...));
  };
  if (max_tokens <= 0 || max_tokens > kMaxTokens) {
    return bad("max_tokens ", max_tokens, " must be in [1, ", kMaxTokens, "]");
  }
  if (max_rows < 0) return bad("max_rows ", max_rows, " must be >= 0");
  if (round_to < 1 || round_to > max_tokens) {
    return bad("round_to ", round_to, " must be in [1, max_tokens ",
               max_tokens, "]");
  }
  if (count_multiple < 1 || count_multiple > kMaxCount) {
    return bad("count_multiple ", count_multiple, " must be in [1, ",
               kMaxCount, "]");
  }
  if (min_count < 0 || min_count > kMaxCount) {
    return bad("min_count ", min_count, " must be in [0, ", kMaxCount, "]");
  }
  if (planner != MicroBatchPlanner::kBalanced &&
      planner != MicroBatchPlanner::kPacked) {
    return bad("planner ", static_cast<int>(planner), " unknown");
  }
  if (order != MicroBatchOrder::kHeavyFirst &&
      order != MicroBatchOrder::kSmallestAtEnds) {
    return bad("order ", static_cast<int>(order), " unknown");
  }
  return absl::OkStatus();
}

absl::Status CheckRowsFitBudget(absl::Span<const int64_t> lengths,
                                const MicroBatchOptions& options) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t load = options.RowLoad(lengths[i]);
    if (load > options.max_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", i, " has ", lengths[i], " tokens",
          options.padded ? absl::StrCat(" (", load, " padded)") : "",
          ", over the micro-batch budget max_tokens ", options.max_tokens));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MicroBatchPlan> PlanMicroBatches(
    absl::Span<const int64_t> lengths, const MicroBatchOptions& options,
    const CostModel& cost) {
  TDOCK_RETURN_IF_ERROR(options.Validate());
  if (lengths.size() > static_cast<size_t>(kMaxRows)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "micro-batch plan of ", lengths.size(), " rows exceeds the limit ",
        kMaxRows));
  }
  TDOCK_ASSIGN_OR_RETURN(const std::vector<double> costs,
                         RowCosts(cost, lengths));
  TDOCK_RETURN_IF_ERROR(CheckRowsFitBudget(lengths, options));
  std::vector<Bin> bins = options.planner == MicroBatchPlanner::kPacked
                              ? PlanPacked(lengths, options)
                              : PlanBalanced(lengths, costs, options);
  MicroBatchPlan plan;
  plan.micro_batches.reserve(bins.size());
  for (Bin& bin : bins) {
    plan.micro_batches.push_back(Finish(lengths, costs, options, std::move(bin)));
  }
  Order(lengths, options.order, &plan.micro_batches);
  TDOCK_RETURN_IF_ERROR(Verify(lengths, options, plan));
  return plan;
}

}  // namespace tdock
