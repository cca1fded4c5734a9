// BufferPool: receive buffers are reused once released, stay aligned, and
// the pool's idle memory is capped.
#include "client/buffer_pool.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

// A released buffer is handed out again for a request of a similar size.
TEST(BufferPool, ReusesReleasedBuffers) {
  BufferPool pool;
  char* first = nullptr;
  {
    std::shared_ptr<char> a = pool.Acquire(100000);
    first = a.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  }
  EXPECT_EQ(pool.pooled_bytes(), 128 << 10);
  std::shared_ptr<char> b = pool.Acquire(120000);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pool.pooled_bytes(), 0);
}

// Idle buffers beyond the cap are freed, not kept.
TEST(BufferPool, CapsIdleBytes) {
  BufferPool pool(/*max_pooled_bytes=*/128 << 10);
  {
    std::shared_ptr<char> a = pool.Acquire(64 << 10);
    std::shared_ptr<char> b = pool.Acquire(64 << 10);
    std::shared_ptr<char> c = pool.Acquire(64 << 10);
  }
  EXPECT_EQ(pool.pooled_bytes(), 128 << 10);
}

// Buffers may outlive the pool, and threads may acquire and release at once.
TEST(BufferPool, BuffersOutliveThePoolAndThreadsShareIt) {
  std::shared_ptr<char> survivor;
  {
    BufferPool pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&pool] {
        for (int i = 0; i < 200; ++i) {
          std::shared_ptr<char> buffer = pool.Acquire(static_cast<size_t>(1000 * (i % 7 + 1)));
          buffer.get()[0] = static_cast<char>(i);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    survivor = pool.Acquire(10);
  }
  survivor.get()[0] = 1;  // still valid after the pool is gone
  survivor.reset();
}

}  // namespace
}  // namespace tdock::internal
