#include "client/buffer_pool.h"

#include <map>
#include <new>
#include <utility>

#include "common/mutex.h"

namespace tdock::internal {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMinCapacity = size_t{64} << 10;

size_t CapacityFor(size_t bytes) {
  size_t capacity = kMinCapacity;
  while (capacity < bytes) capacity <<= 1;
  return capacity;
}

char* NewBuffer(size_t capacity) {
  return static_cast<char*>(::operator new(capacity, std::align_val_t{kAlignment}));
}

void DeleteBuffer(char* data) { ::operator delete(data, std::align_val_t{kAlignment}); }

}  // namespace

struct BufferPool::State {
  explicit State(int64_t max) : max_pooled_bytes(max) {}
  ~State() {
    for (auto& [capacity, data] : idle) DeleteBuffer(data);
  }

  // Keeps the buffer for reuse if there is room, else frees it.
  void Give(char* data, size_t capacity) {
    {
      tdock::MutexLock lock(&mu);
      if (pooled_bytes + static_cast<int64_t>(capacity) <= max_pooled_bytes) {
        idle.emplace(capacity, data);
        pooled_bytes += static_cast<int64_t>(capacity);
        return;
      }
    }
    DeleteBuffer(data);
  }

  const int64_t max_pooled_bytes;
  tdock::Mutex mu;
  std::multimap<size_t, char*> idle ABSL_GUARDED_BY(mu);  // by capacity
  int64_t pooled_bytes ABSL_GUARDED_BY(mu) = 0;
};

BufferPool::BufferPool(int64_t max_pooled_bytes)
    : state_(std::make_shared<State>(max_pooled_bytes)) {}

BufferPool::~BufferPool() = default;

std::shared_ptr<char> BufferPool::Acquire(size_t bytes) {
  const size_t capacity = CapacityFor(bytes);
  char* data = nullptr;
  {
    tdock::MutexLock lock(&state_->mu);
    auto it = state_->idle.find(capacity);
    if (it != state_->idle.end()) {
      data = it->second;
      state_->idle.erase(it);
      state_->pooled_bytes -= static_cast<int64_t>(capacity);
    }
  }
  if (data == nullptr) data = NewBuffer(capacity);
  std::shared_ptr<State> state = state_;
  return std::shared_ptr<char>(data, [state, capacity](char* p) {
    state->Give(p, capacity);
  });
}

int64_t BufferPool::pooled_bytes() const {
  tdock::MutexLock lock(&state_->mu);
  return state_->pooled_bytes;
}

}  // namespace tdock::internal
