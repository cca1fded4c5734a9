// LeaseTable: the rows a dock has handed out under a lease and not yet seen
// acknowledged (consumers with lease_ms > 0).
//
// A Get by such a consumer records a lease over the rows it returns. The
// lease ends exactly once: acknowledged (Ack, or a Put carrying its id),
// returned (Nack), expired (its deadline passed: the dock hands the rows out
// again), superseded (a BALANCED rank asked for the same round again), or
// dropped with its released step. A lease that ended is remembered for a
// while, so a late Ack is told which of these happened.
//
// The table only keeps the records; the dock moves the rows (consumed bits,
// in-flight counts, balanced redeliveries) under its own lock. The table
// tells the dock when a lease gets a deadline (`wake_at`); at that time the
// dock pins the expired leases (PinExpired), records their ends and only
// then ends them (TakePinned): an expiry, like every end, is recorded first.
//
// Thread safety: every method may be called from any thread; mu_ is taken
// under the dock's mutexes, never the other way round. `wake_at` is called
// with mu_ held and must not call back into the table.
#ifndef TDOCK_SERVER_DOCK_LEASES_H_
#define TDOCK_SERVER_DOCK_LEASES_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/refusal.h"

namespace tdock::internal {

struct Lease {
  uint64_t id = 0;
  int consumer = -1;
  int32_t rank = 0;
  int64_t step = 0;
  int64_t round = -1;          // BALANCED: the round of the rank's share
  int32_t replicas = 1;        // BALANCED: the rank's replicas, which share it
  std::vector<int64_t> units;  // others: the claimed units (rows or groups)
  int64_t rows = 0;
  absl::Time deadline;
};

// Per consumer, since the dock was created.
struct LeaseCounts {
  int64_t in_flight = 0;  // leases now
  int64_t expired = 0;
  int64_t nacked = 0;
  int64_t rows_returned = 0;  // rows made available again (expired or nacked)
};

class LeaseTable final {
 public:
  // `who` names the dock in messages ("dock 'grpo'"). `wake_at(t)`: a lease
  // now expires at t (PinExpired then finds it). Ids start at `first_id`
  // (> 0).
  LeaseTable(std::string who, absl::AnyInvocable<void(absl::Time)> wake_at,
             uint64_t first_id = 1);
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // Records a lease (its id is assigned) and returns the id. `pinned`: its
  // clock does not run until Unpin gives it a deadline (a lease runs from
  // when its hand-out is recorded).
  uint64_t Add(Lease lease, bool pinned = false);
  // Recovery: records a lease in flight with the id it had; later ids are
  // higher. False (nothing recorded) if a lease of that id is there already
  // (the replicas of a rank share their share's lease). `pinned` as for Add.
  bool AddRecovered(Lease lease, bool pinned = false);
  // Recovery: lease `id` was acknowledged before the restart; a retried Ack
  // is told so.
  void RecoverAcknowledged(uint64_t id);

  // How a lease ends (kUnrecorded: its hand-out's record failed, so it
  // never was).
  enum class End { kAcked, kNacked, kExpired, kUnrecorded };

  // A Put carrying `id`: the lease cannot expire until Unpin (the Put
  // failed) or TakePinned (it succeeded). NOT_FOUND for an id never handed
  // out; FAILED_PRECONDITION naming the lease and what ended it if it is no
  // longer in flight, or if it is pinned already.
  absl::Status Pin(uint64_t id);
  // Pin for an Ack or Nack of consumer `consumer`: Pin's errors, and
  // INVALID_ARGUMENT if it is another consumer's; returns the lease.
  absl::StatusOr<Lease> PinFor(uint64_t id, int consumer, absl::string_view consumer_name);
  // Lets the lease's clock run again, from `deadline` when given.
  void Unpin(uint64_t id, std::optional<absl::Time> deadline = std::nullopt);
  // Ends a pinned lease as `end` says.
  // Returns an empty lease (id 0) if it is gone (its step was released).
  Lease TakePinned(uint64_t id, End end = End::kAcked);
  // The pinned lease `id`, if it is still in flight.
  std::optional<Lease> Pinned(uint64_t id) const;

  // Pins and returns the leases whose deadline is at or before `now`: each
  // ends with TakePinned(kExpired) once its end is recorded (or Unpin with a
  // later deadline, to try again).
  std::vector<Lease> PinExpired(absl::Time now);
  // The earliest deadline of a lease whose clock runs (InfiniteFuture: none).
  absl::Time NextDeadline() const;
  // The id of a BALANCED share's lease in flight and not pinned; 0: none.
  uint64_t ShareLease(int consumer, int64_t step, int64_t round, int32_t rank) const;
  // A BALANCED share's lease is pinned (its hand-out or end being recorded).
  bool SharePinned(int consumer, int64_t step, int64_t round, int32_t rank) const;
  // Ends and returns the in-flight lease of a BALANCED share, if any: the
  // rank asked for the round again and gets a new lease (`by`).
  std::optional<Lease> TakeShare(int consumer, int64_t step, int64_t round,
                                 int32_t rank);
  void NoteSuperseded(uint64_t old_id, uint64_t by);
  // Ends every lease of a released step.
  void DropStep(int64_t step);
  // The leases of `step` that are not pinned (copies).
  std::vector<Lease> Unpinned(int64_t step) const;
  // Ends lease `id` unless it is pinned or gone (then returns an empty
  // lease); a late Ack is told `why`.
  Lease TakeUnpinned(uint64_t id, std::string why);

  LeaseCounts Counts(int consumer) const;
  // The consumer's leases in flight (copies; pinned ones too: their end is
  // being recorded and may fail), by id.
  std::vector<Lease> InFlight(int consumer) const;

 private:
  struct Entry {
    Lease lease;
    bool pinned = false;
  };
  using ShareKey = std::tuple<int, int64_t, int64_t, int32_t>;

  uint64_t AddWithId(Lease lease, bool pinned);  // id 0: the next one
  // Why a lease ended, for a late Ack: in words, and as the refusal it
  // answers.
  struct Ended {
    std::string why;
    Refusal refusal = Refusal::kLeaseEnded;
  };
  // Removes `it` and remembers why it ended. REQUIRES: mu_ held.
  Lease EndLocked(absl::flat_hash_map<uint64_t, Entry>::iterator it, std::string why,
                  Refusal refusal = Refusal::kLeaseEnded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberEndLocked(uint64_t id, Ended ended) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<absl::flat_hash_map<uint64_t, Entry>::iterator> FindLocked(
      uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LeaseCounts& CountsLocked(int consumer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string who_;
  absl::AnyInvocable<void(absl::Time)> wake_at_ ABSL_GUARDED_BY(mu_);

  mutable tdock::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Entry> leases_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, uint64_t> deadlines_ ABSL_GUARDED_BY(mu_);
  std::map<ShareKey, uint64_t> shares_ ABSL_GUARDED_BY(mu_);
  // Why recently ended leases ended, oldest first, at most kRemembered.
  absl::flat_hash_map<uint64_t, Ended> ended_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> ended_order_ ABSL_GUARDED_BY(mu_);
  std::vector<LeaseCounts> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_LEASES_H_
