// TaskPool and SerialQueue: a queue runs its tasks one at a time in the
// order posted, a queue whose task blocks holds up no other queue, and a
// pool's destruction runs everything posted before it.
#include "common/serial_queue.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tdock {
namespace {

// Concurrency: four threads post 2,000 tasks each to one queue (over a pool
// of four threads). Invariant: no two of its tasks ever run at once, and each
// poster's tasks run in the order it posted them.
TEST(SerialQueueTest, ATaskRunsAloneAndInTheOrderPosted) {
  for (int pool_threads : {1, 4}) {
    SCOPED_TRACE(pool_threads);
    constexpr int kPosters = 4;
    constexpr int kEach = 2000;
    std::atomic<int> running{0};
    std::atomic<bool> overlapped{false};
    std::vector<int> last(kPosters, -1);  // touched by the queue's tasks only
    std::atomic<int> out_of_order{0};
    std::atomic<int> ran{0};
    {
      TaskPool pool(pool_threads);
      std::shared_ptr<SerialQueue> queue = SerialQueue::On(&pool);
      std::vector<std::thread> posters;
      for (int p = 0; p < kPosters; ++p) {
        posters.emplace_back([&, p] {
          for (int i = 0; i < kEach; ++i) {
            queue->Post([&, p, i] {
              if (running.fetch_add(1) != 0) overlapped = true;
              if (last[p] != i - 1) ++out_of_order;
              last[p] = i;
              running.fetch_sub(1);
              ++ran;
            });
          }
        });
      }
      for (std::thread& t : posters) t.join();
    }  // the pool runs every task posted before it goes
    EXPECT_EQ(ran.load(), kPosters * kEach);
    EXPECT_FALSE(overlapped.load()) << "two tasks of one queue ran at once";
    EXPECT_EQ(out_of_order.load(), 0);
  }
}

// Two queues on a pool of two threads, one of whose tasks blocks until
// `release`; however a test ends, the blocked task goes on before the pool
// goes (the pool waits for it).
struct BlockingQueues {
  ~BlockingQueues() {
    if (!release.HasBeenNotified()) release.Notify();
  }

  absl::Notification release;  // outlives the pool
  TaskPool pool{2};
  std::shared_ptr<SerialQueue> busy = SerialQueue::On(&pool);
  std::shared_ptr<SerialQueue> other = SerialQueue::On(&pool);

  void Block() {
    busy->Post([this] { release.WaitForNotification(); });
  }
  // True once `other` ran a task posted now.
  bool OtherRuns() {
    absl::Notification ran;
    other->Post([&ran] { ran.Notify(); });
    return ran.WaitForNotificationWithTimeout(absl::Seconds(30));
  }
};

TEST(SerialQueueTest, AQueueWhoseTaskBlocksHoldsUpNoOtherQueue) {
  BlockingQueues queues;
  queues.Block();
  absl::Notification blocked_ran_next;
  queues.busy->Post([&] { blocked_ran_next.Notify(); });
  EXPECT_TRUE(queues.OtherRuns()) << "a blocked queue held up another queue's task";
  EXPECT_FALSE(blocked_ran_next.HasBeenNotified()) << "a queue's task overtook the one before it";
  queues.release.Notify();
  EXPECT_TRUE(blocked_ran_next.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

// The same with a pool whose one thread is idle when two queues get a task
// each at once: the idle thread takes one, and the other gets a thread of
// its own (the pool once counted the woken thread as free for both).
TEST(SerialQueueTest, ABlockedQueueHoldsUpNoOtherWhenThePoolHadAnIdleThread) {
  BlockingQueues queues;
  absl::Notification warmed;
  queues.busy->Post([&] { warmed.Notify(); });  // starts the pool's first thread
  ASSERT_TRUE(warmed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // Lets that thread go idle (what the test is about; passing does not
  // depend on it).
  absl::SleepFor(absl::Milliseconds(50));
  queues.Block();
  EXPECT_TRUE(queues.OtherRuns()) << "a blocked queue held up another queue's task";
}

TEST(SerialQueueTest, TasksPostedByTasksRunBeforeThePoolIsGone) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(2);
    std::shared_ptr<SerialQueue> a = SerialQueue::On(&pool);
    std::shared_ptr<SerialQueue> b = SerialQueue::On(&pool);
    for (int i = 0; i < 100; ++i) {
      a->Post([&, b] {
        ++ran;
        b->Post([&] { ++ran; });
      });
    }
  }
  EXPECT_EQ(ran.load(), 200);
}

}  // namespace
}  // namespace tdock
