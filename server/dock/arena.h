// Column arenas: where cell payload lives.
//
// ChunkPool owns large 64-byte-aligned chunks for one dock. StepArena takes
// chunks from the pool for one step and hands out regions by bump allocation;
// when the StepArena dies (its step released and the last batch that pinned
// it gone) its chunks go back to the pool, so a steady state allocates no new
// memory and writes into warm pages.
//
// Thread safety: both classes are thread-safe. The pool is shared_ptr-owned
// by the dock and by every StepArena, so a batch that outlives its dock still
// frees into a live pool.
#ifndef TDOCK_SERVER_DOCK_ARENA_H_
#define TDOCK_SERVER_DOCK_ARENA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/mutex.h"

namespace tdock::internal {

struct Chunk {
  char* data = nullptr;
  int64_t size = 0;
};

// Where a pool's chunks come from: the heap by default; a shard's may be
// shared memory that same-host clients map (server/shard/shm_chunks.h).
// Thread safety: called under the pool's lock, from any thread.
class ChunkMemory {
 public:
  virtual ~ChunkMemory() = default;
  // `size` bytes, 64-byte aligned, every page backed; null when there are
  // none to be had.
  virtual char* Allocate(int64_t size) = 0;
  virtual void Free(char* data, int64_t size) = 0;
};

class ChunkPool final : public std::enable_shared_from_this<ChunkPool> {
 public:
  // limit_bytes 0: unlimited; memory null: the heap.
  ChunkPool(int64_t chunk_bytes, int64_t limit_bytes,
            std::shared_ptr<ChunkMemory> memory = nullptr);
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // Allocates chunks up to `bytes` ahead of use and touches their pages.
  void Preallocate(int64_t bytes);
  // `standard` chunks of chunk_bytes plus one dedicated chunk per entry of
  // `oversized` (sizes past chunk_bytes), all or none: empty when the memory
  // limit does not allow them all now (unless `past_limit`), or the host has
  // no memory.
  std::vector<Chunk> AcquireBatch(int64_t standard, const std::vector<int64_t>& oversized,
                                  bool past_limit = false);
  // Returns chunks; standard ones are kept for reuse, oversized ones freed.
  void Release(std::vector<Chunk> chunks);

  int64_t chunk_bytes() const { return chunk_bytes_; }
  int64_t limit_bytes() const { return limit_bytes_; }
  int64_t reserved_bytes() const;  // bytes of all chunks allocated
  // Bytes that Acquire could still hand out (free chunks plus headroom under
  // the limit); INT64_MAX when unlimited.
  int64_t available_bytes() const;

 private:
  Chunk AllocateLocked(int64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(const Chunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const int64_t chunk_bytes_;
  const int64_t limit_bytes_;
  const std::shared_ptr<ChunkMemory> memory_;  // null: the heap

  mutable tdock::Mutex mu_;
  std::vector<Chunk> free_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class StepArena final {
 public:
  explicit StepArena(std::shared_ptr<ChunkPool> pool);
  ~StepArena();  // returns chunks to the pool
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;

  // 64-byte-aligned regions of sizes[i] bytes into out[i], all or none:
  // false (and nothing taken) when the pool's memory limit does not allow
  // them all (unless `past_limit`), so a Put that cannot fit wastes no space.
  bool AllocateBatch(const std::vector<int64_t>& sizes, std::vector<char*>& out,
                     bool past_limit = false);
  int64_t used_bytes() const {
    // relaxed: statistics only.
    return used_bytes_.load(std::memory_order_relaxed);
  }

 private:
  const std::shared_ptr<ChunkPool> pool_;
  std::atomic<int64_t> used_bytes_{0};

  tdock::Mutex mu_;
  std::vector<Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;  // bump offset in chunks_.back()
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ARENA_H_
