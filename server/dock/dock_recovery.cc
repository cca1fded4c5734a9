// DockImpl's recovery (DockRecovery, dock.h): what the journal held, put back
// before the dock serves — released steps, hand-outs, rounds and their
// deliveries — and, once drops are applied, the index of keys and the
// releases of steps found done.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

absl::Status DockImpl::RecoverReleased(int64_t step) {
  if (step < 0) {
    return absl::DataLossError(absl::StrCat(Where(step), ": a release record names a negative step"));
  }
  tdock::MutexLock lock(&mu_);
  Partition& part = ring_.Of(step);
  if (part.live(mu_)) {
    return absl::DataLossError(
        absl::StrCat(Where(step), ": a release record comes after the partition's cells"));
  }
  ApplyReleaseLocked(part, step);  // no cells: nothing to free
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverHandOut(const DockJournal::HandOut& handout) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, handout.step) != StepState::kLive) return absl::OkStatus();
  if (handout.consumer < 0 || handout.consumer >= static_cast<int>(consumers_.plans(mu_).size())) {
    return absl::DataLossError(absl::StrCat(Where(handout.step), ": a hand-out names consumer #",
                                            handout.consumer, ", which does not exist"));
  }
  const ConsumerPlan& plan = consumers_.plan(mu_, handout.consumer);
  if (handout.rank < 0 || handout.rank >= plan.dp_size) {
    return absl::DataLossError(absl::StrCat(Where(handout.step), " consumer '", plan.name,
                                            "': a hand-out names rank ", handout.rank));
  }
  Partition& part = ring_.Of(handout.step);
  ConsumerState& state = part.consumer(mu_, plan.index);
  const int64_t units = plan.whole_groups ? part.groups() : part.rows();
  for (int64_t unit : handout.units) {
    if (unit < 0 || unit >= units) {
      return absl::DataLossError(absl::StrCat(Where(handout.step), " consumer '", plan.name,
                                              "': a hand-out names unit ", unit));
    }
  }
  // The claim the serving Get made, then the same effect (HandOutLocked)
  // and, the record being stored, the lease's clock.
  std::vector<int64_t> claimed;
  for (int64_t unit : handout.units) {
    if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) claimed.push_back(unit);
  }
  const int64_t rows = static_cast<int64_t>(claimed.size()) * (plan.whole_groups ? group_size_ : 1);
  const bool leased = handout.lease_id != 0 && plan.lease > absl::ZeroDuration();
  const HandedOut out =
      HandOutLocked(part, plan, handout.rank, std::move(claimed), rows,
                    leased ? std::optional<uint64_t>(handout.lease_id) : std::nullopt);
  if (out.lease_id != 0) StartLeaseClock(out.lease_id, plan.lease);
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverRound(const DockJournal::RoundRecord& record) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, record.step) != StepState::kLive) return absl::OkStatus();
  if (record.consumer < 0 || record.consumer >= static_cast<int>(consumers_.plans(mu_).size()) ||
      static_cast<int>(record.shares.size()) != consumers_.plan(mu_, record.consumer).dp_size ||
      (!record.repeats.empty() && record.repeats.size() != record.shares.size())) {
    return absl::DataLossError(absl::StrCat(Where(record.step), ": round ", record.round,
                                            " does not fit its consumer"));
  }
  const ConsumerPlan& plan = consumers_.plan(mu_, record.consumer);
  Partition& part = ring_.Of(record.step);
  ConsumerState& state = part.consumer(mu_, plan.index);
  tdock::MutexLock rounds(&state.book.mu());
  if (record.round < state.book.formed()) return absl::OkStatus();
  // A round never recorded (its ranks asked past it by number, or its first
  // delivery's record failed, so no rank got its rows) stays a round with
  // no rows (RoundBook::Recover); whatever rows it held and that are not
  // dropped are claimed again by a round formed later.
  Round round;
  round.stats = record.stats;
  int64_t rows = 0;     // handed out in the shares
  int64_t claimed = 0;  // units claimed, as the round's formation claimed them
  for (size_t r = 0; r < record.shares.size(); ++r) {
    RoundShare share{record.shares[r], record.micro_batches[r]};
    if (!record.repeats.empty()) share.repeats = record.repeats[r];
    for (size_t i = 0; i < share.repeats.size(); ++i) {
      if (share.repeats[i] < 0 || share.repeats[i] >= static_cast<int64_t>(share.rows.size()) ||
          (i > 0 && share.repeats[i] <= share.repeats[i - 1])) {
        return absl::DataLossError(absl::StrCat(Where(record.step), " consumer '", plan.name,
                                                "': round ", record.round, " rank ", r,
                                                " names repeat position ", share.repeats[i]));
      }
    }
    for (int64_t row : share.rows) {
      if (row < 0 || row >= part.rows()) {
        return absl::DataLossError(absl::StrCat(Where(record.step), " consumer '", plan.name,
                                                "': round ", record.round, " names row ", row));
      }
    }
    for (int64_t row : share.RealRows()) {
      const int64_t unit = plan.whole_groups ? row / group_size_ : row;
      // A group's rows dropped before the round formed are in no share; the
      // group counts whole (CountDroppedLocked skips a claimed one).
      if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) ++claimed;
      ++rows;
    }
    round.ranks.push_back(std::move(share));
  }
  CountRoundLocked(part, plan, round, claimed);
  // Not `last` as counted here, nor the record's: either counts rows
  // claimed by rounds before it, and one of those may be an unrecorded
  // round whose rows are claimed again (or a drop replayed before it may
  // count a later round's row). A recovered round ends the step as any
  // round does once the step's rows are counted (the last formed, when no
  // row is left).
  round.last = false;
  state.book.Recover(record.round, std::move(round));
  // Serving counts a share in the hand-out total when it is delivered;
  // the deliveries' records name no rows.
  // relaxed: statistics only.
  state.handed_total.fetch_add(rows, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverDelivery(int64_t step, int consumer, int64_t round, int32_t taker,
                                       uint64_t lease_id) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, step) != StepState::kLive) return absl::OkStatus();
  if (consumer < 0 || consumer >= static_cast<int>(consumers_.plans(mu_).size()) || taker < 0 ||
      taker >= consumers_.plan(mu_, consumer).dp_size * consumers_.plan(mu_, consumer).replicas) {
    return absl::DataLossError(
        absl::StrCat(Where(step), ": a delivery names consumer #", consumer, " taker ", taker));
  }
  const ConsumerPlan& plan = consumers_.plan(mu_, consumer);
  const int32_t rank = taker / plan.replicas;
  ConsumerState& state = ring_.Of(step).consumer(mu_, consumer);
  RoundBook& book = state.book;
  tdock::MutexLock rounds(&book.mu());
  if (round >= book.formed()) return absl::OkStatus();
  // Deliveries come in key order, a taker's rounds ascending. A rank (a
  // replica) takes its rounds in order, so a round it skipped was handed
  // back (expired or nacked: its delivery record went) and is queued for it
  // again.
  book.RecoverDelivery(taker, round);
  if (plan.lease == absl::ZeroDuration()) return absl::OkStatus();
  if (lease_id == 0) {  // its lease was acknowledged
    book.Acked(round, rank);
    return absl::OkStatus();
  }
  // The lease the serving delivery made (LeaseRowsLocked) with its
  // recorded id, and, the record being stored, its clock.
  book.LeaseTakers(round, rank).insert(taker % plan.replicas);
  LeaseRowsLocked(ring_.Of(step), plan, rank, {}, round, book.round(round).ranks[rank].real_rows(),
                  lease_id);
  StartLeaseClock(lease_id, plan.lease);
  return absl::OkStatus();
}

void DockImpl::FinishRecovery() {
  RebuildKeyIndex();
  const std::vector<int64_t> live = LiveSteps();
  // seal_when decides on what recovery wrote (a seal not recorded before).
  for (int64_t step : live) MaybeAutoSeal(step);
  // A write a Seal kept whose record never made it (a crash between the
  // two) left its row in a sealed step with nothing: it ends now.
  for (int64_t step : live) DropOrphans(step);
  // Rows a seal carried that the next step has not stored.
  for (int64_t step : live) CarryForward(step);
  for (int64_t step : live) MaybeAutoRelease(step);
  // Recovered reservations expire from now on, with the journal attached.
  const absl::Time next = reservations_.NextDeadline();
  if (next != absl::InfiniteFuture()) alarm_->RingAt(next);
}

}  // namespace tdock::internal
