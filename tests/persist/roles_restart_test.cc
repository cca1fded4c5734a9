// Roles and columns across restarts: an optional consumer's join, a
// consumer's removal and a column's addition are recorded before they take
// effect. At every crash point the
// recovered dock has the join (the removal) exactly from the point its record
// was stored on, at the latest once it was answered; a joined consumer holds
// its steps after the restart, and a removed one holds none.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock's columns with `reader` and an optional `opt`, both on ids.
DockSpec RolesSpec() {
  DockSpec spec = CrashSpec();
  ConsumerSpec opt{"opt", {"ids"}, 8, 1, false, Policy::kFifo, 0};
  opt.optional = true;
  spec.consumers = {{"reader", {"ids"}, 8, 1, false, Policy::kFifo, 0}, opt};
  return spec;
}

// The state of `opt` in the recovered spec: -1 removed, 0 not joined, 1 joined.
int OptState(const DockSpec& spec) {
  for (const ConsumerSpec& c : spec.consumers) {
    if (c.name == "opt") return c.removed ? -1 : c.joined ? 1 : 0;
  }
  ADD_FAILURE() << "opt is not in the spec";
  return 0;
}

// A release is recorded after the call that allows it was answered.
template <typename Done>
bool Await(Done done) {
  for (int i = 0; i < 2000 && !done(); ++i) absl::SleepFor(absl::Milliseconds(1));
  return done();
}

bool Live(const Dock& dock, int64_t step) {
  for (const StepStats& s : dock.Stats().steps) {
    if (s.step == step) return true;
  }
  return false;
}

TEST(RolesRestart, JoinAndRemovalAreRecordedBeforeTheyTakeEffect) {
  Recording recording(RolesSpec());
  RecordingStore* store = recording.store;
  Dock& dock = *recording.dock;
  WriteIds(dock, 0);
  ASSERT_OK(testing::GetSync(dock, testing::GetOf("reader")));
  ASSERT_TRUE(Await([&] { return !Live(dock, 0); }))
      << "opt has not joined: step 0 is released";

  const int64_t join_issued = store->writes();
  // The Get waits for the join's record, then for rows: none come.
  ASSERT_OK_AND_ASSIGN(Batch none,
                       testing::GetSync(dock, testing::GetOf("opt", 0, absl::Milliseconds(300))));
  EXPECT_TRUE(none.rows.empty());
  EXPECT_TRUE(none.timed_out);
  const int64_t join_acked = store->writes();
  WriteIds(dock, 1);
  ASSERT_OK(testing::GetSync(dock, testing::GetOf("reader")));
  const int64_t reader_done = store->writes();
  ASSERT_TRUE(Live(dock, 1)) << "opt holds step 1";

  const int64_t removal_issued = store->writes();
  ASSERT_OK(dock.RemoveConsumer("opt"));
  const int64_t removal_acked = store->writes();
  ASSERT_TRUE(Await([&] { return !Live(dock, 1); }));
  recording.Stop();
  ASSERT_GT(join_acked, join_issued) << "the join is a record";
  ASSERT_GT(removal_acked, removal_issued) << "the removal is a record";

  int last = 0;
  for (int64_t k = join_issued; k <= store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> recovered = *registry.Find("crash");
    const int state = OptState(recovered->spec());
    // Each change is there from one point on: not joined, joined, removed.
    EXPECT_TRUE(state == last || (last == 0 && state == 1) || (last == 1 && state == -1))
        << "opt went from " << last << " to " << state;
    last = state;
    if (k <= join_issued) {
      EXPECT_EQ(state, 0);
    } else if (k >= join_acked && k <= removal_issued) {
      EXPECT_EQ(state, 1);
    } else if (k >= removal_acked) {
      EXPECT_EQ(state, -1);
    }
    if (state == 1 && k >= reader_done) {
      // Joined, opt holds step 1 across the restart and gets all of it.
      EXPECT_TRUE(Live(*recovered, 1));
      ASSERT_OK_AND_ASSIGN(Batch all, testing::GetSync(*recovered, testing::GetOf("opt")));
      EXPECT_EQ(all.step, 1);
      EXPECT_EQ(all.rows.size(), static_cast<size_t>(kRows));
    }
    if (state == -1) {
      // Removed: nothing holds step 1, which the reader is done with.
      EXPECT_FALSE(Live(*recovered, 1));
      EXPECT_EQ(testing::GetSync(*recovered, testing::GetOf("opt")).status().code(),
                absl::StatusCode::kNotFound);
    }
    // A CreateDock of the spec it was created with (a server's --config at
    // every start) finds it, joined or removed consumers and all.
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> created, registry.Create(RolesSpec()));
    EXPECT_EQ(created.get(), recovered.get());
    registry.Shutdown();
  }
  EXPECT_EQ(last, -1);
}

// A column added to the live dock and written: at every crash point it is
// there once its addition was answered, and its cells only with it.
TEST(ColumnRestart, AddedColumnAndItsCellsSurvive) {
  Recording recording;
  RecordingStore* store = recording.store;
  Dock& dock = *recording.dock;
  WriteIds(dock, 0);
  const int64_t issued = store->writes();
  ASSERT_OK(dock.AddColumn({"teacher", DType::kInt32, {1}, 0, false}));
  const int64_t acked = store->writes();
  ASSERT_OK(testing::PutSync(dock, 0, {2, 5}, {ColumnOf("teacher", 0, 0, {2, 5}, 7)}));
  const int64_t written = store->writes();
  recording.Stop();
  ASSERT_GT(acked, issued) << "the addition is a record";
  for (int64_t k = issued; k <= store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> recovered = *registry.Find("crash");
    const bool there = recovered->spec().ColumnIndex("teacher") >= 0;
    if (k >= acked) {
      EXPECT_TRUE(there);
    } else if (k <= issued) {
      EXPECT_FALSE(there);
    }
    absl::StatusOr<Batch> cells = recovered->Read(0, {2, 5}, {"teacher"});
    if (k >= written) {
      ASSERT_OK(cells.status());
      EXPECT_EQ(testing::RowValues<int32_t>(cells->columns[0], 1), std::vector<int32_t>{7});
    } else if (!there) {
      EXPECT_EQ(cells.status().code(), absl::StatusCode::kInvalidArgument);
    }
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> created, registry.Create(CrashSpec()));
    EXPECT_EQ(created.get(), recovered.get()) << "the column added since makes no other dock";
    registry.Shutdown();
  }
}

// Rows the server assigned and whose cells were stored are not assigned
// again after a restart; the keys they were given find them.
TEST(AppendRestart, AssignedRowsStayAssigned) {
  DockSpec spec = CrashSpec();
  spec.max_rows_per_step = 16;
  Recording recording(spec);
  PutInput in;
  in.step = 0;
  in.keys = {"a", "b", "c"};
  testing::OwnedColumn ids = ColumnOf("ids", 0, 0, {0, 1, 2});
  in.columns.push_back(ids.View());
  ASSERT_OK_AND_ASSIGN(PutResult first, testing::PutSync(*recording.dock, std::move(in)));
  EXPECT_EQ(first.assigned, (std::vector<int64_t>{0, 1, 2}));
  recording.Stop();
  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(Batch read, restarted.dock->ReadKeys({"c"}, {"ids"}));
  EXPECT_EQ(read.rows, std::vector<int64_t>{2});
  PutInput more;
  more.step = 0;
  more.new_rows = 2;
  testing::OwnedColumn more_ids = ColumnOf("ids", 0, 0, {0, 1});
  more.columns.push_back(more_ids.View());
  ASSERT_OK_AND_ASSIGN(PutResult next, testing::PutSync(*restarted.dock, std::move(more)));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{4, 5})) << "group 1 holds row 2";
}

// A key freed by a drop and given to another row belongs to that row after a
// restart, whatever the order its records are read back in.
TEST(KeysRestart, AKeyFreedByADropFindsItsNewRow) {
  Recording recording;
  Dock& dock = *recording.dock;
  ASSERT_OK(testing::PutSync(dock, 0, {4}, {ColumnOf("ids", 0, 0, {4})}, absl::ZeroDuration(),
                             0, {"K"}));
  ASSERT_OK(dock.Drop(DropInput{0, {4}, {}, DropReason::kFailed}));
  ASSERT_OK(testing::PutSync(dock, 0, {1}, {ColumnOf("ids", 0, 0, {1})}, absl::ZeroDuration(),
                             0, {"K"}));
  recording.Stop();
  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(Batch read, restarted.dock->ReadKeys({"K"}, {"ids"}));
  EXPECT_EQ(read.rows, std::vector<int64_t>{1});
  EXPECT_STATUS(testing::PutSync(*restarted.dock, 0, {2}, {ColumnOf("ids", 0, 0, {2})},
                                 absl::ZeroDuration(), 0, {"K"}),
                absl::StatusCode::kAlreadyExists, "key 'K' is row 1 of step 0");
}

// Versions are stored with the cells of the write that carried them: at
// every crash point a row's version is the oldest of its stored writes'
// (none before the first), and it survives a restart.
TEST(VersionsRestart, ARowsVersionIsItsOldestStoredWritesAtEveryCrashPoint) {
  Recording recording;
  ASSERT_OK(recording.dock->SetVersion(6));
  const int64_t before = recording.store->writes();
  auto put = [&](const std::string& column, int64_t version) {
    PutInput in;
    in.step = 0;
    in.rows = {2};
    in.versions = {version};
    testing::OwnedColumn cells = ColumnOf(column, 0, 0, {2});
    in.columns.push_back(cells.View());
    return testing::PutSync(*recording.dock, std::move(in)).status();
  };
  ASSERT_OK(put("ids", 6));
  const int64_t first = recording.store->writes();
  ASSERT_OK(put("score", 4));
  recording.Stop();
  for (int64_t k = before; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(recording.store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    std::shared_ptr<Dock> dock = *registry.Find("crash");
    absl::StatusOr<RowListing> listing = dock->ListRows(0);
    if (k < first) {
      EXPECT_FALSE(listing.ok()) << "nothing stored: the step has not started";
    } else {
      ASSERT_OK(listing);
      const bool both = listing->rows[2].written.size() == 2;
      EXPECT_EQ(listing->rows[2].version, both ? 4 : 6);
      ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {2}, {"ids"}));
      EXPECT_EQ(read.versions, (std::vector<int64_t>{both ? 4 : 6}));
    }
    registry.Shutdown();
  }
}

// A version whose record failed takes no effect: SetVersion and a
// versioned Put answer UNAVAILABLE and the dock and the row are as before.
TEST(VersionsRestart, AVersionNotStoredTakesNoEffect) {
  Recording recording;
  ASSERT_OK(recording.dock->SetVersion(2));
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(recording.dock->SetVersion(5), absl::StatusCode::kUnavailable,
                "version 5 not stored (journal: disk full)");
  EXPECT_EQ(recording.dock->version(), 2);
  ASSERT_OK(testing::PutSync(*recording.dock, 0, {1}, {ColumnOf("ids", 0, 0, {1})}));
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  PutInput in;
  in.step = 0;
  in.rows = {1};
  in.versions = {1};
  testing::OwnedColumn score = ColumnOf("score", 0, 0, {1});
  in.columns.push_back(score.View());
  EXPECT_STATUS(testing::PutSync(*recording.dock, std::move(in)), absl::StatusCode::kUnavailable,
                "not stored");
  ASSERT_OK_AND_ASSIGN(RowListing listing, recording.dock->ListRows(0));
  EXPECT_EQ(listing.rows[1].version, kNoVersion) << "the failed write's version is not the row's";
  recording.Stop();
  Restarted restarted(*recording.store);
  EXPECT_EQ(restarted.dock->version(), 2);
}

// A deletion that was not stored deletes nothing: the dock keeps its
// version. A dock re-created once the deletion is stored starts from version
// 0, after a restart too.
TEST(VersionsRestart, ARecreatedDockDoesNotInheritAVersion) {
  Recording recording;
  ASSERT_OK(recording.dock->SetVersion(9));
  recording.store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_FALSE(recording.registry.Delete("crash").ok());  // its record fails: not deleted
  recording.store->FailNext(0, absl::OkStatus());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> same, recording.registry.Create(CrashSpec()));
  EXPECT_EQ(same->version(), 9) << "the same dock";
  ASSERT_OK(recording.registry.Delete("crash"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> again, recording.registry.Create(CrashSpec()));
  EXPECT_EQ(again->version(), 0);
  ASSERT_OK(again->SetVersion(2));
  recording.Stop();
  Restarted restarted(*recording.store);
  EXPECT_EQ(restarted.dock->version(), 2);
}

// The dock's version is recorded before it takes effect: at every crash
// point the recovered dock is at the last version stored (0 before the
// first), never lower than one acknowledged.
TEST(VersionsRestart, TheDocksVersionIsTheLastStoredAtEveryCrashPoint) {
  Recording recording;
  const std::vector<int64_t> versions = {3, 5, 9};
  std::vector<int64_t> acked_at;  // writes when each version was acknowledged
  for (int64_t version : versions) {
    ASSERT_OK(recording.dock->SetVersion(version));
    acked_at.push_back(recording.store->writes());
  }
  recording.Stop();
  int64_t last = -1;
  for (int64_t k = 0; k <= recording.store->writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Persistence persistence(recording.store->Replay(k), {.data_dir = "replayed"});
    DockRegistry registry;
    ASSERT_OK(persistence.Recover(registry).status());
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Find("crash");
    if (!dock.ok()) continue;  // not created yet
    const int64_t version = (*dock)->version();
    EXPECT_TRUE(version == 0 || version == 3 || version == 5 || version == 9) << version;
    EXPECT_GE(version, last) << "a version never goes back";
    last = version;
    for (size_t i = 0; i < acked_at.size(); ++i) {
      if (k >= acked_at[i]) {
        EXPECT_GE(version, versions[i]);
      }
    }
    registry.Shutdown();
  }
  EXPECT_EQ(last, 9);
}

}  // namespace
}  // namespace tdock::persist::crash
