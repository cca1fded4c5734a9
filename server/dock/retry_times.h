// RetryTimes: when the dock's alarm tries again, per kind, what failed or
// lost a race at a time (a stale pass-over's record, a Reserve's race with a
// start of its step, the drop of a sealed step's orphans and a carry into
// the next step: kOrphans, for both).
//
// Invariants: a kind's time is unset or the time asked last (a later ask
// replaces it); TakeDue clears a due time at most once, so one alarm pass
// runs each retry once, and a retry asked meanwhile for later is kept.
//
// Thread safety: lock-free; the times are hints (what a retry wakes checks
// everything again under the dock's locks), so relaxed atomics suffice.
#ifndef TDOCK_SERVER_DOCK_RETRY_TIMES_H_
#define TDOCK_SERVER_DOCK_RETRY_TIMES_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace tdock::internal {

class RetryTimes final {
 public:
  enum Kind { kStaleGets, kReserves, kOrphans, kKinds };

  // Kind's retry is due at `at`.
  void Ask(Kind kind, absl::Time at) {
    at_ns_[kind].store(absl::ToUnixNanos(at), std::memory_order_relaxed);
  }
  // Whether kind's retry is due at `now`; a due one is cleared by the one
  // call that returns true.
  bool TakeDue(Kind kind, absl::Time now) {
    std::atomic<int64_t>& at = at_ns_[kind];
    int64_t due = at.load(std::memory_order_relaxed);
    return due != kNone && absl::ToUnixNanos(now) >= due &&
           at.compare_exchange_strong(due, kNone, std::memory_order_relaxed);
  }
  // The earliest retry asked and not taken; InfiniteFuture if none.
  absl::Time Next() const {
    absl::Time next = absl::InfiniteFuture();
    for (const std::atomic<int64_t>& at : at_ns_) {
      const int64_t ns = at.load(std::memory_order_relaxed);
      if (ns != kNone) next = std::min(next, absl::FromUnixNanos(ns));
    }
    return next;
  }

 private:
  static constexpr int64_t kNone = 0;  // unix ns 0: no retry asked
  std::array<std::atomic<int64_t>, kKinds> at_ns_{};
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_RETRY_TIMES_H_
