// DockImpl's read path: pick the step, claim rows lock-free, and build a
// batch of views into the step's cells.
#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Retries of a claim that lost rows to concurrent claimers before parking.
constexpr int kMaxClaimRounds = 64;

}  // namespace

absl::StatusOr<ConsumerPlan> DockImpl::PlanFor(const GetInput& in, int index) const {
  tdock::ReaderMutexLock lock(&mu_);
  int k = index;
  if (k < 0) {
    TDOCK_ASSIGN_OR_RETURN(k, consumers_.Find(mu_, in.consumer));
  }
  const ConsumerPlan& plan = consumers_.plan(mu_, k);
  const std::string who = absl::StrCat("dock '", name_, "' consumer '", plan.name, "'");
  if (in.rank < 0 || in.rank >= plan.dp_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": rank ", in.rank, " is out of range [0, ", plan.dp_size, ")"));
  }
  if (in.replica < 0 || in.replica >= plan.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": replica ", in.replica, " is out of range [0, ", plan.replicas, ")",
        plan.replicas == 1 ? " (the consumer has no replicas)" : ""));
  }
  if (in.step.has_value() && *in.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": step ", *in.step, " is negative"));
  }
  if (in.round.has_value() && !in.step.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": round ", *in.round, " is asked for without a step; name the step"));
  }
  if (in.count < 0 || in.count > rows_per_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": count ", in.count, " is out of range [0, ", rows_per_step_, "]"));
  }
  if (plan.whole_groups && in.count % group_size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " takes whole groups: count ", in.count,
        " is not a multiple of n_samples_per_prompt ", group_size_));
  }
  return plan;
}

GetAttempt DockImpl::TryGet(const GetInput& in, const ConsumerPlan& plan) {
  tdock::ReaderMutexLock lock(&mu_);
  return TryGetLocked(in, plan);
}

GetAttempt DockImpl::TryGetLocked(const GetInput& in,
                                            const ConsumerPlan& plan) {
  {
    absl::Status gone = consumers_.Gone(mu_, plan);
    if (!gone.ok()) {
      GetAttempt attempt;
      attempt.done = std::move(gone);
      return attempt;
    }
    // An optional consumer takes nothing before its join is recorded.
    if (!consumers_.plan(mu_, plan.index).holds_steps()) return GetAttempt{};
  }
  if (in.step.has_value()) {
    switch (ring_.Classify(mu_, *in.step)) {
      case StepState::kLive:
        return ServeLocked(ring_.Of(*in.step), in, plan, /*explicit_step=*/true);
      case StepState::kReleased: {
        // A release being recorded may still fail and leave the step live
        // with rows this consumer has not taken: wait for the record.
        if (ring_.Holds(mu_, *in.step)) return GetAttempt{};
        // Nothing more can come from a released step: every rank of every
        // consumer learns that the step is over, not just the one that took
        // its last rows.
        GetAttempt attempt;
        Batch over;
        over.step = *in.step;
        over.end_of_step = true;
        attempt.done = std::move(over);
        return attempt;
      }
      default:
        return GetAttempt{};  // not started yet: wait for it
    }
  }
  std::vector<std::pair<int64_t, Partition*>> live;  // oldest step first
  for (const auto& part : ring_.partitions()) {
    if (part->live(mu_) && !part->releasing(mu_)) live.emplace_back(part->step(mu_), part.get());
  }
  std::sort(live.begin(), live.end());
  GetAttempt attempt;
  for (const auto& [step, part] : live) {
    const int32_t taker = TakerOf(plan, in.rank, in.replica);
    ConsumerState& state = part->consumer(mu_, plan.index);
    if (plan.policy == Policy::kBalanced) {
      // A rank's k-th Get belongs to round k of the oldest step it is not
      // done with; it must not run ahead into a newer step meanwhile.
      if (state.RankDone(mu_, rows_per_step_, taker)) continue;
    }
    GetAttempt one = ServeLocked(*part, in, plan, /*explicit_step=*/false);
    // What this step's attempt passed over is recorded whatever comes next.
    std::move(one.stale.begin(), one.stale.end(), std::back_inserter(attempt.stale));
    one.stale.clear();
    one.wake_consumer |= attempt.wake_consumer;
    if (plan.policy == Policy::kBalanced) {
      // Rows passed over as stale may have ended the step for the rank.
      if (one.done.has_value() || one.draft.has_value() ||
          !state.RankDone(mu_, rows_per_step_, taker)) {
        one.stale = std::move(attempt.stale);
        return one;
      }
    } else if (one.done.has_value()) {
      one.stale = std::move(attempt.stale);
      return one;
    }
    attempt.wake_consumer = one.wake_consumer;
  }
  return attempt;
}

GetAttempt DockImpl::ServeLocked(Partition& part, const GetInput& in,
                                           const ConsumerPlan& plan,
                                           bool explicit_step) {
  if (plan.policy == Policy::kBalanced) {
    return ServeRoundLocked(part, in, plan, explicit_step);
  }
  GetAttempt attempt;
  ConsumerState& state = part.consumer(mu_, plan.index);
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  const int64_t units = plan.whole_groups ? part.groups() : part.rows();
  const int64_t count = (in.count > 0 ? in.count : plan.dispatch_size) / unit_rows;
  // Consumers without a bound skip the staleness calls (the Get path's
  // fast case).
  const int64_t min_version =
      plan.max_staleness.has_value() ? plan.min_version(version_.current()) : kNoVersion;
  if (min_version != kNoVersion) PassOverStaleLocked(part, plan, min_version, attempt);
  for (int round = 0; round < kMaxClaimRounds; ++round) {
    // Remaining counts only committed claims: bits a concurrent claimer holds
    // for a moment (and may undo) must not end the step early.
    // acquire: pairs with the claimers' increments.
    const int64_t remaining =
        units - state.consumed_rows.load(std::memory_order_acquire) / unit_rows;
    if (remaining == 0) {
      // Leased rows may still come back: wait for their acknowledgement.
      // acquire: pairs with the leases' settlements.
      if (state.in_flight_rows.load(std::memory_order_acquire) > 0) {
        return attempt;
      }
      // So may rows passed over as stale, until their record is stored.
      if (state.stale_unrecorded.load(std::memory_order_acquire) > 0) return attempt;
      if (explicit_step) {
        Batch empty;
        empty.step = part.step(mu_);
        empty.end_of_step = true;
        attempt.done = std::move(empty);
      }
      return attempt;
    }
    const int64_t need = std::min(count, remaining);
    if (CountAvailable(part, state, plan, need, min_version) < need) return attempt;
    const uint64_t seed =
        plan.seed ^ (static_cast<uint64_t>(part.step(mu_)) * 0x9E3779B97F4A7C15ull) ^
        // relaxed: only diversifies random draws between calls.
        random_calls_.fetch_add(1, std::memory_order_relaxed);
    std::vector<int64_t> claimed = Claim(part, state, plan, need, seed, min_version);
    if (static_cast<int64_t>(claimed.size()) < need) {
      Unclaim(state, claimed);
      if (!claimed.empty()) attempt.wake_consumer = true;
      continue;  // others won some rows; look again
    }
    // No more than one response carries: the rest goes back at once.
    if (const size_t fit = sizes_.FittingUnits(part, plan, claimed); fit < claimed.size()) {
      const std::vector<int64_t> rest(claimed.begin() + static_cast<ptrdiff_t>(fit),
                                      claimed.end());
      claimed.resize(fit);
      Unclaim(state, rest);
      attempt.wake_consumer = true;
      if (claimed.empty()) {  // only a row that predates the limit's check
        attempt.done = CapacityError(absl::StrCat(
            Where(part.step(mu_)), " consumer '", plan.name, "': ",
            plan.whole_groups ? "group " : "row ", rest.front(),
            " alone is larger than one response carries (", limits_.max_batch_bytes,
            " bytes)"));
        return attempt;
      }
    }
    // A group's dropped rows stay out of the batch; the unit still counts
    // its full size (dock_drops.cc). A row claimed is never a dropped one
    // (a drop sets its consumed bit, under the lock this claim holds shared).
    const int64_t counted = static_cast<int64_t>(claimed.size()) * unit_rows;
    std::vector<int64_t> rows;
    if (!plan.whole_groups) {
      rows = claimed;
    } else {
      rows.reserve(static_cast<size_t>(counted));
      for (int64_t unit : claimed) part.AppendUnitRows(mu_, unit, /*whole_groups=*/true, rows);
    }
    Batch planned;
    if (plan.micro_batch.has_value()) {
      absl::Status status = PlanRowsLocked(part, plan, rows, planned);
      if (!status.ok()) {
        Unclaim(state, claimed);
        attempt.wake_consumer = true;
        attempt.done = status;
        return attempt;
      }
    }
    if (part.row_index().has_versions()) {
      consumers_.staleness(mu_, plan.index).Count(version_.current(), part.row_index(), rows);
    }
    const auto [lease_id, total] = HandOutLocked(
        part, plan, in.rank, std::move(claimed), static_cast<int64_t>(rows.size()),
        plan.lease > absl::ZeroDuration() ? std::optional<uint64_t>(0) : std::nullopt);
    Batch batch = reader_.Make(part, part.step(mu_), part.cells(mu_), std::move(rows),
                               plan.columns, !in.metadata_only);
    if (lease_id != 0) {
      batch.lease_id = lease_id;
      batch.lease = plan.lease;
    }
    batch.micro_batches = std::move(planned.micro_batches);
    batch.balance = planned.balance;
    batch.end_of_step = total == rows_per_step_ &&
                        state.stale_unrecorded.load(std::memory_order_acquire) == 0;
    // A Get that parked while these rows were claimed but not yet counted
    // may have wanted the step's remainder, which is now smaller, or (the
    // step's last rows) must now learn that the step is over: near the end
    // of a step, let the consumer's parked Gets look again.
    if (rows_per_step_ - total < count * unit_rows) attempt.wake_consumer = true;
    attempt.rows_left = rows_per_step_ - total;  // another Get may ask for more
    attempt.dispatch_rows = plan.dispatch_size;
    // acq_rel: counted before the hand-out is visible to auto-release.
    part.unrecorded_handouts().fetch_add(1, std::memory_order_acq_rel);
    if (batch.end_of_step) attempt.maybe_release = part.step(mu_);
    attempt.done = std::move(batch);
    return attempt;
  }
  return attempt;
}

HandedOut DockImpl::HandOutLocked(Partition& part, const ConsumerPlan& plan,
                                            int32_t rank, std::vector<int64_t> units,
                                            int64_t rows, std::optional<uint64_t> lease) {
  ConsumerState& state = part.consumer(mu_, plan.index);
  // A group's dropped rows stay out of `rows`; the unit still counts its
  // full size (dock_drops.cc).
  const int64_t counted = static_cast<int64_t>(units.size()) * (plan.whole_groups ? group_size_ : 1);
  HandedOut out;
  if (lease.has_value()) {
    out.lease_id = LeaseRowsLocked(part, plan, rank, std::move(units), -1, rows, *lease);
  }
  // relaxed: statistics only.
  state.handed_rows.fetch_add(rows, std::memory_order_relaxed);
  state.handed_total.fetch_add(rows, std::memory_order_relaxed);
  // acq_rel: exactly one claimer sees the total reach the step's rows.
  out.done_rows = state.consumed_rows.fetch_add(counted, std::memory_order_acq_rel) + counted;
  return out;
}

void DockImpl::AfterGet(GetAttempt& attempt, int consumer) {
  for (StaleTake& take : std::exchange(attempt.stale, {})) RecordStale(std::move(take));
  if (attempt.draft.has_value()) FormAndCommitRound(*std::exchange(attempt.draft, {}));
  // A parked Get asking for more rows than are left now (it parked while
  // these rows were claimed but not yet counted, or asks for more than this
  // Get did) may take the remainder: it looks again. A Get parked after
  // this look ran its last check after these rows were counted.
  if (!attempt.wake_consumer && attempt.rows_left >= 0 &&
      attempt.rows_left < waiters_.Asked(consumer, attempt.dispatch_rows).most) {
    attempt.wake_consumer = true;
  }
  if (attempt.wake_consumer) {
    std::vector<bool> wanted(static_cast<size_t>(consumer) + 1, false);
    wanted[consumer] = true;
    WakeGets(wanted);
  }
  if (attempt.maybe_release.has_value()) MaybeAutoRelease(*attempt.maybe_release);
}

uint64_t DockImpl::Get(GetInput input, GetCallback done) {
  absl::StatusOr<ConsumerPlan> plan = PlanFor(input);
  if (!plan.ok()) {
    std::move(done)(plan.status());
    return 0;
  }
  // An optional consumer joins with its first Get (Sample too).
  if (plan->optional && !plan->joined) RequestJoin(*plan);
  done = RecordingGet(*plan, input.rank, input.replica, std::move(done));
  GetAttempt attempt = TryGet(input, *plan);
  bool formed = attempt.draft.has_value();
  AfterGet(attempt, plan->index);
  while (formed && !attempt.done.has_value()) {
    // This Get formed a round: it asks again, for its share of it.
    attempt = TryGet(input, *plan);
    formed = attempt.draft.has_value();
    AfterGet(attempt, plan->index);
  }
  if (attempt.done.has_value()) {
    std::move(done)(std::move(*attempt.done));
    return 0;
  }
  if (input.wait <= absl::ZeroDuration()) {
    Batch empty;
    empty.timed_out = true;
    std::move(done)(std::move(empty));
    return 0;
  }
  return ParkGet(std::move(input), *plan, std::move(done));
}

}  // namespace tdock::internal
