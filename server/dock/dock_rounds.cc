// DockImpl's balanced dispatch: rounds of BALANCED consumers (DESIGN.md §5),
// formed through the round dispatcher (round_dispatcher.h), and micro-batch
// plans.
//
// A BALANCED consumer with dp_size D is served in rounds. The k-th Get of
// rank r (in a step) belongs to round k. The first rank to ask for round k
// claims D × dispatch_size rows (or the step's remainder) once they are
// available, splits them into D parts whose row counts (whole groups)
// differ by at most one and whose costs are balanced, and plans each part's
// micro-batches; rank r gets part r, an empty part too, so every rank takes
// every round. Rounds are kept until the step is released, so asking again
// for a round returns the same rows. Drafting and committing a round hold the
// consumer's round book lock (per partition); claims inside it still use the
// lock-free bitmap; planning holds no lock.
#include <algorithm>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/balance/round.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

RoundDraft DockImpl::DraftRoundLocked(const Partition& part, const ConsumerPlan& plan,
                                      std::vector<int64_t> units) const {
  RoundDraft draft;
  draft.step = part.step(mu_);
  draft.consumer = plan.index;
  draft.who = absl::StrCat(Where(part.step(mu_)), " consumer '", plan.name, "'");
  draft.whole_groups = plan.whole_groups;
  draft.units = std::move(units);
  // A group's dropped rows stay out of the round: groups may differ in size.
  // A row claimed is never a dropped one (dock_drops.cc).
  if (!plan.whole_groups) {
    draft.rows = draft.units;
    draft.unit_sizes.assign(draft.units.size(), 1);
  } else {
    for (int64_t unit : draft.units) {
      const size_t before = draft.rows.size();
      part.AppendUnitRows(mu_, unit, /*whole_groups=*/true, draft.rows);
      draft.unit_sizes.push_back(static_cast<int32_t>(draft.rows.size() - before));
    }
  }
  draft.lengths.reserve(draft.rows.size());
  for (int64_t row : draft.rows) {
    draft.lengths.push_back(reader_.Tokens(part, row));
    if (limits_.max_batch_bytes > 0) {
      draft.row_bytes.push_back(sizes_.Row(part, plan, row));
    }
  }
  draft.options.dp_size = plan.dp_size;
  if (plan.whole_groups) {
    draft.options.group_sizes.assign(draft.unit_sizes.begin(), draft.unit_sizes.end());
  }
  draft.options.cost = plan.cost;
  draft.options.micro_batch = plan.micro_batch;
  draft.options.same_count_across_ranks = plan.same_count_across_ranks;
  draft.options.pad_repeat = plan.pad == RoundPad::kRepeat;
  draft.max_batch_bytes = limits_.max_batch_bytes;
  draft.fixed_bytes = ResponseSizes::Fixed();
  return draft;
}

void DockImpl::FormAndCommitRound(const RoundDraft& draft) {
  if (limits_.before_round_planned) limits_.before_round_planned(draft.step, draft.consumer);
  FormedRound formed = FormRound(draft);  // no lock held
  {
    tdock::ReaderMutexLock lock(&mu_);
    // A step released meanwhile took the claims with it (a release being
    // recorded may still fail and leave the step as it was: keep the round).
    if (!ring_.Holds(mu_, draft.step)) return;
    Partition& part = ring_.Of(draft.step);
    ConsumerState& state = part.consumer(mu_, draft.consumer);
    RoundBook& book = state.book;
    tdock::MutexLock round_lock(&book.mu());
    const ConsumerPlan& plan = consumers_.plan(mu_, draft.consumer);
    if (!formed.round.ok()) {
      GiveBackLocked(part, plan, draft.units, /*counted=*/false);
      book.Fail(formed.round.status());
    } else {
      if (formed.kept < draft.units.size()) {
        GiveBackLocked(part, plan,
                       std::vector<int64_t>(draft.units.begin() + formed.kept, draft.units.end()),
                       /*counted=*/false);
      }
      for (const RoundShare& share : formed.round->ranks) {
        // Repeats (pad: repeat) are counted with the share they are from.
        StalenessCounters& staleness = consumers_.staleness(mu_, plan.index);
        if (share.repeats.empty()) {
          staleness.Count(version_.current(), part.row_index(), share.rows);
        } else {
          staleness.Count(version_.current(), part.row_index(), share.RealRows());
        }
      }
      CountRoundLocked(part, plan, *formed.round, static_cast<int64_t>(formed.kept));
      book.Keep(*std::move(formed.round));
    }
  }
  // The ranks waiting for the round (and, for rows given back, any Get).
  std::vector<bool> wanted(static_cast<size_t>(draft.consumer) + 1, false);
  wanted[draft.consumer] = true;
  WakeGets(wanted);
}

void DockImpl::CountRoundLocked(Partition& part, const ConsumerPlan& plan, Round& round,
                                int64_t units) {
  ConsumerState& state = part.consumer(mu_, plan.index);
  state.book.mu().AssertHeld();
  int64_t handed = 0;
  for (const RoundShare& share : round.ranks) handed += share.real_rows();
  // relaxed: statistics only.
  state.handed_rows.fetch_add(handed, std::memory_order_relaxed);
  // Every unit counts its full size (dock_drops.cc).
  const int64_t rows = units * (plan.whole_groups ? group_size_ : 1);
  // acq_rel: exactly one round sees the total reach the step's rows.
  round.last = state.consumed_rows.fetch_add(rows, std::memory_order_acq_rel) + rows ==
               rows_per_step_;
}

GetAttempt DockImpl::StartRoundLocked(Partition& part, const GetInput& in,
                                                const ConsumerPlan& plan, bool explicit_step) {
  GetAttempt attempt;
  ConsumerState& state = part.consumer(mu_, plan.index);
  state.book.mu().AssertHeld();
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  const int64_t units = plan.whole_groups ? part.groups() : part.rows();
  const int64_t min_version =
      plan.max_staleness.has_value() ? plan.min_version(version_.current()) : kNoVersion;
  if (min_version != kNoVersion) PassOverStaleLocked(part, plan, min_version, attempt);
  // Under the book's lock every claim of this consumer is committed at once.
  // acquire: pairs with the rounds' increments.
  const int64_t remaining =
      units - state.consumed_rows.load(std::memory_order_acquire) / unit_rows;
  if (remaining == 0) {
    // Rows passed over as stale end the step once their record is stored.
    if (state.stale_unrecorded.load(std::memory_order_acquire) > 0) return attempt;
    if (explicit_step || in.round.has_value()) {
      Batch over;
      over.step = part.step(mu_);
      over.end_of_step = true;
      attempt.done = std::move(over);
    }
    return attempt;
  }
  const int64_t count = (in.count > 0 ? in.count : plan.dispatch_size) / unit_rows;
  const int64_t need = std::min(count * plan.dp_size, remaining);
  if (CountAvailable(part, state, plan, need, min_version) < need) return attempt;
  std::vector<int64_t> claimed = Claim(part, state, plan, need, plan.seed, min_version);
  if (static_cast<int64_t>(claimed.size()) < need) {  // cannot happen: we hold the book's lock
    Unclaim(state, claimed);
    return attempt;
  }
  // Planned outside the locks (round_dispatcher.h); this Get parks until
  // the round is kept, unless it forms it itself (DockImpl::Get).
  state.book.StartForming();
  attempt.draft = DraftRoundLocked(part, plan, std::move(claimed));
  return attempt;
}

GetAttempt DockImpl::ServeRoundLocked(Partition& part, const GetInput& in,
                                                const ConsumerPlan& plan,
                                                bool explicit_step) {
  GetAttempt attempt;
  ConsumerState& state = part.consumer(mu_, plan.index);
  RoundBook& book = state.book;
  tdock::MutexLock lock(&book.mu());
  const int64_t formed = book.formed();
  const int32_t taker = TakerOf(plan, in.rank, in.replica);
  // Every rank takes every round, an empty share included (a short round,
  // or one whose rows were dropped): ranks that step through their rounds
  // together (collectives) take the same number.
  const int64_t k = in.round.has_value() ? *in.round : book.NextFor(taker);
  if (k < 0 || k > formed) {
    attempt.done = absl::InvalidArgumentError(absl::StrCat(
        Where(part.step(mu_)), " consumer '", plan.name, "': round ", k,
        " is not formed; the next round is ", formed));
    return attempt;
  }
  if (k == formed && book.forming()) return attempt;  // its commit wakes this Get
  if (k == formed && book.failed()) {
    // The last formation of this round failed: one Get learns why, the next
    // tries again.
    attempt.done = book.TakeFailure();
    return attempt;
  }
  if (k == formed) return StartRoundLocked(part, in, plan, explicit_step);
  Round& round = book.round(k);
  RoundShare share;
  if (plan.replicas == 1) {
    share = LiveShareLocked(part, round.ranks[in.rank]);
  } else {
    round.taken.resize(static_cast<size_t>(plan.dp_size));
    std::optional<RoundShare>& taken = round.taken[in.rank];
    if (!taken.has_value()) taken = LiveShareLocked(part, round.ranks[in.rank]);
    share = *taken;
  }
  // The share's lease is changing hands (its hand-out or its end being
  // recorded): wait for that, so one share never has two leases (UnpinLease
  // and the lease's end wake this Get).
  if (plan.lease > absl::ZeroDuration() &&
      leases_->SharePinned(plan.index, part.step(mu_), k, in.rank)) {
    return attempt;
  }
  if (in.replica == 0 && book.FirstDelivery(taker, k)) {
    // First delivery: rows dropped since the round formed were counted with
    // it but are never handed out.
    // relaxed: statistics only.
    state.handed_rows.fetch_sub(
        round.ranks[in.rank].real_rows() - share.real_rows(),
        std::memory_order_relaxed);
  }
  book.Delivered(taker, k);
  // The step's last round, or (drops counted the rest of the step after it
  // formed) the last round there will be.
  // acquire: pairs with the drops' and rounds' increments.
  // Rows passed over as stale end it once their record is stored.
  const bool counted = state.consumed_rows.load(std::memory_order_acquire) == rows_per_step_;
  const bool last = (round.last || (k + 1 == formed && counted)) &&
                    state.stale_unrecorded.load(std::memory_order_acquire) == 0;
  Batch batch = reader_.Make(part, part.step(mu_), part.cells(mu_), share.rows, plan.columns,
                             !in.metadata_only);
  // A share's lease covers its own rows (not its repeats) that are left: a
  // replica's share keeps the rows dropped since its first replica took it.
  bool leased_rows = share.real_rows() > 0;
  if (leased_rows && plan.replicas > 1) {
    const std::vector<int64_t> own = share.RealRows();
    leased_rows = std::any_of(own.begin(), own.end(),
                              [&](int64_t row) { return !part.dropped(row); });
  }
  if (plan.lease > absl::ZeroDuration() && leased_rows && !book.IsAcked(k, in.rank)) {
    // One lease per share: a replica taking it under the lease in flight
    // gets that lease; a replica taking it again replaces the lease.
    std::set<int32_t>& took = book.LeaseTakers(k, in.rank);
    const uint64_t current =
        plan.replicas > 1 ? leases_->ShareLease(plan.index, part.step(mu_), k, in.rank) : 0;
    if (current != 0 && took.count(in.replica) == 0) {
      batch.lease_id = current;
    } else {
      batch.lease_id = LeaseRowsLocked(part, plan, in.rank, {}, k, share.real_rows());
      took.clear();
    }
    took.insert(in.replica);
    batch.lease = plan.lease;
  }
  // An empty share's delivery is recorded too: a restarted server must
  // not give the rank that round again.
  // acq_rel: counted before the hand-out is visible to auto-release.
  part.unrecorded_handouts().fetch_add(1, std::memory_order_acq_rel);
  if (in.replica == 0) {
    // relaxed: statistics only.
    state.handed_total.fetch_add(share.real_rows(), std::memory_order_relaxed);
  }
  batch.round = k;
  batch.micro_batches = share.micro_batches;
  batch.repeats = share.repeats;
  batch.balance = round.stats;
  batch.end_of_step = last;
  // The step may be done for the consumer after this delivery: its last
  // round, or a round handed out again (its record failed) that was every
  // taker's last one owed.
  if (batch.end_of_step || (counted && book.AllDone())) attempt.maybe_release = part.step(mu_);
  attempt.done = std::move(batch);
  return attempt;
}

absl::Status DockImpl::PlanRowsLocked(const Partition& part,
                                      const ConsumerPlan& plan,
                                      std::vector<int64_t>& rows,
                                      Batch& batch) const {
  std::vector<int64_t> lengths;
  lengths.reserve(rows.size());
  for (int64_t row : rows) lengths.push_back(reader_.Tokens(part, row));
  absl::StatusOr<MicroBatchPlan> planned =
      PlanMicroBatches(lengths, *plan.micro_batch, plan.cost);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(Where(part.step(mu_)), " consumer '", plan.name,
                                     "': ", planned.status().message()));
  }
  std::vector<int> order;
  batch.micro_batches = MicroBatchRanges(planned->micro_batches, order);
  batch.balance = PlanStats(*planned);
  std::vector<int64_t> ordered;
  ordered.reserve(rows.size());
  for (int position : order) ordered.push_back(rows[position]);
  rows = std::move(ordered);
  return absl::OkStatus();
}

absl::Status DockImpl::CheckBudgetsLocked(const Partition& part,
                                          const PutInput& in) const {
  auto check = [&](const std::string& consumer, const MicroBatchOptions& budget) {
    for (size_t i = 0; i < in.rows.size(); ++i) {
      const int64_t tokens = reader_.TokensAfterPut(part, in, i);
      if (budget.RowLoad(tokens) > budget.max_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(in.step), ": row ", in.rows[i], " has ", tokens,
            " tokens, over the micro-batch budget of consumer '", consumer,
            "' (max_tokens ", budget.max_tokens, ")"));
      }
    }
    return absl::OkStatus();
  };
  // The consumers that may take the rows: not removed ones, and one being
  // added (it checked the rows written so far; it must fit those written
  // while its record is stored as well).
  absl::InlinedVector<const ConsumerPlan*, 8> plans;
  for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
    if (!plan.removed) plans.push_back(&plan);
  }
  if (const ConsumerPlan* recording = consumers_.recording_plan(mu_)) plans.push_back(recording);
  for (const ConsumerPlan* plan : plans) {
    if (plan->micro_batch.has_value()) TDOCK_RETURN_IF_ERROR(check(plan->name, *plan->micro_batch));
  }
  if (absl::Status fits = sizes_.CheckPut(part, in, plans); !fits.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(in.step), ": ", fits.message()));
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
