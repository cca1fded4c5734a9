// WaiterTable: a dock's parked calls (long-polling Gets, Puts held back by an
// older step or the memory limit, Reserves waiting for admission), by id and
// by deadline, in one id space with a cap per kind. It decides nothing about
// data; the dock says what to park, wakes a kind (Gets of some consumers,
// Puts, Reserves) when what it waits for can have changed, retries what a
// wake-up takes out, and ends what expired. Nothing is retried on a timer.
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
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/dock/types.h"

namespace tdock::internal {

// A parked Get, Put or Reserve.
struct Waiter {
  enum class Kind { kGet, kPut, kReserve };
  enum class End { kNone, kCancelled, kExpired, kShutdown };
  uint64_t id = 0;  // unique across docks, so a transport can cancel by id alone
  absl::Time deadline;
  Kind kind = Kind::kGet;
  int consumer = -1;  // Get: consumer index
  GetInput get;
  GetCallback get_done;
  PutInput put;
  PutCallback put_done;
  std::string put_reason;  // why the Put waits
  ReserveInput reserve;
  ReserveCallback reserve_done;
  absl::Time since;  // Reserve: when it began to wait
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
  // Parks `w` unless the table is shutting down, `max` (> 0) calls of its
  // kind are parked already (Gets: of its consumer; Reserves: of the dock;
  // Puts: no cap), or `served` (run under the lock, the call's last check)
  // says the call was served.
  Parking Park(const std::shared_ptr<Waiter>& w, int64_t max, absl::FunctionRef<bool()> served);

  // Takes out for a retry the parked Gets of consumers whose `wanted[k]` is
  // true (every consumer's when `wanted` is empty), not already in retry.
  std::vector<std::shared_ptr<Waiter>> TakeGets(const std::vector<bool>& wanted);
  // Takes out every parked Put for a retry; one already in retry goes again.
  std::vector<std::shared_ptr<Waiter>> TakePuts();
  // Takes out every parked Reserve not already in retry.
  std::vector<std::shared_ptr<Waiter>> TakeReserves();

  // Finishes a Get's or a Reserve's retry: `served` runs under the lock
  // unless an end was decided meanwhile. Served or ended, the waiter leaves
  // the table; else it is parked again. Returns the end decided (kNone if
  // none).
  Waiter::End FinishRetry(const std::shared_ptr<Waiter>& w, absl::FunctionRef<bool()> served);
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
  bool shutting_down() const;

  // The rows a consumer's parked Gets ask for: each its count, or
  // `dispatch` (the consumer's dispatch size) for one that asks for none.
  struct RowsAsked {
    int64_t fewest = 0;  // 0: none parked
    int64_t most = 0;
  };
  RowsAsked Asked(int consumer, int64_t dispatch) const;

  struct Counts {
    std::vector<int64_t> gets;  // per consumer, for the first `consumers`
    int64_t puts = 0;
    int64_t reserves = 0;
  };
  Counts Count(size_t consumers) const;

 private:
  void AddLocked(const std::shared_ptr<Waiter>& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes out for a retry the waiters of `ids` that are not in retry; `woken`
  // sees each of them first (in retry or not).
  void TakeLocked(const absl::flat_hash_set<uint64_t>& ids,
                  absl::FunctionRef<void(Waiter&)> woken,
                  std::vector<std::shared_ptr<Waiter>>& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The parked calls of `w`'s kind that its cap counts (null: none yet).
  absl::flat_hash_set<uint64_t>* IdsOfLocked(const Waiter& w, bool add)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable tdock::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  // Ids parked (in retry included) by kind, Gets by consumer: a wake-up or
  // a cap looks at its kind only, however many others wait.
  absl::flat_hash_map<int, absl::flat_hash_set<uint64_t>> gets_ ABSL_GUARDED_BY(mu_);
  // Per consumer, the counts its parked Gets ask for (0: the dispatch size).
  absl::flat_hash_map<int, std::multiset<int64_t>> counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> puts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> reserves_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_WAITER_TABLE_H_
