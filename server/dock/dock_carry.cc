// DockImpl's carry (SealWhen::carry): the complete groups beyond a sealed
// step's target go into the next step instead of being dropped as surplus.
//
// The seal decides which groups carry (CarryRowsLocked), and holds them
// from Gets until its record is stored (HoldCarryLocked); that record drops
// them as `carried` together with the step's pending carry (the rows owed to
// the next step). The step is then not released until a Put of the
// dock itself (CarryForward) has written them into the next step, with their
// keys and versions, in groups of their sizes, and with, per consumer, the
// rows it had taken in the sealed step counted done in the next: that Put's
// record ends the pending carry in the same write. A restart finds the
// pending carry and writes it again (FinishRecovery). The carry waits, as a
// parked Put, for the next step's partition; it is refused for good if the
// next step is sealed, released or full, or a key is taken there: the rows
// then stay dropped as carried, the end of the debt is recorded, and the step
// goes.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// A carry that was not stored (a full disk) is tried again after this long.
constexpr absl::Duration kCarryRetryInterval = absl::Seconds(1);

}  // namespace

std::vector<int64_t> DockImpl::CarryRowsLocked(Partition& part, const ConsumerPlan& sealer,
                                               std::vector<int64_t>& surplus,
                                               std::vector<ConsumerUnits>& taken) const {
  // Per consumer, whether a unit it took may still come back to it in this
  // step: under a lease in flight, or (BALANCED) in a round not delivered to
  // every rank. Such a group stays (dropped as surplus): carried, it would
  // count as done for the consumer in the next step without having reached it.
  const int64_t step = part.step(mu_);
  const std::vector<ConsumerPlan>& plans = consumers_.plans(mu_);
  std::vector<const ConsumerState*> states;
  std::vector<std::set<int64_t>> open_units(plans.size());
  std::vector<bool> unsettled(plans.size(), false);
  // A hand-out whose record is in flight may fail and give its units back:
  // while there is one, no unit taken counts as settled.
  const bool handouts_in_flight = part.unrecorded_handouts().load(std::memory_order_acquire) > 0;
  for (const ConsumerPlan& plan : plans) {
    ConsumerState& state = part.consumer(mu_, plan.index);
    states.push_back(&state);
    if (handouts_in_flight) {
      unsettled[plan.index] = true;
      continue;
    }
    if (plan.policy == Policy::kBalanced) {
      tdock::MutexLock rounds(&state.book.mu());
      unsettled[plan.index] = state.book.forming() || !state.book.AllDone() ||
                              state.in_flight_rows.load(std::memory_order_acquire) > 0;
    } else if (state.in_flight_rows.load(std::memory_order_acquire) > 0) {
      for (const Lease& lease : leases_->InFlight(plan.index)) {
        if (lease.step != step) continue;
        open_units[plan.index].insert(lease.units.begin(), lease.units.end());
      }
    }
  }
  // The columns a group must have: carry_columns, or the sealer's.
  std::vector<int> needed = sealer.columns;
  if (!seal_when_->carry_columns.empty()) {
    needed.clear();
    for (const std::string& name : seal_when_->carry_columns) {
      needed.push_back(columns_.IndexOf(name));
    }
  }
  auto carriable = [&](int64_t g) {
    if (part.live_rows(g) == 0) return false;
    for (int c : needed) {
      if (!part.column(c).group_ready.Test(g)) return false;
    }
    for (const ConsumerPlan& plan : plans) {
      for (int64_t row = g * group_size_; row < (g + 1) * group_size_; ++row) {
        if (part.dropped(row)) continue;
        const int64_t unit = plan.whole_groups ? g : row;
        if (states[plan.index]->consumed.Test(unit) &&
            (unsettled[plan.index] || open_units[plan.index].contains(unit))) {
          return false;
        }
      }
    }
    return true;
  };
  // One Put carries them, so every carried row has the same shape: a key or
  // none, a version or none, and the same columns written (no cell is left
  // behind, so a consumer that took a group finds its results with it).
  // Empty: none seen yet.
  std::vector<char> shape;
  auto same_shape = [&](int64_t g) {
    std::vector<char> group;
    for (int64_t row = g * group_size_; row < (g + 1) * group_size_; ++row) {
      if (part.dropped(row)) continue;
      std::vector<char> of = {part.row_index().key(row) != nullptr,
                              part.row_index().version(row) != kNoVersion};
      for (size_t c = 0; c < columns_.size(); ++c) {
        of.push_back(part.ready(static_cast<int>(c), row));
      }
      if (!group.empty() && group != of) return false;
      group = std::move(of);
    }
    if (!shape.empty() && shape != group) return false;
    shape = std::move(group);
    return true;
  };
  std::vector<int64_t> carry, rest;
  for (size_t i = 0; i < surplus.size();) {
    const int64_t g = surplus[i] / group_size_;
    size_t end = i;
    while (end < surplus.size() && surplus[end] / group_size_ == g) ++end;
    std::vector<int64_t>& into = carriable(g) && same_shape(g) ? carry : rest;
    into.insert(into.end(), surplus.begin() + static_cast<std::ptrdiff_t>(i),
                surplus.begin() + static_cast<std::ptrdiff_t>(end));
    i = end;
  }
  surplus = std::move(rest);
  // What each consumer took of them, before their drop counts the rest done.
  for (const ConsumerPlan& plan : plans) {
    ConsumerUnits units{plan.index, {}};
    for (int64_t row : carry) {
      const int64_t unit = plan.whole_groups ? row / group_size_ : row;
      if (!states[plan.index]->consumed.Test(unit)) continue;
      if (units.units.empty() || units.units.back() != unit) units.units.push_back(unit);
    }
    if (!units.units.empty()) taken.push_back(std::move(units));
  }
  return carry;
}

void DockImpl::HoldCarryLocked(Partition& part, const DockJournal::DropRecord& record) {
  Partition::Carry carry{record.carry, record.carry_taken, {}, /*recorded=*/false,
                         /*carrying=*/false};
  for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
    ConsumerState& state = part.consumer(mu_, plan.index);
    ConsumerUnits units{plan.index, {}};
    for (int64_t row : record.carry) {
      const int64_t unit = plan.whole_groups ? row / group_size_ : row;
      if (!units.units.empty() && units.units.back() == unit) continue;
      // Taken units are set already: only the others are claimed here.
      if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
        units.units.push_back(unit);
      }
    }
    if (!units.units.empty()) carry.claimed.push_back(std::move(units));
  }
  part.carry(mu_) = std::move(carry);
}

int64_t DockImpl::ApplyCarryLocked(Partition& part, const DockJournal::DropRecord& record) {
  Partition::Carry& carry = part.carry(mu_);
  // A row a Drop recorded before the seal took out is not carried.
  std::vector<int64_t> rows;
  for (int64_t row : record.carry) {
    if (!part.dropped(row)) rows.push_back(row);
  }
  const int64_t dropped = ApplyDropLocked({record.step, rows, DropReason::kCarried});
  // The units claimed for the consumers that had not taken them are done
  // here (the drop counted none of them: they were claimed).
  for (const ConsumerUnits& units : carry.claimed) {
    const ConsumerPlan& plan = consumers_.plan(mu_, units.consumer);
    // acq_rel: as the claimers' increments.
    part.consumer(mu_, plan.index)
        .consumed_rows.fetch_add(
            static_cast<int64_t>(units.units.size()) * (plan.whole_groups ? group_size_ : 1),
            std::memory_order_acq_rel);
  }
  carry.rows = std::move(rows);
  carry.claimed.clear();
  carry.recorded = true;
  return dropped;
}

void DockImpl::DropCarryLocked(Partition& part) {
  for (const ConsumerUnits& units : part.carry(mu_).claimed) {
    GiveBackLocked(part, consumers_.plan(mu_, units.consumer), units.units, /*counted=*/false);
  }
  part.carry(mu_) = {};
}

void DockImpl::CarryForward(int64_t step) {
  PutInput in;
  std::shared_ptr<const void> pin;  // the cells the Put's columns view
  {
    tdock::MutexLock lock(&mu_);
    if (!ring_.Holds(mu_, step)) return;
    Partition& part = ring_.Of(step);
    Partition::Carry& carry = part.carry(mu_);
    if (carry.rows.empty() || !carry.recorded || carry.carrying) return;
    carry.carrying = true;
    // The columns every carried row has.
    std::vector<int> columns;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (std::all_of(carry.rows.begin(), carry.rows.end(), [&](int64_t row) {
            return part.ready(static_cast<int>(c), row);
          })) {
        columns.push_back(static_cast<int>(c));
      }
    }
    Batch batch = reader_.Make(part, part.step(mu_), part.cells(mu_), carry.rows, columns,
                               /*with_payload=*/true);
    in.step = step + 1;
    in.columns = std::move(batch.columns);
    pin = std::move(batch.pin);
    if (!batch.keys.empty() && !batch.keys[0].empty()) {
      in.keys = std::move(batch.keys);
    } else {
      in.new_rows = static_cast<int64_t>(carry.rows.size());
    }
    if (!batch.versions.empty() && batch.versions[0] != kNoVersion) {
      in.versions = std::move(batch.versions);
    }
    for (size_t i = 0; i < carry.rows.size();) {
      size_t end = i;
      const int64_t group = carry.rows[i] / group_size_;
      while (end < carry.rows.size() && carry.rows[end] / group_size_ == group) ++end;
      in.group_sizes.push_back(static_cast<int32_t>(end - i));
      i = end;
    }
    // Which rows each consumer took before the seal (its drop counted the
    // others done too).
    for (const ConsumerUnits& units : carry.taken) {
      const bool whole_groups = consumers_.plan(mu_, units.consumer).whole_groups;
      const std::set<int64_t> of(units.units.begin(), units.units.end());
      std::vector<size_t> positions;
      for (size_t i = 0; i < carry.rows.size(); ++i) {
        if (of.contains(whole_groups ? carry.rows[i] / group_size_ : carry.rows[i])) {
          positions.push_back(i);
        }
      }
      in.carried_taken.emplace_back(units.consumer, std::move(positions));
    }
    in.carried_from = step;
    in.wait = absl::InfiniteDuration();  // the next step may wait for its partition
  }
  Put(std::move(in), [this, step, pin = std::move(pin)](absl::StatusOr<PutResult> result) {
    EndCarry(step, result.status());
  });
}

void DockImpl::EndCarry(int64_t step, const absl::Status& status) {
  if (waiters_.shutting_down()) return;  // owed still: a restart writes it
  bool again = false;
  {
    tdock::MutexLock lock(&mu_);
    if (!ring_.Holds(mu_, step)) return;
    // Owed still: the write was not stored (the journal failed), or the next
    // step is being sealed (if that seal is not stored, it takes new rows).
    again = absl::IsUnavailable(status) ||
            (absl::IsFailedPrecondition(status) && BeingSealedLocked(step + 1));
    // Refused for good, it stays `carrying` until the end is recorded, so
    // that the alarm does not write it meanwhile.
    if (status.ok() || again) ring_.Of(step).carry(mu_).carrying = false;
    if (status.ok()) ring_.Of(step).carry(mu_) = {};
  }
  if (status.ok()) {
    MaybeAutoRelease(step);
    MaybeAutoRelease(step + 1);  // its consumers may have had every row done
    return;
  }
  if (again) {
    CarryAgainSoon();
    return;
  }
  // Refused for good: the debt ends, recorded, so that a restart does not
  // write what the next step refused.
  commit_.Commit(
      [step](DockJournal& journal, DockJournal::Done stored) {
        journal.CarryEnded(step, std::move(stored));
      },
      [this, step](absl::Status stored) {
        {
          tdock::MutexLock lock(&mu_);
          if (!ring_.Holds(mu_, step)) return;
          Partition::Carry& carry = ring_.Of(step).carry(mu_);
          // Not stored: tried again, refused again, recorded then.
          if (stored.ok()) {
            carry = {};
          } else {
            carry.carrying = false;
          }
        }
        if (stored.ok()) {
          MaybeAutoRelease(step);
        } else {
          CarryAgainSoon();
        }
      });
}

bool DockImpl::BeingSealedLocked(int64_t step) {
  if (!ring_.Holds(mu_, step)) return false;
  Partition& part = ring_.Of(step);
  if (part.sealed(mu_)) return false;
  if (part.seal_pending(mu_)) return true;
  tdock::MutexLock commit(&part.row_index().mu());
  return part.row_index().sealing();
}

void DockImpl::CarryAgainSoon() {
  const absl::Time at = limits_.clock->Now() + kCarryRetryInterval;
  retries_.Ask(RetryTimes::kOrphans, at);
  alarm_->RingAt(at);
}

void DockImpl::CountCarriedDoneLocked(Partition& part, const ConsumerPlan& plan,
                                      const std::vector<int64_t>& units) {
  ConsumerState& state = part.consumer(mu_, plan.index);
  int64_t counted = 0;
  for (int64_t unit : units) {
    if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
      counted += plan.whole_groups ? group_size_ : 1;
    }
  }
  // acq_rel: as the claimers' increments. Nothing is handed out here.
  state.consumed_rows.fetch_add(counted, std::memory_order_acq_rel);
}

absl::Status DockImpl::RecoverCarry(int64_t step, std::vector<int64_t> rows,
                                    std::vector<ConsumerUnits> taken) {
  tdock::MutexLock lock(&mu_);
  if (ring_.Classify(mu_, step) != StepState::kLive) return absl::OkStatus();
  Partition& part = ring_.Of(step);
  for (int64_t row : rows) {
    if (row < 0 || row >= rows_per_step_) {
      return absl::DataLossError(
          absl::StrCat(Where(step), ": the rows to carry name row ", row));
    }
  }
  // As the seal's apply did: a row a Drop recorded before it took out is
  // not carried.
  std::vector<int64_t> carried;
  for (int64_t row : rows) {
    if (part.drop_reason(mu_, row) == DropReason::kCarried) carried.push_back(row);
  }
  rows = std::move(carried);
  for (const ConsumerUnits& units : taken) {
    if (units.consumer < 0 || units.consumer >= static_cast<int>(consumers_.plans(mu_).size())) {
      return absl::DataLossError(absl::StrCat(Where(step), ": the rows to carry name consumer #",
                                              units.consumer, ", which does not exist"));
    }
  }
  part.carry(mu_) = {std::move(rows), std::move(taken), {}, /*recorded=*/true,
                     /*carrying=*/false};
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverCarriedDone(int64_t step, int consumer,
                                          const std::vector<int64_t>& units) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, step) != StepState::kLive) return absl::OkStatus();
  if (consumer < 0 || consumer >= static_cast<int>(consumers_.plans(mu_).size())) {
    return absl::DataLossError(absl::StrCat(Where(step), ": carried rows name consumer #",
                                            consumer, ", which does not exist"));
  }
  const ConsumerPlan& plan = consumers_.plan(mu_, consumer);
  Partition& part = ring_.Of(step);
  const int64_t limit = plan.whole_groups ? part.groups() : part.rows();
  for (int64_t unit : units) {
    if (unit < 0 || unit >= limit) {
      return absl::DataLossError(absl::StrCat(Where(step), " consumer '", plan.name,
                                              "': carried rows name unit ", unit));
    }
  }
  CountCarriedDoneLocked(part, plan, units);
  return absl::OkStatus();
}

}  // namespace tdock::internal
