// PolicyVersion: the dock's policy (weights) version, which SetVersion
// raises and Puts, admission and staleness read without locks.
//
// Invariant: it only goes up.
//
// Thread safety: lock-free. Raise publishes with release and current() reads
// with acquire, so a Put that reads a new version sees what the trainer
// published before setting it.
#ifndef TDOCK_SERVER_DOCK_POLICY_VERSION_H_
#define TDOCK_SERVER_DOCK_POLICY_VERSION_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace tdock::internal {

class PolicyVersion final {
 public:
  int64_t current() const { return version_.load(std::memory_order_acquire); }
  // Raises the version to `version` if it is higher; returns the version
  // after (the higher of the two).
  int64_t Raise(int64_t version) {
    int64_t now = version_.load(std::memory_order_acquire);
    while (now < version &&
           !version_.compare_exchange_weak(now, version, std::memory_order_acq_rel)) {
    }
    return std::max(now, version);
  }

 private:
  std::atomic<int64_t> version_{0};
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_POLICY_VERSION_H_
