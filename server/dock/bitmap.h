// AtomicBitmap: a fixed-size bitmap of atomic 64-bit words.
//
// Thread safety: Set/Claim/Clear/Test/word may run concurrently from any
// thread. Reset must not run concurrently with anything else (the dock calls
// it with the partition held exclusively).
//
// Memory ordering: a bit is a publication flag. Setting a ready bit uses
// release so that the cell written before it is visible to a reader that
// loads the word with acquire. Claiming (fetch_or on a consumed bitmap) uses
// acq_rel: the claimer must see the publication the ready bit carried, and
// competing claimers must agree on one total order per word (which any RMW
// gives). Count is relaxed: it only feeds statistics.
#ifndef TDOCK_SERVER_DOCK_BITMAP_H_
#define TDOCK_SERVER_DOCK_BITMAP_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace tdock::internal {

class AtomicBitmap final {
 public:
  explicit AtomicBitmap(int64_t bits);
  AtomicBitmap(const AtomicBitmap&) = delete;
  AtomicBitmap& operator=(const AtomicBitmap&) = delete;

  int64_t bits() const { return bits_; }
  int64_t num_words() const { return words_n_; }

  // Returns true if the bit was clear before (this call set it).
  bool Set(int64_t i) {
    const uint64_t mask = uint64_t{1} << (i & 63);
    // release: publishes the data written before the bit was set.
    return (words_[i >> 6].fetch_or(mask, std::memory_order_release) & mask) == 0;
  }
  bool Test(int64_t i) const {
    // acquire: pairs with Set's release.
    return (words_[i >> 6].load(std::memory_order_acquire) >> (i & 63)) & 1;
  }
  uint64_t word(int64_t w) const {
    // acquire: pairs with Set's release.
    return words_[w].load(std::memory_order_acquire);
  }
  // Sets `mask` in word w; returns the bits this call set (mask & ~previous).
  uint64_t Claim(int64_t w, uint64_t mask) {
    // acq_rel: see what the ready bits published; order competing claims.
    return mask & ~words_[w].fetch_or(mask, std::memory_order_acq_rel);
  }
  // Replaces word w with `bits`; returns the word it held.
  uint64_t Exchange(int64_t w, uint64_t bits) {
    // acq_rel: readers that load the word see the bits in order.
    return words_[w].exchange(bits, std::memory_order_acq_rel);
  }
  // Clears `mask` in word w (undoing a Claim).
  void Clear(int64_t w, uint64_t mask) {
    // release: a later claimer of these bits sees our undo in order.
    words_[w].fetch_and(~mask, std::memory_order_release);
  }
  // Mask of the valid bits of word w (the last word may be partial).
  uint64_t valid_mask(int64_t w) const {
    const int64_t rest = bits_ - (w << 6);
    return rest >= 64 ? ~uint64_t{0} : ((uint64_t{1} << rest) - 1);
  }
  // Number of set bits (a relaxed snapshot).
  int64_t Count() const;
  // Clears every bit. REQUIRES: no concurrent access.
  void Reset();

 private:
  const int64_t bits_;
  const int64_t words_n_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_BITMAP_H_
