// Drops and seals across restarts. seal_when: the seal the dock decides by
// itself, and the surplus it drops, are recorded before they take effect: at
// every crash point the recovered step is either not sealed with nothing
// dropped, or sealed with exactly the surplus dropped; a seal whose record
// failed is decided again by the next Put. Balanced rounds: a round that was
// never recorded (its shares were dropped whole before they were fetched)
// does not cost the rounds after it their records. A Seal being recorded
// closes the rows it drops to Puts.
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

}  // namespace
}  // namespace tdock::persist::crash
