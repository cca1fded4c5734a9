#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/balance/micro_batch.h"
#include "common/balance/stats.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// Lognormal long-tail lengths (median ~1100), capped, at least 1.
std::vector<int64_t> LongTail(int n, uint64_t seed, double cap) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(7.0, 1.0);
  std::vector<int64_t> out(n);
  for (int64_t& l : out) {
    l = static_cast<int64_t>(std::clamp(std::round(dist(rng)), 1.0, cap));
  }
  return out;
}

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Checks a plan against its input from first principles: every row exactly
// once, the figures of each micro-batch recomputed, the budget and row limit
// held, the count a multiple of count_multiple and at least min_count.
void ExpectValidPlan(const std::vector<int64_t>& lengths,
                     const MicroBatchOptions& options,
                     const MicroBatchPlan& plan) {
  std::vector<int> seen(lengths.size(), 0);
  const int count = static_cast<int>(plan.micro_batches.size());
  EXPECT_EQ(count % options.count_multiple, 0);
  EXPECT_GE(count, options.min_count);
  for (const MicroBatch& mb : plan.micro_batches) {
    EXPECT_TRUE(std::is_sorted(mb.rows.begin(), mb.rows.end()));
    int64_t tokens = 0, longest = 0;
    for (int row : mb.rows) {
      ++seen[row];
      tokens += lengths[row];
      longest = std::max(longest, lengths[row]);
    }
    EXPECT_EQ(mb.tokens, tokens);
    EXPECT_EQ(mb.padded_len, mb.rows.empty() ? 0 : RoundUp(longest, options.round_to));
    const int64_t padded = static_cast<int64_t>(mb.rows.size()) * mb.padded_len;
    EXPECT_EQ(mb.padded_tokens, options.padded ? padded : tokens);
    EXPECT_LE(options.padded ? padded : tokens, options.max_tokens);
    if (options.max_rows > 0) {
      EXPECT_LE(static_cast<int>(mb.rows.size()), options.max_rows);
    }
  }
  for (size_t i = 0; i < lengths.size(); ++i) EXPECT_EQ(seen[i], 1) << "row " << i;
}

// verl's example: [100, 900, 50, 950, 400, 600] under 2000 tokens makes two
// micro-batches of 1500 tokens, {1, 5} first (Σ L² 1,170,000 against
// 1,075,000 for {0, 2, 3, 4}).
TEST(PlanMicroBatches, BalancedWorkedExample) {
  MicroBatchOptions options;
  options.max_tokens = 2000;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan,
                       PlanMicroBatches({100, 900, 50, 950, 400, 600}, options));
  ASSERT_EQ(plan.micro_batches.size(), 2u);
  EXPECT_EQ(plan.micro_batches[0].rows, (std::vector<int>{1, 5}));
  EXPECT_EQ(plan.micro_batches[1].rows, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(plan.micro_batches[0].tokens, 1500);
  EXPECT_EQ(plan.micro_batches[1].tokens, 1500);
}

// ROLL's example shard [1, 5, 6, 8] (rows of the doc's rank 0), round_to 2,
// padded, PACKED, budget 12: [1, 5] pads to 6 (12 tokens), then 6 and 8
// alone. With count_multiple 2 the heaviest multi-row micro-batch splits.
TEST(PlanMicroBatches, PackedWorkedExample) {
  const std::vector<int64_t> lengths = {1, 5, 6, 8};
  MicroBatchOptions options;
  options.max_tokens = 12;
  options.round_to = 2;
  options.padded = true;
  options.planner = MicroBatchPlanner::kPacked;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
  ExpectValidPlan(lengths, options, plan);
  ASSERT_EQ(plan.micro_batches.size(), 3u);
  int64_t padded = 0;
  for (const MicroBatch& mb : plan.micro_batches) padded += mb.padded_tokens;
  EXPECT_EQ(padded, 12 + 6 + 8);
  options.count_multiple = 2;
  ASSERT_OK_AND_ASSIGN(plan, PlanMicroBatches(lengths, options));
  ExpectValidPlan(lengths, options, plan);
  EXPECT_EQ(plan.micro_batches.size(), 4u);
  for (const MicroBatch& mb : plan.micro_batches) EXPECT_EQ(mb.rows.size(), 1u);
}

// Property: over seeded long-tail inputs and every combination of planner,
// padded/packed counting, round_to, max_rows, count_multiple and min_count,
// the plan covers every row once and never exceeds the budget.
TEST(PlanMicroBatches, BudgetAlwaysHeld) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const std::vector<int64_t> lengths = LongTail(300, seed, 8000);
    for (MicroBatchPlanner planner :
         {MicroBatchPlanner::kBalanced, MicroBatchPlanner::kPacked}) {
      for (bool padded : {false, true}) {
        for (int64_t round_to : {1, 128}) {
          for (int max_rows : {0, 6}) {
            for (int multiple : {1, 4}) {
              MicroBatchOptions options;
              options.max_tokens = 8192;
              options.planner = planner;
              options.padded = padded;
              options.round_to = round_to;
              options.max_rows = max_rows;
              options.count_multiple = multiple;
              options.min_count = seed == 4 ? 90 : 0;
              SCOPED_TRACE(testing::Message()
                           << "seed=" << seed << " planner=" << static_cast<int>(planner)
                           << " padded=" << padded << " round_to=" << round_to
                           << " max_rows=" << max_rows << " multiple=" << multiple);
              ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan,
                                   PlanMicroBatches(lengths, options));
              ExpectValidPlan(lengths, options, plan);
            }
          }
        }
      }
    }
  }
}

// Padded counting: the balanced planner uses the packed planner's count and
// its heaviest micro-batch (in padded tokens) is never heavier than the
// packed planner's; under packed counting padding is zero (ratio 1).
TEST(PlanMicroBatches, PaddedBalancedNoHeavierThanPacked) {
  for (uint64_t seed = 30; seed < 40; ++seed) {
    const std::vector<int64_t> lengths = LongTail(400, seed, 6000);
    MicroBatchOptions options;
    options.max_tokens = 16384;
    options.round_to = 128;
    options.padded = true;
    options.count_multiple = seed % 2 == 0 ? 1 : 4;
    auto heaviest = [](const MicroBatchPlan& plan) {
      int64_t max = 0;
      for (const MicroBatch& mb : plan.micro_batches) max = std::max(max, mb.padded_tokens);
      return max;
    };
    options.planner = MicroBatchPlanner::kPacked;
    ASSERT_OK_AND_ASSIGN(MicroBatchPlan packed, PlanMicroBatches(lengths, options));
    options.planner = MicroBatchPlanner::kBalanced;
    ASSERT_OK_AND_ASSIGN(MicroBatchPlan balanced, PlanMicroBatches(lengths, options));
    ExpectValidPlan(lengths, options, balanced);
    EXPECT_EQ(balanced.micro_batches.size(), packed.micro_batches.size());
    EXPECT_LE(heaviest(balanced), heaviest(packed)) << "seed " << seed;
    options.padded = false;
    ASSERT_OK_AND_ASSIGN(MicroBatchPlan unpadded, PlanMicroBatches(lengths, options));
    EXPECT_EQ(PlanStats(unpadded).padding_ratio, 1.0);
  }
}

// Balanced planning uses the lower-bound count ceil(total / budget) when the
// rows allow it, and its micro-batches are close in tokens; a quadratic cost
// model keeps the budget too.
TEST(PlanMicroBatches, BalancedUsesFewestMicroBatches) {
  const std::vector<int64_t> lengths = LongTail(512, 21, 4096);
  int64_t total = 0;
  for (int64_t l : lengths) total += l;
  MicroBatchOptions options;
  options.max_tokens = 16384;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
  ExpectValidPlan(lengths, options, plan);
  const int64_t lower = (total + options.max_tokens - 1) / options.max_tokens;
  EXPECT_EQ(static_cast<int64_t>(plan.micro_batches.size()), lower);
  const BalanceStats stats = PlanStats(plan);
  EXPECT_LE(stats.micro_batch_tokens.max_over_mean(), 1.02);
  ASSERT_OK_AND_ASSIGN(plan, PlanMicroBatches(lengths, options, CostModel{1, 1.0 / 1024}));
  ExpectValidPlan(lengths, options, plan);
}

// Rows that cannot be balanced into the lower-bound count without breaking
// the budget (three 600-token rows, budget 1000: ceil(1800/1000) = 2, but no
// two of them fit together) get more micro-batches, never an overfull one.
TEST(PlanMicroBatches, CountGrowsRatherThanExceedBudget) {
  const std::vector<int64_t> lengths = {600, 600, 600};
  MicroBatchOptions options;
  options.max_tokens = 1000;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
  ExpectValidPlan(lengths, options, plan);
  EXPECT_EQ(plan.micro_batches.size(), 3u);
}

// Micro-batches ordered heaviest first by Σ L², or lightest at both ends.
TEST(PlanMicroBatches, Orders) {
  const std::vector<int64_t> lengths = {100, 200, 300, 400, 500};
  MicroBatchOptions options;
  options.max_tokens = 500;
  options.max_rows = 1;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
  std::vector<int64_t> order;
  for (const MicroBatch& mb : plan.micro_batches) order.push_back(mb.tokens);
  EXPECT_EQ(order, (std::vector<int64_t>{500, 400, 300, 200, 100}));
  options.order = MicroBatchOrder::kSmallestAtEnds;
  ASSERT_OK_AND_ASSIGN(plan, PlanMicroBatches(lengths, options));
  order.clear();
  for (const MicroBatch& mb : plan.micro_batches) order.push_back(mb.tokens);
  EXPECT_EQ(order, (std::vector<int64_t>{100, 300, 500, 400, 200}));
}

// min_count above the row count pads with empty micro-batches; no rows and no
// minimum make an empty plan.
TEST(PlanMicroBatches, MinCountAndEmptyInput) {
  MicroBatchOptions options;
  options.max_tokens = 100;
  options.min_count = 4;
  for (MicroBatchPlanner planner :
       {MicroBatchPlanner::kBalanced, MicroBatchPlanner::kPacked}) {
    options.planner = planner;
    ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches({10, 20}, options));
    ExpectValidPlan({10, 20}, options, plan);
    EXPECT_EQ(plan.micro_batches.size(), 4u);
  }
  options.min_count = 0;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan empty, PlanMicroBatches({}, options));
  EXPECT_TRUE(empty.micro_batches.empty());
}

// Zero-length rows fit any budget alone, but padded next to a long row they
// cost its padded length: with budget 64 the 50-token row (64 padded) goes
// alone and the empty rows share a second micro-batch.
TEST(PlanMicroBatches, ZeroLengthRows) {
  const std::vector<int64_t> lengths = {0, 0, 50, 0};
  MicroBatchOptions options;
  options.max_tokens = 64;
  options.padded = true;
  options.round_to = 16;
  for (MicroBatchPlanner planner :
       {MicroBatchPlanner::kBalanced, MicroBatchPlanner::kPacked}) {
    options.planner = planner;
    ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
    ExpectValidPlan(lengths, options, plan);
    ASSERT_EQ(plan.micro_batches.size(), 2u);
    EXPECT_EQ(plan.micro_batches[0].rows, (std::vector<int>{2}));
    EXPECT_EQ(plan.micro_batches[1].rows, (std::vector<int>{0, 1, 3}));
  }
}

// A row over the budget is an error naming the row, its length and the
// budget; with padding its padded length counts.
TEST(PlanMicroBatches, RowOverBudgetNamed) {
  MicroBatchOptions options;
  options.max_tokens = 1000;
  EXPECT_STATUS(PlanMicroBatches({10, 1001, 5}, options),
                absl::StatusCode::kInvalidArgument,
                "row 1 has 1001 tokens, over the micro-batch budget max_tokens 1000");
  options.padded = true;
  options.round_to = 128;
  EXPECT_STATUS(PlanMicroBatches({10, 999}, options),
                absl::StatusCode::kInvalidArgument, "row 1 has 999 tokens (1024 padded)");
}

// Each bad option gets its own INVALID_ARGUMENT naming the field.
TEST(PlanMicroBatches, RejectsBadOptions) {
  const std::vector<int64_t> lengths = {1, 2};
  MicroBatchOptions unset;
  EXPECT_STATUS(PlanMicroBatches(lengths, unset), absl::StatusCode::kInvalidArgument,
                "max_tokens 0");
  auto with = [](auto mutate) {
    MicroBatchOptions options;
    options.max_tokens = 100;
    mutate(options);
    return options;
  };
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto& o) { o.max_rows = -1; })),
                absl::StatusCode::kInvalidArgument, "max_rows -1");
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto& o) { o.round_to = 0; })),
                absl::StatusCode::kInvalidArgument, "round_to 0");
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto& o) { o.count_multiple = 0; })),
                absl::StatusCode::kInvalidArgument, "count_multiple 0");
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto& o) { o.min_count = -2; })),
                absl::StatusCode::kInvalidArgument, "min_count -2");
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto& o) {
                  o.planner = static_cast<MicroBatchPlanner>(7);
                })),
                absl::StatusCode::kInvalidArgument, "planner 7");
  EXPECT_STATUS(PlanMicroBatches({1, -3}, with([](auto&) {})),
                absl::StatusCode::kInvalidArgument, "row 1 has negative length -3");
  EXPECT_STATUS(PlanMicroBatches(lengths, with([](auto&) {}), CostModel{0, 0}),
                absl::StatusCode::kInvalidArgument, "cost model");
  EXPECT_STATUS(PlanMicroBatches({90, 90}, with([](auto&) {}), CostModel{1, 1e306}),
                absl::StatusCode::kInvalidArgument, "beyond the double range");
}

// Stats of a plan: token spread, padding ratio = padded / real tokens.
TEST(PlanStats, FiguresMatchPlan) {
  const std::vector<int64_t> lengths = {1, 5, 6, 8};
  MicroBatchOptions options;
  options.max_tokens = 12;
  options.round_to = 2;
  options.padded = true;
  options.planner = MicroBatchPlanner::kPacked;
  ASSERT_OK_AND_ASSIGN(MicroBatchPlan plan, PlanMicroBatches(lengths, options));
  const BalanceStats stats = PlanStats(plan);
  EXPECT_EQ(stats.micro_batches, 3);
  EXPECT_EQ(stats.tokens, 20);
  EXPECT_EQ(stats.padded_tokens, 26);
  EXPECT_DOUBLE_EQ(stats.padding_ratio, 26.0 / 20.0);
  EXPECT_EQ(stats.micro_batch_tokens.min, 6);
  EXPECT_EQ(stats.micro_batch_tokens.max, 8);
  EXPECT_DOUBLE_EQ(stats.micro_batch_tokens.mean, 20.0 / 3);
  EXPECT_EQ(stats.rank_cost.max, 20);
}

}  // namespace
}  // namespace tdock
