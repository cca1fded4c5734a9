#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/balance/round.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// The design docs' example: 8 rows over 2 ranks.
const std::vector<int64_t> kRollLengths = {7, 6, 8, 5, 1, 3, 8, 6};

std::vector<int64_t> LongTail(int n, uint64_t seed, double cap) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(7.0, 1.0);
  std::vector<int64_t> out(n);
  for (int64_t& l : out) {
    l = static_cast<int64_t>(std::clamp(std::round(dist(rng)), 1.0, cap));
  }
  return out;
}

MicroBatchOptions RollPacked(int64_t max_tokens) {
  MicroBatchOptions options;
  options.max_tokens = max_tokens;
  options.round_to = 2;
  options.padded = true;
  options.planner = MicroBatchPlanner::kPacked;
  return options;
}

// Every round position appears once over all ranks, and each rank's rows are
// its micro-batches' rows back to back.
void ExpectConsistentRound(const RoundPlan& round, int n) {
  std::vector<int> seen(n, 0);
  for (const RankPlan& rank : round.ranks) {
    for (int row : rank.rows) ++seen[row];
    if (rank.micro_batches.empty()) continue;
    std::vector<int> joined;
    for (const MicroBatch& mb : rank.micro_batches) {
      joined.insert(joined.end(), mb.rows.begin(), mb.rows.end());
    }
    EXPECT_EQ(joined, rank.rows);
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "row " << i;
}

// Balanced ranks carry 22 tokens each, where dealing the sorted rows
// round-robin (ROLL) gives 20 and 24.
TEST(PlanRound, WorkedExampleBalancesRanks) {
  RoundOptions options;
  options.dp_size = 2;
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(kRollLengths, options));
  ExpectConsistentRound(round, 8);
  ASSERT_EQ(round.ranks.size(), 2u);
  for (const RankPlan& rank : round.ranks) {
    EXPECT_EQ(rank.tokens, 22);
    EXPECT_EQ(rank.rows.size(), 4u);
  }
  std::vector<int64_t> sorted = kRollLengths;
  std::sort(sorted.begin(), sorted.end());
  int64_t dealt[2] = {0, 0};
  for (size_t i = 0; i < sorted.size(); ++i) dealt[i % 2] += sorted[i];
  EXPECT_EQ(dealt[0], 20);
  EXPECT_EQ(dealt[1], 24);
  EXPECT_EQ(round.stats.rank_tokens.max_over_mean(), 1.0);
}

// Budget 12, round_to 2, padded, PACKED: the round occupies 54 padded tokens
// (rank {3,5,6,8}: [3,5]→2×6, [6]→6, [8]→8; rank {1,6,7,8}: [1,6]→2×6,
// [7]→8, [8]→8), at most the docs' 56 and well under 80 for padding all eight
// rows to 10.
TEST(PlanRound, WorkedExamplePackedPadding) {
  RoundOptions options;
  options.dp_size = 2;
  options.same_count_across_ranks = false;
  options.micro_batch = RollPacked(12);
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(kRollLengths, options));
  ExpectConsistentRound(round, 8);
  EXPECT_EQ(round.stats.tokens, 44);
  EXPECT_EQ(round.stats.padded_tokens, 54);
  EXPECT_LE(round.stats.padded_tokens, 56);
  EXPECT_DOUBLE_EQ(round.stats.padding_ratio, 54.0 / 44.0);
}

// Budget 10: the docs' picture puts 2 × 6 = 12 padded tokens in a micro-batch;
// here none exceeds 10.
TEST(PlanRound, WorkedExampleBudgetTenHeld) {
  RoundOptions options;
  options.dp_size = 2;
  options.micro_batch = RollPacked(10);
  for (MicroBatchPlanner planner :
       {MicroBatchPlanner::kPacked, MicroBatchPlanner::kBalanced}) {
    options.micro_batch->planner = planner;
    ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(kRollLengths, options));
    ExpectConsistentRound(round, 8);
    for (const RankPlan& rank : round.ranks) {
      for (const MicroBatch& mb : rank.micro_batches) {
        EXPECT_LE(mb.padded_tokens, 10);
      }
    }
  }
}

// same_count_across_ranks: every rank gets the round's largest count, each
// micro-batch still within budget.
TEST(PlanRound, SameCountAcrossRanks) {
  std::vector<int64_t> lengths = LongTail(256, 9, 8000);
  for (int i = 0; i < 8; ++i) lengths[i] = 8000;  // lumpy ranks
  RoundOptions options;
  options.dp_size = 8;
  options.micro_batch = MicroBatchOptions{};
  options.micro_batch->max_tokens = 8192;
  options.micro_batch->padded = true;
  options.micro_batch->round_to = 128;
  for (MicroBatchPlanner planner :
       {MicroBatchPlanner::kBalanced, MicroBatchPlanner::kPacked}) {
    options.micro_batch->planner = planner;
    ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(lengths, options));
    ExpectConsistentRound(round, 256);
    const size_t count = round.ranks[0].micro_batches.size();
    EXPECT_GT(count, 0u);
    for (const RankPlan& rank : round.ranks) {
      EXPECT_EQ(rank.micro_batches.size(), count);
      EXPECT_EQ(rank.rows.size(), 32u);
      for (const MicroBatch& mb : rank.micro_batches) {
        EXPECT_LE(mb.padded_tokens, 8192);
      }
    }
    EXPECT_EQ(round.stats.micro_batches, static_cast<int64_t>(8 * count));
  }
}

// Whole groups stay on one rank; ranks get equal numbers of groups (±1).
TEST(PlanRound, GroupsStayTogether) {
  const std::vector<int64_t> lengths = LongTail(5 * 36, 4, 16384);
  RoundOptions options;
  options.dp_size = 8;
  options.group_size = 5;
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(lengths, options));
  ExpectConsistentRound(round, 180);
  for (const RankPlan& rank : round.ranks) {
    EXPECT_TRUE(rank.rows.size() == 20 || rank.rows.size() == 25);
    for (int row : rank.rows) {
      const int first = row - row % 5;
      for (int j = 0; j < 5; ++j) {
        EXPECT_NE(std::find(rank.rows.begin(), rank.rows.end(), first + j),
                  rank.rows.end());
      }
    }
  }
}

// Stats agree with the plan; without micro-batches, padding ratio is 1.
TEST(PlanRound, StatsMatchRanks) {
  const std::vector<int64_t> lengths = LongTail(100, 2, 16384);
  RoundOptions options;
  options.dp_size = 4;
  options.cost = CostModel{1, 0.001};
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound(lengths, options));
  double max_cost = 0, sum_tokens = 0;
  for (const RankPlan& rank : round.ranks) {
    double cost = 0;
    int64_t tokens = 0;
    for (int row : rank.rows) {
      cost += options.cost.Cost(lengths[row]);
      tokens += lengths[row];
    }
    EXPECT_DOUBLE_EQ(rank.cost, cost);
    EXPECT_EQ(rank.tokens, tokens);
    max_cost = std::max(max_cost, cost);
    sum_tokens += static_cast<double>(tokens);
  }
  EXPECT_DOUBLE_EQ(round.stats.rank_cost.max, max_cost);
  EXPECT_DOUBLE_EQ(round.stats.rank_tokens.mean, sum_tokens / 4);
  EXPECT_EQ(round.stats.padding_ratio, 1.0);
  EXPECT_EQ(round.stats.micro_batches, 0);
}

// Fewer rows than ranks: one row per rank while rows last, the rest empty;
// with same_count_across_ranks every rank still gets the same number of
// micro-batches (an empty rank's micro-batch is empty).
TEST(PlanRound, FewerRowsThanRanks) {
  RoundOptions options;
  options.dp_size = 4;
  options.micro_batch = MicroBatchOptions{};
  options.micro_batch->max_tokens = 1000;
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound({300, 0, 700}, options));
  ExpectConsistentRound(round, 3);
  ASSERT_EQ(round.ranks.size(), 4u);
  EXPECT_TRUE(round.ranks[3].rows.empty());
  for (const RankPlan& rank : round.ranks) {
    EXPECT_LE(rank.rows.size(), 1u);
    ASSERT_EQ(rank.micro_batches.size(), 1u);
    EXPECT_EQ(rank.micro_batches[0].rows, rank.rows);
  }
  EXPECT_EQ(round.stats.rank_tokens.max, 700);
  EXPECT_EQ(round.stats.rank_tokens.min, 0);
}

// pad_repeat: every rank short of the largest share is filled with repeats
// of the round's lightest rows (positions past the round's rows, mapped by
// `repeats`), planned into its micro-batches like any row: 3 rows over 4
// ranks give every rank one row, the empty rank a repeat of row 1 (0
// tokens), the lightest.
TEST(PlanRound, PadRepeatFillsShortRanksWithTheLightestRows) {
  RoundOptions options;
  options.dp_size = 4;
  options.pad_repeat = true;
  options.micro_batch = MicroBatchOptions{};
  options.micro_batch->max_tokens = 1000;
  ASSERT_OK_AND_ASSIGN(RoundPlan round, PlanRound({300, 0, 700}, options));
  ASSERT_EQ(round.ranks.size(), 4u);
  EXPECT_EQ(round.repeats, std::vector<int>{1});
  std::vector<int> real(3, 0);
  int repeats = 0;
  for (const RankPlan& rank : round.ranks) {
    ASSERT_EQ(rank.rows.size(), 1u) << "every rank gets as many rows";
    ASSERT_EQ(rank.micro_batches.size(), 1u);
    EXPECT_EQ(rank.micro_batches[0].rows, rank.rows);
    if (rank.rows[0] >= 3) {
      EXPECT_EQ(rank.rows[0], 3 + repeats);
      ++repeats;
    } else {
      ++real[rank.rows[0]];
    }
  }
  EXPECT_EQ(real, (std::vector<int>{1, 1, 1})) << "each row once, besides its repeats";
  EXPECT_EQ(repeats, 1);
  // Odd rows over two ranks: the short rank gets one repeat, and its cost.
  options.dp_size = 2;
  ASSERT_OK_AND_ASSIGN(RoundPlan odd, PlanRound({300, 0, 700}, options));
  ASSERT_EQ(odd.repeats, std::vector<int>{1});
  EXPECT_EQ(odd.ranks[0].rows.size(), 2u);
  EXPECT_EQ(odd.ranks[1].rows.size(), 2u);
  options.pad_repeat = false;
  ASSERT_OK_AND_ASSIGN(RoundPlan unpadded, PlanRound({300, 0, 700}, options));
  EXPECT_TRUE(unpadded.repeats.empty());
  EXPECT_EQ(unpadded.ranks[0].rows.size() + unpadded.ranks[1].rows.size(), 3u);
}

// Errors name the round position of a row over the budget, and bad options.
TEST(PlanRound, RejectsBadInput) {
  RoundOptions options;
  options.dp_size = 2;
  options.micro_batch = MicroBatchOptions{};
  options.micro_batch->max_tokens = 100;
  EXPECT_STATUS(PlanRound({5, 6, 7, 150}, options),
                absl::StatusCode::kInvalidArgument,
                "row 3 has 150 tokens, over the micro-batch budget max_tokens 100");
  options.group_size = 3;
  EXPECT_STATUS(PlanRound({5, 6, 7, 8}, options), absl::StatusCode::kInvalidArgument,
                "multiple of group_size");
  options.group_size = 1;
  options.dp_size = 0;
  EXPECT_STATUS(PlanRound({5}, options), absl::StatusCode::kInvalidArgument,
                "dp_size 0");
  options.dp_size = 2;
  options.micro_batch->max_tokens = -1;
  EXPECT_STATUS(PlanRound({5}, options), absl::StatusCode::kInvalidArgument,
                "max_tokens -1");
}

}  // namespace
}  // namespace tdock
