// tdock::Mutex: absl::Mutex, except in the ThreadSanitizer build, where it is
// backed by the standard library. tdock::CondVar: std::condition_variable_any
// over either.
//
// Debian's Abseil is not built with ThreadSanitizer, so TSAN cannot see the
// happens-before edges absl::Mutex creates and reports races that are not
// there. pthread-based std::shared_mutex is intercepted by TSAN, so the TSAN
// build (TDOCK_TSAN) swaps it in. Both carry the same thread-safety
// annotations, so clang's -Wthread-safety checks either.
//
//   tdock::Mutex mu_;
//   int value_ ABSL_GUARDED_BY(mu_);
//   { tdock::MutexLock lock(&mu_); ++value_; }
#ifndef TDOCK_COMMON_MUTEX_H_
#define TDOCK_COMMON_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include <chrono>
#include <condition_variable>

#if defined(TDOCK_TSAN)
#include <shared_mutex>
#endif

namespace tdock {

#if defined(TDOCK_TSAN)

class ABSL_LOCKABLE Mutex final {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }
  // Tells the analysis the mutex is held exclusively (absl::Mutex checks it
  // at run time; std::shared_mutex cannot, so this only informs clang).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  // For std::condition_variable_any.
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::shared_mutex mu_;
};

#else

using Mutex = absl::Mutex;

#endif

// Waits on a tdock::Mutex. Not absl::CondVar: in the Abseil Debian 12 ships
// (20220623), a timed wait signalled around its deadline can miss the
// deadline and block until the next signal (seen as a dock's timer thread
// that never woke for a parked call's wait bound).
class CondVar final {
 public:
  // REQUIRES: mu held exclusively. Returns true on timeout.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Held held{mu};
    if (deadline == absl::InfiniteFuture()) {
      cv_.wait(held);
      return false;
    }
    return cv_.wait_until(held, absl::ToChronoTime(deadline)) == std::cv_status::timeout;
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  // The held mutex as std::condition_variable_any locks it.
  struct Held {
    Mutex* mu;
    void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Lock(); }
    void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu->Unlock(); }
  };
  std::condition_variable_any cv_;
};

// RAII locks that work with either Mutex.
class ABSL_SCOPED_LOCKABLE MutexLock final {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock final {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace tdock

#endif  // TDOCK_COMMON_MUTEX_H_
