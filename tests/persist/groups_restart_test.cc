// Groups of any size with a journal. An append's declared groups and the
// rows they leave unused are stored in one record: at every crash point both
// or neither are there. While that record is being stored the unused rows
// take no Put. Appends, Puts by row and Seals racing each other (also under
// ThreadSanitizer): no acknowledged write is ever dropped, and a restart
// finds every row as it was, dropped for the same reason.
#include <atomic>
#include <future>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock (n = 2) with room for 8 groups a step.
DockSpec AppendSpec() {
  DockSpec spec = CrashSpec();
  spec.max_rows_per_step = 16;
  return spec;
}

// Appends groups of `sizes` to `step` with their ids.
absl::StatusOr<PutResult> AppendGroups(Dock& dock, int64_t step, std::vector<int32_t> sizes) {
  PutInput in;
  in.step = step;
  for (int32_t size : sizes) in.new_rows += size;
  in.group_sizes = std::move(sizes);
  testing::OwnedColumn ids = ColumnOf("ids", 0, step, std::vector<int64_t>(in.new_rows, 0));
  in.columns.push_back(ids.View());
  return testing::PutSync(dock, std::move(in));
}

// An append declaring groups {1, 2, 1}: at every crash point its cells and
// the rows its groups leave unused are both there or neither; once stored,
// the groups are not assigned again after a restart.
TEST(GroupRestart, DeclaredGroupsAreWholeAtEveryCrashPoint) {
  Recording recording(AppendSpec());
  const int64_t before = recording.store->writes();
  ASSERT_OK_AND_ASSIGN(PutResult first, AppendGroups(*recording.dock, 0, {1, 2, 1}));
  ASSERT_EQ(first.assigned, (std::vector<int64_t>{0, 2, 3, 4}));
  recording.Stop();
  int stored = 0;
  for (int64_t k = before; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(recording.store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> dock = *registry.Find("crash");
    absl::StatusOr<RowListing> listing = dock->ListRows(0);
    if (!listing.ok()) {
      EXPECT_EQ(listing.status().code(), absl::StatusCode::kFailedPrecondition) << "not started";
      registry.Shutdown();
      continue;
    }
    ++stored;
    for (const RowState& row : listing->rows) {
      const bool used = row.row == 0 || (row.row >= 2 && row.row <= 4);
      const bool unused = row.row == 1 || row.row == 5;
      EXPECT_EQ(!row.written.empty(), used) << "row " << row.row;
      EXPECT_EQ(row.dropped == DropReason::kUnused, unused) << "row " << row.row;
    }
    registry.Shutdown();
  }
  EXPECT_GT(stored, 0);
  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(PutResult next, AppendGroups(*restarted.dock, 0, {2}));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{6, 7})) << "groups 0 to 2 are taken";
  EXPECT_STATUS(testing::PutSync(*restarted.dock, 0, {5}, {ColumnOf("ids", 0, 0, {5})}),
                absl::StatusCode::kFailedPrecondition, "a group larger than declared");
}


// While an append declaring a group of 1 is being stored, a Put naming the
// group's other row is refused: it would be acknowledged and then dropped
// as unused.
TEST(GroupRestart, AnUnusedRowTakesNoPutWhileItsAppendIsStored) {
  Recording recording(AppendSpec());
  ASSERT_OK(AppendGroups(*recording.dock, 0, {2}));  // the step is live
  recording.store->Hold(true);
  std::future<absl::StatusOr<PutResult>> append =
      std::async(std::launch::async, [&] { return AppendGroups(*recording.dock, 0, {1}); });
  for (int i = 0; i < 2000 && recording.store->waiting() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GT(recording.store->waiting(), 0);
  EXPECT_STATUS(testing::PutSync(*recording.dock, 0, {3}, {ColumnOf("ids", 0, 0, {3})}),
                absl::StatusCode::kFailedPrecondition,
                "row 3 is past the size declared for its group 1 by an append being stored: a "
                "group larger than declared");
  recording.store->Hold(false);
  ASSERT_OK_AND_ASSIGN(PutResult put, append.get());
  EXPECT_EQ(put.assigned, std::vector<int64_t>{2});
  EXPECT_STATUS(testing::PutSync(*recording.dock, 0, {3}, {ColumnOf("ids", 0, 0, {3})}),
                absl::StatusCode::kFailedPrecondition, "a group larger than declared");
}

// The rows of step `step` that read back, and the drop reason of the others
// ("" for a row never written).
std::map<int64_t, std::string> RowsOf(Dock& dock, int64_t step) {
  std::map<int64_t, std::string> rows;
  absl::StatusOr<RowListing> listing = dock.ListRows(step);
  if (!listing.ok()) return rows;
  for (const RowState& row : listing->rows) {
    if (row.dropped != DropReason::kUnspecified) {
      rows[row.row] = std::string(DropReasonName(row.dropped));
    } else if (!row.written.empty()) {
      rows[row.row] = "written";
    }
  }
  return rows;
}

// Two producers append groups of 1 or 2 rows, a writer names random rows,
// a sealer seals each step part-way. Every acknowledged write's rows read
// back, none dropped; after a restart every row is as it was.
//
// So that every kind of row is there however the threads are scheduled, a
// step is sealed once 8 appends (one of a single row) are acknowledged in
// it, each producer appends at most 24 groups to a step (and waits for its
// seal), and the writer names rows below 384 only: groups 192 and up can
// only be appended to, and 48 appends cannot reach all of them.
TEST(GroupRestart, AppendsPutsAndSealsRacingDropNoAcknowledgedWrite) {
  constexpr int kGroupsPerProducer = 24;
  DockSpec spec = AppendSpec();
  spec.max_rows_per_step = 512;
  Recording recording(spec);
  Dock& dock = *recording.dock;
  tdock::Mutex mu;
  std::vector<std::pair<int64_t, int64_t>> acked;  // (step, row)
  auto record = [&](int64_t step, const std::vector<int64_t>& rows) {
    tdock::MutexLock lock(&mu);
    for (int64_t row : rows) acked.emplace_back(step, row);
  };
  std::atomic<int> appended[2] = {0, 0};
  std::atomic<int> single[2] = {0, 0};       // appends of one row
  std::atomic<int> producers_done[2] = {0, 0};
  std::atomic<bool> sealed[2] = {false, false};
  auto produce = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    for (int64_t step = 0; step < 2; ++step) {
      for (int i = 0; i < kGroupsPerProducer; ++i) {
        const int32_t size = 1 + static_cast<int32_t>(rng() % 2);
        absl::StatusOr<PutResult> put = AppendGroups(dock, step, {size});
        if (!put.ok()) {
          EXPECT_TRUE(absl::IsResourceExhausted(put.status()) ||
                      absl::IsFailedPrecondition(put.status()))
              << put.status();
          break;  // sealed
        }
        record(step, put->assigned);
        if (size == 1) ++single[step];
        ++appended[step];
      }
      ++producers_done[step];
      while (!sealed[step]) absl::SleepFor(absl::Milliseconds(1));
    }
  };
  auto write_rows = [&] {
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
      const int64_t step = rng() % 2, row = rng() % 384;
      absl::StatusOr<PutResult> put =
          testing::PutSync(dock, step, {row}, {ColumnOf("ids", 0, step, {row})});
      if (put.ok()) {
        record(step, {row});
      } else {
        // Written, dropped, closed, assigned to an append, sealed, or the
        // step not started.
        EXPECT_TRUE(absl::IsAlreadyExists(put.status()) ||
                    absl::IsFailedPrecondition(put.status()) ||
                    absl::IsResourceExhausted(put.status()))
            << put.status();
      }
    }
  };
  auto seal = [&] {
    for (int64_t step = 0; step < 2; ++step) {
      while (!(appended[step] >= 8 && single[step] >= 1) && producers_done[step] < 2) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      EXPECT_OK(dock.Seal(SealInput{step, {}}).status());
      sealed[step] = true;
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(produce, 1);
  threads.emplace_back(produce, 2);
  threads.emplace_back(write_rows);
  threads.emplace_back(seal);
  for (std::thread& t : threads) t.join();
  ASSERT_OK(recording.persistence->journal().Flush());

  std::map<int64_t, std::map<int64_t, std::string>> live;
  for (int64_t step : {0, 1}) live[step] = RowsOf(dock, step);
  std::map<std::string, int> states;  // the race happened: rows of every kind
  for (const auto& [step, rows] : live) {
    for (const auto& [row, state] : rows) ++states[state];
  }
  EXPECT_GT(states["written"], 0);
  EXPECT_GT(states["unused"], 0);
  EXPECT_GT(states["sealed"], 0);
  for (const auto& [step, row] : acked) {
    EXPECT_EQ(live[step][row], "written") << "step " << step << " row " << row;
  }
  recording.Stop();
  Restarted restarted(*recording.store);
  for (int64_t step : {0, 1}) {
    EXPECT_EQ(RowsOf(*restarted.dock, step), live[step]) << "step " << step;
  }
}

}  // namespace
}  // namespace tdock::persist::crash
