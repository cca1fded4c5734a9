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

TEST(SerialQueueTest, AQueueWhoseTaskBlocksHoldsUpNoOtherQueue) {
  TaskPool pool(2);
  std::shared_ptr<SerialQueue> busy = SerialQueue::On(&pool);
  std::shared_ptr<SerialQueue> other = SerialQueue::On(&pool);
  absl::Notification release;
  absl::Notification blocked_ran_next;
  busy->Post([&] { release.WaitForNotification(); });
  busy->Post([&] { blocked_ran_next.Notify(); });
  absl::Notification other_ran;
  other->Post([&] { other_ran.Notify(); });
  EXPECT_TRUE(other_ran.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "a blocked queue held up another queue's task";
  EXPECT_FALSE(blocked_ran_next.HasBeenNotified()) << "a queue's task overtook the one before it";
  release.Notify();
  EXPECT_TRUE(blocked_ran_next.WaitForNotificationWithTimeout(absl::Seconds(30)));
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
