// BALANCED consumers (rounds split over dp ranks) and micro-batch plans in
// the dock core.
#include <algorithm>
#include <numeric>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

// 8 rows (8 prompts x 1 sample) whose token counts are the worked example of
// the design docs: [7, 6, 8, 5, 1, 3, 8, 6].
const std::vector<int64_t> kLengths = {7, 6, 8, 5, 1, 3, 8, 6};

DockSpec BalancedSpec(int32_t samples = 1) {
  DockSpec spec;
  spec.name = "balanced";
  spec.num_prompts = static_cast<int64_t>(kLengths.size()) / samples;
  spec.n_samples_per_prompt = samples;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  ConsumerSpec actor{"actor", {"tokens"}, 4, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 12, .round_to = 2, .padded = true};
  spec.consumers = {actor};
  return spec;
}

OwnedColumn TokenRows(const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int32_t>> rows;
  for (int64_t len : lengths) rows.push_back(std::vector<int32_t>(len, 1));
  return OwnedColumn::Of<int32_t>("tokens", DType::kInt32, rows);
}

std::unique_ptr<Dock> FilledDock(DockSpec spec) {
  auto dock = Dock::Create(std::move(spec));
  EXPECT_OK(dock);
  std::vector<int64_t> rows(kLengths.size());
  std::iota(rows.begin(), rows.end(), 0);
  EXPECT_OK(PutSync(**dock, 0, rows, {TokenRows(kLengths)}));
  return std::move(dock).value();
}

GetInput RankGet(int rank) {
  GetInput in = GetOf("actor");
  in.rank = rank;
  return in;
}

int64_t Sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

// The two ranks of one round get disjoint rows covering the round, with 22
// tokens each (dealing sorted rows round-robin gives 20 and 24), micro-
// batches within the padded budget and contiguous in row order, and the
// round's balance statistics.
TEST(DockBalanced, RoundSplitsTokensEvenlyAcrossRanks) {
  auto dock = FilledDock(BalancedSpec());
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, RankGet(0)));
  ASSERT_OK_AND_ASSIGN(Batch r1, GetSync(*dock, RankGet(1)));
  EXPECT_EQ(r0.round, 0);
  EXPECT_EQ(r1.round, 0);
  EXPECT_EQ(r0.rows.size(), 4u);
  EXPECT_EQ(r1.rows.size(), 4u);
  std::vector<int64_t> all = r0.rows;
  all.insert(all.end(), r1.rows.begin(), r1.rows.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Sum(r0.token_counts), 22);
  EXPECT_EQ(Sum(r1.token_counts), 22);
  for (const Batch* b : {&r0, &r1}) {
    ASSERT_FALSE(b->micro_batches.empty());
    EXPECT_EQ(b->micro_batches.front().begin, 0);
    EXPECT_EQ(b->micro_batches.back().end, static_cast<int64_t>(b->rows.size()));
    for (size_t i = 0; i < b->micro_batches.size(); ++i) {
      const MicroBatchInfo& mb = b->micro_batches[i];
      EXPECT_LE(mb.padded_tokens, 12);
      if (i > 0) {
        EXPECT_EQ(mb.begin, b->micro_batches[i - 1].end);
      }
      int64_t longest = 0;
      for (int64_t p = mb.begin; p < mb.end; ++p) {
        longest = std::max(longest, b->token_counts[p]);
      }
      EXPECT_EQ(mb.padded_len, (longest + 1) / 2 * 2);
    }
    ASSERT_TRUE(b->balance.has_value());
    EXPECT_DOUBLE_EQ(b->balance->rank_tokens.max, 22);
    EXPECT_TRUE(b->end_of_step);  // one round took the whole step
  }
}

// Asking again for a round returns the same rows; asking past the formed
// rounds is an error naming the next round.
TEST(DockBalanced, AskingAgainReturnsTheSameRows) {
  auto dock = FilledDock(BalancedSpec());
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, RankGet(1)));
  GetInput again = RankGet(1);
  again.step = 0;
  again.round = 0;
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, again));
  EXPECT_EQ(first.rows, second.rows);
  EXPECT_EQ(first.round, second.round);
  GetInput ahead = RankGet(0);
  ahead.step = 0;
  ahead.round = 3;
  EXPECT_STATUS(GetSync(*dock, ahead), absl::StatusCode::kInvalidArgument,
                "round 3 is not formed; the next round is 1");
  GetInput stepless = RankGet(0);
  stepless.round = 0;
  EXPECT_STATUS(GetSync(*dock, stepless), absl::StatusCode::kInvalidArgument,
                "round 0 is asked for without a step");
}

// Every rank takes the same number of rounds: 5 rows in rounds of
// dispatch_size 2 over 2 ranks are rounds of 4 and 1 rows; the rank whose
// share of the short round is empty still takes that round (empty) and ends
// the step with it, as its peer does. Ranks that step together (a
// collective per round) would otherwise wait for each other forever.
TEST(DockBalanced, EveryRankTakesEveryRoundOfAShortStep) {
  DockSpec spec = BalancedSpec();
  spec.num_prompts = 5;
  spec.consumers[0].dispatch_size = 2;
  spec.consumers[0].micro_batch.reset();
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(std::move(spec)));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3, 4}, {TokenRows({7, 6, 8, 5, 1})}));
  std::vector<std::vector<Batch>> taken(2);
  for (int rank : {1, 0}) {
    for (int i = 0; i < 4; ++i) {  // at most: a runaway rank fails below
      GetInput in = RankGet(rank);
      in.step = 0;
      ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
      taken[rank].push_back(batch);
      if (batch.end_of_step) break;
    }
  }
  std::vector<int64_t> rows;
  for (int rank : {0, 1}) {
    ASSERT_EQ(taken[rank].size(), 2u) << "rank " << rank << " takes both rounds";
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(taken[rank][k].round, static_cast<int64_t>(k));
      EXPECT_EQ(taken[rank][k].end_of_step, k == 1) << "rank " << rank << " round " << k;
      rows.insert(rows.end(), taken[rank][k].rows.begin(), taken[rank][k].rows.end());
    }
    EXPECT_EQ(taken[rank][0].rows.size(), 2u);
  }
  EXPECT_EQ(taken[0][1].rows.size() + taken[1][1].rows.size(), 1u)
      << "the short round's one row goes to one rank, the other's share is empty";
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(dock->Stats().steps.empty()) << "both ranks took every round: released";
}

// pad: repeat fills the short round's empty share with a repeat of the
// round's row, marked: both ranks take 2 rows, then 1 row each; the repeat
// counts for nothing (a lease covers only the share's own rows), and the
// step is released once both ranks took both rounds.
TEST(DockBalanced, PadRepeatFillsTheShortRoundsEmptyShare) {
  DockSpec spec = BalancedSpec();
  spec.num_prompts = 5;
  spec.consumers[0].dispatch_size = 2;
  spec.consumers[0].pad = RoundPad::kRepeat;
  spec.consumers[0].lease_ms = 60000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(std::move(spec)));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3, 4}, {TokenRows({7, 6, 8, 5, 1})}));
  std::vector<int64_t> real;
  int repeats = 0;
  for (int64_t round : {0, 1}) {
    for (int rank : {0, 1}) {
      GetInput in = RankGet(rank);
      in.step = 0;
      ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
      ASSERT_EQ(batch.round, round);
      EXPECT_EQ(batch.rows.size(), round == 0 ? 2u : 1u) << "rank " << rank;
      EXPECT_EQ(batch.end_of_step, round == 1);
      ASSERT_EQ(batch.micro_batches.empty() ? 0 : batch.micro_batches.back().end,
                static_cast<int64_t>(batch.rows.size()))
          << "the repeat is in the micro-batch plan";
      for (size_t i = 0; i < batch.rows.size(); ++i) {
        const bool repeat = std::find(batch.repeats.begin(), batch.repeats.end(),
                                      static_cast<int64_t>(i)) != batch.repeats.end();
        repeats += repeat ? 1 : 0;
        if (!repeat) real.push_back(batch.rows[i]);
      }
      if (batch.repeats.size() == batch.rows.size()) {
        EXPECT_EQ(batch.lease_id, 0u) << "a share of repeats alone holds no lease";
      } else {
        ASSERT_NE(batch.lease_id, 0u);
        ASSERT_OK_AND_ASSIGN(int64_t acked, dock->Ack("actor", batch.lease_id));
        EXPECT_EQ(acked, static_cast<int64_t>(batch.rows.size() - batch.repeats.size()));
      }
    }
  }
  EXPECT_EQ(repeats, 1);
  std::sort(real.begin(), real.end());
  EXPECT_EQ(real, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "every row once, besides its repeat";
  EXPECT_TRUE(dock->Stats().steps.empty()) << "both ranks took both rounds: released";
}

// pad: repeat fills the shares of a round: a consumer of another policy has
// none to fill, and is refused naming why.
TEST(DockBalanced, PadRepeatNeedsPolicyBalanced) {
  DockSpec spec = BalancedSpec();
  spec.consumers[0].policy = Policy::kFifo;
  spec.consumers[0].pad = RoundPad::kRepeat;
  EXPECT_STATUS(Dock::Create(spec), absl::StatusCode::kInvalidArgument,
                "consumer 'actor' pad repeat needs policy balanced");
  spec.consumers[0].pad = static_cast<RoundPad>(7);
  EXPECT_STATUS(Dock::Create(spec), absl::StatusCode::kInvalidArgument,
                "consumer 'actor' has no valid pad (none or repeat)");
}

// A step whose rounds are all claimed is released only after every rank has
// fetched its share of the last round.
TEST(DockBalanced, ReleaseWaitsForEveryRankShare) {
  auto dock = FilledDock(BalancedSpec());
  ASSERT_OK(GetSync(*dock, RankGet(0)));
  EXPECT_EQ(dock->Stats().steps.size(), 1u);
  ASSERT_OK(GetSync(*dock, RankGet(1)));
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// Whole-group BALANCED consumers keep each prompt's samples on one rank.
TEST(DockBalanced, WholeGroupsStayOnOneRank) {
  DockSpec spec = BalancedSpec(2);
  spec.consumers[0].whole_groups = true;
  spec.consumers[0].micro_batch.reset();
  auto dock = FilledDock(spec);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, RankGet(rank)));
    ASSERT_EQ(b.rows.size(), 4u);
    std::vector<int64_t> rows = b.rows;
    std::sort(rows.begin(), rows.end());
    for (size_t i = 0; i < rows.size(); i += 2) EXPECT_EQ(rows[i] / 2, rows[i + 1] / 2);
  }
}

// A Put that would make a row longer than a consumer's micro-batch budget is
// refused, naming the row, its tokens, the consumer and the budget.
TEST(DockBalanced, PutRefusesRowOverBudget) {
  auto dock = Dock::Create(BalancedSpec());
  ASSERT_OK(dock);
  EXPECT_STATUS(PutSync(**dock, 0, {3}, {TokenRows({13})}),
                absl::StatusCode::kInvalidArgument,
                "row 3 has 13 tokens, over the micro-batch budget of consumer 'actor' "
                "(max_tokens 12)");
  EXPECT_TRUE((*dock)->Stats().steps.empty() ||
              (*dock)->Stats().steps[0].ready_rows[0] == 0);
}

// A FIFO consumer with a micro-batch plan gets its batch ordered micro-batch
// after micro-batch under the budget (the design docs' second example:
// [100, 900, 50, 950, 400, 600] under 2000 tokens -> two of 1500).
TEST(DockBalanced, FifoBatchComesWithMicroBatches) {
  DockSpec spec;
  spec.name = "fifo";
  spec.num_prompts = 6;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  ConsumerSpec actor{"actor", {"tokens"}, 6, 1, false, Policy::kFifo, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 2000};
  spec.consumers = {actor};
  auto dock = Dock::Create(spec);
  ASSERT_OK(dock);
  ASSERT_OK(PutSync(**dock, 0, {0, 1, 2, 3, 4, 5}, {TokenRows({100, 900, 50, 950, 400, 600})}));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(**dock, GetOf("actor")));
  ASSERT_EQ(b.micro_batches.size(), 2u);
  EXPECT_EQ(b.micro_batches[0].tokens, 1500);
  EXPECT_EQ(b.micro_batches[1].tokens, 1500);
  std::vector<int64_t> first(b.rows.begin(), b.rows.begin() + b.micro_batches[0].end);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<int64_t>{1, 5}));  // heavier by sum of L^2 first
  ASSERT_EQ(b.columns.size(), 1u);
  EXPECT_EQ(b.columns[0].length(0), b.token_counts[0]);  // payload follows row order
}

}  // namespace
}  // namespace tdock

namespace tdock {
namespace {

// With a response limit, a round is formed smaller until each rank's share
// fits one response: 8 rows of 40 KB over 2 ranks under a limit that
// carries two rows at most gives rounds of 2 rows per rank; every row is
// delivered once, and every share's payload is within the limit.
TEST(DockBalanced, SharesFitOneResponse) {
  constexpr int64_t kItems = 10'000;  // int32: 40 KB a row
  DockSpec spec = BalancedSpec();
  spec.consumers[0].micro_batch.reset();
  DockLimits limits;
  limits.max_batch_bytes = (64 << 10) + 2 * (kItems * 4 + 100);
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec, limits));
  std::vector<int64_t> rows(kLengths.size());
  std::iota(rows.begin(), rows.end(), 0);
  ASSERT_OK(PutSync(*dock, 0, rows,
                    {TokenRows(std::vector<int64_t>(kLengths.size(), kItems))}));
  std::vector<int64_t> seen;
  for (int round = 0; round < 8 && seen.size() < kLengths.size(); ++round) {
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_OK_AND_ASSIGN(Batch share, GetSync(*dock, RankGet(rank)));
      EXPECT_LE(share.payload_bytes(), limits.max_batch_bytes);
      EXPECT_LE(share.rows.size(), 2u);
      seen.insert(seen.end(), share.rows.begin(), share.rows.end());
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, rows);
}

}  // namespace
}  // namespace tdock
