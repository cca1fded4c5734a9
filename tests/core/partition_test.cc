// A Partition and the sampler on their own, without a dock: the step ring's
// structure (activate, deactivate, release, the highest step released),
// publication of cells (ready bits, group completion, rewrites, staging for
// the journal), what a release clears, consumers added later; and claiming:
// FIFO and RANDOM claims take only units ready in every needed column and
// not yet consumed, whole-group consumers take complete groups only, Unclaim
// gives units back, and concurrent claimers take every ready unit once.
#include "server/dock/partition.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/local_cell_store.h"
#include "server/dock/sampler.h"

namespace tdock::internal {
namespace {

constexpr int kColumns = 2;

// A partition of `rows` rows in groups of `group_size`, with its own "dock"
// mutex, and one consumer per shape.
class PartitionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Partition> Make(int64_t rows, int32_t group_size,
                                  std::vector<ConsumerShape> consumers = {{}}) {
    return std::make_unique<Partition>(&mu_, /*index=*/1, rows, group_size, kColumns,
                                       consumers);
  }
  std::shared_ptr<StepCells> NewCells() {
    return LocalCellStore(4096, 0).OpenStep();
  }
  static ConsumerPlan PlanFor(std::vector<int> columns, Policy policy = Policy::kFifo,
                              bool whole_groups = false) {
    ConsumerPlan plan;
    plan.columns = std::move(columns);
    plan.policy = policy;
    plan.whole_groups = whole_groups;
    return plan;
  }
  // Publishes `rows` of column c (all with the same block).
  static void Write(Partition& part, int c, const std::vector<int64_t>& rows) {
    static const CellBlock kBlock{nullptr, 0};
    tdock::MutexLock commit(&part.row_index().mu());
    for (int64_t row : rows) part.Publish(c, row, &kBlock);
  }
  static std::vector<int64_t> Range(int64_t from, int64_t to) {
    std::vector<int64_t> rows(static_cast<size_t>(to - from));
    std::iota(rows.begin(), rows.end(), from);
    return rows;
  }

  tdock::Mutex mu_;
};

TEST_F(PartitionTest, StructureFollowsActivateDeactivateAndRelease) {
  auto part = Make(8, 4);
  tdock::MutexLock lock(&mu_);
  EXPECT_EQ(part->index(), 1);
  EXPECT_EQ(part->groups(), 2);
  EXPECT_FALSE(part->live(mu_));
  EXPECT_EQ(part->step(mu_), -1);
  EXPECT_EQ(part->last_released(mu_), -1);

  std::shared_ptr<StepCells> cells = NewCells();
  part->Activate(mu_, 3, cells);
  EXPECT_TRUE(part->live(mu_));
  EXPECT_EQ(part->step(mu_), 3);
  EXPECT_EQ(part->cells(mu_), cells);

  part->Deactivate(mu_);  // nothing was written: step 3 was never released
  EXPECT_FALSE(part->live(mu_));
  EXPECT_EQ(part->last_released(mu_), -1);

  part->Activate(mu_, 3, cells);
  part->set_releasing(mu_, true);
  EXPECT_TRUE(part->releasing(mu_));
  EXPECT_EQ(part->Release(mu_), cells);
  EXPECT_FALSE(part->live(mu_));
  EXPECT_FALSE(part->releasing(mu_));
  EXPECT_EQ(part->step(mu_), -1);
  EXPECT_EQ(part->last_released(mu_), 3);

  part->MarkReleased(mu_, 1);  // an older step does not lower it
  EXPECT_EQ(part->last_released(mu_), 3);
  part->MarkReleased(mu_, 7);
  EXPECT_EQ(part->last_released(mu_), 7);
}

TEST_F(PartitionTest, PublishSetsReadyBitsAndCompletesAGroupOnItsLastRow) {
  auto part = Make(8, 4);
  const CellBlock a{nullptr, 1};
  const CellBlock b{nullptr, 2};
  tdock::MutexLock commit(&part->row_index().mu());
  for (int64_t row : {4, 5, 6}) part->Publish(0, row, &a);
  EXPECT_TRUE(part->ready(0, 5));
  EXPECT_FALSE(part->ready(1, 5));  // columns are independent
  EXPECT_FALSE(part->column(0).group_ready.Test(1));
  part->Publish(0, 6, &b);  // a rewrite: the cell changes, the count does not
  EXPECT_EQ(part->cell(0, 6), &b);
  EXPECT_FALSE(part->column(0).group_ready.Test(1));
  part->Publish(0, 7, &a);
  EXPECT_TRUE(part->column(0).group_ready.Test(1));
  EXPECT_FALSE(part->column(0).group_ready.Test(0));
  EXPECT_EQ(part->column(0).ready.Count(), 4);
}

TEST_F(PartitionTest, StagedCellsStayInvisibleUntilReadyAndUnstageTakesOnlyItsOwn) {
  auto part = Make(8, 4);
  const CellBlock first{nullptr, 1};
  const CellBlock other{nullptr, 2};
  tdock::MutexLock commit(&part->row_index().mu());
  EXPECT_EQ(part->Stage(0, 2, &first), nullptr);  // a first write
  EXPECT_EQ(part->cell(0, 2), &first);            // a later Put sees it written
  EXPECT_FALSE(part->ready(0, 2));                 // consumers do not

  part->Unstage(0, 2, &other);  // not its block: nothing changes
  EXPECT_EQ(part->cell(0, 2), &first);
  part->Unstage(0, 2, &first);
  EXPECT_EQ(part->cell(0, 2), nullptr);

  EXPECT_EQ(part->Stage(0, 2, &first), nullptr);
  part->MakeReady(0, 2);
  EXPECT_TRUE(part->ready(0, 2));
  EXPECT_EQ(part->Stage(0, 2, &other), &first);  // a rewrite returns the old cell
  part->Unstage(0, 2, &other);                    // ready cells are never unstaged
  EXPECT_EQ(part->cell(0, 2), &other);
  part->MakeReady(0, 2);  // a rewrite made ready counts once
  EXPECT_EQ(part->column(0).group_counts[0].load(), 1);
}

TEST_F(PartitionTest, ReleaseClearsCellsBitsCountsAndConsumerState) {
  auto part = Make(8, 4, {{}, {.whole_groups = true, .takers = 2}});
  Write(*part, 0, Range(0, 8));
  Write(*part, 1, Range(0, 4));
  tdock::MutexLock lock(&mu_);
  part->Activate(mu_, 0, NewCells());
  ConsumerState& rows = part->consumer(mu_, 0);
  ConsumerState& groups = part->consumer(mu_, 1);
  EXPECT_EQ(rows.consumed.bits(), 8);
  EXPECT_EQ(groups.consumed.bits(), 2);  // whole-group consumers count groups
  EXPECT_EQ(Claim(*part, rows, PlanFor({0}), 8, 0).size(), 8u);
  rows.consumed_rows = 8;
  rows.in_flight_rows = 2;
  {
    tdock::MutexLock round_lock(&groups.book.mu());
    groups.book.Keep(Round{});
    groups.book.Delivered(0, 0);
    groups.book.Delivered(1, 0);
    groups.book.HandAgain(1, 0);
    groups.book.StartForming();
  }

  part->Release(mu_);
  for (int c = 0; c < kColumns; ++c) {
    EXPECT_EQ(part->column(c).ready.Count(), 0);
    EXPECT_EQ(part->column(c).group_ready.Count(), 0);
    for (int64_t row = 0; row < 8; ++row) EXPECT_EQ(part->cell(c, row), nullptr);
    for (int64_t g = 0; g < 2; ++g) EXPECT_EQ(part->column(c).group_counts[g].load(), 0);
  }
  EXPECT_EQ(rows.consumed.Count(), 0);
  EXPECT_EQ(rows.consumed_rows.load(), 0);
  EXPECT_EQ(rows.in_flight_rows.load(), 0);
  tdock::MutexLock round_lock(&groups.book.mu());
  EXPECT_EQ(groups.book.formed(), 0);
  EXPECT_EQ(groups.book.NextFor(0), 0);
  EXPECT_EQ(groups.book.NextFor(1), 0) << "nothing to hand again";
  EXPECT_FALSE(groups.book.forming());
}

// A round book hands each taker its rounds in order, a round to hand again
// first; a taker is done once past every round formed with none owed again.
// Recovery queues the rounds a taker's recorded deliveries skipped.
TEST(RoundBookTest, TakersGoThroughEveryRoundInOrder) {
  RoundBook book(2);
  tdock::MutexLock lock(&book.mu());
  EXPECT_TRUE(book.AllDone()) << "no round formed";
  book.StartForming();
  EXPECT_TRUE(book.forming());
  book.Keep(Round{});
  book.Keep(Round{});
  EXPECT_FALSE(book.forming());
  EXPECT_EQ(book.NextFor(0), 0);
  EXPECT_TRUE(book.FirstDelivery(0, 0));
  book.Delivered(0, 0);
  book.Delivered(0, 1);
  EXPECT_TRUE(book.Done(0));
  EXPECT_FALSE(book.AllDone()) << "taker 1 took nothing";
  book.HandAgain(1, 0);
  EXPECT_EQ(book.NextFor(1), 0) << "taker 1 is not past round 0: nothing to hand again";
  book.HandAgain(0, 0);
  EXPECT_EQ(book.NextFor(0), 0) << "round 0 again, before anything else";
  EXPECT_FALSE(book.Done(0));
  EXPECT_FALSE(book.FirstDelivery(0, 0));
  book.Delivered(0, 0);
  EXPECT_TRUE(book.Done(0));
  book.Fail(absl::UnavailableError("disk full"));
  EXPECT_TRUE(book.failed());
  EXPECT_EQ(book.TakeFailure().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(book.failed()) << "one Get learns why";

  RoundBook recovered(1);
  tdock::MutexLock recovering(&recovered.mu());
  recovered.Recover(2, Round{});
  EXPECT_EQ(recovered.formed(), 3) << "rounds never recorded keep their numbers";
  EXPECT_TRUE(recovered.Recorded(0) && recovered.Recorded(2));
  recovered.RecoverDelivery(0, 2);
  EXPECT_EQ(recovered.NextFor(0), 0) << "rounds 0 and 1 were handed back";
  recovered.Delivered(0, 0);
  EXPECT_EQ(recovered.NextFor(0), 1);
}

TEST(ConsumerStateTest, ARankIsDoneOnceEveryRowIsCountedNothingUnrecordedAndItTookEveryRound) {
  ConsumerState state(/*units=*/8, /*takers=*/2);
  tdock::Mutex dock_mu;
  tdock::ReaderMutexLock dock_lock(&dock_mu);
  {
    tdock::MutexLock lock(&state.book.mu());
    state.book.StartForming();
    state.book.Keep(Round{});
    state.book.Delivered(/*taker=*/0, /*k=*/0);
  }
  EXPECT_FALSE(state.RankDone(dock_mu, 8, 0)) << "rows left to count";
  state.consumed_rows.store(8);
  EXPECT_TRUE(state.RankDone(dock_mu, 8, 0));
  EXPECT_FALSE(state.RankDone(dock_mu, 8, 1)) << "taker 1 took nothing";
  EXPECT_FALSE(state.RoundsDelivered(dock_mu));
  state.stale_unrecorded.store(1);
  EXPECT_FALSE(state.RankDone(dock_mu, 8, 0)) << "a pass-over not yet recorded";
  state.stale_unrecorded.store(0);
  {
    tdock::MutexLock lock(&state.book.mu());
    state.book.Delivered(/*taker=*/1, /*k=*/0);
  }
  EXPECT_TRUE(state.RankDone(dock_mu, 8, 1));
  EXPECT_TRUE(state.RoundsDelivered(dock_mu));
}

TEST_F(PartitionTest, AConsumerAddedLaterGetsStateSizedForItsUnits) {
  auto part = Make(12, 4);
  tdock::MutexLock lock(&mu_);
  part->AddConsumer(mu_, {.whole_groups = true, .takers = 3});
  ConsumerState& added = part->consumer(mu_, 1);
  EXPECT_EQ(added.consumed.bits(), 3);
  tdock::MutexLock round_lock(&added.book.mu());
  added.book.Keep(Round{});
  added.book.Delivered(2, 0);
  EXPECT_TRUE(added.book.Done(2)) << "a book for three takers";
  EXPECT_FALSE(added.book.Done(1));
}

TEST_F(PartitionTest, AccessorsRefuseAMutexThatIsNotTheirDocks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto part = Make(8, 4);
  tdock::Mutex other;
  EXPECT_DEATH(
      {
        tdock::ReaderMutexLock lock(&other);
        (void)part->step(other);
      },
      "partition 1: not its dock's mutex");
}

TEST_F(PartitionTest, FifoClaimsTheLowestUnitsReadyInEveryNeededColumn) {
  auto part = Make(200, 4);  // rows span four words
  Write(*part, 0, Range(0, 100));
  Write(*part, 1, Range(50, 150));
  tdock::ReaderMutexLock lock(&mu_);
  ConsumerState& state = part->consumer(mu_, 0);
  const ConsumerPlan both = PlanFor({0, 1});
  EXPECT_EQ(CountAvailable(*part, state, both, 1000), 50);  // rows 50..99
  // The count stops once it has enough (at a word's end).
  const int64_t some = CountAvailable(*part, state, both, 5);
  EXPECT_GE(some, 5);
  EXPECT_LE(some, 50);

  EXPECT_EQ(Claim(*part, state, both, 20, 0), Range(50, 70));
  EXPECT_EQ(Claim(*part, state, both, 100, 0), Range(70, 100));  // fewer than asked
  EXPECT_TRUE(Claim(*part, state, both, 1, 0).empty());
  EXPECT_EQ(CountAvailable(*part, state, both, 1000), 0);
  EXPECT_TRUE(Claim(*part, state, both, 0, 0).empty());

  // A plan that needs only column 0 sees rows 0..49 still available.
  EXPECT_EQ(CountAvailable(*part, state, PlanFor({0}), 1000), 50);
}

TEST_F(PartitionTest, WholeGroupConsumersClaimCompleteGroupsOnly) {
  auto part = Make(16, 4, {{.whole_groups = true}});
  Write(*part, 0, Range(0, 7));  // group 0 complete, group 1 three rows short
  Write(*part, 0, {12, 13, 14, 15});
  tdock::ReaderMutexLock lock(&mu_);
  ConsumerState& state = part->consumer(mu_, 0);
  const ConsumerPlan groups = PlanFor({0}, Policy::kFifo, /*whole_groups=*/true);
  EXPECT_EQ(CountAvailable(*part, state, groups, 10), 2);
  EXPECT_EQ(Claim(*part, state, groups, 4, 0), (std::vector<int64_t>{0, 3}));
}

TEST_F(PartitionTest, RandomClaimsAreSeededSortedAndOnlyOfAvailableUnits) {
  const std::vector<int64_t> ready = Range(10, 190);
  auto draw = [&](uint64_t seed) {
    auto part = Make(256, 4);
    Write(*part, 0, ready);
    tdock::ReaderMutexLock lock(&mu_);
    ConsumerState& state = part->consumer(mu_, 0);
    std::vector<int64_t> got = Claim(*part, state, PlanFor({0}, Policy::kRandom), 30, seed);
    EXPECT_EQ(state.consumed.Count(), 30);
    return got;
  };
  const std::vector<int64_t> a = draw(7);
  EXPECT_EQ(a.size(), 30u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), a.size());
  for (int64_t row : a) {
    EXPECT_GE(row, 10);
    EXPECT_LT(row, 190);
  }
  EXPECT_EQ(draw(7), a);  // the same seed draws the same rows
  EXPECT_NE(draw(8), a);
  EXPECT_NE(a, Range(10, 40));  // not the FIFO choice
}

TEST_F(PartitionTest, UnclaimGivesUnitsBackAndConsumersClaimIndependently) {
  auto part = Make(64, 4, {{}, {}});
  Write(*part, 0, Range(0, 64));
  tdock::ReaderMutexLock lock(&mu_);
  ConsumerState& first = part->consumer(mu_, 0);
  ConsumerState& second = part->consumer(mu_, 1);
  const ConsumerPlan plan = PlanFor({0});
  EXPECT_EQ(Claim(*part, first, plan, 64, 0).size(), 64u);
  EXPECT_EQ(Claim(*part, second, plan, 64, 0).size(), 64u);  // its own bits
  Unclaim(first, {3, 40});
  EXPECT_EQ(CountAvailable(*part, first, plan, 100), 2);
  EXPECT_EQ(Claim(*part, first, plan, 10, 0), (std::vector<int64_t>{3, 40}));
  EXPECT_EQ(CountAvailable(*part, second, plan, 100), 0);
}

// Invariant: claimers racing on one consumer, FIFO and RANDOM mixed, while
// rows become ready, take every ready unit exactly once between them.
TEST_F(PartitionTest, ConcurrentClaimersTakeEveryReadyUnitOnce) {
  constexpr int64_t kRows = 64 * 40 + 9;
  auto part = Make(kRows, 1);
  tdock::ReaderMutexLock lock(&mu_);
  ConsumerState& state = part->consumer(mu_, 0);
  constexpr int kThreads = 4;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::atomic<bool> written{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int64_t row = 0; row < kRows; row += 97) {
      Write(*part, 0, Range(row, std::min(row + 97, kRows)));
    }
    written = true;
  });
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const ConsumerPlan plan = PlanFor({0}, t % 2 == 0 ? Policy::kFifo : Policy::kRandom);
      for (uint64_t seed = t;; seed += kThreads) {
        const bool last_look = written.load();
        std::vector<int64_t> units = Claim(*part, state, plan, 13, seed);
        got[t].insert(got[t].end(), units.begin(), units.end());
        if (units.empty() && last_look) break;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<int64_t> all;
  for (const auto& units : got) all.insert(all.end(), units.begin(), units.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Range(0, kRows));
}

TEST_F(PartitionTest, CompleteGroupsCountsGroupsReadyInEveryColumnWithALiveRow) {
  auto part = Make(16, 4);
  Write(*part, 0, Range(0, 16));
  Write(*part, 1, Range(0, 8));  // groups 0 and 1 complete in both columns
  {
    tdock::MutexLock lock(&mu_);
    for (int64_t row = 4; row < 8; ++row) part->MarkDropped(mu_, row, DropReason::kFiltered);
  }
  tdock::ReaderMutexLock lock(&mu_);
  EXPECT_EQ(part->CompleteGroups(mu_, {0}, 10), 3);     // group 1: every row dropped
  EXPECT_EQ(part->CompleteGroups(mu_, {0, 1}, 10), 1);  // groups 2, 3 lack column 1
  EXPECT_GE(part->CompleteGroups(mu_, {0}, 2), 2);
}

TEST_F(PartitionTest, CompleteGroupsStopsOnceItReachesEnough) {
  auto part = Make(256, 2);  // 128 groups: two words of the bitmaps
  Write(*part, 0, Range(0, 256));
  tdock::ReaderMutexLock lock(&mu_);
  EXPECT_EQ(part->CompleteGroups(mu_, {0}, 1000), 128);
  const int64_t enough = part->CompleteGroups(mu_, {0}, 2);
  EXPECT_GE(enough, 2);
  EXPECT_LT(enough, 128) << "the second word is not read";
}

TEST_F(PartitionTest, SurplusRowsKeepTheGroupsTheConsumerTookFirstThenByIndex) {
  auto part = Make(16, 4, {{.whole_groups = false}});
  Write(*part, 0, Range(0, 14));  // groups 0..2 complete, group 3 not
  tdock::ReaderMutexLock lock(&mu_);
  ConsumerState& state = part->consumer(mu_, 0);
  state.consumed.Claim(0, uint64_t{1} << 9);  // the consumer took row 9: group 2
  // Two groups kept: 2 (taken), then 0; the rest of every other group goes,
  // the incomplete one included.
  std::vector<int64_t> expected = Range(4, 8);
  for (int64_t row : Range(12, 16)) expected.push_back(row);
  EXPECT_EQ(part->SurplusRows(mu_, 0, false, {0}, 2), expected);
  EXPECT_EQ(part->SurplusRows(mu_, 0, false, {0}, 0), Range(0, 16));
}

TEST_F(PartitionTest, SurplusRowsOfAWholeGroupConsumerKeepTheGroupsItTookFirst) {
  auto part = Make(16, 4, {{.whole_groups = true}});
  Write(*part, 0, Range(0, 16));
  {
    tdock::MutexLock lock(&mu_);
    part->MarkDropped(mu_, 13, DropReason::kFiltered);  // a dropped row never comes back
  }
  tdock::ReaderMutexLock lock(&mu_);
  part->consumer(mu_, 0).consumed.Claim(0, uint64_t{1} << 3);  // it took group 3
  std::vector<int64_t> expected = Range(4, 12);
  EXPECT_EQ(part->SurplusRows(mu_, 0, true, {0}, 2), expected) << "groups 3 and 0 kept";
  EXPECT_EQ(part->SurplusRows(mu_, 0, true, {0}, 1),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(part->SurplusRows(mu_, 0, true, {0}, 4), std::vector<int64_t>{});
  EXPECT_EQ(part->SurplusRows(mu_, 0, true, {0}, 0),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 15}));
}

TEST(UnitsOfRows, RowsAsGivenOrTheirGroupsAscendingOnce) {
  EXPECT_EQ(UnitsOfRows({9, 2, 3}, false, 4), (std::vector<int64_t>{9, 2, 3}));
  EXPECT_EQ(UnitsOfRows({9, 2, 3, 11}, true, 4), (std::vector<int64_t>{0, 2}));
}

}  // namespace
}  // namespace tdock::internal
