#include "server/dock/arena.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace tdock::internal {
namespace {

constexpr int64_t kAlign = 64;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

ChunkPool::ChunkPool(int64_t chunk_bytes, int64_t limit_bytes)
    : chunk_bytes_(chunk_bytes), limit_bytes_(limit_bytes) {}

ChunkPool::~ChunkPool() {
  tdock::MutexLock lock(&mu_);
  for (Chunk& chunk : free_) std::free(chunk.data);
}

Chunk ChunkPool::AllocateLocked(int64_t size) {
  if (limit_bytes_ > 0 && reserved_bytes_ + size > limit_bytes_) return {};
  void* data = std::aligned_alloc(kAlign, static_cast<size_t>(size));
  if (data == nullptr) return {};
  reserved_bytes_ += size;
  return Chunk{static_cast<char*>(data), size};
}

void ChunkPool::Preallocate(int64_t bytes) {
  std::vector<Chunk> fresh;
  {
    tdock::MutexLock lock(&mu_);
    while (reserved_bytes_ + chunk_bytes_ <= bytes) {
      Chunk chunk = AllocateLocked(chunk_bytes_);
      if (chunk.data == nullptr) break;
      fresh.push_back(chunk);
    }
  }
  // Touch the pages outside the lock so the first writes run at warm speed.
  for (Chunk& chunk : fresh) std::memset(chunk.data, 0, chunk.size);
  tdock::MutexLock lock(&mu_);
  free_.insert(free_.end(), fresh.begin(), fresh.end());
}

Chunk ChunkPool::Acquire(int64_t min_bytes) {
  tdock::MutexLock lock(&mu_);
  if (min_bytes <= chunk_bytes_) {
    if (!free_.empty()) {
      Chunk chunk = free_.back();
      free_.pop_back();
      return chunk;
    }
    return AllocateLocked(chunk_bytes_);
  }
  // Oversized: dedicated allocation. Free standard chunks first if the limit
  // would otherwise refuse it.
  const int64_t size = RoundUp(min_bytes, kAlign);
  while (limit_bytes_ > 0 && reserved_bytes_ + size > limit_bytes_ &&
         !free_.empty()) {
    std::free(free_.back().data);
    reserved_bytes_ -= free_.back().size;
    free_.pop_back();
  }
  return AllocateLocked(size);
}

void ChunkPool::Release(std::vector<Chunk> chunks) {
  {
    tdock::MutexLock lock(&mu_);
    for (Chunk& chunk : chunks) {
      if (chunk.size == chunk_bytes_) {
        free_.push_back(chunk);
      } else {
        std::free(chunk.data);
        reserved_bytes_ -= chunk.size;
      }
    }
  }
}

int64_t ChunkPool::reserved_bytes() const {
  tdock::MutexLock lock(&mu_);
  return reserved_bytes_;
}

int64_t ChunkPool::available_bytes() const {
  if (limit_bytes_ == 0) return INT64_MAX;
  tdock::MutexLock lock(&mu_);
  int64_t free_bytes = 0;
  for (const Chunk& chunk : free_) free_bytes += chunk.size;
  return limit_bytes_ - reserved_bytes_ + free_bytes;
}

StepArena::StepArena(std::shared_ptr<ChunkPool> pool) : pool_(std::move(pool)) {}

StepArena::~StepArena() {
  std::vector<Chunk> chunks;
  {
    tdock::MutexLock lock(&mu_);
    chunks.swap(chunks_);
  }
  pool_->Release(std::move(chunks));
}

char* StepArena::Allocate(int64_t bytes) {
  const int64_t size = RoundUp(bytes > 0 ? bytes : 1, kAlign);
  tdock::MutexLock lock(&mu_);
  char* region = nullptr;
  if (size > pool_->chunk_bytes()) {
    // Oversized: a dedicated chunk, kept in front so the bump chunk at the
    // back stays current.
    Chunk chunk = pool_->Acquire(size);
    if (chunk.data == nullptr) return nullptr;
    chunks_.insert(chunks_.begin(), chunk);
    region = chunk.data;
  } else {
    if (chunks_.empty() || chunks_.back().size > pool_->chunk_bytes() ||
        offset_ + size > chunks_.back().size) {
      Chunk chunk = pool_->Acquire(size);
      if (chunk.data == nullptr) return nullptr;
      chunks_.push_back(chunk);
      offset_ = 0;
    }
    region = chunks_.back().data + offset_;
    offset_ += size;
  }
  // relaxed: statistics only.
  used_bytes_.fetch_add(size, std::memory_order_relaxed);
  return region;
}

}  // namespace tdock::internal
