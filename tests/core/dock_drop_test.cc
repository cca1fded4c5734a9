// Drops: a dropped row is never handed out again, counts as done for every
// consumer (it holds neither its group nor its step), and refuses later
// Puts and Reads by naming the drop. Bad input changes nothing.
#include <algorithm>
#include <numeric>
#include <set>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::DropOf;
using testing::DropSpec;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::kLongWait;
using testing::PutSync;
using testing::Reader;
using testing::Sorted;

// Dropped rows, written or not, are never handed out and count as done: the
// consumer's last Get ends the step with the rows left, and the step is
// released by itself.
TEST(DropTest, DroppedRowsAreNeverHandedOutAndCountAsDone) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("reader", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 6), {Cells("prompt", Iota(0, 6))}));
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Drop(DropOf(0, {2, 6, 7}, DropReason::kFailed)));
  EXPECT_EQ(dropped, 3);
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_EQ(stats.steps[0].dropped_rows[static_cast<int>(DropReason::kFailed)], 3);
  EXPECT_EQ(stats.steps[0].available_rows, std::vector<int64_t>{5});
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1, 3, 4, 5}));
  EXPECT_TRUE(batch.end_of_step);
  stats = dock->Stats();
  EXPECT_TRUE(stats.steps.empty()) << "the step is done and released";
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{5});
  EXPECT_EQ(stats.rows_dropped_total[static_cast<int>(DropReason::kFailed)], 3);
}

// Rows handed out count only rows a consumer received: dropping rows of a
// group a whole-group consumer has not taken leaves the counts as they were
// (they used to fall by the rows dropped, below zero for a step).
TEST(DropTest, DropsNeverLowerTheRowsHandedOut) {
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Reader("groups", {"prompt"}, 2, true)})));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Cells("prompt", {0, 1, 2})}));
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Drop(DropOf(0, {3}, DropReason::kFailed)));
  ASSERT_EQ(dropped, 1);
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.steps.at(0).consumed_rows, std::vector<int64_t>{0});
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{0});
  GetInput first = GetOf("groups", 2);
  first.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, first));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1}));
  ASSERT_OK(dock->Drop(DropOf(0, {5}, DropReason::kFailed)).status());
  stats = dock->Stats();
  EXPECT_EQ(stats.steps.at(0).consumed_rows, std::vector<int64_t>{2});
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{2});
  ASSERT_OK_AND_ASSIGN(batch, GetSync(*dock, first));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{2})) << "group 1 without its dropped row";
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{3});
}

// A dropped row leaves its group: the group is complete once its other rows
// are, and whole-group consumers receive the rows left.
TEST(DropTest, GroupsCompleteWithoutTheirDroppedRows) {
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Reader("groups", {"prompt"}, 2, true)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 7), {Cells("prompt", Iota(0, 7))}));
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("groups", 8)));
  EXPECT_TRUE(first.rows.empty()) << "row 7 is missing: not every group is complete";
  ASSERT_OK(dock->Drop(DropOf(0, {7, 1}, DropReason::kFailed)));
  EXPECT_EQ(dock->Stats().steps[0].available_rows, std::vector<int64_t>{8})
      << "every group counts as available (in units of whole groups)";
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("groups", 8)));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(batch.end_of_step);
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// A group dropped whole is done for a whole-group consumer: its last group
// ends the step.
TEST(DropTest, GroupDroppedWholeIsDoneForWholeGroupConsumers) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("groups", {"prompt"}, 2, true)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 6), {Cells("prompt", Iota(0, 6))}));
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Drop(DropOf(0, {}, DropReason::kFiltered, {3, 1})));
  EXPECT_EQ(dropped, 4);
  std::vector<int64_t> got;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("groups", 2, kLongWait)));
    got.insert(got.end(), batch.rows.begin(), batch.rows.end());
    if (batch.end_of_step) break;
    ASSERT_FALSE(batch.rows.empty());
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 4, 5}));
}

// A parked Get for the step's remainder is served when a drop makes the
// remainder ready: it never waits for rows that cannot come.
TEST(DropTest, ParkedGetIsServedWhenADropEndsTheWait) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("reader", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 4), {Cells("prompt", Iota(0, 4))}));
  std::promise<absl::StatusOr<Batch>> parked;
  dock->Get(GetOf("reader", 8, kLongWait),
            [&](absl::StatusOr<Batch> b) { parked.set_value(std::move(b)); });
  ASSERT_OK(dock->Drop(DropOf(0, {}, DropReason::kFailed, {2, 3})));
  ASSERT_OK_AND_ASSIGN(Batch batch, parked.get_future().get());
  EXPECT_EQ(batch.rows, Iota(0, 4));
  EXPECT_TRUE(batch.end_of_step);
}

// A Put or a Read of a dropped row fails naming the drop and changes
// nothing; dropping a row again drops nothing.
TEST(DropTest, PutAndReadOfADroppedRowNameTheDrop) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("reader", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 4), {Cells("prompt", Iota(0, 4))}));
  ASSERT_OK(dock->Drop(DropOf(0, {3, 5}, DropReason::kFiltered)));
  const absl::Status dropped = PutSync(*dock, 0, {4, 5}, {Cells("prompt", {4, 5})}).status();
  EXPECT_STATUS(dropped, absl::StatusCode::kFailedPrecondition, "row 5 was dropped (filtered)");
  EXPECT_REFUSED(dropped, Refusal::kDropped, DropReason::kFiltered);
  EXPECT_STATUS(PutSync(*dock, 0, {3}, {Cells("response", {3})}),
                absl::StatusCode::kFailedPrecondition, "row 3 was dropped (filtered)");
  EXPECT_EQ(dock->Stats().steps[0].ready_rows, (std::vector<int64_t>{4, 0}))
      << "the refused Puts wrote nothing (row 4 neither)";
  const absl::Status read = dock->Read(0, {3}, {"prompt"}).status();
  EXPECT_STATUS(read, absl::StatusCode::kFailedPrecondition, "row 3 was dropped (filtered)");
  EXPECT_REFUSED(read, Refusal::kDropped, DropReason::kFiltered);
  ASSERT_OK_AND_ASSIGN(int64_t again, dock->Drop(DropOf(0, {3, 5}, DropReason::kFailed)));
  EXPECT_EQ(again, 0);
  EXPECT_STATUS(dock->Read(0, {3}, {}), absl::StatusCode::kFailedPrecondition,
                "dropped (filtered)");
}

// Every bad drop or seal gets its own error and changes nothing.
TEST(DropTest, BadInputGetsASpecificErrorAndChangesNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("reader", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 2), {Cells("prompt", Iota(0, 2))}));
  EXPECT_STATUS(dock->Drop(DropOf(0, {1}, DropReason::kUnspecified)),
                absl::StatusCode::kInvalidArgument, "a drop needs a reason (filtered, failed");
  EXPECT_STATUS(dock->Drop(DropOf(0, {1}, static_cast<DropReason>(42))),
                absl::StatusCode::kInvalidArgument, "needs a reason");
  EXPECT_STATUS(dock->Drop(DropOf(0, {}, DropReason::kFailed)),
                absl::StatusCode::kInvalidArgument, "names no rows or groups");
  EXPECT_STATUS(dock->Drop(DropOf(0, {1, 8}, DropReason::kFailed)),
                absl::StatusCode::kInvalidArgument, "row 8 is out of range [0, 8)");
  EXPECT_STATUS(dock->Drop(DropOf(0, {1}, DropReason::kFailed, {4})),
                absl::StatusCode::kInvalidArgument, "group 4 is out of range [0, 4)");
  EXPECT_STATUS(dock->Drop(DropOf(-1, {1}, DropReason::kFailed)),
                absl::StatusCode::kInvalidArgument, "step is negative");
  EXPECT_STATUS(dock->Drop(DropOf(1, {1}, DropReason::kFailed)),
                absl::StatusCode::kFailedPrecondition, "step 1 has not started");
  EXPECT_STATUS(dock->Seal(SealInput{0, {"prompt", "reward"}}),
                absl::StatusCode::kInvalidArgument, "required column 'reward' is unknown");
  EXPECT_STATUS(dock->Seal(SealInput{3, {}}), absl::StatusCode::kFailedPrecondition,
                "has not started");
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_FALSE(stats.steps[0].sealed);
  for (int64_t n : stats.rows_dropped_total) EXPECT_EQ(n, 0);
  ASSERT_OK(dock->ReleaseStep(0));
  EXPECT_STATUS(dock->Drop(DropOf(0, {1}, DropReason::kFailed)),
                absl::StatusCode::kFailedPrecondition, "step 0 is released");
  EXPECT_STATUS(dock->Seal(SealInput{0, {}}), absl::StatusCode::kFailedPrecondition,
                "step 0 is released");
}

// Rows dropped after their balanced round was formed leave the shares not
// yet fetched; the micro-batch ranges shrink with them and keep their count.
TEST(DropTest, RowsDroppedAfterTheirRoundFormedLeaveTheShare) {
  ConsumerSpec actor{"actor", {"prompt"}, 4, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 12};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({actor})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  GetInput rank0 = GetOf("actor");
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, rank0));
  ASSERT_EQ(r0.rows.size(), 4u);
  // Rank 1's share is the other four rows: drop two of them.
  std::vector<int64_t> rest;
  for (int64_t row : Iota(0, 8)) {
    if (std::find(r0.rows.begin(), r0.rows.end(), row) == r0.rows.end()) rest.push_back(row);
  }
  ASSERT_OK(dock->Drop(DropOf(0, {rest[0], rest[2], r0.rows[0]}, DropReason::kFiltered)));
  GetInput rank1 = GetOf("actor");
  rank1.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch r1, GetSync(*dock, rank1));
  EXPECT_EQ(Sorted(r1.rows), (std::vector<int64_t>{rest[1], rest[3]}));
  EXPECT_TRUE(r1.end_of_step);
  int64_t in_plan = 0, tokens = 0;
  for (const MicroBatchInfo& mb : r1.micro_batches) {
    in_plan += mb.end - mb.begin;
    tokens += mb.tokens;
  }
  EXPECT_EQ(in_plan, 2);
  EXPECT_EQ(tokens, rest[1] + 1 + rest[3] + 1);
  EXPECT_TRUE(dock->Stats().steps.empty()) << "both ranks have their shares: released";
}

// Drops that take the rest of the step after its last round formed make that
// round the step's last: the rank fetching it last ends the step, which is
// released.
TEST(DropTest, DropsThatEndTheStepAfterItsLastRoundRelease) {
  ConsumerSpec actor{"actor", {"prompt"}, 2, 2, false, Policy::kBalanced, 0};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({actor})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 4), {Cells("prompt", Iota(0, 4))}));
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, GetOf("actor")));
  ASSERT_EQ(r0.rows.size(), 2u);
  EXPECT_FALSE(r0.end_of_step);
  ASSERT_OK(dock->Drop(DropOf(0, Iota(4, 8), DropReason::kFailed)));
  EXPECT_EQ(dock->Stats().steps.size(), 1u) << "rank 1 has not fetched its share";
  GetInput rank1 = GetOf("actor");
  rank1.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch r1, GetSync(*dock, rank1));
  EXPECT_EQ(r1.rows.size(), 2u);
  EXPECT_TRUE(r1.end_of_step);
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// A share every row of which was dropped is still delivered, empty: the
// rank takes that round like its peers (ranks that step together take the
// same rounds), then goes on to the next.
TEST(DropTest, AShareDroppedWholeIsDeliveredEmpty) {
  ConsumerSpec actor{"actor", {"prompt"}, 1, 2, false, Policy::kBalanced, 0};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({actor})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, GetOf("actor")));
  ASSERT_EQ(r0.round, 0);
  ASSERT_EQ(r0.rows.size(), 1u);
  // Round 0 took rows 0 and 1; rank 1's is the other one: drop it.
  ASSERT_OK(dock->Drop(DropOf(0, {1 - r0.rows[0]}, DropReason::kFiltered)));
  GetInput rank1 = GetOf("actor", 0, kLongWait);
  rank1.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch empty, GetSync(*dock, rank1));
  EXPECT_EQ(empty.round, 0);
  EXPECT_TRUE(empty.rows.empty());
  EXPECT_FALSE(empty.end_of_step);
  ASSERT_OK_AND_ASSIGN(Batch next, GetSync(*dock, rank1));
  EXPECT_EQ(next.round, 1);
  EXPECT_EQ(next.rows.size(), 1u);
}

// A whole-group balanced consumer balances groups that drops left unequal.
TEST(DropTest, BalancedRoundsOfGroupsOfUnequalSizes) {
  ConsumerSpec actor{"actor", {"prompt"}, 4, 2, true, Policy::kBalanced, 0};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({actor})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK(dock->Drop(DropOf(0, {0, 5}, DropReason::kFailed)));
  std::set<int64_t> got;
  for (int32_t rank : {0, 1}) {
    GetInput in = GetOf("actor");
    in.rank = rank;
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
    std::set<int64_t> groups;
    for (int64_t row : batch.rows) groups.insert(row / 2);
    EXPECT_EQ(groups.size(), 2u) << "equal numbers of groups per rank";
    got.insert(batch.rows.begin(), batch.rows.end());
  }
  EXPECT_EQ(got, (std::set<int64_t>{1, 2, 3, 4, 6, 7}));
}

// A lease none of whose rows is left ends with the drop (a late Ack says
// why, the step does not wait for it); a lease that keeps some rows hands
// only those back when it expires.
TEST(DropTest, LeasesOfDroppedRowsEnd) {
  auto clock = std::make_shared<ManualClock>();
  auto timers = std::make_shared<TimerService>(clock);
  ConsumerSpec scorer = Reader("scorer", {"prompt"}, 2);
  scorer.lease_ms = 30;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({scorer}),
                                               DockLimits{.timers = timers, .clock = clock}));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("scorer")));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("scorer")));
  ASSERT_EQ(a.rows, Iota(0, 2));
  ASSERT_EQ(b.rows, Iota(2, 4));
  ASSERT_OK(dock->Drop(DropOf(0, {0, 1, 2}, DropReason::kFiltered)));
  EXPECT_STATUS(dock->Ack("scorer", a.lease_id), absl::StatusCode::kFailedPrecondition,
                "every row of it was dropped");
  EXPECT_EQ(dock->Stats().rows_in_flight, std::vector<int64_t>{2}) << "b's lease is in flight";
  clock->Advance(absl::Milliseconds(31));
  for (int i = 0; i < 1000 && dock->Stats().lease_expiries_total[0] == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));  // the expiry runs on the timer's thread
  }
  ASSERT_EQ(dock->Stats().lease_expiries_total[0], 1);
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, GetOf("scorer", 2, kLongWait)));
  EXPECT_EQ(again.rows, (std::vector<int64_t>{3, 4})) << "only row 3 came back";
  ASSERT_OK(dock->Ack("scorer", again.lease_id));
  ASSERT_OK_AND_ASSIGN(Batch last, GetSync(*dock, GetOf("scorer", 2, kLongWait)));
  ASSERT_EQ(last.rows, Iota(5, 7));
  ASSERT_OK(dock->Ack("scorer", last.lease_id));
  ASSERT_OK_AND_ASSIGN(Batch end, GetSync(*dock, GetOf("scorer", 2, kLongWait)));
  ASSERT_EQ(end.rows, std::vector<int64_t>{7});
  EXPECT_TRUE(end.end_of_step);
  ASSERT_OK(dock->Ack("scorer", end.lease_id));
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// A consumer added after a drop never sees the dropped rows.
TEST(DropTest, ConsumerAddedLaterSkipsDroppedRows) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("reader", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK(dock->Drop(DropOf(0, {}, DropReason::kFailed, {1})));
  ASSERT_OK(dock->AddConsumer(Reader("late", {"prompt"}, 8, true)));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("late")));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1, 4, 5, 6, 7}));
  EXPECT_TRUE(batch.end_of_step);
}

}  // namespace
}  // namespace tdock
