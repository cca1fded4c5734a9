// WaiterTable: a dock's parked calls (long-polling Gets, Puts held back by an
// older step or the memory limit), by id and by deadline: the waiter table
// of DESIGN.md §4. It decides nothing about data; the dock says what to
// park, retries what a wake-up takes out, and ends what expired.
//
// Exactly once: a waiter taken out for a retry is marked in_retry and stays
// in the table; an end decided meanwhile (Cancel, expiry, Shutdown) is noted
// in the waiter and carried out by whoever finishes the retry.
//
// Lossless wake-ups: Park runs the caller's last check under the table's
// lock, and every wake-up takes that lock, so either the check sees what a
// wake-up announces or the wake-up finds the waiter.
//
// Thread safety: every method may be called from any thread. The checks
// passed to Park and FinishRetry run under the table's lock, which comes
// before the dock's locks; no callback of a call runs under it.
#ifndef TDOCK_SERVER_DOCK_WAITER_TABLE_H_
#define TDOCK_SERVER_DOCK_WAITER_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/dock/types.h"

namespace tdock::internal {

// A parked Get or Put.
struct Waiter {
  enum class End { kNone, kCancelled, kExpired, kShutdown };
  uint64_t id = 0;  // unique across docks, so a transport can cancel by id alone
  absl::Time deadline;
  bool is_put = false;
  int consumer = -1;  // Get: consumer index
  GetInput get;
  GetCallback get_done;
  PutInput put;
  PutCallback put_done;
  std::string put_reason;  // why the Put waits
  // Guarded by the table's lock.
  bool in_retry = false;        // taken out by a wake-up, being retried
  bool woken_in_retry = false;  // a Put's wake-up came during its retry
  End end = End::kNone;         // an end decided while in_retry
};

class WaiterTable final {
 public:
  // A new waiter with a fresh id, whose wait ends at `deadline`.
  static std::shared_ptr<Waiter> New(absl::Time deadline);

  enum class Parking { kParked, kServed, kShuttingDown, kTooMany };
  // Parks `w` unless the table is shutting down, `max_gets` (> 0) Gets of
  // its consumer are parked already, or `served` (run under the lock, the
  // call's last check) says the call was served.
  Parking Park(const std::shared_ptr<Waiter>& w, int64_t max_gets,
               absl::FunctionRef<bool()> served);

  // Takes out for a retry the parked Gets of consumers whose `wanted[k]` is
  // true (every consumer's when `wanted` is empty), not already in retry.
  std::vector<std::shared_ptr<Waiter>> TakeGets(const std::vector<bool>& wanted);
  // Takes out every parked Put for a retry; one already in retry goes again.
  std::vector<std::shared_ptr<Waiter>> TakePuts();

  // Finishes a Get's retry: `served` runs under the lock unless an end was
  // decided meanwhile. Served or ended, the waiter leaves the table; else
  // it is parked again. Returns the end decided (kNone if none).
  Waiter::End FinishGetRetry(const std::shared_ptr<Waiter>& w, absl::FunctionRef<bool()> served);
  // A Put's retry: Ended before each attempt (true: an end was decided, stop
  // trying); then FinishPutRetry with whether the attempt completed the
  // Put. kAgain: a wake-up came meanwhile, attempt again.
  bool Ended(const std::shared_ptr<Waiter>& w);
  enum class AfterRetry { kParked, kAgain, kRemoved };
  AfterRetry FinishPutRetry(const std::shared_ptr<Waiter>& w, bool done, Waiter::End* end);

  // The waiter `id`, removed, to be ended as cancelled by the caller; null if
  // it is gone, or in retry (then its retrier ends it).
  std::shared_ptr<Waiter> Cancel(uint64_t id);

  // Waiters past their deadline, removed (those in retry are ended by their
  // retrier), and what to do next.
  struct Expiry {
    std::vector<std::shared_ptr<Waiter>> expired;
    bool puts_parked = false;                 // retry them: memory may be back
    absl::Time next = absl::InfiniteFuture();  // the next deadline
  };
  Expiry Expire(absl::Time now);

  // From now on nothing parks; returns every waiter not in retry, removed.
  std::vector<std::shared_ptr<Waiter>> Shutdown();

  // Parked Puts, and parked Gets per consumer (index < size of `gets`).
  int64_t Count(std::vector<int64_t>& gets) const;

 private:
  void RemoveLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable tdock::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, uint64_t> deadlines_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_WAITER_TABLE_H_
