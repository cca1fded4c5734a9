// TaskPool and SerialQueue: work that must run in order (one dock's record
// completions: its Puts made ready and answered, the Gets they wake, the
// rounds those plan) on a small pool of threads that many such queues
// share, so that a long task delays only the queue it is on.
//
//   TaskPool pool(4);
//   std::shared_ptr<SerialQueue> queue = SerialQueue::On(&pool);
//   queue->Post([] { ... });  // runs after every task posted to `queue` before
//
// Thread safety: Post may be called from any thread, also from a task. The
// pool starts a thread for a task that no idle thread will take, up to its
// size: up to that many queues can be busy at once without holding up the
// others. A queue runs one task at a time, in the order posted, on any one of the
// pool's threads; a queue with tasks holds at most one thread, and gives it
// back after a few tasks so that busy queues take turns with the others.
// A queue keeps itself alive while it has tasks to run. ~TaskPool runs
// every task posted to the pool or to a queue on it before it returns, then
// joins its threads; the pool must outlive every queue's last Post.
#ifndef TDOCK_COMMON_SERIAL_QUEUE_H_
#define TDOCK_COMMON_SERIAL_QUEUE_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "common/mutex.h"

namespace tdock {

class TaskPool final {
 public:
  using Task = absl::AnyInvocable<void() &&>;
  // At most `threads` (at least 1), started as tasks come.
  explicit TaskPool(int threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs `task` on one of the pool's threads, in no particular order with
  // other tasks.
  void Post(Task task);

 private:
  void Run();

  const int max_threads_;
  tdock::Mutex mu_;
  CondVar cv_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int idle_ ABSL_GUARDED_BY(mu_) = 0;     // threads waiting for a task
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // threads started and not yet returned
  // Appended while !stop_; joined by the destructor, once stop_ is set.
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

class SerialQueue final : public std::enable_shared_from_this<SerialQueue> {
 public:
  using Task = TaskPool::Task;
  // A queue whose tasks run on `pool` (borrowed).
  static std::shared_ptr<SerialQueue> On(TaskPool* pool);
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  void Post(Task task);

 private:
  // Tasks one turn on a pool thread runs at most, before the queue lets
  // other queues' turns go first.
  static constexpr int kTasksPerTurn = 16;

  explicit SerialQueue(TaskPool* pool) : pool_(pool) {}
  // One turn: runs queued tasks in order; posts another turn if some are
  // left after kTasksPerTurn.
  void Turn();

  TaskPool* const pool_;
  tdock::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool scheduled_ ABSL_GUARDED_BY(mu_) = false;  // a turn is posted or running
};

}  // namespace tdock

#endif  // TDOCK_COMMON_SERIAL_QUEUE_H_
