// Drops and seals across restarts. seal_when: the seal the dock decides by
// itself, and the surplus it drops, are recorded before they take effect: at
// every crash point the recovered step is either not sealed with nothing
// dropped, or sealed with exactly the surplus dropped; a seal whose record
// failed is decided again by the next Put. Balanced rounds: a round that was
// never recorded (its shares were dropped whole before they were fetched)
// does not cost the rounds after it their records. A Seal being recorded
// closes the rows it drops to Puts. A Seal decided while a row's first
// write is being recorded keeps the row (a rewritable column's too); if
// that record fails, or a crash loses it, the row is dropped as sealed, so
// the sealed step is not held by a row that can no longer come.
#include <algorithm>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock, sealed once "groups" (whole groups of score) has 2
// complete groups.
DockSpec SealingSpec() {
  DockSpec spec = CrashSpec();
  spec.seal_when = SealWhen{"groups", 2};
  return spec;
}

void WriteScores(Dock& dock, const std::vector<int64_t>& rows) {
  ASSERT_OK(testing::PutSync(dock, 0, rows, {ColumnOf("score", 0, 0, rows)}));
}

// The seal is decided after the Put that completes the target was
// answered, on the journal's completion thread: waits for `done()`.
template <typename Done>
bool Await(Done done) {
  for (int i = 0; i < 2000 && !done(); ++i) absl::SleepFor(absl::Milliseconds(1));
  return done();
}

// Rows of step 0 that read as dropped as surplus.
std::vector<int64_t> Surplus(Dock& dock) {
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < kRows; ++row) {
    absl::StatusOr<Batch> read = dock.Read(0, {row}, {"ids"});
    if (!read.ok() && read.status().message().find("dropped (surplus)") != std::string::npos) {
      rows.push_back(row);
    }
  }
  return rows;
}

TEST(SealRestart, TheSealAndItsSurplusAreWholeAtEveryCrashPoint) {
  Recording recording(SealingSpec());
  RecordingStore* store = recording.store;
  WriteIds(*recording.dock, 0);
  WriteScores(*recording.dock, {0, 1});
  const int64_t before_seal = store->writes();
  WriteScores(*recording.dock, {6, 7});  // the second complete group: sealed
  ASSERT_TRUE(Await([&] { return recording.dock->Stats().steps.at(0).sealed; }));
  DockStats stats;
  ASSERT_EQ(Surplus(*recording.dock), (std::vector<int64_t>{2, 3, 4, 5}));
  recording.Stop();
  const int64_t writes = store->writes();
  ASSERT_GT(writes, before_seal + 1) << "the scores and the seal are separate writes";
  int sealed = 0;
  for (int64_t k = before_seal; k <= writes; ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> dock = *registry.Find("crash");
    stats = dock->Stats();
    ASSERT_EQ(stats.steps.size(), 1u);
    if (stats.steps[0].sealed) {
      ++sealed;
      EXPECT_EQ(Surplus(*dock), (std::vector<int64_t>{2, 3, 4, 5}));
    } else {
      EXPECT_TRUE(Surplus(*dock).empty());
    }
    registry.Shutdown();
  }
  EXPECT_GT(sealed, 0);
}

TEST(SealRestart, ASealWhoseRecordFailedIsDecidedAgain) {
  Recording recording(SealingSpec());
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  WriteScores(*dock, {0, 1});
  // The scores' write succeeds, the seal's after it fails.
  recording.store->FailNext(1, absl::UnavailableError("disk full"), /*after=*/1);
  WriteScores(*dock, {6, 7});
  ASSERT_TRUE(Await([&] { return recording.store->failed() == 1; }));
  recording.store->FailNext(0, absl::OkStatus());
  ASSERT_OK(recording.persistence->journal().Flush());
  EXPECT_FALSE(dock->Stats().steps.at(0).sealed);
  EXPECT_TRUE(Surplus(*dock).empty());
  WriteScores(*dock, {4});  // a Put: the dock decides again
  ASSERT_TRUE(Await([&] { return dock->Stats().steps.at(0).sealed; }));
  // Row 4 was written, but its group (2) is not complete: surplus.
  EXPECT_EQ(Surplus(*dock), (std::vector<int64_t>{2, 3, 4, 5}));
}

// Round 0 of "bal" (dp 2, one row per rank) is formed but its first
// delivery is not stored, then both its rows are dropped: each rank passes
// it over and takes its share of round 1, which is recorded (round 0 never
// is) and acknowledged. After a restart round 1 is still taken: its rows are
// not handed out again.
TEST(DropRestart, ARoundNeverRecordedKeepsTheNextRoundsRecords) {
  Recording recording;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_OK(testing::PutSync(*dock, 0, rows, {ColumnOf("score", 0, 0, rows)}));
  GetInput rank0 = testing::GetOf("bal");
  GetInput rank1 = testing::GetOf("bal");
  rank1.rank = 1;
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(testing::GetSync(*dock, rank0), absl::StatusCode::kUnavailable, "not stored");
  recording.store->FailNext(0, absl::OkStatus());
  ASSERT_OK(dock->Drop(DropInput{0, {0, 1}, {}, DropReason::kFiltered}));
  std::vector<int64_t> taken;
  for (const GetInput& in : {rank0, rank1}) {
    ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*dock, in));
    EXPECT_EQ(batch.round, 1);
    ASSERT_EQ(batch.rows.size(), 1u);
    taken.push_back(batch.rows[0]);
    ASSERT_OK(dock->Ack("bal", batch.lease_id));
  }
  std::sort(taken.begin(), taken.end());
  ASSERT_EQ(taken, (std::vector<int64_t>{2, 3}));
  recording.Stop();

  Restarted restarted(*recording.store);
  std::vector<int64_t> again;
  for (GetInput in : {rank0, rank1}) {
    in.step = 0;
    for (int i = 0; i < 8; ++i) {
      ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*restarted.dock, in));
      again.insert(again.end(), batch.rows.begin(), batch.rows.end());
      if (batch.lease_id != 0) ASSERT_OK(restarted.dock->Ack("bal", batch.lease_id));
      if (batch.end_of_step || batch.rows.empty()) break;
    }
  }
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, (std::vector<int64_t>{4, 5, 6, 7}));
}

// While a Seal's record is being stored, a Put of a row it drops (unwritten
// when it was decided) is refused: an acknowledged write is never dropped
// as unwritten.
TEST(SealRestart, APutRacingASealIsRefusedNotDropped) {
  Recording recording;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  WriteScores(*dock, {0, 1, 2, 3});
  recording.store->Hold(true);
  std::promise<absl::StatusOr<int64_t>> sealed;
  dock->Seal(SealInput{0, {"score"}},
             [&](absl::StatusOr<int64_t> rows) { sealed.set_value(std::move(rows)); });
  ASSERT_TRUE(Await([&] { return recording.store->waiting() > 0; }));
  PutInput in;
  in.step = 0;
  in.rows = {4};
  const testing::OwnedColumn score = ColumnOf("score", 0, 0, {4});
  in.columns.push_back(score.View());
  std::promise<absl::Status> put;
  dock->Put(std::move(in), [&](absl::StatusOr<PutResult> r) { put.set_value(r.status()); });
  recording.store->Hold(false);
  EXPECT_STATUS(put.get_future().get(), absl::StatusCode::kFailedPrecondition,
                "step 0 is being sealed: row 4, not written when the seal was decided, is "
                "dropped with it");
  ASSERT_OK_AND_ASSIGN(int64_t dropped, sealed.get_future().get());
  EXPECT_EQ(dropped, 4);
  EXPECT_STATUS(testing::PutSync(*dock, 0, {4}, {ColumnOf("score", 0, 0, {4})}),
                absl::StatusCode::kFailedPrecondition, "row 4 was dropped (sealed)");
}

// Step 0 with ids in rows 0-3; row 4's first write (`column`) is held in
// the store (and fails there if `fail`) while a default Seal is decided;
// returns the Put's and the Seal's answers.
struct RacedSeal {
  absl::Status put;
  absl::StatusOr<int64_t> sealed;
  int64_t before = 0;  // the store's writes before row 4's
};
RacedSeal SealWhileAWriteIsRecorded(Recording& recording, const std::string& column, bool fail) {
  Dock& dock = *recording.dock;
  const std::vector<int64_t> first = {0, 1, 2, 3};
  EXPECT_OK(testing::PutSync(dock, 0, first, {ColumnOf("ids", 0, 0, first)}));
  EXPECT_OK(recording.persistence->journal().Flush());
  const int64_t before = recording.store->writes();
  recording.store->Hold(true);
  if (fail) recording.store->FailNext(1, absl::UnavailableError("disk full"));
  PutInput in;
  in.step = 0;
  in.rows = {4};
  const testing::OwnedColumn cell = ColumnOf(column, 0, 0, {4}, /*note=*/7);
  in.columns.push_back(cell.View());
  std::promise<absl::Status> put;
  dock.Put(std::move(in), [&](absl::StatusOr<PutResult> r) { put.set_value(r.status()); });
  EXPECT_TRUE(Await([&] { return recording.store->waiting() > 0; }));
  std::promise<absl::StatusOr<int64_t>> sealed;
  dock.Seal(SealInput{0, {}},
            [&](absl::StatusOr<int64_t> rows) { sealed.set_value(std::move(rows)); });
  recording.store->Hold(false);
  return {put.get_future().get(), sealed.get_future().get(), before};
}

std::string ReadError(Dock& dock, int64_t row, const std::string& column) {
  absl::StatusOr<Batch> read = dock.Read(0, {row}, {column});
  return read.ok() ? "" : std::string(read.status().message());
}

// The first write of a rewritable column is staged like any first write:
// the Seal sees the row written and keeps it, so the acknowledged write is
// never dropped as sealed.
TEST(SealRestart, ASealKeepsARowWhoseRewritableFirstWriteIsBeingRecorded) {
  Recording recording;
  const RacedSeal raced = SealWhileAWriteIsRecorded(recording, "note", /*fail=*/false);
  ASSERT_OK(raced.put);
  ASSERT_OK_AND_ASSIGN(int64_t dropped, raced.sealed);
  EXPECT_EQ(dropped, 3) << "rows 5-7; row 4 was being written";
  EXPECT_EQ(ReadError(*recording.dock, 4, "note"), "");
  recording.Stop();
  Persistence persistence(recording.store->Replay(recording.store->writes()),
                          {.data_dir = "replayed"});
  DockRegistry registry;
  ASSERT_OK(persistence.Recover(registry).status());
  EXPECT_EQ(ReadError(**registry.Find("crash"), 4, "note"), "") << "after a restart";
  registry.Shutdown();
}

// The write the Seal kept is not stored: its row has nothing and can no
// longer come, so it is dropped as sealed (recorded) and the step ends for
// its consumers. At the crash point between the Seal's record and that
// drop's (the write lost, the seal stored), recovery drops it the same way.
TEST(SealRestart, ARowASealKeptForAWriteThatFailedIsDroppedAsSealed) {
  Recording recording;
  const RacedSeal raced = SealWhileAWriteIsRecorded(recording, "ids", /*fail=*/true);
  EXPECT_STATUS(raced.put, absl::StatusCode::kUnavailable, "not stored");
  ASSERT_OK_AND_ASSIGN(int64_t dropped, raced.sealed);
  EXPECT_EQ(dropped, 3);
  ASSERT_TRUE(Await([&] {
    return ReadError(*recording.dock, 4, "ids").find("dropped (sealed)") != std::string::npos;
  })) << ReadError(*recording.dock, 4, "ids");
  ASSERT_OK(recording.persistence->journal().Flush());
  const int64_t writes = recording.store->writes();  // the orphan's drop is the last
  GetInput all;
  all.consumer = "reader";
  all.step = 0;
  all.count = kRows;
  ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*recording.dock, all));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(batch.end_of_step) << "row 4 no longer holds the step";
  recording.Stop();
  int sealed = 0;
  for (int64_t k = raced.before; k <= writes; ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k, " of ", writes));
    Persistence persistence(recording.store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> dock = *registry.Find("crash");
    const DockStats stats = dock->Stats();
    ASSERT_EQ(stats.steps.size(), 1u);
    if (stats.steps[0].sealed) {
      ++sealed;
      EXPECT_TRUE(Await([&] {
        return ReadError(*dock, 4, "ids").find("dropped (sealed)") != std::string::npos;
      })) << ReadError(*dock, 4, "ids");
    }
    registry.Shutdown();
  }
  EXPECT_GE(sealed, 2) << "the crash points after the seal's record and after the drop's";
}

// A DeleteDock whose record fails deletes nothing: the dock is found, still
// records (its journal is open again), and is there after a restart with
// what it recorded since.
TEST(DeleteRestart, ADeletionNotStoredLeavesTheDockAsItWas) {
  Recording recording;
  WriteIds(*recording.dock, 0);
  ASSERT_OK(recording.persistence->journal().Flush());
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(recording.registry.Delete("crash"), absl::StatusCode::kUnavailable,
                "dock 'crash': deletion not stored");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, recording.registry.Find("crash"));
  ASSERT_OK(dock->Drop(DropInput{0, {3}, {}, DropReason::kFiltered}));
  recording.Stop();
  Persistence persistence(recording.store->Replay(recording.store->writes()),
                          {.data_dir = "replayed"});
  DockRegistry registry;
  ASSERT_OK(persistence.Recover(registry).status());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> again, registry.Find("crash"));
  EXPECT_EQ(ReadError(*again, 2, "ids"), "");
  EXPECT_NE(ReadError(*again, 3, "ids").find("dropped (filtered)"), std::string::npos)
      << ReadError(*again, 3, "ids");
  registry.Shutdown();
}

}  // namespace
}  // namespace tdock::persist::crash
