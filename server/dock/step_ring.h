// StepRing: the dock's partitions, one per step in flight, and how a step
// stands with the partition it uses. Step s uses partition s % P (P: the
// spec's steps_in_flight), and a partition's steps come in order: step s may
// start only once s - P is released (the partition's first step, at once), so
// a step written too early waits instead of skipping an older one.
//
// Invariants: a partition holds at most one step at a time, and the steps it
// holds increase; a step is live from its activation until its release is
// applied, and while its release is being recorded it counts as released to
// new work (Classify) but is still held (Holds): a release whose record fails
// leaves it live as it was. The totals of released steps (rows written per
// column, dropped per reason) count each released step once.
//
// Thread safety: the vector of partitions is fixed at construction. Which
// step a partition holds is guarded by the dock's structure lock (Partition's
// accessors name it); every method that reads it names that lock too.
#ifndef TDOCK_SERVER_DOCK_STEP_RING_H_
#define TDOCK_SERVER_DOCK_STEP_RING_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "server/dock/partition.h"

namespace tdock::internal {

class StepRing final {
 public:
  // How a step stands with its partition.
  enum class StepState {
    kLive,      // the partition holds it, not being released
    kFree,      // the partition is free for it: a write may start it
    kBlocked,   // an older step holds (or will first hold) the partition
    kReleased,  // released, or its release is being recorded
  };

  // `steps_in_flight` partitions of `rows` rows, under `dock_mu`.
  StepRing(const tdock::Mutex* dock_mu, int32_t steps_in_flight, int64_t rows,
           int32_t group_size, int columns, const std::vector<ConsumerShape>& consumers,
           size_t column_capacity);
  StepRing(const StepRing&) = delete;
  StepRing& operator=(const StepRing&) = delete;

  int32_t steps_in_flight() const { return static_cast<int32_t>(partitions_.size()); }
  // The partition step `step` (>= 0) uses.
  Partition& Of(int64_t step) const { return *partitions_[step % steps_in_flight()]; }
  const std::vector<std::unique_ptr<Partition>>& partitions() const { return partitions_; }

  StepState Classify(const tdock::Mutex& dock_mu, int64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The partition holds `step`, live or being released. Completions that
  // undo or account for a hand-out use this, not kLive: a release being
  // recorded may fail and leave the step live, with every row as it was.
  bool Holds(const tdock::Mutex& dock_mu, int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The step a blocked step waits for. REQUIRES: Classify is kBlocked.
  int64_t BlockingStep(const tdock::Mutex& dock_mu, int64_t step) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The oldest step not released: the oldest live one, or the next one a
  // free partition takes.
  int64_t FrontStep(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Per partition, in order: the step it holds (live or being released),
  // else the one it takes next.
  std::vector<int64_t> NextSteps(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The steps the partitions hold, ascending.
  std::vector<int64_t> LiveSteps(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);

  // `part`'s step is being released: its rows written in each of the
  // first `columns` columns and dropped per reason join the totals.
  void CountReleased(const tdock::Mutex& dock_mu, const Partition& part, int columns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Rows written per column (`columns` of them) in the released steps.
  std::vector<int64_t> ReleasedReadyRows(const tdock::Mutex& dock_mu, int columns) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Rows dropped per reason in the released steps.
  const std::array<int64_t, kDropReasons>& released_dropped_rows(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    Held(dock_mu);
    return released_dropped_;
  }

 private:
  // The step `part` holds, or takes next.
  int64_t NextStep(const tdock::Mutex& dock_mu, const Partition& part) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Tell the analysis that `dock_mu` held is the ring's guard, and check it.
  void Held(const tdock::Mutex& dock_mu) const ABSL_ASSERT_SHARED_LOCK(dock_mu_);

  const tdock::Mutex* const dock_mu_;
  std::vector<std::unique_ptr<Partition>> partitions_;
  std::vector<int64_t> released_ready_ ABSL_GUARDED_BY(dock_mu_);
  std::array<int64_t, kDropReasons> released_dropped_ ABSL_GUARDED_BY(dock_mu_){};
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_STEP_RING_H_
