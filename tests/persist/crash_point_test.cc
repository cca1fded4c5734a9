// Crash points: randomized workloads against a journaled dock (several
// writers and readers, leased and BALANCED consumers, Put with ack_lease,
// Nack, early releases, AddConsumer, failed writes), whose journal writes
// are then replayed up to every crash point k (the first k writes survive,
// the rest are lost). At every k:
//   - the server comes back: recovery succeeds;
//   - every Put acknowledged by k is present and whole; a Put in doubt is
//     all there or not at all; a step holding acknowledged cells is gone
//     only if it was released, or every consumer may have been done with it;
//   - draining every consumer after recovery hands out no row whose
//     hand-out (without a lease) or acknowledgement (with one) was answered
//     by k, hands out no row twice, and hands out every row that is ready
//     and that no consumer's answer may have counted as done.
#include <algorithm>
#include <cstdio>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/crash_workload.h"
#include "tests/test_util.h"

namespace tdock::persist::crash {
namespace {

using testing::GetSync;
using testing::RowValues;

// The checker of one crash point; failures are collected as text.
class CrashPoint {
 public:
  CrashPoint(const CrashWorkload& workload, int64_t k) : w_(workload), k_(k) {}

  std::vector<std::string> Check(std::unique_ptr<Store> store) {
    Persistence persistence(std::move(store), {.data_dir = absl::StrCat("crash point ", k_)});
    DockRegistry registry;
    absl::StatusOr<RecoveryStats> recovered = persistence.Recover(registry);
    if (!recovered.ok()) {
      Fail(absl::StrCat("recovery failed: ", recovered.status().ToString()));
      return failures_;
    }
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Find("crash");
    if (dock.ok()) {
      CheckDock(**dock);
    } else if (k_ >= w_.created()) {
      Fail(absl::StrCat("the dock is gone: ", dock.status().ToString()));
    }
    registry.Shutdown();
    return failures_;
  }

 private:
  bool Acked(const Event& e) const { return e.acked <= k_; }
  bool Possibly(const Event& e) const { return e.issued < k_ && e.acked != kNever; }
  void Fail(std::string what) { failures_.push_back(absl::StrCat("crash point ", k_, ": ", what)); }

  bool DoneBy(const std::string& consumer, int64_t step, int64_t row, bool acked) const {
    auto it = w_.done().find({consumer, step, row});
    if (it == w_.done().end()) return false;
    for (const Event& e : it->second) {
      if (acked ? Acked(e) : Possibly(e)) return true;
    }
    return false;
  }

  void CheckDock(Dock& dock) {
    const DockSpec spec = dock.spec();
    std::set<int64_t> live;
    for (const StepStats& s : dock.Stats().steps) live.insert(s.step);
    CheckPuts(dock, spec, live);
    // Which cells are there, before draining releases steps.
    std::map<int64_t, std::vector<std::set<std::string>>> cells;
    for (int64_t step : live) {
      cells[step].resize(kRows);
      for (int64_t row = 0; row < kRows; ++row) {
        for (const ColumnSpec& c : spec.columns) {
          if (dock.Read(step, {row}, {c.name}).ok()) cells[step][row].insert(c.name);
        }
      }
    }
    // The producers write what is missing, so every row can reach every
    // consumer.
    for (int64_t step : live) {
      for (const ColumnSpec& c : spec.columns) {
        std::vector<int64_t> rows;
        for (int64_t row = 0; row < kRows; ++row) {
          if (cells[step][row].count(c.name) == 0) rows.push_back(row);
        }
        if (rows.empty()) continue;
        absl::StatusOr<PutResult> put =
            testing::PutSync(dock, step, rows, {ColumnOf(c.name, step, rows)});
        if (!put.ok()) {
          Fail(absl::StrCat("step ", step, ": writing the missing ", c.name,
                            " cells failed: ", put.status().ToString()));
        }
      }
    }
    // Leases still in flight come back, as when their workers are gone.
    for (const auto& [consumer, ids] : w_.leases()) {
      for (uint64_t id : ids) (void)dock.Nack(consumer, id);
    }
    for (int64_t step : live) {
      for (const ConsumerSpec& consumer : spec.consumers) {
        CheckDrain(dock, consumer, step);
      }
    }
  }

  void CheckPuts(Dock& dock, const DockSpec& spec, const std::set<int64_t>& live) {
    for (const PutRecord& put : w_.puts()) {
      if (!Possibly(put.event)) continue;
      if (live.count(put.step) == 0) {
        if (Acked(put.event) && !MayBeReleased(spec, put.step)) {
          Fail(absl::StrCat("step ", put.step, " holds an acknowledged Put of ", put.column,
                            " but is gone after recovery"));
        }
        continue;
      }
      int present = 0;
      for (int64_t row : put.rows) {
        absl::StatusOr<Batch> read = dock.Read(put.step, {row}, {put.column});
        if (!read.ok()) continue;
        ++present;
        const bool right = put.column == "ids"
                               ? RowValues<int32_t>(read->columns[0], 0) == IdsOf(put.step, row)
                               : RowValues<float>(read->columns[0], 0) ==
                                     std::vector<float>{ScoreOf(put.step, row)};
        if (!right) Fail(absl::StrCat("step ", put.step, " row ", row, " ", put.column, " differs"));
      }
      const int rows = static_cast<int>(put.rows.size());
      if (Acked(put.event) && present != rows) {
        Fail(absl::StrCat("an acknowledged Put of step ", put.step, " ", put.column, " has ",
                          present, " of its ", rows, " cells"));
      } else if (present != 0 && present != rows) {
        Fail(absl::StrCat("a Put of step ", put.step, " ", put.column, " is partial: ", present,
                          " of ", rows, " cells"));
      }
    }
  }

  // A step may be gone if it was released, or if every consumer may have
  // taken every row.
  bool MayBeReleased(const DockSpec& spec, int64_t step) const {
    auto released = w_.releases().find(step);
    if (released != w_.releases().end() && released->second < k_) return true;
    for (const ConsumerSpec& c : spec.consumers) {
      for (int64_t row = 0; row < kRows; ++row) {
        if (!DoneBy(c.name, step, row, /*acked=*/false)) return false;
      }
    }
    return true;
  }

  void CheckDrain(Dock& dock, const ConsumerSpec& consumer, int64_t step) {
    std::vector<int64_t> drained;
    for (int32_t rank = 0; rank < consumer.dp_size; ++rank) {
      for (int i = 0; i < 4 * kRows; ++i) {
        GetInput in = testing::GetOf(consumer.name);
        in.rank = rank;
        in.step = step;
        absl::StatusOr<Batch> got = GetSync(dock, in);
        if (!got.ok()) {
          Fail(absl::StrCat(consumer.name, " step ", step, ": Get failed: ",
                            got.status().ToString()));
          return;
        }
        drained.insert(drained.end(), got->rows.begin(), got->rows.end());
        if (got->lease_id != 0) (void)dock.Ack(consumer.name, got->lease_id);
        if (got->end_of_step || got->timed_out || got->rows.empty()) break;
      }
    }
    std::set<int64_t> seen;
    for (int64_t row : drained) {
      if (!seen.insert(row).second) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row, " handed out twice"));
      }
      if (DoneBy(consumer.name, step, row, /*acked=*/true)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was acknowledged before the crash and is handed out again"));
      }
    }
    for (int64_t row = 0; row < kRows; ++row) {
      if (seen.count(row) == 0 && !DoneBy(consumer.name, step, row, /*acked=*/false)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was never acknowledged, but is not handed out"));
      }
    }
  }

  const CrashWorkload& w_;
  const int64_t k_;
  std::vector<std::string> failures_;
};

// Runs workload `seed` and checks every crash point; returns the number of
// crash points and appends failures.
int64_t RunAndCheck(uint64_t seed, int ops, std::vector<std::string>& failures) {
  auto owned = std::make_unique<RecordingStore>();
  RecordingStore* store = owned.get();
  int64_t writes = 0;
  std::unique_ptr<CrashWorkload> workload;
  {
    Persistence persistence(std::move(owned), {.data_dir = "recording"});
    DockRegistry registry;
    EXPECT_OK(persistence.Recover(registry).status());
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Create(CrashSpec());
    EXPECT_OK(dock.status());
    if (!dock.ok()) return 0;
    workload = std::make_unique<CrashWorkload>(seed, store, *dock);
    workload->Run(ops);
    registry.Shutdown();
    workload->WaitParked();
    EXPECT_OK(persistence.journal().Flush());
    writes = store->writes();
    for (int64_t k = 0; k <= writes; ++k) {
      for (std::string& f : CrashPoint(*workload, k).Check(store->Replay(k))) {
        failures.push_back(absl::StrCat("seed ", seed, " ", f));
      }
    }
  }
  return writes + 1;
}

// A server started on the records `store` holds after its writes so far.
struct Restarted {
  explicit Restarted(const RecordingStore& store)
      : persistence(store.Replay(store.writes()), {.data_dir = "restarted"}) {
    EXPECT_OK(persistence.Recover(registry).status());
    dock = *registry.Find("crash");
  }
  ~Restarted() { registry.Shutdown(); }
  Persistence persistence;
  DockRegistry registry;
  std::shared_ptr<Dock> dock;
};

// A server on a RecordingStore holding the crash dock; Stop shuts it down
// with every record stored.
struct Recording {
  Recording() {
    auto owned = std::make_unique<RecordingStore>();
    store = owned.get();
    persistence = std::make_unique<Persistence>(std::move(owned),
                                                PersistenceOptions{.data_dir = "recording"});
    EXPECT_OK(persistence->Recover(registry).status());
    dock = *registry.Create(CrashSpec());
  }
  void Stop() {
    registry.Shutdown();
    EXPECT_OK(persistence->journal().Flush());
  }
  ~Recording() { registry.Shutdown(); }
  RecordingStore* store = nullptr;
  std::unique_ptr<Persistence> persistence;
  DockRegistry registry;
  std::shared_ptr<Dock> dock;
};

// Writes the ids of every row of `step`.
void WriteIds(Dock& dock, int64_t step) {
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < kRows; ++row) rows.push_back(row);
  ASSERT_OK(testing::PutSync(dock, step, rows, {ColumnOf("ids", step, rows)}));
}

// Lease ids are never handed out twice, across restarts too: an Ack of a
// lease acknowledged before a restart, retried after it, fails saying it was
// acknowledged, instead of acknowledging the lease a new Get got.
TEST(Restart, LeaseIdsAreNeverReused) {
  Recording recording;
  Dock* dock = recording.dock.get();
  RecordingStore* store = recording.store;
  WriteIds(*dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, testing::GetOf("scorer")));
  ASSERT_OK(dock->Ack("scorer", first.lease_id));
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*restarted.dock, testing::GetOf("scorer")));
  EXPECT_GT(second.lease_id, first.lease_id);
  // A worker retrying an Ack whose answer it lost learns that it was stored.
  EXPECT_STATUS(restarted.dock->Ack("scorer", first.lease_id),
                absl::StatusCode::kFailedPrecondition,
                "is not in flight: it was already acknowledged");
  EXPECT_OK(restarted.dock->Ack("scorer", second.lease_id));
  EXPECT_NE(second.rows, first.rows);
}

// A Put with ack_lease is atomic whichever of its writes fails: answered
// OK, its acknowledgement survives a restart; failed, its cells are not
// written and the lease is still in flight, so the retried Put succeeds.
TEST(Restart, PutWithAckIsAtomic) {
  for (int after = 0; after < 3; ++after) {
    SCOPED_TRACE(absl::StrCat("the write after ", after, " fails"));
    Recording recording;
    Dock* dock = recording.dock.get();
    RecordingStore* store = recording.store;
    WriteIds(*dock, 0);
    ASSERT_OK_AND_ASSIGN(Batch leased, GetSync(*dock, testing::GetOf("scorer")));
    const std::vector<int64_t> rows = leased.rows;
    store->FailNext(1, absl::UnavailableError("disk full"), after);
    absl::StatusOr<PutResult> put = testing::PutSync(
        *dock, 0, rows, {ColumnOf("score", 0, rows)}, absl::ZeroDuration(), leased.lease_id);
    store->FailNext(0, absl::OkStatus());
    if (!put.ok()) {
      EXPECT_STATUS(dock->Read(0, rows, {"score"}), absl::StatusCode::kFailedPrecondition,
                    "is not written");
      ASSERT_OK(testing::PutSync(*dock, 0, rows, {ColumnOf("score", 0, rows)},
                                 absl::ZeroDuration(), leased.lease_id));
    }
    recording.Stop();

    Restarted restarted(*store);
    EXPECT_STATUS(restarted.dock->Nack("scorer", leased.lease_id),
                  absl::StatusCode::kFailedPrecondition, "is not in flight");
    ASSERT_OK_AND_ASSIGN(Batch next, GetSync(*restarted.dock, testing::GetOf("scorer")));
    for (int64_t row : next.rows) {
      EXPECT_EQ(std::count(rows.begin(), rows.end(), row), 0) << row;
    }
  }
}

// AddConsumer records the new spec before the consumer exists: when that
// record fails the call fails and the consumer takes no Get, so no hand-out
// names a consumer the store does not know and the server comes back; the
// retried call adds it, and it survives a restart with what it took.
TEST(Restart, AddConsumerIsRecordedBeforeItServes) {
  Recording recording;
  Dock* dock = recording.dock.get();
  RecordingStore* store = recording.store;
  WriteIds(*dock, 0);
  store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(dock->AddConsumer(LateConsumer()), absl::StatusCode::kUnavailable,
                "not stored (journal: disk full)");
  EXPECT_STATUS(GetSync(*dock, testing::GetOf("late")), absl::StatusCode::kNotFound,
                "consumer 'late' is unknown");
  ASSERT_OK(dock->AddConsumer(LateConsumer()));
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, testing::GetOf("late", 4)));
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_NE(restarted.dock, nullptr);
  ASSERT_OK_AND_ASSIGN(Batch rest, GetSync(*restarted.dock, testing::GetOf("late", kRows)));
  std::vector<int64_t> all = first.rows;
  all.insert(all.end(), rest.rows.begin(), rest.rows.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kRows));
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
}

// A deleted dock's late records never reach a dock created again under the
// same name: the old dock's release, asked for after the delete (as by a
// call that found the dock just before it), fails instead of deleting the
// new dock's step 0, which survives a restart whole.
TEST(Restart, ARecreatedDockGetsNoneOfTheOldOnesRecords) {
  Recording recording;
  RecordingStore* store = recording.store;
  std::shared_ptr<Dock> old = recording.dock;
  WriteIds(*old, 0);
  ASSERT_OK(recording.registry.Delete("crash"));
  ASSERT_OK_AND_ASSIGN(recording.dock, recording.registry.Create(CrashSpec()));
  WriteIds(*recording.dock, 0);
  EXPECT_STATUS(old->ReleaseStep(0), absl::StatusCode::kUnavailable,
                "dock 'crash' was deleted");
  EXPECT_STATUS(testing::PutSync(*old, 1, {0}, {ColumnOf("ids", 1, {0})}),
                absl::StatusCode::kUnavailable, "dock 'crash' was deleted");
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_NE(restarted.dock, nullptr);
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < kRows; ++row) rows.push_back(row);
  ASSERT_OK_AND_ASSIGN(Batch step0, restarted.dock->Read(0, rows, {"ids"}));
  EXPECT_EQ(step0.rows, rows);
  EXPECT_STATUS(restarted.dock->Read(1, {0}, {"ids"}), absl::StatusCode::kFailedPrecondition,
                "");
}

// Concurrent AddConsumer calls on a journaled dock are recorded one at a
// time, each exactly once: every call succeeds, and the restarted dock has
// the consumers in the order the running one gave them.
TEST(Restart, ConcurrentAddConsumersAreEachRecordedOnce) {
  constexpr int kThreads = 4;
  constexpr int kEach = 8;
  Recording recording;
  RecordingStore* store = recording.store;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        ConsumerSpec consumer = LateConsumer();
        consumer.name = absl::StrCat("late", t, "_", i);
        EXPECT_OK(recording.dock->AddConsumer(consumer).status());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const DockSpec running = recording.dock->spec();
  ASSERT_EQ(running.consumers.size(), CrashSpec().consumers.size() + kThreads * kEach);
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_NE(restarted.dock, nullptr);
  std::vector<std::string> before, after;
  for (const ConsumerSpec& c : running.consumers) before.push_back(c.name);
  for (const ConsumerSpec& c : restarted.dock->spec().consumers) after.push_back(c.name);
  EXPECT_EQ(after, before);
}

// A rewrite of a rewritable column is seen only once it is stored: while
// its record fails, readers keep the cell it would replace; the rewrite that
// is stored is the one served, before and after a restart.
TEST(Restart, RewriteIsSeenOnlyOnceStored) {
  Recording recording;
  RecordingStore* store = recording.store;
  DockSpec spec = CrashSpec();
  spec.name = "rewrites";
  spec.columns[1].rewritable = true;  // score
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, recording.registry.Create(spec));
  auto score = [](Dock& d) -> float {
    absl::StatusOr<Batch> read = d.Read(0, {0}, {"score"});
    EXPECT_OK(read.status());
    return read.ok() ? testing::RowValues<float>(read->columns[0], 0)[0] : -1;
  };
  ASSERT_OK(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 0, {0})}));
  store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 1, {0})}),
                absl::StatusCode::kUnavailable, "disk full");
  EXPECT_EQ(score(*dock), ScoreOf(0, 0));
  ASSERT_OK(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 2, {0})}));
  EXPECT_EQ(score(*dock), ScoreOf(2, 0));
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> recovered, restarted.registry.Find("rewrites"));
  EXPECT_EQ(score(*recovered), ScoreOf(2, 0));
}

// The crash dock with a short lease for "scorer", created on `recording`,
// with the ids of step 0 written.
std::shared_ptr<Dock> ShortLeaseDock(Recording& recording, int64_t lease_ms) {
  DockSpec spec = CrashSpec();
  spec.name = "short";
  spec.consumers[1].lease_ms = lease_ms;
  absl::StatusOr<std::shared_ptr<Dock>> dock = recording.registry.Create(spec);
  EXPECT_OK(dock.status());
  if (!dock.ok()) return nullptr;
  WriteIds(**dock, 0);
  return *dock;
}

// A lease's expiry is recorded before its rows go back: while that record
// fails, the rows stay with the lease (a Get finds nothing); once it is
// stored (tried again a second later) they are handed out again.
TEST(Restart, ExpiryIsRecordedBeforeTheRowsGoBack) {
  Recording recording;
  RecordingStore* store = recording.store;
  std::shared_ptr<Dock> dock = ShortLeaseDock(recording, 300);
  ASSERT_NE(dock, nullptr);
  // After the two hand-outs and the Ack, the first expiry's record fails.
  store->FailNext(1, absl::UnavailableError("disk full"), /*after=*/3);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, testing::GetOf("scorer", 2)));
  ASSERT_OK_AND_ASSIGN(Batch rest, GetSync(*dock, testing::GetOf("scorer", kRows - 2)));
  ASSERT_OK(dock->Ack("scorer", rest.lease_id));
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (store->failed() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(store->failed(), 1);
  ASSERT_OK_AND_ASSIGN(Batch during, GetSync(*dock, testing::GetOf("scorer", 2)));
  EXPECT_TRUE(during.rows.empty()) << "rows went back before their expiry was stored";
  ASSERT_OK_AND_ASSIGN(Batch again,
                       GetSync(*dock, testing::GetOf("scorer", 2, absl::Seconds(30))));
  EXPECT_EQ(again.rows, first.rows);
}

// A lease runs from when its hand-out is stored: a hand-out whose record
// took longer than the lease (a slow disk) is still in flight when the Get
// is answered, and its Ack succeeds.
TEST(Restart, LeaseRunsFromItsRecord) {
  Recording recording;
  RecordingStore* store = recording.store;
  std::shared_ptr<Dock> dock = ShortLeaseDock(recording, 500);
  ASSERT_NE(dock, nullptr);
  store->Hold(true);
  std::promise<absl::StatusOr<Batch>> got;
  dock->Get(testing::GetOf("scorer", 2),
            [&got](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  absl::SleepFor(absl::Seconds(1));  // the slow record: longer than the lease
  store->Hold(false);
  ASSERT_OK_AND_ASSIGN(Batch leased, got.get_future().get());
  EXPECT_OK(dock->Ack("scorer", leased.lease_id));
}

// A balanced share has one lease at a time: a rank that asks for its round
// again while the first hand-out is still being stored waits for that
// record, then gets a new lease that supersedes the first (whose Ack then
// fails), instead of a second live lease on the same rows.
TEST(Restart, ABalancedShareHasOneLeaseAtATime) {
  Recording recording;
  RecordingStore* store = recording.store;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  ASSERT_OK(testing::PutSync(*dock, 0, {0, 1, 2, 3, 4, 5, 6, 7},
                             {ColumnOf("score", 0, {0, 1, 2, 3, 4, 5, 6, 7})}));
  GetInput ask = testing::GetOf("bal", 0, absl::Seconds(30));
  ask.step = 0;
  ask.round = 0;
  store->Hold(true);
  std::promise<absl::StatusOr<Batch>> first, again;
  dock->Get(ask, [&first](absl::StatusOr<Batch> b) { first.set_value(std::move(b)); });
  dock->Get(ask, [&again](absl::StatusOr<Batch> b) { again.set_value(std::move(b)); });
  store->Hold(false);
  ASSERT_OK_AND_ASSIGN(Batch a, first.get_future().get());
  ASSERT_OK_AND_ASSIGN(Batch b, again.get_future().get());
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_NE(a.lease_id, b.lease_id);
  EXPECT_STATUS(dock->Ack("bal", a.lease_id), absl::StatusCode::kFailedPrecondition,
                "asked for round 0");
  EXPECT_OK(dock->Ack("bal", b.lease_id));
}

TEST(CrashPoint, EveryPrefixOfTheJournalRecovers) {
  constexpr int kWorkloads = 24;
  constexpr int kOps = 160;
  std::vector<std::string> failures;
  int64_t points = 0;
  for (uint64_t seed = 1; seed <= kWorkloads; ++seed) points += RunAndCheck(seed, kOps, failures);
  std::printf("crash points: %d workloads of %d operations, %lld crash points, %zu failures\n",
              kWorkloads, kOps, static_cast<long long>(points), failures.size());
  for (size_t i = 0; i < failures.size() && i < 40; ++i) ADD_FAILURE() << failures[i];
  EXPECT_GT(points, kWorkloads * 20);
}

}  // namespace
}  // namespace tdock::persist::crash
