// DockImpl's balanced dispatch: rounds of BALANCED consumers (DESIGN.md §5)
// and micro-batch plans.
//
// A BALANCED consumer with dp_size D is served in rounds. The k-th Get of
// rank r (in a step) belongs to round k. The first rank to ask for round k
// claims D × dispatch_size rows (or the step's remainder) once they are
// available, splits them into D parts of equal row counts (equal whole
// groups) and balanced cost, and plans each part's micro-batches; rank r gets
// part r. Rounds are kept until the step is released, so asking again for a
// round returns the same rows. Round formation holds the consumer's
// round_mu (per partition); claims inside it still use the lock-free bitmap.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/balance/round.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Micro-batches of a plan as contiguous ranges of `order`, which receives
// the plan's positions micro-batch after micro-batch.
std::vector<MicroBatchInfo> Ranges(const std::vector<MicroBatch>& micro_batches,
                                   std::vector<int>& order) {
  std::vector<MicroBatchInfo> out;
  order.clear();
  for (const MicroBatch& mb : micro_batches) {
    MicroBatchInfo info;
    info.begin = static_cast<int64_t>(order.size());
    order.insert(order.end(), mb.rows.begin(), mb.rows.end());
    info.end = static_cast<int64_t>(order.size());
    info.padded_len = mb.padded_len;
    info.tokens = mb.tokens;
    info.padded_tokens = mb.padded_tokens;
    out.push_back(info);
  }
  return out;
}

}  // namespace

int64_t DockImpl::TokenCountLocked(const Partition& part, int64_t row) const {
  int64_t tokens = 0;
  for (int c : length_columns_) {
    const CellBlock* cell = part.cell(c, row);
    if (cell != nullptr) tokens += cell->length;
  }
  return tokens;
}

absl::StatusOr<Round> DockImpl::FormRoundLocked(Partition& part,
                                                const ConsumerPlan& plan,
                                                std::vector<int64_t> rows) const {
  std::vector<int64_t> lengths;
  lengths.reserve(rows.size());
  for (int64_t row : rows) lengths.push_back(TokenCountLocked(part, row));
  RoundOptions options;
  options.dp_size = plan.dp_size;
  options.group_size = plan.whole_groups ? group_size_ : 1;
  options.cost = plan.cost;
  options.micro_batch = plan.micro_batch;
  options.same_count_across_ranks = plan.same_count_across_ranks;
  absl::StatusOr<RoundPlan> planned = PlanRound(lengths, options);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(Where(part.step()), " consumer '", plan.name,
                                     "': ", planned.status().message()));
  }
  Round round;
  round.stats = planned->stats;
  for (const RankPlan& rank : planned->ranks) {
    RoundShare share;
    std::vector<int> order = rank.rows;
    if (!rank.micro_batches.empty()) {
      share.micro_batches = Ranges(rank.micro_batches, order);
    }
    for (int position : order) share.rows.push_back(rows[position]);
    round.ranks.push_back(std::move(share));
  }
  return round;
}

absl::StatusOr<Round> DockImpl::FormFittingRoundLocked(Partition& part,
                                                       const ConsumerPlan& plan,
                                                       std::vector<int64_t>& claimed,
                                                       std::vector<int64_t>& rows) {
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  for (;;) {
    rows.clear();
    for (int64_t unit : claimed) {
      for (int32_t i = 0; i < unit_rows; ++i) rows.push_back(unit * unit_rows + i);
    }
    absl::StatusOr<Round> round = FormRoundLocked(part, plan, rows);
    if (!round.ok() || limits_.max_batch_bytes <= 0) return round;
    int64_t largest = 0;
    for (const RoundShare& share : round->ranks) {
      largest = std::max(largest, ResponseBytesLocked(part, plan, share.rows));
    }
    if (largest <= limits_.max_batch_bytes) return round;
    // A share would not fit one response: a smaller round, in proportion
    // (the units left over go back, for the next round).
    const int64_t units = static_cast<int64_t>(claimed.size());
    const int64_t keep = std::min(units - 1, units * limits_.max_batch_bytes / largest);
    if (keep < 1) {
      return absl::ResourceExhaustedError(absl::StrCat(
          Where(part.step()), " consumer '", plan.name, "': ",
          plan.whole_groups ? "group " : "row ", claimed.front(),
          " alone is larger than one response carries (", limits_.max_batch_bytes,
          " bytes)"));
    }
    const std::vector<int64_t> rest(claimed.begin() + keep, claimed.end());
    claimed.resize(static_cast<size_t>(keep));
    Unclaim(part, plan, rest);
  }
}

DockImpl::GetAttempt DockImpl::ServeRoundLocked(Partition& part, const GetInput& in,
                                                const ConsumerPlan& plan,
                                                bool explicit_step) {
  GetAttempt attempt;
  ConsumerState& state = part.consumer(plan.index);
  tdock::MutexLock lock(&state.round_mu);
  const int64_t formed = static_cast<int64_t>(state.rounds.size());
  // A share whose lease ended unacknowledged goes to the rank first.
  std::set<int64_t>& pending = state.redeliver[in.rank];
  const int64_t k = in.round.has_value() ? *in.round
                    : !pending.empty()   ? *pending.begin()
                                         : state.next_round[in.rank];
  if (k < 0 || k > formed) {
    attempt.done = absl::InvalidArgumentError(absl::StrCat(
        Where(part.step()), " consumer '", plan.name, "': round ", k,
        " is not formed; the next round is ", formed));
    return attempt;
  }
  if (k == formed) {
    const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
    const int64_t units = plan.whole_groups ? part.groups() : part.rows();
    // Under round_mu every claim of this consumer is committed at once.
    // acquire: pairs with the rounds' increments.
    const int64_t remaining =
        units - state.consumed_rows.load(std::memory_order_acquire) / unit_rows;
    if (remaining == 0) {
      if (explicit_step || in.round.has_value()) {
        Batch over;
        over.step = part.step();
        over.end_of_step = true;
        attempt.done = std::move(over);
      }
      return attempt;
    }
    const int64_t count = (in.count > 0 ? in.count : plan.dispatch_size) / unit_rows;
    const int64_t need = std::min(count * plan.dp_size, remaining);
    if (CountAvailable(part, plan, need) < need) return attempt;
    std::vector<int64_t> claimed = Claim(part, plan, need, plan.seed);
    if (static_cast<int64_t>(claimed.size()) < need) {  // cannot happen: we hold round_mu
      Unclaim(part, plan, claimed);
      return attempt;
    }
    std::vector<int64_t> rows;
    absl::StatusOr<Round> round = FormFittingRoundLocked(part, plan, claimed, rows);
    if (!round.ok()) {
      Unclaim(part, plan, claimed);
      attempt.wake_consumer = true;
      attempt.done = round.status();
      return attempt;
    }
    // acq_rel: exactly one round sees the total reach the step's rows.
    round->last = part.consumer(plan.index).consumed_rows.fetch_add(
                      static_cast<int64_t>(rows.size()), std::memory_order_acq_rel) +
                      static_cast<int64_t>(rows.size()) ==
                  rows_per_step_;
    state.rounds.push_back(*std::move(round));
  }
  const Round& round = state.rounds[k];
  const RoundShare& share = round.ranks[in.rank];
  // The share's lease is changing hands (its hand-out or its end being
  // recorded): wait for that, so one share never has two leases (UnpinLease
  // and the lease's end wake this Get).
  if (plan.lease > absl::ZeroDuration() &&
      leases_->SharePinned(plan.index, part.step(), k, in.rank)) {
    return attempt;
  }
  state.next_round[in.rank] = std::max(state.next_round[in.rank], k + 1);
  pending.erase(k);
  Batch batch = MakeBatchLocked(part, share.rows, plan.columns, !in.metadata_only);
  if (plan.lease > absl::ZeroDuration() && !share.rows.empty()) {
    batch.lease_id = LeaseRowsLocked(part, plan, in.rank, {}, k,
                                     static_cast<int64_t>(share.rows.size()));
    batch.lease = plan.lease;
  }
  if (journal_ != nullptr && !share.rows.empty()) {
    // acq_rel: counted before the hand-out is visible to auto-release.
    part.unrecorded_handouts().fetch_add(1, std::memory_order_acq_rel);
  }
  batch.round = k;
  batch.micro_batches = share.micro_batches;
  batch.balance = round.stats;
  batch.end_of_step = round.last;
  if (round.last) attempt.maybe_release = part.step();
  attempt.done = std::move(batch);
  return attempt;
}

absl::Status DockImpl::PlanRowsLocked(const Partition& part,
                                      const ConsumerPlan& plan,
                                      std::vector<int64_t>& rows,
                                      Batch& batch) const {
  std::vector<int64_t> lengths;
  lengths.reserve(rows.size());
  for (int64_t row : rows) lengths.push_back(TokenCountLocked(part, row));
  absl::StatusOr<MicroBatchPlan> planned =
      PlanMicroBatches(lengths, *plan.micro_batch, plan.cost);
  if (!planned.ok()) {
    return absl::Status(planned.status().code(),
                        absl::StrCat(Where(part.step()), " consumer '", plan.name,
                                     "': ", planned.status().message()));
  }
  std::vector<int> order;
  batch.micro_batches = Ranges(planned->micro_batches, order);
  batch.balance = PlanStats(*planned);
  std::vector<int64_t> ordered;
  ordered.reserve(rows.size());
  for (int position : order) ordered.push_back(rows[position]);
  rows = std::move(ordered);
  return absl::OkStatus();
}

bool DockImpl::RankDoneLocked(Partition& part, const ConsumerPlan& plan,
                              int32_t rank) const {
  ConsumerState& state = part.consumer(plan.index);
  // acquire: pairs with the round's increment.
  if (state.consumed_rows.load(std::memory_order_acquire) < rows_per_step_) return false;
  tdock::MutexLock lock(&state.round_mu);
  return state.next_round[rank] >= static_cast<int64_t>(state.rounds.size()) &&
         state.redeliver[rank].empty();
}

bool DockImpl::RoundsDeliveredLocked(Partition& part, const ConsumerPlan& plan) const {
  ConsumerState& state = part.consumer(plan.index);
  tdock::MutexLock lock(&state.round_mu);
  if (state.rounds.empty() || !state.rounds.back().last) return false;
  const int64_t last = static_cast<int64_t>(state.rounds.size()) - 1;
  for (int64_t next : state.next_round) {
    if (next <= last) return false;
  }
  for (const std::set<int64_t>& pending : state.redeliver) {
    if (!pending.empty()) return false;
  }
  return true;
}

absl::Status DockImpl::CheckBudgetsLocked(const Partition& part,
                                          const PutInput& in) const {
  auto check = [&](const std::string& consumer, const MicroBatchOptions& budget) {
    for (size_t i = 0; i < in.rows.size(); ++i) {
      int64_t tokens = 0;
      for (int c : length_columns_) {
        auto given = std::find_if(in.columns.begin(), in.columns.end(),
                                  [&](const PackedColumn& p) { return p.name == columns_[c].name; });
        const CellBlock* cell = part.cell(c, in.rows[i]);
        tokens += given != in.columns.end() ? given->length(static_cast<int64_t>(i))
                  : cell != nullptr         ? cell->length
                                            : 0;
      }
      if (budget.RowLoad(tokens) > budget.max_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(in.step), ": row ", in.rows[i], " has ", tokens,
            " tokens, over the micro-batch budget of consumer '", consumer,
            "' (max_tokens ", budget.max_tokens, ")"));
      }
    }
    return absl::OkStatus();
  };
  for (const ConsumerPlan& plan : plans_) {
    if (plan.micro_batch.has_value()) TDOCK_RETURN_IF_ERROR(check(plan.name, *plan.micro_batch));
  }
  // A consumer being added checked the rows written so far; it must fit
  // the rows written while its record is stored as well.
  if (recording_consumer_.has_value() && recording_consumer_->micro_batch.has_value()) {
    TDOCK_RETURN_IF_ERROR(check(recording_consumer_->name, *recording_consumer_->micro_batch));
  }
  return CheckResponseSizesLocked(part, in);
}

}  // namespace tdock::internal
