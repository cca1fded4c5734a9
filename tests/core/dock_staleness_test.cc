// Staleness bounds: a consumer with max_staleness η never takes a row whose
// version is older than the dock's version minus η; such a row is passed
// over (left for consumers without a bound) or, with stale: drop, dropped
// for every consumer as "stale"; either way it does not hold the step. A
// bounded consumer takes a step's oldest versions first unless told index
// order. Bad bounds are refused and change nothing.
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::DropOf;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::Reader;

ConsumerSpec Bounded(std::string name, int64_t dispatch, int64_t max_staleness,
                     StalePolicy stale = StalePolicy::kLeave, bool whole_groups = false) {
  ConsumerSpec c = Reader(std::move(name), {"prompt"}, dispatch, whole_groups);
  c.max_staleness = max_staleness;
  c.stale = stale;
  return c;
}

// Writes the prompt cells of `rows` of step 0 with per-row versions.
void PutPrompts(Dock& dock, std::vector<int64_t> rows, std::vector<int64_t> versions) {
  PutInput in;
  in.step = 0;
  in.rows = rows;
  in.versions = std::move(versions);
  testing::OwnedColumn cells = Cells("prompt", rows);
  in.columns.push_back(cells.View());
  ASSERT_OK(testing::PutSync(dock, std::move(in)).status());
}

GetInput StepGet(std::string consumer, absl::Duration wait = absl::ZeroDuration()) {
  GetInput in = GetOf(std::move(consumer), 0, wait);
  in.step = 0;
  return in;
}

TEST(StalenessTest, ABoundedConsumerPassesOverRowsPastItsBoundAndOthersTakeThem) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec(
                                      {Bounded("actor", 8, 1), Reader("ref", {"prompt"}, 8)})));
  ASSERT_OK(dock->SetVersion(3));
  PutPrompts(*dock, Iota(0, 8), {1, 2, 3, 0, 2, 3, 1, 3});
  ASSERT_OK_AND_ASSIGN(Batch actor, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(actor.rows, (std::vector<int64_t>{1, 2, 4, 5, 7})) << "versions 2 and 3 only";
  EXPECT_EQ(actor.versions, (std::vector<int64_t>{2, 3, 2, 3, 3}));
  EXPECT_TRUE(actor.end_of_step) << "the rows passed over do not hold the step";
  ASSERT_OK_AND_ASSIGN(Batch ref, GetSync(*dock, StepGet("ref")));
  EXPECT_EQ(ref.rows, Iota(0, 8)) << "a consumer without a bound takes every row";
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.staleness[0].stale_rows, 3);
  EXPECT_EQ(stats.staleness[0].count, 5);
  EXPECT_EQ(stats.staleness[0].sum, 1 + 1 + 0 + 0 + 0);
  EXPECT_EQ(stats.staleness[0].buckets[0], 3) << "staleness 0";
  EXPECT_EQ(stats.staleness[0].buckets[1], 2) << "staleness 1";
  EXPECT_EQ(stats.staleness[1].stale_rows, 0);
  EXPECT_EQ(stats.staleness[1].sum, 2 + 1 + 0 + 3 + 1 + 0 + 2 + 0);
  EXPECT_EQ(stats.rows_dropped_total[static_cast<int>(DropReason::kStale)], 0)
      << "stale: leave drops nothing";
  EXPECT_TRUE(stats.steps.empty()) << "both consumers are done: the step is released";
}

TEST(StalenessTest, StaleDropDropsTheRowForEveryConsumer) {
  ASSERT_OK_AND_ASSIGN(
      auto dock, Dock::Create(testing::DropSpec({Bounded("actor", 8, 1, StalePolicy::kDrop),
                                                 Reader("ref", {"prompt"}, 8)})));
  ASSERT_OK(dock->SetVersion(2));
  PutPrompts(*dock, Iota(0, 8), {0, 0, 2, 2, 1, 1, 2, 0});
  ASSERT_OK_AND_ASSIGN(Batch actor, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(actor.rows, (std::vector<int64_t>{2, 3, 4, 5, 6}));
  EXPECT_TRUE(actor.end_of_step);
  ASSERT_OK_AND_ASSIGN(Batch ref, GetSync(*dock, StepGet("ref")));
  EXPECT_EQ(ref.rows, (std::vector<int64_t>{2, 3, 4, 5, 6})) << "rows 0, 1 and 7 were dropped";
  EXPECT_TRUE(ref.end_of_step);
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.rows_dropped_total[static_cast<int>(DropReason::kStale)], 3);
  EXPECT_EQ(stats.staleness[0].stale_rows, 3);
}

TEST(StalenessTest, AWriteToARowDroppedAsStaleNamesTheReason) {
  ASSERT_OK_AND_ASSIGN(
      auto dock, Dock::Create(testing::DropSpec({Bounded("actor", 8, 0, StalePolicy::kDrop),
                                                 Reader("ref", {"prompt", "response"}, 8)})));
  ASSERT_OK(dock->SetVersion(1));
  PutPrompts(*dock, Iota(0, 8), {0, 1, 1, 1, 1, 1, 1, 1});
  ASSERT_OK_AND_ASSIGN(Batch actor, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(actor.rows, Iota(1, 8));
  const absl::Status stale = testing::PutSync(*dock, 0, {0}, {Cells("response", {0})}).status();
  EXPECT_STATUS(stale, absl::StatusCode::kFailedPrecondition, "row 0 was dropped (stale)");
  EXPECT_REFUSED(stale, Refusal::kStale, DropReason::kStale);
}

TEST(StalenessTest, AWaitingGetTakesNoRowThatBecameStaleMeanwhile) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Bounded("actor", 8, 0)})));
  PutPrompts(*dock, Iota(0, 4), {0, 0, 0, 0});
  std::promise<absl::StatusOr<Batch>> got;
  dock->Get(StepGet("actor", testing::kLongWait),
            [&got](absl::StatusOr<Batch> batch) { got.set_value(std::move(batch)); });
  ASSERT_OK(dock->SetVersion(1));  // rows 0-3 are now one version too old
  ASSERT_OK(dock->Drop(DropOf(0, Iota(4, 8), DropReason::kFailed)));
  ASSERT_OK_AND_ASSIGN(Batch batch, got.get_future().get());
  EXPECT_TRUE(batch.rows.empty()) << "the waiting Get hands out no row past the bound";
  EXPECT_TRUE(batch.end_of_step);
  EXPECT_EQ(dock->Stats().staleness[0].stale_rows, 4);
}

TEST(StalenessTest, RowsWithoutAVersionHaveNoAge) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Bounded("actor", 8, 0)})));
  ASSERT_OK(dock->SetVersion(5));
  PutPrompts(*dock, Iota(0, 8), {});
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  EXPECT_EQ(dock->Stats().staleness[0].count, 0) << "rows without a version are not counted";
}

TEST(StalenessTest, AGroupIsAsOldAsItsOldestRowAndTheOldestGroupsComeFirst) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec(
                                      {Bounded("actor", 8, 1, StalePolicy::kLeave, true)})));
  ASSERT_OK(dock->SetVersion(2));
  // Groups of 2: {0, 1} {2, 3} {4, 5} {6, 7}.
  PutPrompts(*dock, Iota(0, 8), {2, 0, 1, 2, 2, 2, 2, 1});
  GetInput two_groups = StepGet("actor");
  two_groups.count = 4;
  ASSERT_OK_AND_ASSIGN(Batch oldest, GetSync(*dock, two_groups));
  EXPECT_EQ(oldest.rows, (std::vector<int64_t>{2, 3, 6, 7}))
      << "group 0 holds a row of version 0; groups 1 and 3 (version 1) come first";
  ASSERT_OK_AND_ASSIGN(Batch rest, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(rest.rows, (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(rest.end_of_step);
}

TEST(StalenessTest, IndexOrderTakesRowsByIndexWithinTheBound) {
  ConsumerSpec actor = Bounded("actor", 3, 4);
  actor.order = RowOrder::kIndex;
  ConsumerSpec oldest = Reader("oldest", {"prompt"}, 3);
  oldest.order = RowOrder::kOldestVersion;  // without a bound too
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({actor, oldest})));
  ASSERT_OK(dock->SetVersion(3));
  PutPrompts(*dock, Iota(0, 8), {3, 2, 1, 0, 3, 2, 1, 0});
  ASSERT_OK_AND_ASSIGN(Batch by_index, GetSync(*dock, StepGet("actor")));
  EXPECT_EQ(by_index.rows, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(Batch by_age, GetSync(*dock, StepGet("oldest")));
  EXPECT_EQ(by_age.rows, (std::vector<int64_t>{2, 3, 7})) << "versions 1, 0, 0: the oldest";
}

// Oldest first holds across claims: rows of an older version written after
// a claim, and rows a lease gives back, come before the newer rows left
// (a drain keeps its order between claims instead of sorting on each).
TEST(StalenessTest, OldestFirstSeesRowsWrittenOrGivenBackSinceTheLastClaim) {
  ConsumerSpec oldest = Reader("oldest", {"prompt"}, 2);
  oldest.order = RowOrder::kOldestVersion;
  oldest.lease_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({oldest})));
  ASSERT_OK(dock->SetVersion(2));
  PutPrompts(*dock, Iota(0, 4), {2, 2, 1, 1});
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, StepGet("oldest")));
  EXPECT_EQ(first.rows, (std::vector<int64_t>{2, 3}));
  PutPrompts(*dock, {4, 5}, {0, 0});
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, StepGet("oldest")));
  EXPECT_EQ(second.rows, (std::vector<int64_t>{4, 5})) << "version 0, written after";
  ASSERT_OK(dock->Nack("oldest", first.lease_id).status());
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, StepGet("oldest")));
  EXPECT_EQ(again.rows, (std::vector<int64_t>{2, 3})) << "version 1, given back";
  ASSERT_OK_AND_ASSIGN(Batch last, GetSync(*dock, StepGet("oldest")));
  EXPECT_EQ(last.rows, (std::vector<int64_t>{0, 1}));
}

TEST(StalenessTest, BalancedRoundsLeaveStaleRowsOut) {
  ConsumerSpec actor = Bounded("actor", 4, 1);
  actor.dp_size = 2;
  actor.policy = Policy::kBalanced;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({actor})));
  ASSERT_OK(dock->SetVersion(2));
  PutPrompts(*dock, Iota(0, 8), {2, 0, 1, 2, 0, 1, 2, 2});
  std::vector<int64_t> taken;
  bool ended = false;
  for (int32_t rank = 0; rank < 2; ++rank) {
    GetInput in = StepGet("actor");
    in.rank = rank;
    ASSERT_OK_AND_ASSIGN(Batch share, GetSync(*dock, in));
    taken.insert(taken.end(), share.rows.begin(), share.rows.end());
    for (int64_t v : share.versions) EXPECT_GE(v, 1);
    ended |= share.end_of_step;
  }
  EXPECT_EQ(testing::Sorted(taken), (std::vector<int64_t>{0, 2, 3, 5, 6, 7}));
  EXPECT_TRUE(ended);
  EXPECT_TRUE(dock->Stats().steps.empty()) << "the rows passed over do not hold the step";
}

TEST(StalenessTest, ALeasedRowComingBackAfterAnUpdateIsNotHandedOutAgain) {
  ConsumerSpec actor = Bounded("actor", 4, 0);
  actor.lease_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({actor})));
  PutPrompts(*dock, Iota(0, 8), {0, 0, 0, 0, 0, 0, 0, 0});
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, StepGet("actor")));
  ASSERT_EQ(first.rows, Iota(0, 4));
  ASSERT_OK(dock->SetVersion(1));
  ASSERT_OK_AND_ASSIGN(int64_t back, dock->Nack("actor", first.lease_id));
  EXPECT_EQ(back, 4);
  ASSERT_OK_AND_ASSIGN(Batch after, GetSync(*dock, StepGet("actor")));
  EXPECT_TRUE(after.rows.empty()) << "every row is one version too old now";
  EXPECT_TRUE(after.end_of_step);
  EXPECT_EQ(dock->Stats().staleness[0].stale_rows, 8);
}

TEST(StalenessTest, BadBoundsAreRefusedAndChangeNothing) {
  EXPECT_STATUS(Dock::Create(testing::DropSpec({Bounded("actor", 8, -1)})).status(),
                absl::StatusCode::kInvalidArgument,
                "consumer 'actor' max_staleness -1 is negative");
  ConsumerSpec drop_without_bound = Reader("actor", {"prompt"}, 8);
  drop_without_bound.stale = StalePolicy::kDrop;
  EXPECT_STATUS(Dock::Create(testing::DropSpec({drop_without_bound})).status(),
                absl::StatusCode::kInvalidArgument,
                "consumer 'actor' stale: drop needs max_staleness");
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Reader("ref", {"prompt"}, 8)})));
  EXPECT_STATUS(dock->AddConsumer(Bounded("actor", 8, -3)), absl::StatusCode::kInvalidArgument,
                "max_staleness -3 is negative");
  EXPECT_EQ(dock->Stats().consumers, std::vector<std::string>{"ref"});
}

}  // namespace
}  // namespace tdock
