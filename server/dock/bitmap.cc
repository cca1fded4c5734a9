#include "server/dock/bitmap.h"

#include <bit>

namespace tdock::internal {

AtomicBitmap::AtomicBitmap(int64_t bits)
    : bits_(bits),
      words_n_((bits + 63) / 64),
      words_(new std::atomic<uint64_t>[words_n_]) {
  Reset();
}

int64_t AtomicBitmap::Count() const {
  int64_t count = 0;
  for (int64_t w = 0; w < words_n_; ++w) {
    // relaxed: statistics only.
    count += std::popcount(words_[w].load(std::memory_order_relaxed));
  }
  return count;
}

void AtomicBitmap::Reset() {
  for (int64_t w = 0; w < words_n_; ++w) {
    words_[w].store(0, std::memory_order_relaxed);
  }
}

}  // namespace tdock::internal
