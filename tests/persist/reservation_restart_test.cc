// Reservations with a journal. A reservation is stored before it is
// answered, with its rows' version and the rows its declared groups leave
// unused: at every crash point the recovered dock has it whole or not at
// all, and once it was answered it is there. Recovered, its rows stay the
// producer's (appends skip them, a Put naming it writes them) until its
// deadline, which counts from the original grant; rows not written by then
// are dropped as expired, and so are rows whose write was being stored at
// the deadline if that write is not stored.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock (n = 2, 8 rows a step) with room for 8 groups a step.
DockSpec RoomySpec() {
  DockSpec spec = CrashSpec();
  spec.max_rows_per_step = 16;
  return spec;
}

ReserveInput Groups(std::vector<int32_t> sizes, int64_t version, absl::Duration deadline) {
  ReserveInput in;
  in.group_sizes = std::move(sizes);
  in.version = version;
  in.deadline = deadline;
  return in;
}

absl::Status WriteIds(Dock& dock, const Reservation& r, std::vector<int64_t> rows) {
  PutInput in;
  in.step = r.step;
  in.reservation = r.id;
  in.rows = rows;
  testing::OwnedColumn ids = ColumnOf("ids", 0, r.step, rows);
  in.columns.push_back(ids.View());
  return testing::PutSync(dock, std::move(in)).status();
}

// Starts a Put of `row`'s ids naming the reservation; its answer comes in
// the future.
std::future<absl::Status> StartWrite(Dock& dock, const Reservation& r, int64_t row) {
  auto answer = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = answer->get_future();
  PutInput in;
  in.step = r.step;
  in.reservation = r.id;
  in.rows = {row};
  testing::OwnedColumn ids = ColumnOf("ids", 0, r.step, {row});
  in.columns.push_back(ids.View());
  dock.Put(std::move(in), [answer](absl::StatusOr<PutResult> put) {
    answer->set_value(put.status());
  });
  return future;
}

// With the Put's record waiting in the (held) store, moves the clock past
// the reservation's deadline (an hour) and waits for the expiry.
void PassDeadlineWhileWriting(Recording& recording, ManualClock& clock) {
  ASSERT_TRUE(recording.store->AwaitWaiting(1)) << "the write is not waiting in the store";
  clock.Advance(absl::Hours(1) + absl::Seconds(1));
  for (int i = 0; i < 6000 && recording.dock->Stats().reservations_live > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(recording.dock->Stats().reservations_live, 0) << "the reservation expired";
}

TEST(ReservationRestart, AReservationIsWholeOrAbsentAtEveryCrashPoint) {
  Recording recording(RoomySpec());
  ASSERT_OK(recording.dock->SetVersion(4));
  const int64_t before = recording.store->writes();
  ASSERT_OK_AND_ASSIGN(Reservation reserved,
                       recording.dock->Reserve(Groups({2, 1}, 3, absl::Hours(1))));
  ASSERT_EQ(reserved.rows, (std::vector<int64_t>{0, 1, 2}));
  const int64_t answered = recording.store->writes();
  recording.Stop();
  int found = 0;
  for (int64_t k = before; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(*recording.store, k);
    Dock& dock = *restarted.dock;
    absl::StatusOr<RowListing> listing = dock.ListRows(0);
    if (!listing.ok()) {
      EXPECT_LT(k, answered) << "an answered reservation is stored";
      EXPECT_EQ(dock.Stats().reservations_live, 0);
      continue;
    }
    ++found;
    EXPECT_EQ(listing->rows[0].version, 3);
    EXPECT_EQ(listing->rows[2].version, 3);
    EXPECT_EQ(listing->rows[3].dropped, DropReason::kUnused) << "with the reservation";
    EXPECT_EQ(dock.Stats().reservations_live, 1);
    // Appends skip its rows; a Put naming it writes them.
    PutInput append;
    append.step = 0;
    append.new_rows = 2;
    testing::OwnedColumn ids = ColumnOf("ids", 0, 0, {0, 0});
    append.columns.push_back(ids.View());
    ASSERT_OK_AND_ASSIGN(PutResult appended, testing::PutSync(dock, std::move(append)));
    EXPECT_EQ(appended.assigned, (std::vector<int64_t>{4, 5}));
    EXPECT_OK(WriteIds(dock, reserved, {0, 1, 2}));
  }
  EXPECT_GT(found, 0);
}

// A reservation whose record fails takes nothing: its rows go to the next
// reservation (or append), not left behind the step's append cursor.
TEST(ReservationRestart, AReservationNotStoredLeavesItsRowsFree) {
  Recording recording(RoomySpec());
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(recording.dock->Reserve(Groups({2, 2}, 0, absl::Hours(1))),
                absl::StatusCode::kUnavailable, "reservation not stored");
  ASSERT_OK_AND_ASSIGN(Reservation again,
                       recording.dock->Reserve(Groups({2, 2}, 0, absl::Hours(1))));
  EXPECT_EQ(again.step, 0);
  EXPECT_EQ(again.rows, (std::vector<int64_t>{0, 1, 2, 3}));
}

// Both servers run on manual clocks: the restarted one keeps the
// reservation (an hour's deadline) and expires its rows not written once its
// clock passes the deadline.
TEST(ReservationRestart, TheDeadlineOutlivesARestart) {
  Recording recording(RoomySpec(), std::make_shared<ManualClock>());
  ASSERT_OK_AND_ASSIGN(Reservation reserved,
                       recording.dock->Reserve(Groups({2, 2}, 0, absl::Hours(1))));
  ASSERT_OK(WriteIds(*recording.dock, reserved, {0, 1}));
  recording.Stop();
  auto clock = std::make_shared<ManualClock>();
  Restarted restarted(*recording.store, recording.store->writes(), clock);
  clock->Advance(absl::Minutes(50));
  EXPECT_EQ(restarted.dock->Stats().reservations_live, 1) << "expired before its deadline";
  clock->Advance(absl::Minutes(11));
  bool expired = false;
  for (int i = 0; i < 6000 && !expired; ++i) {
    expired = restarted.dock->Stats().rows_dropped_total[static_cast<int>(DropReason::kExpired)] == 2;
    if (!expired) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(expired) << "rows 2 and 3 were not written by the deadline";
  ASSERT_OK_AND_ASSIGN(RowListing listing, restarted.dock->ListRows(0));
  EXPECT_EQ(listing.rows[1].dropped, DropReason::kUnspecified);
  EXPECT_EQ(listing.rows[2].dropped, DropReason::kExpired);
  EXPECT_STATUS(WriteIds(*restarted.dock, reserved, {3}), absl::StatusCode::kFailedPrecondition,
                absl::StrCat("reservation ", reserved.id, " expired at"));
}

// A row being written when its reservation expires is left to its write;
// when the write's record fails, the row is dropped as expired then, so it
// does not hold the step (no append can take it: the cursor is past it).
TEST(ReservationRestart, ARowWhoseWriteFailsAfterItsReservationExpiredIsDropped) {
  auto clock = std::make_shared<ManualClock>();
  Recording recording(RoomySpec(), clock);
  ASSERT_OK_AND_ASSIGN(Reservation reserved,
                       recording.dock->Reserve(Groups({2}, 0, absl::Hours(1))));
  ASSERT_EQ(reserved.rows, (std::vector<int64_t>{0, 1}));
  recording.store->Hold(true);
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  std::future<absl::Status> put = StartWrite(*recording.dock, reserved, 0);
  // The deadline passes while the write waits in the store.
  PassDeadlineWhileWriting(recording, *clock);
  auto expired_rows = [&] {
    return recording.dock->Stats().rows_dropped_total[static_cast<int>(DropReason::kExpired)];
  };
  recording.store->Hold(false);
  EXPECT_STATUS(put.get(), absl::StatusCode::kUnavailable, "not stored");
  for (int i = 0; i < 600 && expired_rows() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(expired_rows(), 2) << "row 1 at the deadline, row 0 once its write failed";
  absl::StatusOr<Batch> read = recording.dock->Read(0, {0}, {"ids"});
  EXPECT_STATUS(read, absl::StatusCode::kFailedPrecondition, "row 0 was dropped (expired)");
}

// The same race at every crash point, with the write stored and with it
// failing: after recovery (the deadline long past) each reserved row is
// written or dropped as expired, never left with neither, and a row whose
// write was answered OK is written.
TEST(ReservationRestart, ExpiryOverAWriteInFlightAtEveryCrashPoint) {
  for (const bool fails : {false, true}) {
    SCOPED_TRACE(fails ? "the write fails" : "the write is stored");
    auto clock = std::make_shared<ManualClock>();
    Recording recording(RoomySpec(), clock);
    const int64_t before = recording.store->writes();
    ASSERT_OK_AND_ASSIGN(Reservation reserved,
                         recording.dock->Reserve(Groups({2}, 0, absl::Hours(1))));
    recording.store->Hold(true);
    if (fails) recording.store->FailNext(1, absl::UnavailableError("disk full"));
    std::future<absl::Status> put = StartWrite(*recording.dock, reserved, 0);
    PassDeadlineWhileWriting(recording, *clock);
    recording.store->Hold(false);
    const absl::Status written = put.get();
    EXPECT_EQ(written.ok(), !fails) << written;
    // Row 1 at the deadline, row 0 with its failed write: both recorded.
    auto expired_rows = [](Dock& dock) {
      return dock.Stats().rows_dropped_total[static_cast<int>(DropReason::kExpired)];
    };
    const int64_t want = fails ? 2 : 1;
    for (int i = 0; i < 600 && expired_rows(*recording.dock) < want; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(expired_rows(*recording.dock), want);
    recording.Stop();

    bool written_before = false;
    for (int64_t k = before + 1; k <= recording.store->writes(); ++k) {
      SCOPED_TRACE(absl::StrCat("crash point ", k));
      auto later = std::make_shared<ManualClock>();
      Restarted restarted(*recording.store, k, later);
      Dock& dock = *restarted.dock;
      // Past its deadline, a recovered reservation expires.
      later->Advance(absl::Hours(2));
      for (int i = 0; i < 600 && dock.Stats().reservations_live > 0; ++i) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      ASSERT_EQ(dock.Stats().reservations_live, 0);
      bool settled = false;
      for (int i = 0; i < 600 && !settled; ++i) {
        ASSERT_OK_AND_ASSIGN(RowListing listing, dock.ListRows(0));
        settled = true;
        for (int64_t row : reserved.rows) {
          const RowState& state = listing.rows[row];
          const bool has_ids = !state.written.empty();
          if (!has_ids && state.dropped != DropReason::kExpired) settled = false;
          if (has_ids) {
            EXPECT_EQ(state.dropped, DropReason::kUnspecified) << "row " << row;
          }
        }
        if (!settled) absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_TRUE(settled) << "a reserved row is neither written nor dropped as expired";
      ASSERT_OK_AND_ASSIGN(RowListing listing, dock.ListRows(0));
      if (fails) {
        EXPECT_TRUE(listing.rows[0].written.empty()) << "a write that failed is there";
      } else {
        // Once its record is in the journal the write is there at every
        // later crash point, the last included.
        const bool written_here = !listing.rows[0].written.empty();
        EXPECT_TRUE(written_here || !written_before) << "a stored write is lost";
        written_before |= written_here;
        if (k == recording.store->writes()) {
          EXPECT_TRUE(written_here) << "a write answered OK is lost";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tdock::persist::crash
