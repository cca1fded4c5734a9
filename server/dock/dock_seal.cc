// DockImpl's seal_when (DockSpec::seal_when): the dock seals a step by
// itself once the consumer it names has enough complete groups, and drops
// the other groups as surplus (or, with carry, carries the complete ones
// into the next step: dock_carry.cc).
//
// The decision is taken after every Put that made cells ready (the Put is
// answered once the seal it caused is applied, so its producer sees the step
// sealed) and every drop (a drop may complete groups), under the dock's
// mutex held exclusively, so two decisions never race; the step is marked
// seal_pending until the seal's record is stored (a failed record clears
// it, and the next Put decides again).
#include <algorithm>
#include <bit>
#include <utility>

#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::MaybeAutoSeal(int64_t step, absl::AnyInvocable<void() &&> then) {
  std::optional<DockJournal::DropRecord> record = DecideSeal(step);
  if (!record.has_value()) {
    if (then) std::move(then)();
    return;
  }
  // A failed record leaves the step unsealed: `then` runs all the same.
  RecordAndApplyDrop(*std::move(record), /*in_flight=*/false,
                     [then = std::move(then)](absl::StatusOr<int64_t>) mutable {
                       if (then) std::move(then)();
                     });
}

std::optional<DockJournal::DropRecord> DockImpl::DecideSeal(int64_t step) {
  // Recovery replays the seals that were recorded; FinishRecovery decides
  // again, recording what it decides.
  if (!seal_when_.has_value() || !commit_.serving()) return std::nullopt;
  {
    tdock::ReaderMutexLock lock(&mu_);
    if (ring_.Classify(mu_, step) != StepState::kLive) return std::nullopt;
    const Partition& part = ring_.Of(step);
    if (part.sealed(mu_) || part.seal_pending(mu_) || part.releasing(mu_)) return std::nullopt;
    const ConsumerPlan& plan = consumers_.plan(mu_, consumers_.IndexOf(mu_, seal_when_->consumer));
    if (part.CompleteGroups(mu_, plan.columns, seal_when_->groups) < seal_when_->groups) {
      return std::nullopt;
    }
  }
  tdock::MutexLock lock(&mu_);
  if (ring_.Classify(mu_, step) != StepState::kLive) return std::nullopt;
  Partition& part = ring_.Of(step);
  // A step whose release is being recorded is done: nothing to seal.
  if (part.sealed(mu_) || part.seal_pending(mu_) || part.releasing(mu_)) return std::nullopt;
  const ConsumerPlan& plan = consumers_.plan(mu_, consumers_.IndexOf(mu_, seal_when_->consumer));
  std::vector<int64_t> surplus =
      part.SurplusRows(mu_, plan.index, plan.whole_groups, plan.columns, seal_when_->groups);
  DockJournal::DropRecord record{step, std::move(surplus), DropReason::kSurplus, /*seal=*/true};
  if (seal_when_->carry) {
    record.carry = CarryRowsLocked(part, plan, record.rows, record.carry_taken);
    if (!record.carry.empty()) HoldCarryLocked(part, record);
  }
  part.set_seal_pending(mu_, true);  // sealed once recorded
  return record;
}

}  // namespace tdock::internal

namespace tdock::internal {
namespace {

// Dropping a sealed step's orphans whose record failed is tried again after
// this long (a full disk gets time to drain).
constexpr absl::Duration kOrphansRetryInterval = absl::Seconds(1);

// Nothing is written to the row or being written to it, and it is neither
// dropped nor closed.
bool Orphan(Partition& part, int64_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu()) {
  return !part.dropped(row) && !part.has_cell(row) && part.row_index().pending_writes(row) == 0 &&
         part.row_index().closed(row) == RowIndex::Closed::kOpen;
}

}  // namespace

std::vector<int64_t> DockImpl::OrphansLocked(Partition& part, DropReason reason) {
  std::vector<int64_t> rows;
  if (reason == DropReason::kSealed) {
    if (!part.sealed(mu_)) return rows;
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      if (Orphan(part, row)) rows.push_back(row);
    }
  } else {
    for (int64_t row : part.row_index().expired_in_flight()) {
      if (Orphan(part, row)) rows.push_back(row);
    }
    std::sort(rows.begin(), rows.end());
  }
  if (rows.empty()) return rows;
  // Closed to Puts while the drop is recorded: a sealed step's as a Seal's
  // rows, an expired reservation's as its expiry's.
  if (reason == DropReason::kSealed) {
    part.row_index().AddDropInFlight(/*seal=*/true, rows, 1);
  } else {
    part.row_index().SetExpiring(rows, /*closed=*/true);
    part.row_index().AddDropInFlight(/*seal=*/false, {}, 1);
  }
  return rows;
}

void DockImpl::DropOrphans(int64_t step) {
  for (DropReason reason : {DropReason::kExpired, DropReason::kSealed}) {
    std::vector<int64_t> rows;
    {
      tdock::ReaderMutexLock lock(&mu_);
      if (!ring_.Holds(mu_, step) || ring_.Of(step).releasing(mu_)) return;
      Partition& part = ring_.Of(step);
      tdock::MutexLock commit(&part.row_index().mu());
      rows = OrphansLocked(part, reason);
    }
    if (rows.empty()) continue;
    const bool seal = reason == DropReason::kSealed;
    RecordAndApplyDrop(
        rows, step, reason, seal, /*in_flight=*/true,
        [this, step, rows, seal](absl::StatusOr<int64_t> dropped) {
          if (!seal) {
            tdock::ReaderMutexLock lock(&mu_);
            if (ring_.Holds(mu_, step)) {
              Partition& part = ring_.Of(step);
              tdock::MutexLock commit(&part.row_index().mu());
              part.row_index().SetExpiring(rows, /*closed=*/false);
            }
          }
          if (dropped.ok() || absl::IsFailedPrecondition(dropped.status())) return;
          const absl::Time at = limits_.clock->Now() + kOrphansRetryInterval;
          retries_.Ask(RetryTimes::kOrphans, at);
          alarm_->RingAt(at);
        });
  }
}

}  // namespace tdock::internal
