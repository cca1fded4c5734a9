// What survives a restart, scenario by scenario (record before effect,
// DESIGN.md §4): lease ids and acknowledgements, Puts that acknowledge a
// lease, CreateDock and AddConsumer, a dock deleted and created again, rewrites, lease
// clocks and expiries, balanced shares. Each runs a server on a
// RecordingStore, makes chosen writes fail or wait, and restarts a server on
// what the store holds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

using testing::GetSync;

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
        *dock, 0, rows, {ColumnOf("score", 0, 0, rows)}, absl::ZeroDuration(), leased.lease_id);
    store->FailNext(0, absl::OkStatus());
    if (!put.ok()) {
      EXPECT_STATUS(dock->Read(0, rows, {"score"}), absl::StatusCode::kFailedPrecondition,
                    "is not written");
      ASSERT_OK(testing::PutSync(*dock, 0, rows, {ColumnOf("score", 0, 0, rows)},
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

// NackAll hands each lease back as a Nack, recorded first: when the
// records fail the leases stay in flight (the answer says how many went
// back); once stored, the rows are handed back for good: after a restart
// no lease is listed and the rows go out again.
TEST(Restart, NackAllIsRecordedLikeNacks) {
  Recording recording;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, testing::GetOf("scorer")));
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, testing::GetOf("scorer")));
  ASSERT_OK(recording.persistence->journal().Flush());
  recording.store->FailNext(2, absl::UnavailableError("disk full"));
  EXPECT_STATUS(dock->NackAll("scorer"), absl::StatusCode::kUnavailable,
                "0 of 2 leases handed back; dock 'crash': lease ");
  recording.store->FailNext(0, absl::OkStatus());
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> left, dock->ListLeases("scorer"));
  EXPECT_EQ(left.size(), 2u) << "still in flight";
  ASSERT_OK_AND_ASSIGN(NackAllResult back, dock->NackAll("scorer"));
  EXPECT_EQ(back.leases, 2);
  EXPECT_EQ(back.rows, 4);
  recording.Stop();

  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(left, restarted.dock->ListLeases("scorer"));
  EXPECT_TRUE(left.empty());
  std::vector<int64_t> again;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*restarted.dock, testing::GetOf("scorer")));
    again.insert(again.end(), batch.rows.begin(), batch.rows.end());
  }
  std::vector<int64_t> taken = first.rows;
  taken.insert(taken.end(), second.rows.begin(), second.rows.end());
  std::sort(again.begin(), again.end());
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(again, taken);
}

// A hand-out is recorded with the rank whose Get took it: after a restart
// its lease is listed with that rank, and NackAll of that rank (a worker's
// replacement handing back what the dead worker held) finds it.
TEST(Restart, ARecoveredLeaseKeepsItsRank) {
  Recording recording;
  Dock* dock = recording.dock.get();
  ConsumerSpec workers{"workers", {"ids"}, 2, /*dp_size=*/2, false, Policy::kFifo, 0};
  workers.lease_ms = 600000;
  ASSERT_OK(dock->AddConsumer(workers));
  WriteIds(*dock, 0);
  GetInput get = testing::GetOf("workers");
  get.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch taken, GetSync(*dock, get));
  ASSERT_EQ(taken.rows.size(), 2u);
  recording.Stop();

  Restarted restarted(*recording.store);
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> leases, restarted.dock->ListLeases("workers"));
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].lease_id, taken.lease_id);
  EXPECT_EQ(leases[0].rank, 1);
  ASSERT_OK_AND_ASSIGN(NackAllResult none, restarted.dock->NackAll("workers", 0));
  EXPECT_EQ(none.leases, 0) << "rank 0 holds nothing";
  ASSERT_OK_AND_ASSIGN(NackAllResult back, restarted.dock->NackAll("workers", 1));
  EXPECT_EQ(back.leases, 1);
  EXPECT_EQ(back.rows, 2);
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
  EXPECT_STATUS(testing::PutSync(*old, 1, {0}, {ColumnOf("ids", 0, 1, {0})}),
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

// A dock's record completions run on that dock's own queue: a consumer of
// one dock that keeps the callback of the Get a Put woke (run where the
// Put's record completed) holds up no other dock's acknowledgements.
TEST(Restart, ADockBusyInACompletionHoldsUpNoOtherDock) {
  absl::Notification woken;    // both outlive the server, which may still
  absl::Notification release;  // run the Get's callback as it goes
  Recording recording;
  // However the test ends, the blocked callback goes on before the server goes.
  absl::Cleanup unblock = [&] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  DockSpec spec = CrashSpec();
  spec.name = "other";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> other, recording.registry.Create(spec));
  recording.dock->Get(testing::GetOf("reader", 1, absl::Seconds(60)),
                      [&](absl::StatusOr<Batch> got) {
                        EXPECT_OK(got.status());
                        woken.Notify();
                        release.WaitForNotification();
                      });
  const std::vector<int64_t> rows{0};
  ASSERT_OK(testing::PutSync(*recording.dock, 0, rows, {ColumnOf("ids", 0, 0, rows)}));
  ASSERT_TRUE(woken.WaitForNotificationWithTimeout(absl::Seconds(30)));
  std::promise<absl::Status> stored;
  std::thread writer([&] {
    stored.set_value(testing::PutSync(*other, 0, rows, {ColumnOf("ids", 0, 0, rows)}).status());
  });
  std::future<absl::Status> answered = stored.get_future();
  const bool in_time = answered.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release.Notify();
  EXPECT_TRUE(in_time) << "dock 'other' waited for dock 'crash''s completion";
  EXPECT_OK(answered.get());
  writer.join();
  recording.Stop();
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
  ASSERT_OK(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 0, 0, {0})}));
  store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 0, 1, {0})}),
                absl::StatusCode::kUnavailable, "disk full");
  EXPECT_EQ(score(*dock), ScoreOf(0, 0, 0));
  ASSERT_OK(testing::PutSync(*dock, 0, {0}, {ColumnOf("score", 0, 2, {0})}));
  EXPECT_EQ(score(*dock), ScoreOf(0, 2, 0));
  recording.Stop();

  Restarted restarted(*store);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> recovered, restarted.registry.Find("rewrites"));
  EXPECT_EQ(score(*recovered), ScoreOf(0, 2, 0));
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

// A hand-out whose record fails while a release of its step is being
// recorded gives its rows back, as at any other time: when the release's
// record fails too and the step stays live, the rows are handed out again
// (they were lost: the step counted them as taken).
TEST(Restart, AHandOutFailedDuringAFailedReleaseGivesItsRowsBack) {
  Recording recording;
  RecordingStore* store = recording.store;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  store->Hold(true);
  std::promise<absl::StatusOr<Batch>> got;
  dock->Get(testing::GetOf("reader"),
            [&got](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  // The hand-out's write is under way (held) when the release is asked for:
  // they are two writes.
  ASSERT_TRUE(store->AwaitWaiting(1));
  std::promise<absl::Status> released;
  dock->ReleaseStep(0, [&released](absl::Status s) { released.set_value(std::move(s)); });
  store->FailNext(2, absl::UnavailableError("disk full"));
  store->Hold(false);
  EXPECT_STATUS(got.get_future().get().status(), absl::StatusCode::kUnavailable, "not stored");
  EXPECT_STATUS(released.get_future().get(), absl::StatusCode::kUnavailable, "not stored");
  std::vector<int64_t> drained;
  for (int i = 0; i < kRows; ++i) {
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, testing::GetOf("reader")));
    if (batch.rows.empty()) break;
    drained.insert(drained.end(), batch.rows.begin(), batch.rows.end());
  }
  std::sort(drained.begin(), drained.end());
  EXPECT_EQ(drained, std::vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
}

// A Get that names a step whose release is being recorded waits for the
// record instead of answering end_of_step: the record may fail, and then the
// step stays live with rows the consumer has not taken. Here it fails, and
// the waiting Get is served those rows; a second Get, asked while the next
// release is being recorded, learns end_of_step once that one is stored.
TEST(Restart, AGetWaitsForTheReleaseRecordOfItsStep) {
  Recording recording;
  RecordingStore* store = recording.store;
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, testing::GetOf("reader", 2)));
  ASSERT_EQ(first.rows.size(), 2u);
  store->Hold(true);
  std::promise<absl::Status> released;
  dock->ReleaseStep(0, [&released](absl::Status s) { released.set_value(std::move(s)); });
  ASSERT_TRUE(store->AwaitWaiting(1));
  GetInput rest = testing::GetOf("reader", kRows - 2, absl::Seconds(60));
  rest.step = 0;
  std::promise<absl::StatusOr<Batch>> got;
  dock->Get(rest, [&got](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  std::future<absl::StatusOr<Batch>> answer = got.get_future();
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "answered while the step's release was being recorded";
  store->FailNext(1, absl::UnavailableError("disk full"));
  store->Hold(false);
  EXPECT_STATUS(released.get_future().get(), absl::StatusCode::kUnavailable, "not stored");
  ASSERT_OK_AND_ASSIGN(Batch served, answer.get());
  EXPECT_EQ(served.rows.size(), static_cast<size_t>(kRows - 2));  // the step's last rows
  std::vector<int64_t> all = first.rows;
  all.insert(all.end(), served.rows.begin(), served.rows.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, std::vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));

  // The release asked for again is stored: a Get waiting meanwhile learns
  // that the step is over.
  store->Hold(true);
  std::promise<absl::Status> again;
  dock->ReleaseStep(0, [&again](absl::Status s) { again.set_value(std::move(s)); });
  ASSERT_TRUE(store->AwaitWaiting(1));
  std::promise<absl::StatusOr<Batch>> over;
  dock->Get(rest, [&over](absl::StatusOr<Batch> b) { over.set_value(std::move(b)); });
  store->Hold(false);
  EXPECT_OK(again.get_future().get());
  ASSERT_OK_AND_ASSIGN(Batch end, over.get_future().get());
  EXPECT_TRUE(end.end_of_step);
  EXPECT_TRUE(end.rows.empty());
}

// CreateDock completes through its callback once the spec is stored: the
// caller does not wait on the journal, the dock serves nothing before (it is
// not found, and a Delete of it is refused), a second Create of the same
// spec joins the first (one dock is built), another spec is refused at once.
TEST(CreateDock, AnsweredOnceItsSpecIsStored) {
  Recording recording;
  RecordingStore* store = recording.store;
  DockSpec spec = CrashSpec();
  spec.name = "other";
  store->Hold(true);
  std::promise<absl::StatusOr<std::shared_ptr<Dock>>> first, second;
  recording.registry.Create(spec, [&first](absl::StatusOr<std::shared_ptr<Dock>> d) {
    first.set_value(std::move(d));
  });
  recording.registry.Create(spec, [&second](absl::StatusOr<std::shared_ptr<Dock>> d) {
    second.set_value(std::move(d));
  });
  EXPECT_STATUS(recording.registry.Find("other").status(), absl::StatusCode::kNotFound,
                "does not exist");
  DockSpec different = spec;
  different.steps_in_flight = 3;
  EXPECT_STATUS(recording.registry.Create(different).status(), absl::StatusCode::kAlreadyExists,
                "is being created with a different spec");
  EXPECT_STATUS(recording.registry.Delete("other"), absl::StatusCode::kAborted,
                "is being created");
  store->Hold(false);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> a, first.get_future().get());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> b, second.get_future().get());
  EXPECT_EQ(a, b);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> found, recording.registry.Find("other"));
  EXPECT_EQ(found, a);
}

// The registry outlives the answers of its creations: destroying it while a
// creation's callback still runs (on the journal's completion thread) waits
// for that callback to return and for the creation to finish. (It did not:
// the destructor saw no creation in flight once the dock was registered and
// freed the registry under FinishCreate, a use-after-free.)
TEST(CreateDock, RegistryWaitsForAnAnswerInProgress) {
  auto owned = std::make_unique<RecordingStore>();
  RecordingStore* store = owned.get();
  Persistence persistence(std::move(owned), PersistenceOptions{.data_dir = "recording"});
  auto registry = std::make_unique<DockRegistry>();
  ASSERT_OK(persistence.Recover(*registry).status());
  store->Hold(true);
  std::promise<void> answering;
  std::atomic<bool> returned{false};
  registry->Create(CrashSpec(), [&](absl::StatusOr<std::shared_ptr<Dock>> dock) {
    answering.set_value();
    // Long enough for the destructor below to run past a creation it did
    // not wait for.
    absl::SleepFor(absl::Milliseconds(100));
    returned = dock.ok();
  });
  store->Hold(false);
  answering.get_future().wait();
  registry.reset();
  EXPECT_TRUE(returned);
}

// A creation whose spec is not stored fails, and leaves nothing: the name
// is free, a retry creates the dock, and that one survives a restart.
TEST(CreateDock, NotStoredLeavesNothing) {
  Recording recording;
  RecordingStore* store = recording.store;
  DockSpec spec = CrashSpec();
  spec.name = "other";
  store->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(recording.registry.Create(spec).status(), absl::StatusCode::kUnavailable,
                "was not created: its spec was not stored (journal: disk full)");
  EXPECT_STATUS(recording.registry.Find("other").status(), absl::StatusCode::kNotFound,
                "does not exist");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, recording.registry.Create(spec));
  WriteIds(*dock, 0);
  recording.Stop();
  Restarted restarted(*store);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> recovered, restarted.registry.Find("other"));
  EXPECT_OK(recovered->Read(0, {0}, {"ids"}).status());
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
                             {ColumnOf("score", 0, 0, {0, 1, 2, 3, 4, 5, 6, 7})}));
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

}  // namespace
}  // namespace tdock::persist::crash
