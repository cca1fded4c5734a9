#include "common/serial_queue.h"

#include <utility>

#include "absl/time/time.h"

namespace tdock {

TaskPool::TaskPool(int threads) : max_threads_(threads < 1 ? 1 : threads) {}

TaskPool::~TaskPool() {
  std::vector<std::thread> threads;
  {
    tdock::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
    threads.swap(threads_);  // no thread starts once stop_ is set
  }
  for (std::thread& thread : threads) thread.join();
}

void TaskPool::Post(Task task) {
  {
    tdock::MutexLock lock(&mu_);
    if (!stop_ || running_ > 0) {
      tasks_.push_back(std::move(task));
      // A thread for each task no idle thread takes (an idle thread that
      // was woken but has not yet taken its task still counts as idle, and
      // takes one): a busy thread may be busy for long.
      if (static_cast<int64_t>(tasks_.size()) > idle_ && !stop_ &&
          static_cast<int>(threads_.size()) < max_threads_) {
        ++running_;
        threads_.emplace_back([this] { Run(); });
      }
      cv_.SignalAll();
      return;
    }
  }
  // Every thread has returned (the pool is being destroyed): a task posted
  // by a task that ran last still runs.
  std::move(task)();
}

void TaskPool::Run() {
  for (;;) {
    Task task;
    {
      tdock::MutexLock lock(&mu_);
      while (tasks_.empty() && !stop_) {
        ++idle_;
        cv_.WaitWithDeadline(&mu_, absl::InfiniteFuture());
        --idle_;
      }
      if (tasks_.empty()) {
        // Stopping, and nothing is left; a task still running elsewhere may
        // post more, which the threads still running take.
        --running_;
        return;
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
}

std::shared_ptr<SerialQueue> SerialQueue::On(TaskPool* pool) {
  return std::shared_ptr<SerialQueue>(new SerialQueue(pool));
}

void SerialQueue::Post(Task task) {
  {
    tdock::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
    if (scheduled_) return;  // the turn in progress (or posted) runs it
    scheduled_ = true;
  }
  pool_->Post([self = shared_from_this()] { self->Turn(); });
}

void SerialQueue::Turn() {
  for (int ran = 0;; ++ran) {
    Task task;
    {
      tdock::MutexLock lock(&mu_);
      if (tasks_.empty()) {
        scheduled_ = false;
        return;
      }
      if (ran == kTasksPerTurn) break;  // scheduled_ stays set: the next turn is ours
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::move(task)();
  }
  pool_->Post([self = shared_from_this()] { self->Turn(); });
}

}  // namespace tdock
