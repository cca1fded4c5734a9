// ConsumerTable: the dock's spec as it grows (consumers added, removed and
// joining, columns added), one plan per consumer (ConsumerPlan: the resolved
// spec and the consumer's life: optional, joined, removed, joining), per
// consumer the rows it was handed in released steps and the staleness of the
// rows handed to it, and the spec changes asked for: a queue taken one at a
// time, in the order asked, whose first change's new spec may be being
// recorded.
//
// Invariants: plan(i) is consumer i of spec() (same index and name, and its
// life as the spec says once a change is applied); consumers are only
// appended and a removed one keeps its index; the staleness counters and
// the released totals have one entry per consumer. Only the worker that
// Enqueue chose takes changes off the queue, until Next finds it empty. At
// most one spec is being recorded, the queue's first change's.
//
// Thread safety: guarded by the dock's structure lock, which every call
// names (`dock_mu`, given at construction), as Partition's structure is:
// shared to read, exclusive to change, checked by clang's -Wthread-safety.
// The staleness counters are atomics, counted with the lock held shared.
#ifndef TDOCK_SERVER_DOCK_CONSUMER_TABLE_H_
#define TDOCK_SERVER_DOCK_CONSUMER_TABLE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/spec.h"
#include "server/dock/partition.h"
#include "server/dock/sampler.h"
#include "server/dock/types.h"

namespace tdock::internal {

// A consumer's resolved spec: the index, the column indexes, the policy.
ConsumerPlan MakePlan(const DockSpec& spec, int index);
// The indexes of the columns named (-1 for a name the spec lacks).
std::vector<int> ResolveColumns(const DockSpec& spec, const std::vector<std::string>& names);

// Per consumer, since the dock's creation (StalenessStats). Statistics
// only: every operation is relaxed.
struct StalenessCounters {
  std::array<std::atomic<int64_t>, kStalenessBounds.size() + 1> buckets{};
  std::atomic<int64_t> sum{0};
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> stale_rows{0};

  // Counts the staleness (`now` minus its version, at least 0) of each of
  // `rows` that has a version in `index`.
  void Count(int64_t now, const RowIndex& index, absl::Span<const int64_t> rows);
  StalenessStats Snapshot() const;
};

// A change of the spec asked for: a consumer added, removed or joining, or
// a column added.
struct SpecChange {
  enum class Kind { kAdd, kRemove, kJoin, kAddColumn };
  Kind kind = Kind::kAdd;
  ConsumerSpec consumer;  // kAdd: the consumer; kRemove, kJoin: its name
  ConsumerCallback done;  // answered with the consumer; empty for kJoin
  ColumnSpec column;      // kAddColumn
  ColumnCallback column_done;
  // kAddColumn: its state in each partition, built before the change takes
  // the dock's lock.
  std::shared_ptr<std::vector<std::unique_ptr<ColumnState>>> column_states;
  int join_index = -1;  // kJoin: the consumer, by position (names are reused)
};

class ConsumerTable final {
 public:
  // `spec` is normalized; a plan is made for each of its consumers.
  ConsumerTable(const tdock::Mutex* dock_mu, DockSpec spec);
  ConsumerTable(const ConsumerTable&) = delete;
  ConsumerTable& operator=(const ConsumerTable&) = delete;

  // ---- the spec and the plans
  const DockSpec& spec(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return spec_;
  }
  const std::vector<ConsumerPlan>& plans(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return plans_;
  }
  const ConsumerPlan& plan(const tdock::Mutex& dock_mu, int index) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return plans_[index];
  }
  // The consumer's index, -1 if the spec has none of that name.
  int IndexOf(const tdock::Mutex& dock_mu, absl::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The consumer's index, or NOT_FOUND naming the dock and the consumer
  // (and saying if one of that name was removed).
  absl::StatusOr<int> Find(const tdock::Mutex& dock_mu, absl::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The smallest max_staleness of the consumers that hold steps, and (in
  // *consumer) whose it is; nullopt: none has one.
  std::optional<int64_t> AdmissionBound(const tdock::Mutex& dock_mu, std::string* consumer) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Find, and FAILED_PRECONDITION if the consumer has no leases.
  absl::StatusOr<int> FindLeasing(const tdock::Mutex& dock_mu, absl::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Why the consumer of `plan` (a plan taken earlier) cannot be served now:
  // it was removed (NOT_FOUND), or the record of its join failed. OK
  // otherwise.
  absl::Status Gone(const tdock::Mutex& dock_mu, const ConsumerPlan& plan) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);

  // Consumer `consumer` is appended: its plan, counters and totals.
  const ConsumerPlan& Add(const tdock::Mutex& dock_mu, const ConsumerSpec& consumer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The spec becomes `next` (the same consumers, or columns added).
  void Replace(const tdock::Mutex& dock_mu, DockSpec next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The consumer's life (removed, joined, joining, why a join failed).
  ConsumerPlan& life(const tdock::Mutex& dock_mu, int index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu) {
    HeldExclusive(dock_mu);
    return plans_[index];
  }

  // ---- the spec changes asked for
  // Queues `change`; true if the caller is to work through the queue (no
  // worker was), with Next.
  bool Enqueue(const tdock::Mutex& dock_mu, SpecChange change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The worker's next change (the queue's first), or null once the queue is
  // empty: the worker is done, and the next Enqueue names another.
  SpecChange* Next(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Takes the first change off the queue (decided: applied or refused).
  SpecChange Pop(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The first change's new spec is being recorded; `added` >= 0: its
  // consumer of that index is being added (it takes no Get until applied,
  // but Puts keep to its budget).
  void StartRecording(const tdock::Mutex& dock_mu, DockSpec next, int added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The record came back: the spec that was being recorded.
  DockSpec EndRecording(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // The consumer being added while its spec is recorded, and its plan.
  const ConsumerSpec* recording_consumer(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return recording_consumer_.has_value() ? &*recording_consumer_ : nullptr;
  }
  const ConsumerPlan* recording_plan(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return recording_plan_.has_value() ? &*recording_plan_ : nullptr;
  }

  // ---- totals
  StalenessCounters& staleness(const tdock::Mutex& dock_mu, int index) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return *staleness_[index];
  }
  // `part`'s step is being released: each consumer's hand-outs in it
  // (ConsumerState::handed_total) join the released totals.
  void AddReleased(const tdock::Mutex& dock_mu, const Partition& part)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Per consumer, rows handed out in released steps.
  const std::vector<int64_t>& released_handed_total(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return released_handed_total_;
  }

 private:
  // Tell the analysis that `dock_mu` held is this table's guard, and check
  // that it is.
  // Inline: every plan lookup of the claim path passes here.
  void HeldShared(const tdock::Mutex& dock_mu) const ABSL_ASSERT_SHARED_LOCK(dock_mu_) {
    TDOCK_CHECK(&dock_mu == dock_mu_) << "consumer table: not its dock's mutex";
  }
  void HeldExclusive(const tdock::Mutex& dock_mu) const ABSL_ASSERT_EXCLUSIVE_LOCK(dock_mu_) {
    TDOCK_CHECK(&dock_mu == dock_mu_) << "consumer table: not its dock's mutex";
  }

  const tdock::Mutex* const dock_mu_;
  DockSpec spec_ ABSL_GUARDED_BY(dock_mu_);
  std::vector<ConsumerPlan> plans_ ABSL_GUARDED_BY(dock_mu_);
  std::vector<std::unique_ptr<StalenessCounters>> staleness_ ABSL_GUARDED_BY(dock_mu_);
  std::vector<int64_t> released_handed_total_ ABSL_GUARDED_BY(dock_mu_);
  std::deque<SpecChange> changes_ ABSL_GUARDED_BY(dock_mu_);  // in the order asked
  bool working_ ABSL_GUARDED_BY(dock_mu_) = false;  // a worker takes changes off
  std::optional<DockSpec> recording_spec_ ABSL_GUARDED_BY(dock_mu_);
  std::optional<ConsumerSpec> recording_consumer_ ABSL_GUARDED_BY(dock_mu_);
  std::optional<ConsumerPlan> recording_plan_ ABSL_GUARDED_BY(dock_mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_CONSUMER_TABLE_H_
