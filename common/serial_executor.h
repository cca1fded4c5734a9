// SerialExecutor: one thread that runs posted tasks in the order they were
// posted. The journal runs its completions on one, so that no dock work (a
// Put's cells made ready, the Gets it wakes) runs on the journal's thread.
//
//   SerialExecutor completions;
//   completions.Post([] { ... });
//
// Thread safety: Post may be called from any thread, also from a task.
// Destruction runs every task posted before it, then joins the thread; a task
// must not destroy its own executor.
#ifndef TDOCK_COMMON_SERIAL_EXECUTOR_H_
#define TDOCK_COMMON_SERIAL_EXECUTOR_H_

#include <deque>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "common/mutex.h"

namespace tdock {

class SerialExecutor final {
 public:
  using Task = absl::AnyInvocable<void() &&>;
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Post(Task task);
  // True on the executor's own thread.
  bool OnThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run();

  tdock::Mutex mu_;
  CondVar cv_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace tdock

#endif  // TDOCK_COMMON_SERIAL_EXECUTOR_H_
