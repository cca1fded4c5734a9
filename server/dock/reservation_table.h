// ReservationTable: a dock's granted reservations (admission before
// generation, Dock::Reserve) by id, by deadline and by step, and a memo of
// the latest ones that expired.
//
// The table keeps records only; the dock reserves and frees the rows in
// their step (Partition) and records every change in the journal first.
// An entry is added once its reservation is stored (or recovered), leaves
// when its deadline passes (TakeExpired: the dock then drops its rows not
// written) or when its step is released (ForgetStep: the rows went with the
// step), and is erased if its record failed.
//
// Invariants: an id is in at most one of the live entries and the expired
// memo; every live entry is in the deadline and step indexes exactly once;
// the memo holds at most kExpiredRemembered ids.
//
// Thread safety: every method may be called from any thread. mu_ is a leaf:
// it is taken under the dock's locks (its structure lock, a step's commit
// lock), and nothing is taken while holding it.
#ifndef TDOCK_SERVER_DOCK_RESERVATION_TABLE_H_
#define TDOCK_SERVER_DOCK_RESERVATION_TABLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tdock::internal {

class ReservationTable final {
 public:
  // Expired reservations remembered, to name them in a late Put's error.
  static constexpr size_t kExpiredRemembered = 4096;

  struct Entry {
    int64_t step = 0;
    std::vector<int64_t> rows;
    int64_t version = 0;
    absl::Time deadline;
  };
  // What the table knows of an id.
  struct Lookup {
    enum class Kind { kLive, kExpired, kUnknown };
    Kind kind = Kind::kUnknown;
    Entry entry;  // kLive: the entry; kExpired: its step and deadline
  };

  // Ids start at `first_id` (the dock's epoch: an id from before a restart
  // never names another reservation).
  explicit ReservationTable(uint64_t first_id);
  ReservationTable(const ReservationTable&) = delete;
  ReservationTable& operator=(const ReservationTable&) = delete;

  // A fresh id.
  uint64_t NewId();
  // A recovered reservation's id: later ids are larger.
  void NoteRecoveredId(uint64_t id);

  // Adds (or replaces) the entry of `id`; the memo forgets it.
  void Add(uint64_t id, Entry entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Erases the entry of `id` (its record failed), if there is one.
  void Erase(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Erases the entries of `step`, which was released: their rows went
  // with it. A later Put naming one is told it is unknown.
  void ForgetStep(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  Lookup Find(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

  // The entries whose deadline is at or before `now`, removed and
  // remembered as expired, in deadline order.
  std::vector<std::pair<uint64_t, Entry>> TakeExpired(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // The earliest deadline of a live entry; InfiniteFuture if none.
  absl::Time NextDeadline() const ABSL_LOCKS_EXCLUDED(mu_);

  // A Reserve that waited for admission was granted after `waited`.
  void CountAdmissionWait(absl::Duration waited) ABSL_LOCKS_EXCLUDED(mu_);
  struct Counts {
    int64_t live = 0;             // entries
    int64_t admission_waits = 0;  // Reserves granted after waiting
    double admission_wait_seconds = 0;
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void EraseLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberExpiredLocked(uint64_t id, int64_t step, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // relaxed: ids need uniqueness only.
  std::atomic<uint64_t> next_id_;

  mutable tdock::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> live_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> by_deadline_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::set<uint64_t>> by_step_ ABSL_GUARDED_BY(mu_);
  // Expired: id -> (step, deadline), the latest kExpiredRemembered.
  std::map<uint64_t, std::pair<int64_t, absl::Time>> expired_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);  // its `live` is set when read
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_RESERVATION_TABLE_H_
