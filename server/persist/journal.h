// Journal: the one write-behind thread between the docks and the Store. It
// group-commits: every batch queued while a write is in progress goes into
// the next write, so a burst of Puts costs one WAL sync, not one each. No
// Store call runs on the caller's (RPC) thread.
//
//   sync:  a batch's `done` runs once the write that holds it is in the WAL
//          and synced (or failed: then with the error, naming the store);
//   async: `done` runs at once in Submit; the batch is written in the
//          background and synced within flush_interval. A failed background
//          write makes the journal fail every later Submit with its error.
//          Backpressure: while more than async_queue_bytes wait to be
//          written, `done` runs only once the batch is written (as in sync,
//          without the sync), so producers faster than the disk slow down
//          instead of pinning ever more memory.
//
// Thread safety: Submit and Flush may be called from any thread. `done`
// callbacks run on the journal's completion thread, in the order of the
// writes (sync, and async batches held back), or on the caller's (async),
// with no journal lock held: never on the thread that writes, so the next
// group commit does not wait for what the callbacks do. With sync
// durability, a batch submitted with a queue (NewQueue: one per dock) has
// its `done` run on that queue instead, in the order of the writes too,
// over a small pool of threads the queues share: one dock's slow
// completions (the Gets and rounds a Put wakes) delay neither the
// completion thread nor another dock's. A `done` must not wait for the
// journal (Flush, or another batch's `done`).
#ifndef TDOCK_SERVER_PERSIST_JOURNAL_H_
#define TDOCK_SERVER_PERSIST_JOURNAL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/serial_executor.h"
#include "common/serial_queue.h"
#include "server/persist/store.h"

namespace tdock::persist {

enum class Durability { kSync, kAsync };

class Journal final {
 public:
  struct Options {
    Durability durability = Durability::kSync;
    absl::Duration flush_interval = absl::Milliseconds(100);  // async only
    int64_t async_queue_bytes = int64_t{256} << 20;            // async only
    // Threads that run the queues' completions (NewQueue). Default: 4.
    int queue_threads = 4;
  };
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // `store` is borrowed and must outlive the journal.
  Journal(Store* store, Options options);
  // Writes (and syncs) everything queued, runs every pending `done`, stops.
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // `queue` (sync durability; may be null): where `done` runs.
  void Submit(StoreBatch batch, Done done, std::shared_ptr<SerialQueue> queue = nullptr);
  // Submit for a caller that holds a lock of its own: queues the batch and
  // returns what to run once that lock is released (`done`, when it is
  // answered at once), or nothing.
  absl::AnyInvocable<void() &&> Enqueue(StoreBatch batch, Done done,
                                        std::shared_ptr<SerialQueue> queue = nullptr);
  // A queue for the completions of one submitter's batches; null with
  // async durability, which runs no `done` on a queue (so Flush waits for
  // no queue).
  std::shared_ptr<SerialQueue> NewQueue();
  // Returns once everything submitted before the call is durable and the
  // `done` of every write before it has run (on its queue too); the error
  // of a failed write if there was one since the last Flush (async).
  absl::Status Flush();
  // Flush, then runs `task` on the journal thread (no write runs meanwhile)
  // and returns its status: for what reads the store as of now, such as a
  // checkpoint, without a Store call on the caller's thread.
  absl::Status RunWhenFlushed(absl::AnyInvocable<absl::Status() &&> task);
  // The same without waiting: `done` gets the task's status (or the flush's
  // error), on the completion thread.
  void WhenFlushed(absl::AnyInvocable<absl::Status() &&> task, Done done);

  struct Stats {
    int64_t batches = 0;  // submitted
    int64_t writes = 0;   // store writes (group commits)
    int64_t bytes = 0;
    int64_t held = 0;     // async batches acknowledged only once written
  };
  Stats stats() const;
  Durability durability() const { return options_.durability; }

 private:
  struct Pending {
    StoreBatch batch;
    Done done;  // empty for async batches
    std::shared_ptr<SerialQueue> queue;  // where `done` runs (null: the completion thread)
    bool flush = false;  // a Flush marker: sync the store
    absl::AnyInvocable<absl::Status() &&> task;  // then run this (RunWhenFlushed)
  };
  void Run();
  // On the completion thread, once the `done`s of the writes before a
  // Flush ran or were posted: runs `done` once every queue ran those too.
  void AfterQueues(Done done, absl::Status status);

  Store* const store_;
  const Options options_;
  mutable tdock::Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // async: the first failed write
  bool unsynced_ ABSL_GUARDED_BY(mu_) = false;  // async writes since the last sync
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet written
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;  // async batches held whose `done` has not run
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<SerialQueue>> queues_ ABSL_GUARDED_BY(mu_);  // NewQueue's
  // Destroyed in this order: the completion thread's last tasks may post to
  // queues, whose tasks the pool then runs.
  TaskPool queue_pool_;
  SerialExecutor completions_;  // runs the `done`s; drained after thread_ stops
  std::thread thread_;
};

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_JOURNAL_H_
