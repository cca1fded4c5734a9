#include "common/serial_executor.h"

#include <utility>

#include "absl/time/time.h"

namespace tdock {

SerialExecutor::SerialExecutor() : thread_([this] { Run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    tdock::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

void SerialExecutor::Post(Task task) {
  tdock::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  cv_.SignalAll();
}

void SerialExecutor::Run() {
  for (;;) {
    std::deque<Task> batch;
    {
      tdock::MutexLock lock(&mu_);
      while (tasks_.empty() && !stop_) cv_.WaitWithDeadline(&mu_, absl::InfiniteFuture());
      if (tasks_.empty()) return;  // stopping, and everything ran
      batch.swap(tasks_);
    }
    for (Task& task : batch) std::move(task)();
  }
}

}  // namespace tdock
