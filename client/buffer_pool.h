// BufferPool: reusable 64-byte-aligned receive buffers for the client.
//
// Copying a Get's payload into fresh memory runs at page-fault speed (about
// 1.5 GB/s here) while warm memory takes 9-15 GB/s, so the client keeps the
// buffers of batches it has handed out and reuses them once those batches
// are gone. A buffer returns to the pool when the last ClientBatch holding
// it is destroyed; the pool keeps at most `max_pooled_bytes` idle.
//
// Thread safety: Acquire may be called concurrently, and buffers may be
// released from any thread. Buffers keep the pool's state alive, so they may
// outlive the pool (and the Client).
#ifndef TDOCK_CLIENT_BUFFER_POOL_H_
#define TDOCK_CLIENT_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tdock::internal {

class BufferPool final {
 public:
  // Default keeps up to 1 GiB of idle buffers.
  explicit BufferPool(int64_t max_pooled_bytes = int64_t{1} << 30);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` bytes, 64-byte aligned. Capacities are
  // powers of two from 64 KiB, so buffers of similar sizes are shared.
  std::shared_ptr<char> Acquire(size_t bytes);

  int64_t pooled_bytes() const;  // idle bytes held now

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace tdock::internal

#endif  // TDOCK_CLIENT_BUFFER_POOL_H_
