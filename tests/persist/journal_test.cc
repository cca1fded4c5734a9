// The journal's write-behind thread: sync acknowledgements come after the
// write, batches queued during a write are group-committed into the next
// one, failures reach exactly the batches they hit, async acknowledges at
// once and syncs in the background (holding acknowledgements back while too
// much waits to be written), nothing queued is lost at shutdown, and with
// sync durability a batch's `done` runs on its submitter's queue: in write
// order, apart from other submitters, and before a later Flush returns.
// (Also run under ThreadSanitizer.)
#include "server/persist/journal.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

StoreBatch One(const std::string& key, const std::string& value = "v") {
  StoreBatch batch;
  batch.Put(key, value);
  return batch;
}

bool Has(const Store& store, const std::string& key) {
  bool found = false;
  EXPECT_OK(store.Scan(key, [&](absl::string_view k, absl::string_view) {
    found |= k == key;
    return absl::OkStatus();
  }));
  return found;
}

// Polls `ready` (a synchronization point, not a timing assertion).
bool Await(const std::function<bool()>& ready) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!ready()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Sync: `done` runs after the batch is in the store, with a synced write.
TEST(Journal, SyncAcknowledgesAfterTheWrite) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kSync});
  std::promise<bool> seen;
  journal.Submit(One("k"), [&](absl::Status s) {
    EXPECT_OK(s);
    seen.set_value(Has(store, "k"));
  });
  EXPECT_TRUE(seen.get_future().get());
  EXPECT_EQ(store.synced_writes(), 1);
}

// Batches submitted while a write is held in the store go into one next
// write: 1 + 49 submits make 2 writes, and every batch is acknowledged.
TEST(Journal, GroupCommitsWhatQueuesDuringAWrite) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kSync});
  store.Hold();
  std::atomic<int> acked{0};
  auto ack = [&](absl::Status s) {
    EXPECT_OK(s);
    ++acked;
  };
  journal.Submit(One("first"), ack);
  ASSERT_TRUE(Await([&] { return store.held() == 1; }));
  std::vector<std::thread> producers;
  for (int t = 0; t < 7; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < 7; ++i) journal.Submit(One(absl::StrCat("k", t, "_", i)), ack);
    });
  }
  for (auto& p : producers) p.join();
  store.Release();
  ASSERT_TRUE(Await([&] { return acked.load() == 50; }));
  EXPECT_EQ(store.writes(), 2);
  EXPECT_EQ(journal.stats().batches, 50);
  EXPECT_TRUE(Has(store, "k6_6"));
}

// A failed write fails the batches it held, with the store's message, and
// writes nothing; the next write succeeds.
TEST(Journal, FailedWriteFailsItsBatches) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kSync});
  store.FailNext(1, absl::UnavailableError("store 'x': write: IO error: No space left"));
  std::promise<absl::Status> failed;
  journal.Submit(One("lost"), [&](absl::Status s) { failed.set_value(s); });
  EXPECT_STATUS(failed.get_future().get(), absl::StatusCode::kUnavailable,
                "journal: store 'x': write: IO error: No space left");
  std::promise<absl::Status> ok;
  journal.Submit(One("kept"), [&](absl::Status s) { ok.set_value(s); });
  EXPECT_OK(ok.get_future().get());
  EXPECT_FALSE(Has(store, "lost"));
  EXPECT_TRUE(Has(store, "kept"));
}

// Async: acknowledged at once in Submit (even while the store is held);
// written and synced in the background; Flush makes it durable.
TEST(Journal, AsyncAcknowledgesAtOnceAndSyncsLater) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kAsync,
                           .flush_interval = absl::Milliseconds(5)});
  store.Hold();
  bool acked = false;
  journal.Submit(One("a"), [&](absl::Status s) {
    EXPECT_OK(s);
    acked = true;
  });
  EXPECT_TRUE(acked);  // in Submit, before any write
  store.Release();
  ASSERT_TRUE(Await([&] { return store.syncs() >= 1; }));  // the interval's sync
  EXPECT_TRUE(Has(store, "a"));
  EXPECT_EQ(store.synced_writes(), 0);
  EXPECT_OK(journal.Flush());
}

// Async: a failed background write makes Flush and every later Submit fail
// with its error; nothing more is written.
// Async backpressure: with more than async_queue_bytes waiting to be
// written, a batch is acknowledged only once it is written; below the
// bound again, at once.
TEST(Journal, AsyncHoldsAcknowledgementsBeyondTheQueueBound) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kAsync,
                           .flush_interval = absl::Milliseconds(5),
                           .async_queue_bytes = 150});
  store.Hold();
  const std::string value(100, 'v');
  std::atomic<int> acked{0};
  auto submit = [&](const std::string& key) {
    StoreBatch batch;
    batch.Put(key, value);
    journal.Submit(std::move(batch), [&](absl::Status s) {
      EXPECT_OK(s);
      ++acked;
    });
  };
  submit("a");  // 101 bytes queued: at once
  EXPECT_EQ(acked.load(), 1);
  ASSERT_TRUE(Await([&] { return store.held() == 1; }));  // "a" is being written
  submit("b");  // 202 > 150: held until written
  EXPECT_EQ(acked.load(), 1);
  EXPECT_EQ(journal.stats().held, 1);
  store.Release();
  ASSERT_TRUE(Await([&] { return acked.load() == 2; }));
  EXPECT_TRUE(Has(store, "b"));
  submit("c");  // the queue is empty again: at once
  EXPECT_EQ(acked.load(), 3);
  EXPECT_OK(journal.Flush());
}

// RunWhenFlushed runs its task on the journal thread after everything
// submitted before it is written, and returns the task's status.
TEST(Journal, RunWhenFlushedRunsAfterEarlierWritesOnTheJournalThread) {
  for (Durability durability : {Durability::kSync, Durability::kAsync}) {
    FakeStore store;
    Journal journal(&store, {.durability = durability});
    store.Hold();
    journal.Submit(One("a"), [](absl::Status s) { EXPECT_OK(s); });
    std::thread::id ran_on;
    bool saw_a = false;
    std::thread release([&] {
      ASSERT_TRUE(Await([&] { return store.held() == 1; }));
      store.Release();
    });
    EXPECT_STATUS(journal.RunWhenFlushed([&] {
                    ran_on = std::this_thread::get_id();
                    saw_a = Has(store, "a");
                    return absl::AbortedError("the task's own status");
                  }),
                  absl::StatusCode::kAborted, "the task's own status");
    release.join();
    EXPECT_TRUE(saw_a);
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
}

// Sync, with queues: each submitter's `done`s run on its own queue in the
// order of the writes; one blocked in a `done` holds up neither the other
// queue nor the journal; Flush returns only once every queue ran the
// `done`s of the writes before it.
TEST(Journal, SyncRunsEachQueuesDonesInOrderApartFromTheOthers) {
  FakeStore store;
  absl::Notification release;  // outlives the journal, whose pool waits for it
  Journal journal(&store, {.durability = Durability::kSync});
  // However the test ends, the blocked `done` goes on before the journal goes.
  absl::Cleanup unblock = [&] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  std::shared_ptr<SerialQueue> slow = journal.NewQueue();
  std::shared_ptr<SerialQueue> fast = journal.NewQueue();
  std::atomic<bool> slow_second_ran{false};
  journal.Submit(One("slow1"), [&](absl::Status s) {
    EXPECT_OK(s);
    release.WaitForNotification();  // the slow dock's Put wakes a long round plan
  }, slow);
  journal.Submit(One("slow2"), [&](absl::Status s) {
    EXPECT_OK(s);
    slow_second_ran = true;
  }, slow);
  std::vector<int> fast_order;  // touched by the fast queue's tasks only
  std::promise<void> fast_done;
  for (int i = 0; i < 3; ++i) {
    journal.Submit(One(absl::StrCat("fast", i)), [&, i](absl::Status s) {
      EXPECT_OK(s);
      fast_order.push_back(i);
      if (i == 2) fast_done.set_value();
    }, fast);
  }
  std::future<void> fast_acked = fast_done.get_future();
  ASSERT_EQ(fast_acked.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "a queue blocked in a done held up another queue's acknowledgements";
  EXPECT_EQ(fast_order, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(slow_second_ran.load()) << "a queue's done overtook the one before it";
  std::promise<absl::Status> flushed;
  std::thread flusher([&] { flushed.set_value(journal.Flush()); });
  std::future<absl::Status> flush = flushed.get_future();
  EXPECT_EQ(flush.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
      << "Flush returned before a queue ran the dones of the writes before it";
  release.Notify();
  EXPECT_OK(flush.get());
  EXPECT_TRUE(slow_second_ran.load());
  flusher.join();
}

// Async: no `done` runs on a queue, so a dock gets none (and Flush posts
// nothing to one); a submission without a queue is acknowledged and flushed.
TEST(Journal, AsyncGivesNoQueue) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kAsync});
  std::shared_ptr<SerialQueue> queue = journal.NewQueue();
  EXPECT_EQ(queue, nullptr);
  std::promise<absl::Status> acked;
  journal.Submit(One("a"), [&](absl::Status s) { acked.set_value(std::move(s)); }, queue);
  EXPECT_OK(acked.get_future().get());
  EXPECT_OK(journal.Flush());
}

// Async: the store is synced every flush_interval even when batches keep
// arriving and the queue never runs empty (each write takes 2 ms, a batch
// comes every 0.5 ms).
TEST(Journal, AsyncSyncsUnderSteadyLoad) {
  FakeStore store;
  store.SetDelay(absl::Milliseconds(2));
  Journal journal(&store, {.durability = Durability::kAsync,
                           .flush_interval = absl::Milliseconds(10)});
  const absl::Time end = absl::Now() + absl::Milliseconds(200);
  for (int i = 0; absl::Now() < end; ++i) {
    journal.Submit(One(absl::StrCat("k", i)), [](absl::Status s) { EXPECT_OK(s); });
    absl::SleepFor(absl::Microseconds(500));
  }
  // 200 ms at one sync per 10 ms (+ a write's 2 ms): at least a few, even on
  // a loaded machine.
  EXPECT_GE(store.syncs(), 3);
  EXPECT_OK(journal.Flush());
}

TEST(Journal, AsyncFailureIsSticky) {
  FakeStore store;
  Journal journal(&store, {.durability = Durability::kAsync});
  store.FailNext(1, absl::UnavailableError("disk full"));
  journal.Submit(One("a"), [](absl::Status s) { EXPECT_OK(s); });
  EXPECT_STATUS(journal.Flush(), absl::StatusCode::kUnavailable, "disk full");
  absl::Status later;
  journal.Submit(One("b"), [&](absl::Status s) { later = s; });
  EXPECT_STATUS(later, absl::StatusCode::kUnavailable, "disk full");
  EXPECT_STATUS(journal.Flush(), absl::StatusCode::kUnavailable, "disk full");
  EXPECT_FALSE(Has(store, "b"));
}

// Destroying the journal writes what is queued and acknowledges it (sync),
// or writes and syncs it (async).
TEST(Journal, ShutdownDrainsTheQueue) {
  for (Durability durability : {Durability::kSync, Durability::kAsync}) {
    FakeStore store;
    std::atomic<int> acked{0};
    {
      Journal journal(&store, {.durability = durability,
                               .flush_interval = absl::Hours(1)});
      store.Hold();
      for (int i = 0; i < 20; ++i) {
        journal.Submit(One(absl::StrCat("k", i)), [&](absl::Status s) {
          EXPECT_OK(s);
          ++acked;
        });
      }
      store.Release();
    }
    EXPECT_EQ(acked.load(), 20);
    EXPECT_TRUE(Has(store, "k19"));
    if (durability == Durability::kAsync) {
      EXPECT_GE(store.syncs(), 1);
    }
  }
}

}  // namespace
}  // namespace tdock::persist
