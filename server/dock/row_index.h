// RowIndex: what one step knows of its rows besides their cells: keys,
// versions, where appends go on (the cursor, and the rows of appends in
// progress), reservations, and the rows held while a decision about them is
// being stored. One per partition (Partition::row_index()), reset when the
// partition's step is released.
//
// Thread safety: its lock, mu(), is the partition's commit lock: it
// serializes the step's commits, so a multi-cell Put is all or nothing, and
// guards everything here except keys and versions, which are written under
// it and read without it (atomics, published before the cells they go with
// are made ready). In the dock's lock order it comes after the dock's mutex
// and before a RoundBook's.
//
// Invariants:
// - A row's key is set with its first write and stays until the step is
//   released, or until ClearKey undoes a first write that was not stored.
// - A row's version only goes down (the oldest any stored write carried).
// - A row is held by at most one append claim; a claim holds rows only
//   until its append commits or is answered.
// - A row is closed (Closed) only while the decision that closes it (a
//   Seal, an append's unused rows, a reservation's expiry) is being stored.
#ifndef TDOCK_SERVER_DOCK_ROW_INDEX_H_
#define TDOCK_SERVER_DOCK_ROW_INDEX_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "common/batch_meta.h"

namespace tdock::internal {

class RowIndex final {
 public:
  explicit RowIndex(int64_t rows);
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;

  tdock::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  // The step is released: every row is as new (claims stay unique).
  void Reset() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- keys: the key's string lives as long as the step.
  const std::string* key(int64_t row) const {
    return keys_[row].load(std::memory_order_acquire);
  }
  void SetKey(int64_t row, std::string key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearKey(int64_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    keys_[row].store(nullptr, std::memory_order_release);
  }
  // Some row of the step has had a key.
  bool has_keys() const { return keyed_.load(std::memory_order_acquire); }

  // ---- versions: the policy version a row was generated with, the oldest
  // a stored write of it carried (kNoVersion: none).
  int64_t version(int64_t row) const { return versions_[row].load(std::memory_order_acquire); }
  void LowerVersion(int64_t row, int64_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Some row of the step has a version.
  bool has_versions() const { return versioned_.load(std::memory_order_acquire); }
  // Bounds of the versions rows have had (with none: min_version() is
  // INT64_MAX, max_version() kNoVersion). A row lowered since keeps max
  // from shrinking; min is exact. Read after a row's ready bit, they cover
  // its version.
  int64_t min_version() const { return min_version_.load(std::memory_order_acquire); }
  int64_t max_version() const { return max_version_.load(std::memory_order_acquire); }

  // ---- appends (DockImpl::AssignRows): the first group not yet looked at,
  // and the rows an append was assigned (its declared groups' unused rows
  // included), held by its claim until its cells are committed or it is
  // answered. No other Put writes them meanwhile, and the step stays on its
  // partition. Claims are unique per partition, across the steps it holds.
  int64_t append_cursor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return append_cursor_; }
  void set_append_cursor(int64_t group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    append_cursor_ = group;
  }
  uint64_t NewAppendClaim() {
    // relaxed: only uniqueness matters.
    return next_claim_.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  uint64_t append_claim(int64_t row) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return claims_.empty() ? 0 : row_claims_[row];
  }
  bool has_append_claims() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !claims_.empty(); }
  void ClaimForAppend(const std::vector<int64_t>& rows, uint64_t claim)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // False when the claim holds no row (given back already, or its step gone).
  bool ReleaseAppendClaim(uint64_t claim) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- writes in flight: writes of the row committed whose
  // record is not stored yet (a failed one clears the row's key only if
  // none is left).
  int32_t pending_writes(int64_t row) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_[row];
  }
  void AddPendingWrite(int64_t row, int32_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_[row] += delta;
    pending_used_ = true;
  }

  // ---- closed rows: rows a Put may not write for now, and why: a Seal
  // being stored drops them (unwritten when it was decided), an append
  // being stored leaves them unused (past its groups' declared sizes), or a
  // reservation's expiry being stored drops them. So no write is
  // acknowledged and then dropped by a decision made before it.
  enum class Closed { kOpen, kSealing, kUnused, kExpiring };
  Closed closed(int64_t row) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closing_.empty() && unused_.empty() && expiring_.empty()) return Closed::kOpen;
    if (closing_.contains(row)) return Closed::kSealing;
    if (expiring_.contains(row)) return Closed::kExpiring;
    return unused_.contains(row) ? Closed::kUnused : Closed::kOpen;
  }
  // An append's unused rows: closed when it commits, open again once they
  // are dropped (or its record failed).
  void SetUnused(const std::vector<int64_t>& rows, bool closed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetExpiring(const std::vector<int64_t>& rows, bool closed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops and Seals being recorded (delta +1 when one is
  // submitted, -1 when it is stored or fails); a Seal closes `rows`. The
  // step is not taken off its partition meanwhile, so a stored record
  // always finds the step it was decided on.
  void AddDropInFlight(bool seal, const std::vector<int64_t>& rows, int32_t delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool sealing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sealing_ > 0; }
  bool drops_in_flight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return drops_in_flight_ > 0;
  }

  // ---- reservations (DockImpl::Reserve): rows granted to a producer, by
  // reservation id; no append takes them. Their rows not written when one
  // expires are closed while their drop is recorded.
  uint64_t reservation(int64_t row) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = reserved_.find(row);
    return it == reserved_.end() ? 0 : it->second;
  }
  bool has_reservations() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !reserved_.empty(); }
  void SetReserved(const std::vector<int64_t>& rows, uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // id 0: no longer reserved
  // Rows of an expired reservation that were being written when it expired:
  // if that write is not stored they are dropped as expired then.
  void AddExpiredInFlight(const std::vector<int64_t>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    expired_in_flight_.insert(rows.begin(), rows.end());
  }
  const absl::flat_hash_set<int64_t>& expired_in_flight() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return expired_in_flight_;
  }

 private:
  const int64_t rows_;
  tdock::Mutex mu_;
  std::unique_ptr<std::atomic<const std::string*>[]> keys_;  // per row
  std::vector<std::unique_ptr<std::string>> key_store_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> keyed_{false};
  std::unique_ptr<std::atomic<int64_t>[]> versions_;  // per row
  std::atomic<bool> versioned_{false};
  std::atomic<int64_t> min_version_{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> max_version_{kNoVersion};
  int64_t append_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  // Per row, the claim holding it (0: none), made on the first claim; and
  // per claim held, its rows.
  std::unique_ptr<uint64_t[]> row_claims_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::vector<int64_t>> claims_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_claim_{0};
  std::vector<int32_t> pending_ ABSL_GUARDED_BY(mu_);  // per row
  bool pending_used_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<int64_t, int32_t> closing_ ABSL_GUARDED_BY(mu_);  // row -> Seals
  absl::flat_hash_set<int64_t> unused_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> expiring_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, uint64_t> reserved_ ABSL_GUARDED_BY(mu_);  // row -> id
  absl::flat_hash_set<int64_t> expired_in_flight_ ABSL_GUARDED_BY(mu_);
  int32_t sealing_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t drops_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ROW_INDEX_H_
