#include "server/persist/journal.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tdock::persist {
namespace {

absl::Status Named(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("journal: ", status.message()));
}

}  // namespace

Journal::Journal(Store* store, Options options)
    : store_(store),
      options_(options),
      queue_pool_(options.queue_threads),
      thread_([this] { Run(); }) {}

Journal::~Journal() {
  {
    tdock::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

void Journal::Submit(StoreBatch batch, Done done, std::shared_ptr<SerialQueue> queue) {
  absl::AnyInvocable<void() &&> now = Enqueue(std::move(batch), std::move(done), std::move(queue));
  if (now) std::move(now)();
}

std::shared_ptr<SerialQueue> Journal::NewQueue() {
  // Async: `done`s run where Enqueue says, never on a queue.
  if (options_.durability != Durability::kSync) return nullptr;
  std::shared_ptr<SerialQueue> queue = SerialQueue::On(&queue_pool_);
  tdock::MutexLock lock(&mu_);
  std::erase_if(queues_, [](const std::weak_ptr<SerialQueue>& q) { return q.expired(); });
  queues_.push_back(queue);
  return queue;
}

absl::AnyInvocable<void() &&> Journal::Enqueue(StoreBatch batch, Done done,
                                               std::shared_ptr<SerialQueue> queue) {
  const bool sync = options_.durability == Durability::kSync;
  bool now = !sync;  // async: acknowledged here, unless refused or held back
  absl::Status refused;
  {
    tdock::MutexLock lock(&mu_);
    ++stats_.batches;
    if (!sync && !failed_.ok()) {
      refused = failed_;
    } else {
      // Once one batch is held back, later ones are too until its `done`
      // has run: completions keep the order of the batches.
      if (!sync && (held_ > 0 || (queued_bytes_ + batch.bytes() > options_.async_queue_bytes &&
                                  queued_bytes_ > 0))) {
        now = false;
        ++held_;
        ++stats_.held;
      }
      queued_bytes_ += batch.bytes();
      // async: a held batch's `done` keeps the completion thread, which
      // keeps the order of every batch's answer.
      queue_.push_back({std::move(batch), now ? Done() : std::move(done),
                        sync ? std::move(queue) : nullptr, false});
      cv_.SignalAll();
    }
  }
  if (!now) return {};
  return [done = std::move(done), refused = std::move(refused)]() mutable {
    std::move(done)(std::move(refused));
  };
}

absl::Status Journal::Flush() { return RunWhenFlushed(nullptr); }

absl::Status Journal::RunWhenFlushed(absl::AnyInvocable<absl::Status() &&> task) {
  std::promise<absl::Status> flushed;
  WhenFlushed(std::move(task), [&flushed](absl::Status s) { flushed.set_value(std::move(s)); });
  return flushed.get_future().get();
}

void Journal::WhenFlushed(absl::AnyInvocable<absl::Status() &&> task, Done done) {
  tdock::MutexLock lock(&mu_);
  queue_.push_back({StoreBatch(), std::move(done), nullptr, true, std::move(task)});
  cv_.SignalAll();
}

void Journal::AfterQueues(Done done, absl::Status status) {
  std::vector<std::shared_ptr<SerialQueue>> queues;
  {
    tdock::MutexLock lock(&mu_);
    for (const std::weak_ptr<SerialQueue>& weak : queues_) {
      if (std::shared_ptr<SerialQueue> queue = weak.lock()) queues.push_back(std::move(queue));
    }
  }
  if (queues.empty()) {
    std::move(done)(std::move(status));
    return;
  }
  // Each queue runs its earlier completions before this; the last queue to
  // get here runs `done`.
  struct Barrier {
    std::atomic<size_t> left;
    Done done;
    absl::Status status;
  };
  auto barrier = std::make_shared<Barrier>();
  barrier->left.store(queues.size(), std::memory_order_relaxed);
  barrier->done = std::move(done);
  barrier->status = std::move(status);
  for (const std::shared_ptr<SerialQueue>& queue : queues) {
    queue->Post([barrier] {
      // acq_rel: every queue's earlier completions happen before `done`.
      if (barrier->left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::move(barrier->done)(std::move(barrier->status));
      }
    });
  }
}

Journal::Stats Journal::stats() const {
  tdock::MutexLock lock(&mu_);
  return stats_;
}

void Journal::Run() {
  const bool sync = options_.durability == Durability::kSync;
  absl::Time last_sync = absl::Now();
  for (;;) {
    std::deque<Pending> work;
    bool sync_now = false;
    bool stopping = false;
    {
      tdock::MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) {
        const absl::Time deadline =
            unsynced_ ? last_sync + options_.flush_interval : absl::InfiniteFuture();
        if (cv_.WaitWithDeadline(&mu_, deadline) && queue_.empty()) {
          sync_now = true;  // async: the flush interval passed
          break;
        }
      }
      work.swap(queue_);
      stopping = stop_;
    }
    // Writes the batches merged so far as one group commit; runs their dones.
    StoreBatch merged;
    std::vector<std::pair<Done, std::shared_ptr<SerialQueue>>> dones;
    auto write = [&] {
      if (merged.empty() && dones.empty()) return;
      const int64_t bytes = merged.bytes();
      const absl::Status status =
          merged.empty() ? absl::OkStatus() : Named(store_->Write(merged, sync));
      merged = StoreBatch();
      {
        tdock::MutexLock lock(&mu_);
        ++stats_.writes;
        stats_.bytes += bytes;
        queued_bytes_ -= bytes;
        if (!sync) {
          unsynced_ = true;
          if (!status.ok() && failed_.ok()) failed_ = status;
        }
      }
      if (!dones.empty()) {
        // async: only held batches have a `done` here.
        const int64_t held = sync ? 0 : static_cast<int64_t>(dones.size());
        completions_.Post([this, dones = std::move(dones), status, held]() mutable {
          for (auto& [done, queue] : dones) {
            if (queue == nullptr) {
              std::move(done)(status);
            } else {
              queue->Post([done = std::move(done), status]() mutable { std::move(done)(status); });
            }
          }
          if (held == 0) return;
          tdock::MutexLock lock(&mu_);
          held_ -= held;
        });
        dones.clear();
      }
    };
    auto sync_store = [&]() -> absl::Status {
      const absl::Status status = Named(store_->Sync());
      last_sync = absl::Now();
      tdock::MutexLock lock(&mu_);
      unsynced_ = false;
      if (!status.ok() && failed_.ok()) failed_ = status;
      return failed_;
    };
    for (Pending& p : work) {
      if (p.flush) {
        write();
        absl::Status status = sync ? absl::OkStatus() : sync_store();
        if (status.ok() && p.task) status = std::move(p.task)();
        // After the completions of the writes before it.
        completions_.Post([this, done = std::move(p.done), status = std::move(status)]() mutable {
          AfterQueues(std::move(done), std::move(status));
        });
        continue;
      }
      merged.Append(std::move(p.batch));
      if (p.done) dones.emplace_back(std::move(p.done), std::move(p.queue));
    }
    write();
    // async: a sync is due every flush_interval, also while writes keep
    // coming (the wait above syncs only when the queue runs empty).
    if (!sync && !sync_now && absl::Now() - last_sync >= options_.flush_interval) {
      tdock::MutexLock lock(&mu_);
      sync_now = unsynced_;
    }
    if (sync_now) (void)sync_store();
    if (stopping) {
      bool more = false;
      bool unsynced = false;
      {
        tdock::MutexLock lock(&mu_);
        more = !queue_.empty();
        unsynced = unsynced_;
      }
      if (!more) {
        if (unsynced) (void)sync_store();
        return;
      }
    }
  }
}

}  // namespace tdock::persist
