#include "server/dock/arena.h"

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <utility>

namespace tdock::internal {
namespace {

constexpr int64_t kAlign = 64;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

ChunkPool::ChunkPool(int64_t chunk_bytes, int64_t limit_bytes,
                     std::shared_ptr<ChunkMemory> memory)
    : chunk_bytes_(chunk_bytes), limit_bytes_(limit_bytes), memory_(std::move(memory)) {}

ChunkPool::~ChunkPool() {
  tdock::MutexLock lock(&mu_);
  for (Chunk& chunk : free_) FreeLocked(chunk);
}

Chunk ChunkPool::AllocateLocked(int64_t size) {
  // The callers keep to the limit (AcquireBatch may go past it on request).
  void* data = memory_ != nullptr ? memory_->Allocate(size)
                                  : std::aligned_alloc(kAlign, static_cast<size_t>(size));
  if (data == nullptr) return {};
  reserved_bytes_ += size;
  return Chunk{static_cast<char*>(data), size};
}

void ChunkPool::Preallocate(int64_t bytes) {
  std::vector<Chunk> fresh;
  {
    tdock::MutexLock lock(&mu_);
    while (reserved_bytes_ + chunk_bytes_ <= bytes &&
           (limit_bytes_ == 0 || reserved_bytes_ + chunk_bytes_ <= limit_bytes_)) {
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

void ChunkPool::FreeLocked(const Chunk& chunk) {
  if (memory_ != nullptr) {
    memory_->Free(chunk.data, chunk.size);
  } else {
    std::free(chunk.data);
  }
  reserved_bytes_ -= chunk.size;
}

std::vector<Chunk> ChunkPool::AcquireBatch(int64_t standard,
                                           const std::vector<int64_t>& oversized,
                                           bool past_limit) {
  tdock::MutexLock lock(&mu_);
  const int64_t reused = std::min<int64_t>(standard, static_cast<int64_t>(free_.size()));
  int64_t fresh = (standard - reused) * chunk_bytes_;
  for (int64_t size : oversized) fresh += RoundUp(size, kAlign);
  if (limit_bytes_ > 0) {
    // Free idle standard chunks this batch does not reuse, if that makes room.
    while (reserved_bytes_ + fresh > limit_bytes_ &&
           static_cast<int64_t>(free_.size()) > reused) {
      FreeLocked(free_.back());
      free_.pop_back();
    }
    if (reserved_bytes_ + fresh > limit_bytes_ && !past_limit) return {};
  }
  std::vector<Chunk> out;
  for (int64_t i = 0; i < reused; ++i) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  for (int64_t i = reused; i < standard; ++i) out.push_back(AllocateLocked(chunk_bytes_));
  for (int64_t size : oversized) out.push_back(AllocateLocked(RoundUp(size, kAlign)));
  for (const Chunk& chunk : out) {
    if (chunk.data != nullptr) continue;
    // Out of host memory: give everything back and report failure.
    for (const Chunk& c : out) {
      if (c.data != nullptr) FreeLocked(c);
    }
    return {};
  }
  return out;
}

void ChunkPool::Release(std::vector<Chunk> chunks) {
  {
    tdock::MutexLock lock(&mu_);
    for (Chunk& chunk : chunks) {
      if (chunk.size == chunk_bytes_) {
        free_.push_back(chunk);
      } else {
        FreeLocked(chunk);
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

bool StepArena::AllocateBatch(const std::vector<int64_t>& sizes, std::vector<char*>& out,
                              bool past_limit) {
  const int64_t chunk_bytes = pool_->chunk_bytes();
  tdock::MutexLock lock(&mu_);
  // Plan the bump allocation first, to take every chunk it needs at once.
  const bool usable = !chunks_.empty() && chunks_.back().size == chunk_bytes;
  int64_t room = usable ? chunk_bytes - offset_ : 0;
  int64_t standard = 0;
  std::vector<int64_t> oversized;
  for (int64_t bytes : sizes) {
    const int64_t size = RoundUp(bytes > 0 ? bytes : 1, kAlign);
    if (size > chunk_bytes) {
      oversized.push_back(size);
    } else if (size <= room) {
      room -= size;
    } else {
      ++standard;
      room = chunk_bytes - size;
    }
  }
  std::vector<Chunk> fresh;
  if (standard > 0 || !oversized.empty()) {
    fresh = pool_->AcquireBatch(standard, oversized, past_limit);
    if (fresh.empty()) return false;
  }
  // Oversized chunks go in front so the bump chunk stays at the back.
  size_t next_standard = 0;
  size_t next_oversized = static_cast<size_t>(standard);
  if (!usable) offset_ = chunk_bytes;  // forces a fresh chunk for the first fit
  out.clear();
  int64_t total = 0;
  for (int64_t bytes : sizes) {
    const int64_t size = RoundUp(bytes > 0 ? bytes : 1, kAlign);
    total += size;
    if (size > chunk_bytes) {
      const Chunk& chunk = fresh[next_oversized++];
      chunks_.insert(chunks_.begin(), chunk);
      out.push_back(chunk.data);
      continue;
    }
    if (offset_ + size > chunk_bytes) {
      chunks_.push_back(fresh[next_standard++]);
      offset_ = 0;
    }
    out.push_back(chunks_.back().data + offset_);
    offset_ += size;
  }
  // relaxed: statistics only.
  used_bytes_.fetch_add(total, std::memory_order_relaxed);
  return true;
}

}  // namespace tdock::internal
