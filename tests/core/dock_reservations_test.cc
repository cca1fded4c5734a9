// Reservations (admission before generation): a producer reserves rows for
// the version it generates with and gets a step and rows once the rows can be
// trained on within the consumers' staleness bounds; until then the call
// waits (it is not refused). Reserved rows are the producer's (appends skip
// them), carry its version, and those not written by the deadline are
// dropped as expired, so they never hold a step. Bad reservations change
// nothing.
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::Reader;

ReserveInput Rows(int64_t rows, int64_t version = 0,
                  absl::Duration wait = absl::ZeroDuration()) {
  ReserveInput in;
  in.rows = rows;
  in.version = version;
  in.deadline = absl::Seconds(60);
  in.wait = wait;
  return in;
}

// Writes the reservation's rows (every column the test dock has).
absl::Status WriteReserved(Dock& dock, const Reservation& r) {
  PutInput in;
  in.step = r.step;
  in.reservation = r.id;
  testing::OwnedColumn prompt = Cells("prompt", r.rows);
  testing::OwnedColumn response = Cells("response", r.rows);
  in.columns = {prompt.View(), response.View()};
  return testing::PutSync(dock, std::move(in)).status();
}

DockSpec ThreeSteps(std::vector<ConsumerSpec> consumers) {
  DockSpec spec = testing::DropSpec(std::move(consumers));
  spec.steps_in_flight = 3;
  return spec;
}

TEST(ReservationsTest, RowsGoToTheOldestStepWithRoomAndCarryTheVersion) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ASSERT_OK(dock->SetVersion(3));
  ASSERT_OK_AND_ASSIGN(Reservation first, dock->Reserve(Rows(4, 2)));
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(first.rows, Iota(0, 4));
  EXPECT_EQ(first.version, 2);
  ASSERT_OK_AND_ASSIGN(Reservation second, dock->Reserve(Rows(3, 3)));
  EXPECT_EQ(second.rows, Iota(4, 7)) << "whole groups; the last one partly";
  ASSERT_OK_AND_ASSIGN(Reservation third, dock->Reserve(Rows(2, 3)));
  EXPECT_EQ(third.step, 1) << "step 0 has one free row, in a group already taken";
  EXPECT_NE(first.id, second.id);
  EXPECT_EQ(dock->Stats().reservations_live, 3);
  ASSERT_OK(WriteReserved(*dock, first));
  ASSERT_OK(WriteReserved(*dock, second));
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.rows[1].version, 2);
  EXPECT_EQ(listing.rows[5].version, 3);
  GetInput all = GetOf("actor", 7);
  all.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, all));
  EXPECT_EQ(batch.rows, Iota(0, 7));
  EXPECT_EQ(batch.versions, (std::vector<int64_t>{2, 2, 2, 2, 3, 3, 3}));
}

TEST(ReservationsTest, AppendsSkipReservedRows) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, dock->Reserve(Rows(4)));
  PutInput append;
  append.step = 0;
  append.new_rows = 2;
  testing::OwnedColumn response = Cells("response", {0, 0});
  append.columns.push_back(response.View());
  ASSERT_OK_AND_ASSIGN(PutResult appended, testing::PutSync(*dock, std::move(append)));
  EXPECT_EQ(appended.assigned, (std::vector<int64_t>{4, 5}));
  // A Put may name reserved rows by number, too.
  ASSERT_OK(testing::PutSync(*dock, 0, {2}, {Cells("response", {2})}));
}

TEST(ReservationsTest, DeclaredGroupsCloseTheirRest) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ReserveInput groups;
  groups.group_sizes = {2, 1};
  groups.deadline = absl::Seconds(60);
  ASSERT_OK_AND_ASSIGN(Reservation reserved, dock->Reserve(groups));
  EXPECT_EQ(reserved.rows, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.rows[3].dropped, DropReason::kUnused);
}

// Reservations for the newest weights (no version given) wait until the
// trainer has caught up: it takes step 0 under a lease, updates, sets
// version 1 and acknowledges (the step is released then); step 2 trains
// two versions after step 0.
TEST(ReservationsTest, AdmissionWaitsUntilTheTrainerCatchesUp) {
  ConsumerSpec actor = Reader("actor", {"prompt", "response"}, 8);
  actor.max_staleness = 1;
  actor.lease_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({actor})));
  ReserveInput newest = Rows(8);
  newest.version.reset();
  // Version 0: step 0 trains at 0, step 1 at 1, step 2 at 2 (past the bound).
  ASSERT_OK_AND_ASSIGN(Reservation s0, dock->Reserve(newest));
  ASSERT_OK_AND_ASSIGN(Reservation s1, dock->Reserve(newest));
  EXPECT_EQ(s1.step, 1);
  ASSERT_OK_AND_ASSIGN(Reservation now, dock->Reserve(newest));
  EXPECT_TRUE(now.timed_out) << "without a wait, no step admits it";
  std::promise<absl::StatusOr<Reservation>> parked;
  newest.wait = testing::kLongWait;
  dock->Reserve(newest, [&](absl::StatusOr<Reservation> r) { parked.set_value(std::move(r)); });
  std::future<absl::StatusOr<Reservation>> later = parked.get_future();
  EXPECT_EQ(dock->Stats().reservations_parked, 1);
  ASSERT_OK(WriteReserved(*dock, s0));
  GetInput train = GetOf("actor");
  train.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, train));
  ASSERT_TRUE(batch.end_of_step);
  ASSERT_OK(dock->SetVersion(1));  // step 0 trained; not yet acknowledged
  EXPECT_EQ(later.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout)
      << "step 0 is not released: step 2 would train at version 3";
  ASSERT_OK(dock->Ack("actor", batch.lease_id).status());  // step 0 released
  ASSERT_OK_AND_ASSIGN(Reservation granted, later.get());
  EXPECT_FALSE(granted.timed_out);
  EXPECT_EQ(granted.step, 2);
  EXPECT_EQ(granted.version, 1) << "the dock's version when it was granted";
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.reservations_parked, 0);
  EXPECT_EQ(stats.admission_waits_total, 1);
  EXPECT_GT(stats.admission_wait_seconds_total, 0);
}

// The ring paces too: a reservation waits for a partition to be free.
TEST(ReservationsTest, AReservationWaitsForAFreePartition) {
  DockSpec spec = testing::DropSpec({Reader("actor", {"response"}, 8)});
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  ASSERT_OK_AND_ASSIGN(Reservation s0, dock->Reserve(Rows(8)));
  ASSERT_OK_AND_ASSIGN(Reservation s1, dock->Reserve(Rows(8)));
  ASSERT_EQ(s1.step, 1);
  std::promise<absl::StatusOr<Reservation>> parked;
  dock->Reserve(Rows(8, 0, testing::kLongWait),
                [&](absl::StatusOr<Reservation> r) { parked.set_value(std::move(r)); });
  std::future<absl::StatusOr<Reservation>> later = parked.get_future();
  EXPECT_EQ(later.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK_AND_ASSIGN(Reservation granted, later.get());
  EXPECT_EQ(granted.step, 2);
}

TEST(ReservationsTest, OnlyTheNewestVersionIsAdmittedUnderABoundOfZero) {
  ConsumerSpec actor = Reader("actor", {"prompt", "response"}, 8);
  actor.max_staleness = 0;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({actor})));
  ASSERT_OK_AND_ASSIGN(Reservation s0, dock->Reserve(Rows(8)));
  ASSERT_OK_AND_ASSIGN(Reservation ahead, dock->Reserve(Rows(8)));
  EXPECT_TRUE(ahead.timed_out) << "step 1 trains at version 1: version 0 is one too old";
  // The trainer takes step 0 (released) and publishes version 1.
  ASSERT_OK(WriteReserved(*dock, s0));
  GetInput train = GetOf("actor");
  train.step = 0;
  ASSERT_OK(GetSync(*dock, train).status());
  ASSERT_OK(dock->SetVersion(1));
  // No step could train version 0 now.
  const absl::StatusOr<Reservation> stale = dock->Reserve(Rows(8, 0));
  EXPECT_STATUS(stale, absl::StatusCode::kFailedPrecondition,
                "version 0 is 1 versions behind the dock's 1");
  EXPECT_REFUSED(stale, Refusal::kStale, DropReason::kUnspecified);
  // Stale comes before a bad deadline: a producer that reads the refusal
  // learns that its weights are too old, whatever else is wrong.
  ReserveInput stale_and_unbounded = Rows(8, 0);
  stale_and_unbounded.deadline = absl::ZeroDuration();
  EXPECT_REFUSED(dock->Reserve(stale_and_unbounded), Refusal::kStale, DropReason::kUnspecified);
  ASSERT_OK_AND_ASSIGN(Reservation fresh, dock->Reserve(Rows(8, 1)));
  EXPECT_EQ(fresh.step, 1);
  ASSERT_OK_AND_ASSIGN(Reservation next, dock->Reserve(Rows(8, 1)));
  EXPECT_TRUE(next.timed_out) << "step 2 trains at version 2";
}

struct Clocked {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<TimerService> timers = std::make_shared<TimerService>(clock);
  std::unique_ptr<Dock> dock;
};

TEST(ReservationsTest, ExpiredReservationsDoNotHoldTheStep) {
  Clocked c;
  ASSERT_OK_AND_ASSIGN(c.dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)}),
                                            DockLimits{.timers = c.timers, .clock = c.clock}));
  ReserveInput in = Rows(8);
  in.deadline = absl::Seconds(5);
  ASSERT_OK_AND_ASSIGN(Reservation reserved, c.dock->Reserve(in));
  ASSERT_OK(testing::PutSync(*c.dock, 0, {0, 1, 2}, {Cells("response", {0, 1, 2})}));
  c.clock->Advance(absl::Seconds(6));
  bool expired = false;
  for (int i = 0; i < 1000 && !expired; ++i) {
    expired = c.dock->Stats().rows_dropped_total[static_cast<int>(DropReason::kExpired)] == 5;
    if (!expired) absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(expired) << "rows 3-7 were not written by the deadline";
  GetInput all = GetOf("actor");
  all.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*c.dock, all));
  EXPECT_EQ(batch.rows, Iota(0, 3));
  EXPECT_TRUE(batch.end_of_step) << "the expired rows do not hold the step";
  PutInput late;
  late.step = 0;
  late.reservation = reserved.id;
  testing::OwnedColumn response = Cells("response", {3});
  late.rows = {3};
  late.columns.push_back(response.View());
  const absl::Status refused = testing::PutSync(*c.dock, std::move(late)).status();
  EXPECT_STATUS(refused, absl::StatusCode::kFailedPrecondition,
                absl::StrCat("reservation ", reserved.id, " expired at"));
  EXPECT_REFUSED(refused, Refusal::kExpired, DropReason::kExpired);
  EXPECT_EQ(c.dock->Stats().reservations_live, 0);
}

// A released step takes its reservations with it: a dock written through
// reservations step after step holds none of them once the steps are
// released (each used to stay until its deadline, up to a day, and every
// alarm of the dock walked them all).
TEST(ReservationsTest, AReleasedStepForgetsItsReservations) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  for (int64_t step = 0; step < 6; ++step) {
    ASSERT_OK_AND_ASSIGN(Reservation r, dock->Reserve(Rows(8)));  // a 60 s deadline
    ASSERT_EQ(r.step, step);
    ASSERT_OK(WriteReserved(*dock, r));
    GetInput all = GetOf("actor");
    all.step = step;
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, all));
    ASSERT_TRUE(batch.end_of_step);  // the step is released
  }
  EXPECT_EQ(dock->Stats().reservations_live, 0);
}

// A parked Reserve is tried again when what admits it can have changed (here
// the consumer whose bound held it back is removed), not on a timer: the
// dock's clock never moves in this test.
TEST(ReservationsTest, RemovingTheBoundingConsumerAdmitsAParkedReserve) {
  Clocked c;
  ConsumerSpec actor = Reader("actor", {"response"}, 8);
  actor.max_staleness = 0;
  ASSERT_OK_AND_ASSIGN(c.dock, Dock::Create(ThreeSteps({actor, Reader("critic", {"response"}, 8)}),
                                            DockLimits{.timers = c.timers, .clock = c.clock}));
  ASSERT_OK(c.dock->Reserve(Rows(8)).status());  // step 0
  std::promise<absl::StatusOr<Reservation>> parked;
  ASSERT_NE(c.dock->Reserve(Rows(8, 0, testing::kLongWait),
                            [&](absl::StatusOr<Reservation> r) { parked.set_value(std::move(r)); }),
            0u);
  EXPECT_EQ(c.dock->Stats().reservations_parked, 1) << "step 1 trains at version 1";
  ASSERT_OK(c.dock->RemoveConsumer("actor").status());
  std::future<absl::StatusOr<Reservation>> later = parked.get_future();
  ASSERT_EQ(later.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the removal did not wake the parked Reserve";
  ASSERT_OK_AND_ASSIGN(Reservation granted, later.get());
  EXPECT_FALSE(granted.timed_out);
  EXPECT_EQ(granted.step, 1);
}

// Reserves waiting for admission are capped per dock, as Gets are per
// consumer: one more is refused with a specific error and changes nothing.
TEST(ReservationsTest, ParkedReservesAreCappedPerDock) {
  ConsumerSpec actor = Reader("actor", {"response"}, 8);
  actor.max_staleness = 0;
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(ThreeSteps({actor}), DockLimits{.max_parked_reserves = 2}));
  ASSERT_OK(dock->Reserve(Rows(8)).status());  // step 0; the rest must wait
  std::vector<uint64_t> ids;
  std::vector<std::promise<absl::StatusOr<Reservation>>> answers(2);
  for (auto& answer : answers) {
    ids.push_back(dock->Reserve(Rows(8, 0, testing::kLongWait),
                                [&answer](absl::StatusOr<Reservation> r) {
                                  answer.set_value(std::move(r));
                                }));
    ASSERT_NE(ids.back(), 0u);
  }
  EXPECT_STATUS(dock->Reserve(Rows(8, 0, testing::kLongWait)),
                absl::StatusCode::kResourceExhausted,
                "2 Reserves are already waiting for admission, the server's limit "
                "(--max_parked_reserves_per_dock)");
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.reservations_parked, 2);
  EXPECT_EQ(stats.reservations_live, 1);
  for (uint64_t id : ids) dock->Cancel(id);
  for (auto& answer : answers) {
    EXPECT_STATUS(answer.get_future().get(), absl::StatusCode::kCancelled,
                  "reservation cancelled");
  }
  EXPECT_EQ(dock->Stats().reservations_parked, 0);
}

TEST(ReservationsTest, APutNamingAReservationWritesOnlyItsRows) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ASSERT_OK_AND_ASSIGN(Reservation reserved, dock->Reserve(Rows(2)));
  PutInput in;
  in.step = 0;
  in.reservation = reserved.id;
  in.rows = {5};
  testing::OwnedColumn response = Cells("response", {5});
  in.columns.push_back(response.View());
  EXPECT_STATUS(testing::PutSync(*dock, in), absl::StatusCode::kInvalidArgument,
                absl::StrCat("row 5 is not one of reservation ", reserved.id, "'s rows"));
  in.step = 1;
  in.rows = {0};
  EXPECT_STATUS(testing::PutSync(*dock, in), absl::StatusCode::kInvalidArgument,
                absl::StrCat("reservation ", reserved.id, " is of step 0"));
  in.step = 0;
  in.reservation = 999;
  EXPECT_STATUS(testing::PutSync(*dock, in), absl::StatusCode::kNotFound,
                "reservation 999 is not known");
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  for (const RowState& row : listing.rows) EXPECT_TRUE(row.written.empty()) << row.row;
}

TEST(ReservationsTest, AWaitingReservationCanBeCancelled) {
  ConsumerSpec actor = Reader("actor", {"response"}, 8);
  actor.max_staleness = 0;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({actor})));
  ASSERT_OK(dock->Reserve(Rows(8)).status());
  std::promise<absl::StatusOr<Reservation>> parked;
  const uint64_t id = dock->Reserve(Rows(8, 0, testing::kLongWait), [&](absl::StatusOr<Reservation> r) {
    parked.set_value(std::move(r));
  });
  ASSERT_NE(id, 0u);
  dock->Cancel(id);
  EXPECT_STATUS(parked.get_future().get(), absl::StatusCode::kCancelled, "reservation cancelled");
  EXPECT_EQ(dock->Stats().reservations_parked, 0);
}

TEST(ReservationsTest, APartialLastGroupClosesItsRest) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ASSERT_OK_AND_ASSIGN(Reservation three, dock->Reserve(Rows(3)));
  EXPECT_EQ(three.rows, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.rows[3].dropped, DropReason::kUnused) << "no append could take it";
}

TEST(ReservationsTest, AVersionNoStepCanTrainIsRefused) {
  ConsumerSpec actor = Reader("actor", {"response"}, 8);
  actor.max_staleness = 1;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({actor})));
  ASSERT_OK(dock->SetVersion(5));
  EXPECT_STATUS(dock->Reserve(Rows(2, 3)), absl::StatusCode::kFailedPrecondition,
                "version 3 is 2 versions behind the dock's 5, past consumer 'actor' "
                "max_staleness 1");
  EXPECT_TRUE(dock->Stats().steps.empty());
}

TEST(ReservationsTest, BadReservationsAreRefusedAndChangeNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ThreeSteps({Reader("actor", {"response"}, 8)})));
  ASSERT_OK(dock->SetVersion(2));
  EXPECT_STATUS(dock->Reserve(Rows(2, -1)), absl::StatusCode::kInvalidArgument,
                "version -1 is negative");
  EXPECT_STATUS(dock->Reserve(Rows(2, 3)), absl::StatusCode::kFailedPrecondition,
                "version 3 is newer than the dock's version 2");
  EXPECT_STATUS(dock->Reserve(Rows(0)), absl::StatusCode::kInvalidArgument,
                "asks for 0 rows and 0 group sizes");
  EXPECT_STATUS(dock->Reserve(Rows(9)), absl::StatusCode::kInvalidArgument,
                "reservation of 9 rows (5 groups) is over a step's capacity of 8 rows");
  ReserveInput sizes = Rows(0);
  sizes.group_sizes = {3};
  EXPECT_STATUS(dock->Reserve(sizes), absl::StatusCode::kInvalidArgument,
                "group size 3 is out of range [1, 2]");
  ReserveInput no_deadline = Rows(2);
  no_deadline.deadline = absl::ZeroDuration();
  EXPECT_STATUS(dock->Reserve(no_deadline), absl::StatusCode::kInvalidArgument,
                "deadline 0 is out of range (0, 24h]");
  const DockStats stats = dock->Stats();
  EXPECT_TRUE(stats.steps.empty());
  EXPECT_EQ(stats.reservations_live, 0);
}

}  // namespace
}  // namespace tdock
