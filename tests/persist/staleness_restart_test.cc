// Staleness bounds with a journal. What a bounded consumer passes over as
// stale is recorded before the step may end (with stale: drop, as a drop of
// reason "stale"); at every crash point the recovered dock hands the
// bounded consumer no row past its bound and the unbounded one every row
// not dropped, and the step ends for both. A record that fails gives the
// rows back, to be passed over again.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock's columns with "actor" (bounded at 0 versions, on ids) and
// "ref" (no bound), each taking the whole step.
DockSpec BoundedSpec(StalePolicy stale) {
  DockSpec spec = CrashSpec();
  ConsumerSpec actor{"actor", {"ids"}, kRows, 1, false, Policy::kFifo, 0};
  actor.max_staleness = 0;
  actor.stale = stale;
  spec.consumers = {actor, {"ref", {"ids"}, kRows, 1, false, Policy::kFifo, 0}};
  return spec;
}

// Writes the ids of `rows` of step 0 at `version`.
void WriteVersioned(Dock& dock, std::vector<int64_t> rows, int64_t version) {
  PutInput in;
  in.step = 0;
  in.rows = std::move(rows);
  in.versions = {version};
  testing::OwnedColumn ids = ColumnOf("ids", 0, 0, in.rows);
  in.columns.push_back(ids.View());
  ASSERT_OK(testing::PutSync(dock, std::move(in)).status());
}

// Rows 0-3 at version 0, rows 4-7 at version 1.
void WriteVersioned(Dock& dock) {
  WriteVersioned(dock, {0, 1, 2, 3}, 0);
  WriteVersioned(dock, {4, 5, 6, 7}, 1);
}

GetInput StepGet(const std::string& consumer) {
  GetInput in = testing::GetOf(consumer);
  in.step = 0;
  return in;
}

class StalenessRestart : public ::testing::TestWithParam<StalePolicy> {};

TEST_P(StalenessRestart, NoRowPastTheBoundIsHandedOutAtEveryCrashPoint) {
  const bool drop = GetParam() == StalePolicy::kDrop;
  Recording recording(BoundedSpec(GetParam()));
  ASSERT_OK(recording.dock->SetVersion(1));
  WriteVersioned(*recording.dock);
  const int64_t before = recording.store->writes();
  ASSERT_OK_AND_ASSIGN(Batch actor, testing::GetSync(*recording.dock, StepGet("actor")));
  ASSERT_EQ(actor.rows, (std::vector<int64_t>{4, 5, 6, 7}));
  // The step ends for the consumer once the pass-over is stored.
  GetInput end = StepGet("actor");
  end.wait = absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(Batch over, testing::GetSync(*recording.dock, end));
  ASSERT_TRUE(over.rows.empty());
  ASSERT_TRUE(actor.end_of_step || over.end_of_step);
  recording.Stop();
  int passed_over = 0;
  for (int64_t k = before; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(*recording.store, k);
    Dock* dock = restarted.dock.get();
    ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
    int dropped = 0;
    for (const RowState& row : listing.rows) {
      if (row.dropped == DropReason::kUnspecified) continue;
      EXPECT_EQ(row.dropped, DropReason::kStale) << "row " << row.row;
      EXPECT_LT(row.row, 4) << "only rows of version 0 are stale";
      ++dropped;
    }
    EXPECT_TRUE(dropped == 0 || dropped == 4) << "a drop is stored whole";
    passed_over += dropped == 4 || listing.rows[0].taken.size() == 1;
    GetInput until_end = StepGet("actor");
    until_end.wait = absl::Seconds(10);  // a pass-over ends the step once stored
    bool ended = false;
    for (int get = 0; get < 3 && !ended; ++get) {
      ASSERT_OK_AND_ASSIGN(Batch again, testing::GetSync(*dock, until_end));
      for (int64_t version : again.versions) EXPECT_EQ(version, 1) << "none past the bound";
      ended = again.end_of_step;
    }
    EXPECT_TRUE(ended);
    ASSERT_OK_AND_ASSIGN(Batch ref, testing::GetSync(*dock, StepGet("ref")));
    // Not dropped before the crash, the stale rows were dropped again now.
    EXPECT_EQ(static_cast<int>(ref.rows.size()), drop ? kRows - 4 : kRows);
    EXPECT_TRUE(ref.end_of_step);
  }
  EXPECT_GT(passed_over, 0) << (drop ? "the drop" : "the pass-over") << " was stored";
}

TEST_P(StalenessRestart, ARecordThatFailsGivesTheRowsBackToBePassedOverAgain) {
  Recording recording(BoundedSpec(GetParam()));
  WriteVersioned(*recording.dock, {0, 1, 2, 3}, 0);
  ASSERT_OK(recording.dock->SetVersion(1));
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  ASSERT_OK_AND_ASSIGN(Batch none, testing::GetSync(*recording.dock, StepGet("actor")));
  EXPECT_TRUE(none.rows.empty());
  EXPECT_FALSE(none.end_of_step);
  // The Get answered at once; its pass-over is recorded after it, and
  // given back when that fails.
  auto given_back = [&] {
    absl::StatusOr<RowListing> listing = recording.dock->ListRows(0);
    if (!listing.ok() || recording.store->failed() != 1) return false;
    for (const RowState& row : listing->rows) {
      if (!row.taken.empty() || row.dropped != DropReason::kUnspecified) return false;
    }
    return true;
  };
  for (int i = 0; i < 2000 && !given_back(); ++i) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(given_back()) << "the rows whose record failed are the consumer's again";
  EXPECT_EQ(recording.dock->Stats().staleness[0].stale_rows, 0);
  absl::SleepFor(absl::Milliseconds(1100));  // passing over is tried again a second later
  WriteVersioned(*recording.dock, {4, 5, 6, 7}, 1);
  ASSERT_OK_AND_ASSIGN(Batch rest, testing::GetSync(*recording.dock, StepGet("actor")));
  EXPECT_EQ(rest.rows, (std::vector<int64_t>{4, 5, 6, 7}));
  GetInput end = StepGet("actor");
  end.wait = absl::Seconds(10);
  ASSERT_OK_AND_ASSIGN(Batch over, testing::GetSync(*recording.dock, end));
  EXPECT_TRUE(over.end_of_step) << "the stale rows were passed over again";
  EXPECT_EQ(recording.dock->Stats().staleness[0].stale_rows, 4);
  recording.Stop();
  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(Batch after, testing::GetSync(*restarted.dock, StepGet("actor")));
  EXPECT_TRUE(after.rows.empty()) << "handed out and passed over before the restart";
  EXPECT_TRUE(after.end_of_step);
}

// A journal that keeps failing is not asked again and again: after a
// failed pass-over the consumer's Gets wait a second before passing over
// again (they used to retry at once, each failure waking them).
TEST_P(StalenessRestart, AFailingJournalIsNotAskedInALoop) {
  Recording recording(BoundedSpec(GetParam()));
  WriteVersioned(*recording.dock, {0, 1, 2, 3}, 0);
  ASSERT_OK(recording.dock->SetVersion(1));
  recording.store->FailNext(1000, absl::UnavailableError("disk full"));
  GetInput waiting = StepGet("actor");
  waiting.wait = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(Batch none, testing::GetSync(*recording.dock, waiting));
  EXPECT_TRUE(none.rows.empty());
  EXPECT_FALSE(none.end_of_step);
  EXPECT_LE(recording.store->failed(), 2) << "records tried while the Get waited";
  recording.store->FailNext(0, absl::OkStatus());
}

INSTANTIATE_TEST_SUITE_P(Policies, StalenessRestart,
                         ::testing::Values(StalePolicy::kLeave, StalePolicy::kDrop),
                         [](const auto& info) {
                           return info.param == StalePolicy::kLeave ? "Leave" : "Drop";
                         });

}  // namespace
}  // namespace tdock::persist::crash
