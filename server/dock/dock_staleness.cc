// DockImpl's staleness bounds: a consumer with max_staleness η never takes a
// row older than the dock's version minus η (a group: one whose rows not
// dropped are all within it). The check is made where rows are claimed (a
// BALANCED round: when it is formed), against the version read then; rows
// without a version have no age.
//
// A row past the bound that would otherwise be available to the consumer
// is claimed by it as stale and counted done for it, so it never holds the
// step. With `stale: leave` that is all (recorded like a hand-out with no
// lease); consumers without a bound still take the row. With `stale: drop`
// the row is dropped for every consumer with reason "stale". Either way the
// record is stored before the step may be released, and if it fails the
// units go back to the consumer, to be passed over again by a later claim.
// A row's version only falls and the dock's only rises, so a row stale
// once stays stale (after a restart too: both are recovered from records
// stored before they took effect).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::PassOverStaleLocked(Partition& part, const ConsumerPlan& plan,
                                   int64_t min_version, GetAttempt& attempt) {
  if (min_version == kNoVersion || part.row_index().min_version() >= min_version) return;
  ConsumerState& state = part.consumer(mu_, plan.index);
  // After a record failed, not at once again: a failing journal would
  // otherwise be asked in a loop by the Gets each failure wakes.
  // relaxed: a hint; a late look only delays the next try.
  if (absl::ToUnixNanos(limits_.clock->Now()) < state.stale_retry_ns.load(std::memory_order_relaxed)) {
    return;
  }
  StaleTake take;
  take.units = ClaimStale(part, state, plan, min_version);
  if (take.units.empty()) return;
  take.step = part.step(mu_);
  take.consumer = plan.index;
  take.drop = plan.stale_drop;
  for (int64_t unit : take.units) part.AppendUnitRows(mu_, unit, plan.whole_groups, take.rows);
  const int64_t counted =
      static_cast<int64_t>(take.units.size()) * (plan.whole_groups ? group_size_ : 1);
  // A record that can fail holds the step's end for the consumer, and its
  // auto-release, until it is stored; one stored at once (no journal) holds
  // neither, so that this Get's batch can end the step.
  if (commit_.durable()) {
    // acq_rel: counted before the units are, so auto-release waits for the
    // record, and so does the consumer's end of the step.
    part.unrecorded_handouts().fetch_add(1, std::memory_order_acq_rel);
    state.stale_unrecorded.fetch_add(static_cast<int64_t>(take.units.size()),
                                     std::memory_order_acq_rel);
  }
  // Done for the consumer, though not handed out (handed_rows stays).
  // acq_rel: as the claimers' increments.
  state.consumed_rows.fetch_add(counted, std::memory_order_acq_rel);
  attempt.wake_consumer = true;  // a Get waiting for the step's end may see it now
  attempt.stale.push_back(std::move(take));
}

void DockImpl::RecordStale(StaleTake take) {
  if (take.drop) {
    {
      // Like a Drop: the step stays on its partition until the record is in
      // (a step released meanwhile ends the record's claim on it).
      tdock::ReaderMutexLock lock(&mu_);
      if (ring_.Holds(mu_, take.step)) {
        Partition& part = ring_.Of(take.step);
        tdock::MutexLock commit(&part.row_index().mu());
        part.row_index().AddDropInFlight(/*seal=*/false, {}, 1);
      }
    }
    std::vector<int64_t> rows = take.rows;
    RecordAndApplyDrop(std::move(rows), take.step, DropReason::kStale, /*seal=*/false,
                       /*in_flight=*/true,
                       [this, take = std::move(take)](absl::StatusOr<int64_t> dropped) {
                         EndStaleTake(take, dropped.ok());
                       });
    return;
  }
  // Counted done when claimed: recorded as handed out.
  const DockJournal::HandOut record{take.step, take.consumer, take.units, /*lease_id=*/0};
  auto store = [&record](DockJournal& journal, DockJournal::Done stored) {
    journal.HandedOut(record, std::move(stored));
  };
  commit_.Commit(store, [this, take = std::move(take)](absl::Status stored) {
    EndStaleTake(take, stored.ok());
  });
}

void DockImpl::EndStaleTake(const StaleTake& take, bool stored) {
  int64_t current = -1;  // the partition's step now, if a newer one
  {
    tdock::ReaderMutexLock lock(&mu_);
    const ConsumerPlan& plan = consumers_.plan(mu_, take.consumer);
    if (ring_.Holds(mu_, take.step)) {
      Partition& part = ring_.Of(take.step);
      ConsumerState& state = part.consumer(mu_, plan.index);
      if (!stored) {
        // Given back but for units dropped meanwhile (those stay done).
        GiveBackLocked(part, plan, take.units, /*counted=*/true);
        // relaxed: a hint (PassOverStaleLocked).
        const absl::Time retry = limits_.clock->Now() + absl::Seconds(1);
        state.stale_retry_ns.store(absl::ToUnixNanos(retry), std::memory_order_relaxed);
        // Then the consumer's parked Gets look again (OnAlarm).
        retries_.Ask(RetryTimes::kStaleGets, retry);
        alarm_->RingAt(retry);
      }
      if (commit_.durable()) {
        // release: the units' return (or their record) comes before a Get
        // that sees the count fall ends the step for the consumer.
        state.stale_unrecorded.fetch_sub(static_cast<int64_t>(take.units.size()),
                                         std::memory_order_acq_rel);
      }
    } else if (const Partition& part = ring_.Of(take.step); part.live(mu_)) {
      current = part.step(mu_);  // released meanwhile; its partition holds a newer step
    }
    if (stored) {
      // relaxed: statistics only.
      consumers_.staleness(mu_, plan.index)
          .stale_rows.fetch_add(static_cast<int64_t>(take.rows.size()), std::memory_order_relaxed);
    }
  }
  if (commit_.durable()) {
    // release: the units' return (or their record) happens before an
    // auto-release that sees the count drop.
    ring_.Of(take.step).unrecorded_handouts().fetch_sub(1, std::memory_order_acq_rel);
  }
  if (stored) {
    // The consumer's Gets may see the step's end now.
    std::vector<bool> wanted(static_cast<size_t>(take.consumer) + 1, false);
    wanted[take.consumer] = true;
    WakeGets(wanted);
  }
  MaybeAutoRelease(take.step);
  if (current >= 0) MaybeAutoRelease(current);  // it may have waited for the count
}

}  // namespace tdock::internal
