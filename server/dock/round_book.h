// RoundBook: a BALANCED consumer's rounds in one step (DESIGN.md §5) — the
// rounds formed, the formation of the next one, which round each taker (a
// rank, or a rank's replica: DockImpl::TakerOf) gets next and which it must
// get again, the shares' lease bookkeeping, and which rounds are recorded.
//
// Every rank takes every round in order: a taker's Get is round NextFor(t),
// unless it names one; Delivered(t, k) moves it past k; a share whose lease
// ended unacknowledged (or whose delivery was not recorded) is handed to the
// taker again before anything else (HandAgain). The step is done for a
// taker once it is past every round formed and owes none again (Done).
//
//   tdock::MutexLock lock(&state.book.mu());
//   const int64_t k = state.book.NextFor(taker);
//   if (k == state.book.formed()) { /* form it: StartForming, Keep or Fail */ }
//   ... state.book.Delivered(taker, k);
//
// Thread safety: every member needs mu(), a leaf lock taken under the dock's
// (shared) lock; formation's planning runs without it (round_dispatcher.h).
#ifndef TDOCK_SERVER_DOCK_ROUND_BOOK_H_
#define TDOCK_SERVER_DOCK_ROUND_BOOK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/balance/stats.h"
#include "common/batch_meta.h"
#include "common/mutex.h"

namespace tdock::internal {

// One rank's share of a balanced round.
struct RoundShare {
  std::vector<int64_t> rows;  // micro-batch after micro-batch
  std::vector<MicroBatchInfo> micro_batches;
  // pad: repeat: the positions in `rows` (ascending) that repeat a row of
  // the round to fill the share; they count for nothing (handed out, leased,
  // acknowledged) but are delivered, marked, for the loss to mask.
  std::vector<int64_t> repeats;

  // Rows that are not repeats.
  int64_t real_rows() const { return static_cast<int64_t>(rows.size() - repeats.size()); }
  // `rows` without the repeats.
  std::vector<int64_t> RealRows() const;
};

// A round of a BALANCED consumer: claimed once, split over the dp ranks.
struct Round {
  std::vector<RoundShare> ranks;
  // Consumers with replicas: per rank, the share as its first replica took
  // it (without the rows dropped by then), which every replica then takes,
  // so that they train on the same rows; cleared when its lease comes back.
  std::vector<std::optional<RoundShare>> taken;
  BalanceStats stats;
  bool last = false;  // it took the step's last rows
};

class RoundBook {
 public:
  explicit RoundBook(int32_t takers) : next_(static_cast<size_t>(takers), 0), again_(takers) {}

  tdock::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // The rounds formed: 0 .. formed() - 1.
  int64_t formed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(rounds_.size());
  }
  Round& round(int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rounds_[k]; }

  // Round formed() is being planned outside the dock's locks: its rows are
  // claimed, and Gets for it park until it is kept or fails.
  bool forming() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return forming_; }
  void StartForming() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { forming_ = true; }
  void Keep(Round round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why it failed goes to the next Get that asks for the round (TakeFailure);
  // the Get after that forms it again.
  void Fail(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool failed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !failure_.ok(); }
  absl::Status TakeFailure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::exchange(failure_, absl::OkStatus());
  }

  // The round a taker's Get gets: a round it must get again first, else the
  // round after the last it took.
  int64_t NextFor(int32_t taker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Round k reaches the taker for the first time (neither taken before nor
  // to be taken again).
  bool FirstDelivery(int32_t taker, int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Delivered(int32_t taker, int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The taker, past round k, gets it again before anything else (its lease
  // ended unacknowledged, or its delivery was not recorded).
  void HandAgain(int32_t taker, int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The taker is past every round formed and owes none again.
  bool Done(int32_t taker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Consumers with leases: the replicas that took round k's share of `rank`
  // under the lease now in flight (the share has one lease, whichever
  // replica acknowledges it), and the shares acknowledged (a replica taking
  // one later needs no lease).
  std::set<int32_t>& LeaseTakers(int64_t k, int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return lease_takers_[{k, rank}];
  }
  void LeaseEnded(int64_t k, int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    lease_takers_.erase({k, rank});
  }
  void ReplicaLost(int64_t k, int32_t rank, int32_t replica) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Acked(int64_t k, int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsAcked(int64_t k, int32_t rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return acked_.count({k, rank}) != 0;
  }

  // With a journal: a round is recorded with its first stored delivery.
  bool Recorded(int64_t k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<size_t>(k) < recorded_.size() && recorded_[k];
  }
  void MarkRecorded(int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Recovery: round k as recorded (the rounds before it that were never
  // recorded stay rounds with empty shares, so later rounds keep their
  // numbers); a taker's recorded delivery of round k, in a taker's
  // ascending order (a round it skipped was handed back: it gets it again).
  void Recover(int64_t k, Round round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecoverDelivery(int32_t taker, int64_t k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // For the partition's next step; a formation in flight finds the step gone.
  void Reset() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  mutable tdock::Mutex mu_;
  std::vector<Round> rounds_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> next_ ABSL_GUARDED_BY(mu_);        // per taker
  std::vector<std::set<int64_t>> again_ ABSL_GUARDED_BY(mu_);  // per taker
  std::map<std::pair<int64_t, int32_t>, std::set<int32_t>> lease_takers_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<int64_t, int32_t>> acked_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> recorded_ ABSL_GUARDED_BY(mu_);
  bool forming_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ROUND_BOOK_H_
