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

// seal_when.carry: step 0 has 3 groups complete for "groups" (rows 0-5
// scored) and seals at 2, carrying group 2 (rows 4 and 5, which "reader"
// took) into step 1. At every crash point the carried rows are in exactly
// one place after recovery: not sealed, nothing dropped and step 1 empty; or
// sealed, rows 4 and 5 dropped as carried and, once recovery has written
// what was owed, in step 1 as its rows 0 and 1, once, with their cells, done
// for "reader" there and whole for "groups".
TEST(SealRestart, ACarryIsWrittenOnceAtEveryCrashPoint) {
  DockSpec spec = CrashSpec();
  spec.seal_when = SealWhen{"groups", 2, /*carry=*/true};
  Recording recording(spec);
  RecordingStore* store = recording.store;
  WriteIds(*recording.dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch read, testing::GetSync(*recording.dock, testing::GetOf("reader", 8)));
  ASSERT_EQ(read.rows.size(), 8u);
  const int64_t before_seal = store->writes();
  WriteScores(*recording.dock, {0, 1, 2, 3, 4, 5});
  ASSERT_TRUE(Await([&] { return recording.dock->Stats().steps.size() == 2; }));
  recording.Stop();
  const int64_t writes = store->writes();
  ASSERT_GE(writes, before_seal + 3) << "the scores, the seal and the carry are separate writes";
  int carried = 0;
  for (int64_t k = before_seal; k <= writes; ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(*store, k);
    Dock& dock = *restarted.dock;
    DockStats stats = dock.Stats();
    ASSERT_FALSE(stats.steps.empty());
    const StepStats& step0 = stats.steps[0];
    ASSERT_EQ(step0.step, 0);
    if (!step0.sealed) {
      EXPECT_EQ(stats.steps.size(), 1u);
      EXPECT_EQ(step0.dropped_rows[static_cast<int>(DropReason::kCarried)], 0);
      continue;
    }
    ++carried;
    EXPECT_EQ(step0.dropped_rows[static_cast<int>(DropReason::kCarried)], 2);
    EXPECT_EQ(step0.dropped_rows[static_cast<int>(DropReason::kSurplus)], 2);
    ASSERT_TRUE(Await([&] { return dock.Stats().steps.size() == 2; })) << "the carry is owed";
    ASSERT_OK_AND_ASSIGN(RowListing listing, dock.ListRows(1));
    int written = 0;
    for (const RowState& row : listing.rows) written += row.written.empty() ? 0 : 1;
    EXPECT_EQ(written, 2) << "the carried rows, once";
    ASSERT_OK_AND_ASSIGN(Batch moved, dock.Read(1, {0, 1}, {"ids", "score"}));
    EXPECT_EQ(testing::RowValues<int32_t>(moved.columns[0], 0), IdsOf(0, 0, 4));
    EXPECT_EQ(testing::RowValues<int32_t>(moved.columns[0], 1), IdsOf(0, 0, 5));
    EXPECT_EQ(testing::RowValues<float>(moved.columns[1], 1), std::vector<float>{ScoreOf(0, 0, 5)});
    GetInput reader = testing::GetOf("reader", 8);
    reader.step = 1;
    ASSERT_OK_AND_ASSIGN(Batch none, testing::GetSync(dock, reader));
    EXPECT_TRUE(none.rows.empty()) << "reader took the carried rows in step 0";
    GetInput groups = testing::GetOf("groups", 2);
    groups.step = 1;
    ASSERT_OK_AND_ASSIGN(Batch group, testing::GetSync(dock, groups));
    EXPECT_EQ(group.rows, (std::vector<int64_t>{0, 1}));
  }
  EXPECT_GT(carried, 0);
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

// Step 0 complete for "bal" (dp 2, one row per rank); round 0 is formed by
// rank 0's Get, whose record (the round's first delivery) fails.
void FormRoundZeroUnrecorded(Recording& recording) {
  Dock& dock = *recording.dock;
  WriteIds(dock, 0);
  const std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_OK(testing::PutSync(dock, 0, rows, {ColumnOf("score", 0, 0, rows)}));
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(testing::GetSync(dock, testing::GetOf("bal")), absl::StatusCode::kUnavailable,
                "not stored");
  recording.store->FailNext(0, absl::OkStatus());
}

GetInput BalRank(int32_t rank) {
  GetInput in = testing::GetOf("bal");
  in.rank = rank;
  return in;
}

// Round 0 of "bal" (dp 2, one row per rank) is formed but its first
// delivery is not stored, then both its rows are dropped: each rank asks
// for round 1 by number and takes its share, which is recorded (round 0
// never is) and acknowledged. After a restart round 1 is still taken: its
// rows are not handed out again.
TEST(DropRestart, ARoundNeverRecordedKeepsTheNextRoundsRecords) {
  Recording recording;
  Dock* dock = recording.dock.get();
  FormRoundZeroUnrecorded(recording);
  const GetInput rank0 = BalRank(0), rank1 = BalRank(1);
  ASSERT_OK(dock->Drop(DropInput{0, {0, 1}, {}, DropReason::kFiltered}));
  std::vector<int64_t> taken;
  for (GetInput in : {rank0, rank1}) {
    in.step = 0;
    in.round = 1;
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
      if (batch.end_of_step || (batch.rows.empty() && batch.round < 0)) break;
    }
  }
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, (std::vector<int64_t>{4, 5, 6, 7}));
}

// A rank's delivery of an empty share is recorded like any other: after a
// restart the rank goes on to its next round instead of taking the empty
// one again (a round more than its peers). Round 0 of "bal" takes rows 0
// and 1; rank 1's row of it is dropped; rank 1 takes round 0, empty.
TEST(DropRestart, AnEmptyShareTakenIsNotTakenAgainAfterARestart) {
  Recording recording;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  const std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_OK(testing::PutSync(*dock, 0, rows, {ColumnOf("score", 0, 0, rows)}));
  GetInput rank0 = BalRank(0), rank1 = BalRank(1);
  rank0.step = rank1.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch first, testing::GetSync(*dock, rank0));
  ASSERT_EQ(first.round, 0);
  ASSERT_EQ(first.rows.size(), 1u);
  ASSERT_OK(dock->Drop(DropInput{0, {1 - first.rows[0]}, {}, DropReason::kFiltered}));
  ASSERT_OK_AND_ASSIGN(Batch empty, testing::GetSync(*dock, rank1));
  ASSERT_EQ(empty.round, 0);
  ASSERT_TRUE(empty.rows.empty());
  recording.Stop();

  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(Batch next, testing::GetSync(*restarted.dock, rank1));
  EXPECT_EQ(next.round, 1) << "round 0 was taken before the restart";
  EXPECT_EQ(next.rows.size(), 1u);
}

// pad: repeat: a round's repeats are recorded with it. "pbal" (dp 2, 2 rows
// per rank) after row 7 is dropped: round 1 holds rows 4-6, one share filled
// with a repeat. Rank 0 takes both rounds; after a restart rank 1 asks for
// round 1 and gets its share as it was formed, the repeat marked.
TEST(DropRestart, ARoundsRepeatsAreRecordedWithIt) {
  DockSpec spec = CrashSpec();
  ConsumerSpec pbal{"pbal", {"ids"}, 2, 2, false, Policy::kBalanced, 0};
  pbal.pad = RoundPad::kRepeat;
  spec.consumers.push_back(pbal);
  Recording recording(spec);
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  ASSERT_OK(dock->Drop(DropInput{0, {7}, {}, DropReason::kFiltered}));
  GetInput rank0 = testing::GetOf("pbal");
  rank0.step = 0;
  GetInput rank1 = rank0;
  rank1.rank = 1;
  ASSERT_OK(testing::GetSync(*dock, rank0));
  ASSERT_OK_AND_ASSIGN(Batch mine, testing::GetSync(*dock, rank0));
  ASSERT_EQ(mine.round, 1);
  ASSERT_EQ(mine.rows.size(), 2u);
  rank1.round = 1;
  ASSERT_OK_AND_ASSIGN(Batch before, testing::GetSync(*dock, rank1));
  recording.Stop();

  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(Batch theirs, testing::GetSync(*restarted.dock, rank1));
  EXPECT_EQ(theirs.rows, before.rows);
  EXPECT_EQ(theirs.repeats, before.repeats);
  ASSERT_EQ(theirs.rows.size(), 2u);
  ASSERT_EQ(mine.repeats.size() + theirs.repeats.size(), 1u) << "one share was short by one row";
  std::vector<int64_t> real;
  for (const Batch* b : {&mine, &theirs}) {
    for (size_t i = 0; i < b->rows.size(); ++i) {
      if (b->repeats.empty() || b->repeats[0] != static_cast<int64_t>(i)) {
        real.push_back(b->rows[i]);
      }
    }
  }
  std::sort(real.begin(), real.end());
  EXPECT_EQ(real, (std::vector<int64_t>{4, 5, 6}));
}

// A round recorded as the step's last (its formation counted the step's
// final rows) while an earlier round never was: after a restart that
// earlier round's rows are unclaimed and go into a round formed again, so
// the recovered "last" round does not end the step before them. Round 0 of
// "bal" is formed, its first delivery's record fails and rank 0's row of
// it is dropped: rank 0 goes on to take rounds 1-3 (the third is
// the last, asking for each by number; its lease is in flight at the stop);
// rank 1 has taken nothing.
TEST(DropRestart, ARecoveredLastRoundDoesNotEndTheStepBeforeAnUnrecordedRoundsRows) {
  Recording recording;
  Dock* dock = recording.dock.get();
  FormRoundZeroUnrecorded(recording);
  const GetInput rank0 = BalRank(0), rank1 = BalRank(1);
  ASSERT_OK(dock->Drop(DropInput{0, {0}, {}, DropReason::kFiltered}));
  uint64_t in_flight = 0;
  for (int64_t round = 1; round <= 3; ++round) {
    GetInput in = rank0;
    in.step = 0;
    in.round = round;
    ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*dock, in));
    ASSERT_EQ(batch.round, round);
    ASSERT_EQ(batch.rows, (std::vector<int64_t>{2 * round}));
    EXPECT_EQ(batch.end_of_step, round == 3);
    if (round < 3) ASSERT_OK(dock->Ack("bal", batch.lease_id));
    in_flight = batch.lease_id;
  }
  recording.Stop();

  Restarted restarted(*recording.store);
  ASSERT_OK(restarted.dock->Nack("bal", in_flight));
  std::vector<int64_t> again;
  for (GetInput in : {rank1, rank0}) {
    in.step = 0;
    bool ended = false;
    for (int i = 0; i < 8 && !ended; ++i) {
      ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*restarted.dock, in));
      again.insert(again.end(), batch.rows.begin(), batch.rows.end());
      if (batch.lease_id != 0) ASSERT_OK(restarted.dock->Ack("bal", batch.lease_id));
      ended = batch.end_of_step;
    }
    EXPECT_TRUE(ended) << "rank " << in.rank;
  }
  std::sort(again.begin(), again.end());
  EXPECT_EQ(again, (std::vector<int64_t>{1, 3, 5, 6, 7}))
      << "rank 1's shares of rounds 1-3, rank 0's of round 3 again, and row 1";
}

// A BALANCED consumer of whole groups counts each group of a round at its
// full size, rows dropped before the round formed included (they are in no
// share). After a restart the recovered rounds count the same, so the
// consumer, having taken every round, is at the end of the step: row 1 of
// group 0 is dropped, then two rounds of two groups are taken.
TEST(DropRestart, RecoveredRoundsOfWholeGroupsCountTheirDroppedRows) {
  DockSpec spec = CrashSpec();
  ConsumerSpec gbal{"gbal", {"ids"}, 2, 2, /*whole_groups=*/true, Policy::kBalanced, 0};
  spec.consumers.push_back(gbal);
  Recording recording(spec);
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  ASSERT_OK(dock->Drop(DropInput{0, {1}, {}, DropReason::kFiltered}));
  GetInput rank0 = testing::GetOf("gbal");
  rank0.step = 0;
  GetInput rank1 = rank0;
  rank1.rank = 1;
  std::vector<int64_t> taken;
  for (int round = 0; round < 2; ++round) {
    for (const GetInput& in : {rank0, rank1}) {
      ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*dock, in));
      EXPECT_EQ(batch.round, round);
      taken.insert(taken.end(), batch.rows.begin(), batch.rows.end());
      EXPECT_EQ(batch.end_of_step, round == 1);
    }
  }
  std::sort(taken.begin(), taken.end());
  ASSERT_EQ(taken, (std::vector<int64_t>{0, 2, 3, 4, 5, 6, 7}));
  recording.Stop();

  Restarted restarted(*recording.store);
  for (const GetInput& in : {rank0, rank1}) {
    ASSERT_OK_AND_ASSIGN(Batch batch, testing::GetSync(*restarted.dock, in));
    EXPECT_TRUE(batch.rows.empty());
    EXPECT_TRUE(batch.end_of_step) << "rank " << in.rank << ": every round was taken";
  }
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

// Step 0 with ids in rows 0-3 (dropped as filtered if `drop_first`); row
// 4's first write (`column`) is held in the store (and fails there if
// `fail`) while a default Seal is decided; returns the Put's and the Seal's
// answers.
struct RacedSeal {
  absl::Status put;
  absl::StatusOr<int64_t> sealed;
  int64_t before = 0;  // the store's writes before row 4's
};
RacedSeal SealWhileAWriteIsRecorded(Recording& recording, const std::string& column, bool fail,
                                    bool drop_first = false) {
  Dock& dock = *recording.dock;
  const std::vector<int64_t> first = {0, 1, 2, 3};
  EXPECT_OK(testing::PutSync(dock, 0, first, {ColumnOf("ids", 0, 0, first)}));
  if (drop_first) EXPECT_OK(dock.Drop(DropInput{0, first, {}, DropReason::kFiltered}));
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

// When that drop ends the step (every other row is dropped too), the crash
// point between the Seal's record and the drop's leaves recovery two records
// to write, one after the other: the drop, then the step's release. Both are
// stored before Recover returns, so the server starts with the step released
// and nothing in flight (on a slow disk too).
TEST(SealRestart, RecoveryStoresTheReleaseTheOrphansDropLeadsTo) {
  Recording recording;
  const RacedSeal raced =
      SealWhileAWriteIsRecorded(recording, "ids", /*fail=*/true, /*drop_first=*/true);
  EXPECT_STATUS(raced.put, absl::StatusCode::kUnavailable, "not stored");
  ASSERT_OK_AND_ASSIGN(int64_t dropped, raced.sealed);
  EXPECT_EQ(dropped, 3);
  ASSERT_TRUE(Await([&] { return recording.dock->Stats().steps.empty(); }))
      << "the step ends once row 4 is dropped";
  recording.Stop();
  // The crash point just after the Seal's record: the second write after
  // the Put's (the Put's failed and is not in the log).
  const int64_t after_seal = raced.before + 1;
  auto replayed = std::make_unique<RecordingStore>(recording.store->Replay(after_seal));
  RecordingStore* disk = replayed.get();
  disk->SlowDown(absl::Milliseconds(20));
  Persistence persistence(std::move(replayed), {.data_dir = "replayed"});
  DockRegistry registry;
  ASSERT_OK(persistence.Recover(registry).status());
  // The epoch, the orphan's drop, the release.
  EXPECT_EQ(disk->writes(), 3) << "the records recovery led to are stored";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, registry.Find("crash"));
  EXPECT_TRUE(dock->Stats().steps.empty()) << "step 0 is released before serving";
  registry.Shutdown();
}

// A Seal whose record is stored while the step's release is being recorded
// takes effect (a release may fail and leave the step live): answered with
// the rows it dropped. Here the release's record fails, so the step stays,
// sealed, as it is after a restart.
TEST(SealRestart, ASealStoredWhileTheStepsReleaseIsRecordedTakesEffect) {
  Recording recording;
  Dock& dock = *recording.dock;
  const std::vector<int64_t> first = {0, 1, 2, 3};
  ASSERT_OK(testing::PutSync(dock, 0, first, {ColumnOf("ids", 0, 0, first)}));
  ASSERT_OK(recording.persistence->journal().Flush());
  recording.store->Hold(true);
  std::promise<absl::StatusOr<int64_t>> sealed;
  dock.Seal(SealInput{0, {}},
            [&](absl::StatusOr<int64_t> rows) { sealed.set_value(std::move(rows)); });
  ASSERT_TRUE(Await([&] { return recording.store->waiting() > 0; }));
  std::promise<absl::Status> released;
  dock.ReleaseStep(0, [&](absl::Status status) { released.set_value(std::move(status)); });
  // The Seal's write (held now) is stored, the release's fails.
  recording.store->FailNext(1, absl::UnavailableError("disk full"), /*after=*/1);
  recording.store->Hold(false);
  ASSERT_OK_AND_ASSIGN(int64_t dropped, sealed.get_future().get());
  EXPECT_EQ(dropped, 4) << "rows 4-7, which have no cell";
  EXPECT_STATUS(released.get_future().get(), absl::StatusCode::kUnavailable, "not stored");
  ASSERT_EQ(dock.Stats().steps.size(), 1u);
  EXPECT_TRUE(dock.Stats().steps[0].sealed);
  EXPECT_NE(ReadError(dock, 5, "ids").find("dropped (sealed)"), std::string::npos);
  recording.Stop();
  Restarted restarted(*recording.store);
  ASSERT_EQ(restarted.dock->Stats().steps.size(), 1u);
  EXPECT_TRUE(restarted.dock->Stats().steps[0].sealed) << "as before the restart";
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

// A Drop on a step that holds no cell yet (an append that started it waits
// for memory): at every crash point the step is either not started, or
// started with the row dropped.
TEST(DropRestart, ADropOnAStepWithoutCellsIsKeptAtEveryCrashPoint) {
  DockSpec spec = CrashSpec();
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 192 << 10;  // the oldest step's chunk and one more
  std::promise<absl::Status> answered;  // outlives the dock
  Recording recording(spec);
  ASSERT_OK(testing::PutSync(*recording.dock, 0, {0}, {ColumnOf("ids", 0, 0, {0})}));
  // Two rows of 80 KB for step 1: past the limit while step 0 is live.
  const testing::OwnedColumn large = testing::OwnedColumn::Of<int32_t>(
      "ids", DType::kInt32, {std::vector<int32_t>(20000, 1), std::vector<int32_t>(20000, 2)});
  PutInput append;
  append.step = 1;
  append.new_rows = 2;
  append.wait = absl::Hours(1);
  append.columns.push_back(large.View());
  recording.dock->Put(append, [&](absl::StatusOr<PutResult> put) {
    answered.set_value(put.status());
  });
  const int64_t before = recording.store->writes();
  ASSERT_OK_AND_ASSIGN(int64_t dropped,
                       recording.dock->Drop(DropInput{1, {6}, {}, DropReason::kFailed}));
  ASSERT_EQ(dropped, 1);
  recording.Stop();  // answers the waiting append
  EXPECT_STATUS(answered.get_future().get(), absl::StatusCode::kUnavailable, "");
  ASSERT_GT(recording.store->writes(), before);
  for (int64_t k = before; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(*recording.store, k);
    absl::StatusOr<RowListing> listing = restarted.dock->ListRows(1);
    if (k == before) {
      EXPECT_EQ(listing.status().code(), absl::StatusCode::kFailedPrecondition)
          << "nothing of step 1 was stored";
      continue;
    }
    ASSERT_OK(listing.status());
    ASSERT_EQ(listing->rows.size(), static_cast<size_t>(kRows));
    for (const RowState& row : listing->rows) {
      EXPECT_EQ(row.dropped, row.row == 6 ? DropReason::kFailed : DropReason::kUnspecified)
          << "row " << row.row;
    }
  }
}

}  // namespace
}  // namespace tdock::persist::crash
