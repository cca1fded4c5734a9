// DockImpl's drops and seals (DESIGN.md §1): rows taken out of a step with a
// reason, and steps closed to new rows.
//
// A dropped row is done for every consumer: a consumer that has not taken it
// gets its consumed bit set (counted, so the row never holds the step), one
// that has keeps it. For whole-group consumers a group is done once it is
// taken or every row of it is dropped, and is ready for a column once every
// row of it that is not dropped is (Partition::MarkDropped). A unit counts
// its full size toward consumed_rows either way, so a step is done for a
// consumer when consumed_rows reaches the step's rows, as without drops. The
// rows handed out (handed_rows, the statistics) count only rows a consumer
// received: a drop never changes them.
//
// Claims hold the dock's mutex shared and drops hold it exclusively, so a
// claim sees a drop whole. Two kinds of claims outlive one hold of the lock:
// a round being formed (claimed, counted at its commit) and a lease (counted,
// handed back when it ends). Giving their units back (GiveBackLocked) keeps a
// unit dropped meanwhile claimed and counts it as done. Rows of a formed
// round that are dropped before their rank fetches the share are left out
// of it (the micro-batch ranges shrink with them), and a lease none of whose
// rows is left ends with the drop.
//
// With a journal the drop is recorded first and applied once stored (record
// before effect); recovery applies the stored drops after every hand-out.
// A seal drops the rows unwritten when it is decided: it decides under the
// partition's commit lock and, while its record is stored, those rows take
// no Put (Partition::closing), so a write is never acknowledged and then
// dropped as unwritten. Without a journal the record is stored at once, and
// the same path applies it.
//
// An append that declares its groups' sizes closes the rest of each group
// ("unused") with the Put's record, before its cells are ready.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

std::string ReasonList() {
  std::vector<std::string> names;
  for (DropReason r : AllDropReasons()) {
    if (!ServerOwnDropReason(r)) names.emplace_back(DropReasonName(r));
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status DockImpl::CheckDroppableLocked(int64_t step, absl::string_view what) const {
  switch (ring_.Classify(mu_, step)) {
    case StepState::kLive:
      return absl::OkStatus();
    case StepState::kReleased:
      return Refuse(Refusal::kReleased, absl::FailedPreconditionError(absl::StrCat(
                                            Where(step), " is released: it cannot be ", what)));
    default:
      return absl::FailedPreconditionError(
          absl::StrCat(Where(step), " has not started (nothing is written to it): it cannot be ",
                       what, " yet"));
  }
}

absl::StatusOr<std::vector<int64_t>> DockImpl::DropRowsLocked(const DropInput& in) const {
  if (in.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Where(in.step), ": step is negative"));
  }
  if (in.reason == DropReason::kUnspecified ||
      DropReasonName(in.reason) == DropReasonName(DropReason::kUnspecified)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(in.step), ": a drop needs a reason (", ReasonList(), ")"));
  }
  if (ServerOwnDropReason(in.reason)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(in.step), ": reason '", DropReasonName(in.reason),
        "' is the server's own (rows past a group's declared size, carried into the next "
        "step, or with cells on a lost shard); give one of ", ReasonList()));
  }
  if (in.rows.empty() && in.groups.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(in.step), ": the drop names no rows or groups"));
  }
  std::vector<int64_t> rows;
  rows.reserve(in.rows.size() + in.groups.size() * group_size_);
  for (int64_t row : in.rows) {
    if (row < 0 || row >= rows_per_step_) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(in.step), ": row ", row, " is out of range [0, ", rows_per_step_, ")"));
    }
    rows.push_back(row);
  }
  const int64_t groups = rows_per_step_ / group_size_;
  for (int64_t group : in.groups) {
    if (group < 0 || group >= groups) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(in.step), ": group ", group, " is out of range [0, ", groups, ")"));
    }
    for (int32_t i = 0; i < group_size_; ++i) rows.push_back(group * group_size_ + i);
  }
  TDOCK_RETURN_IF_ERROR(CheckDroppableLocked(in.step, "dropped from"));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

absl::StatusOr<std::vector<int64_t>> DockImpl::SealRowsLocked(const SealInput& in) {
  if (in.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(Where(in.step), ": step is negative"));
  }
  std::vector<int> required;
  for (const std::string& name : in.required_columns) {
    const int c = columns_.IndexOf(name);
    if (c < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(in.step), ": seal: required column '", name, "' is unknown"));
    }
    required.push_back(c);
  }
  TDOCK_RETURN_IF_ERROR(CheckDroppableLocked(in.step, "sealed"));
  Partition& part = ring_.Of(in.step);
  // Decided in one hold of the commit lock with the marks: a Put commits
  // before (its rows are written) or is refused.
  tdock::MutexLock commit(&part.row_index().mu());
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < rows_per_step_; ++row) {
    if (part.dropped(row)) continue;
    bool any = false, all = true;
    for (size_t c = 0; c < columns_.size(); ++c) {
      // A cell being recorded counts as written: its Put is under way.
      const bool written = part.cell(static_cast<int>(c), row) != nullptr;
      any |= written;
      if (!written && std::find(required.begin(), required.end(), c) != required.end()) {
        all = false;
      }
    }
    if (!any || !all) rows.push_back(row);
  }
  part.row_index().AddDropInFlight(/*seal=*/true, rows, 1);
  return rows;
}

void DockImpl::Drop(DropInput input, RowsCallback done) {
  absl::StatusOr<std::vector<int64_t>> rows;
  {
    tdock::ReaderMutexLock lock(&mu_);
    rows = DropRowsLocked(input);
    if (rows.ok()) {
      Partition& part = ring_.Of(input.step);
      tdock::MutexLock commit(&part.row_index().mu());
      part.row_index().AddDropInFlight(/*seal=*/false, {}, 1);  // until recorded
    }
  }
  RecordAndApplyDrop(std::move(rows), input.step, input.reason, /*seal=*/false,
                     /*in_flight=*/true, std::move(done));
}

void DockImpl::Seal(SealInput input, RowsCallback done) {
  absl::StatusOr<std::vector<int64_t>> rows;
  {
    // The rows are closed to Puts until the record is stored (or fails).
    tdock::ReaderMutexLock lock(&mu_);
    rows = SealRowsLocked(input);
  }
  RecordAndApplyDrop(std::move(rows), input.step, DropReason::kSealed, /*seal=*/true,
                     /*in_flight=*/true, std::move(done));
}

void DockImpl::RecordAndApplyDrop(absl::StatusOr<std::vector<int64_t>> rows, int64_t step,
                                  DropReason reason, bool seal, bool in_flight,
                                  RowsCallback done) {
  if (!rows.ok()) {
    std::move(done)(rows.status());
    return;
  }
  RecordAndApplyDrop(DockJournal::DropRecord{step, *std::move(rows), reason, seal}, in_flight,
                     std::move(done));
}

void DockImpl::RecordAndApplyDrop(DockJournal::DropRecord record, bool in_flight,
                                  RowsCallback done) {
  auto apply = [this, record, in_flight, done = std::move(done)](absl::Status stored) mutable {
    const std::string what = record.seal ? "seal" : "drop";
    if (!stored.ok()) {
      if (in_flight) {
        tdock::ReaderMutexLock lock(&mu_);
        EndDropInFlightLocked(record);  // a Seal's rows take Puts again
      }
      if (record.seal && record.reason == DropReason::kSurplus) {
        // seal_when's record failed: the next Put decides again; what it
        // would have carried stays.
        tdock::MutexLock lock(&mu_);
        if (ring_.Holds(mu_, record.step)) {
          ring_.Of(record.step).set_seal_pending(mu_, false);
          if (!record.carry.empty()) DropCarryLocked(ring_.Of(record.step));
        }
      }
      if (!record.carry.empty()) WakeGets({});  // its rows may be taken again
      std::move(done)(absl::UnavailableError(absl::StrCat(
          Where(record.step), ": ", what, " not stored (", stored.message(), ")")));
      return;
    }
    absl::StatusOr<int64_t> dropped;
    {
      tdock::MutexLock lock(&mu_);
      // A step whose release is being recorded takes it: the record is
      // stored, and a release that fails leaves the step live.
      if (!ring_.Holds(mu_, record.step)) {
        dropped = Refuse(Refusal::kReleased,
                         absl::FailedPreconditionError(absl::StrCat(
                             Where(record.step), " was released while the ", what,
                             " was recorded")));
      } else {
        dropped = ApplyDropLocked(record);
      }
      // In the same hold: a Seal's rows are dropped now.
      if (in_flight) EndDropInFlightLocked(record);
    }
    std::move(done)(std::move(dropped));  // before the calls it wakes are served
    AfterDrop(record.step);
    // Rows the seal kept because a write of them was being recorded, whose
    // record then failed: they end with it.
    if (record.seal) DropOrphans(record.step);
    if (!record.carry.empty()) CarryForward(record.step);
  };
  commit_.Commit(
      [&record](DockJournal& journal, DockJournal::Done stored) {
        journal.Dropped(record, std::move(stored));
      },
      std::move(apply));
}

void DockImpl::EndDropInFlightLocked(const DockJournal::DropRecord& record) {
  // A released step's partition forgot its records in flight.
  if (!ring_.Holds(mu_, record.step)) return;
  Partition& part = ring_.Of(record.step);
  tdock::MutexLock commit(&part.row_index().mu());
  part.row_index().AddDropInFlight(record.seal, record.rows, -1);
}

int64_t DockImpl::ApplyDropLocked(const DockJournal::DropRecord& record) {
  Partition& part = ring_.Of(record.step);
  if (record.seal) part.Seal(mu_);
  int64_t dropped = 0;
  for (int64_t row : record.rows) {
    if (!part.MarkDropped(mu_, row, record.reason)) continue;
    ++dropped;
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) CountDroppedLocked(part, plan, row);
  }
  // A dropped row's key is free.
  keys_.ForgetRows(mu_, part.step(mu_), part.row_index(), record.rows);
  if (dropped > 0) EndDroppedLeasesLocked(part);
  // Owed to the next step from now on (CarryForward).
  if (!record.carry.empty()) dropped += ApplyCarryLocked(part, record);
  return dropped;
}

void DockImpl::CountDroppedLocked(Partition& part, const ConsumerPlan& plan, int64_t row) {
  ConsumerState& state = part.consumer(mu_, plan.index);
  // A consumer that holds the row's unit took it (or is forming a round of
  // it, which counts it at its commit or gives it back as done).
  const int64_t unit = plan.whole_groups ? row / group_size_ : row;
  if (state.consumed.Test(unit)) return;
  // acq_rel: as the claimers' increments. Nothing was handed out.
  if (!plan.whole_groups) {
    state.consumed.Set(unit);
    state.consumed_rows.fetch_add(1, std::memory_order_acq_rel);
  } else if (part.live_rows(unit) == 0) {
    state.consumed.Set(unit);
    state.consumed_rows.fetch_add(group_size_, std::memory_order_acq_rel);
  }
}

void DockImpl::EndDroppedLeasesLocked(Partition& part) {
  const int64_t step = part.step(mu_);
  for (const Lease& lease : leases_->Unpinned(step)) {
    bool left = false;
    if (lease.round >= 0) {
      ConsumerState& state = part.consumer(mu_, lease.consumer);
      tdock::MutexLock rounds(&state.book.mu());
      // Repeats (pad: repeat) are not the lease's rows.
      for (int64_t row : state.book.round(lease.round).ranks[lease.rank].RealRows()) {
        left |= !part.dropped(row);
      }
    } else {
      for (int64_t unit : lease.units) {
        left |= !part.UnitDropped(mu_, unit, consumers_.plan(mu_, lease.consumer).whole_groups);
      }
    }
    if (left) continue;
    const Lease ended = leases_->TakeUnpinned(lease.id, "every row of it was dropped");
    if (ended.id != 0) SettleLeaseLocked(ended);
  }
}

void DockImpl::GiveBackLocked(Partition& part, const ConsumerPlan& plan,
                              const std::vector<int64_t>& units, bool counted) {
  ConsumerState& state = part.consumer(mu_, plan.index);
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  std::vector<int64_t> back;
  int64_t done_meanwhile = 0;  // uncounted units dropped while held: now done
  for (int64_t unit : units) {
    if (!part.UnitDropped(mu_, unit, plan.whole_groups)) {
      back.push_back(unit);
    } else if (!counted) {
      ++done_meanwhile;
    }
  }
  // Lower the count first: a claimer that takes a cleared bit then counts
  // from below the step's rows and can still see the step end.
  // acq_rel: pairs with the claimers' increments.
  if (counted && !back.empty()) {
    state.consumed_rows.fetch_sub(static_cast<int64_t>(back.size()) * unit_rows,
                                  std::memory_order_acq_rel);
  }
  if (done_meanwhile > 0) {
    state.consumed_rows.fetch_add(done_meanwhile * unit_rows, std::memory_order_acq_rel);
  }
  Unclaim(state, back);
}

RoundShare DockImpl::LiveShareLocked(const Partition& part, const RoundShare& share) const {
  if (std::none_of(share.rows.begin(), share.rows.end(),
                   [&](int64_t row) { return part.dropped(row); })) {
    return share;
  }
  RoundShare live;
  // Each micro-batch keeps its place (ranks step through the same number);
  // its range shrinks by the rows dropped from it. Without a plan the share
  // is one range.
  std::vector<MicroBatchInfo> ranges = share.micro_batches;
  if (ranges.empty()) ranges.push_back({0, static_cast<int64_t>(share.rows.size())});
  auto repeat = share.repeats.begin();  // a dropped row's repeats go with it
  for (MicroBatchInfo& info : ranges) {
    const int64_t begin = info.begin, end = info.end;
    info.begin = static_cast<int64_t>(live.rows.size());
    info.tokens = 0;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = share.rows[i];
      const bool repeats = repeat != share.repeats.end() && *repeat == i;
      if (repeats) ++repeat;
      if (part.dropped(row)) continue;
      if (repeats) live.repeats.push_back(static_cast<int64_t>(live.rows.size()));
      live.rows.push_back(row);
      info.tokens += reader_.Tokens(part, row);
    }
    info.end = static_cast<int64_t>(live.rows.size());
    // A padded budget counts rows x padded length, else the real tokens.
    const bool padded = info.padded_tokens == info.padded_len * (end - begin);
    info.padded_tokens = padded ? info.padded_len * (info.end - info.begin) : info.tokens;
  }
  if (!share.micro_batches.empty()) live.micro_batches = std::move(ranges);
  return live;
}

void DockImpl::CloseUnusedRows(int64_t step, const std::vector<int64_t>& rows, bool stored) {
  int64_t closed = 0;
  {
    tdock::MutexLock lock(&mu_);
    // A step being released still holds them: its release may fail.
    if (!ring_.Holds(mu_, step)) return;
    Partition& part = ring_.Of(step);
    if (stored) closed = ApplyDropLocked({step, rows, DropReason::kUnused, /*seal=*/false});
    tdock::MutexLock commit(&part.row_index().mu());
    part.row_index().SetUnused(rows, /*closed=*/false);  // dropped now, or open again
  }
  // The group's other rows were just written, so this ends no step unless
  // they were dropped meanwhile.
  if (closed > 0) MaybeAutoRelease(step);
}

void DockImpl::AfterDrop(int64_t step) {
  MaybeAutoSeal(step);  // groups may be complete now
  WakeGets({});         // groups may be complete now, or steps over
  MaybeAutoRelease(step);
}

absl::Status DockImpl::RecoverDrop(const DockJournal::DropRecord& record) {
  tdock::MutexLock lock(&mu_);
  const StepState state = ring_.Classify(mu_, record.step);
  if (state != StepState::kLive && state != StepState::kFree) return absl::OkStatus();
  for (int64_t row : record.rows) {
    if (row < 0 || row >= rows_per_step_) {
      return absl::DataLossError(
          absl::StrCat(Where(record.step), ": a drop record names row ", row));
    }
  }
  if (DropReasonName(record.reason) == DropReasonName(DropReason::kUnspecified)) {
    return absl::DataLossError(absl::StrCat(Where(record.step), ": a drop record has no reason"));
  }
  if (state == StepState::kFree) {
    // Dropped before any cell of the step was stored (its first append
    // waited for memory): the step was started and kept for the drop.
    ring_.Of(record.step).Activate(mu_, record.step, store_->OpenStep());
  }
  ApplyDropLocked(record);
  return absl::OkStatus();
}

}  // namespace tdock::internal
