// DockImpl's write path: validate, find or start the step's partition,
// store the payload in its cells (copied once), then publish under the
// partition's commit lock so a Put is all-or-nothing.
#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Attempts of a Put that lose a race with a concurrent start of its step.
constexpr int kMaxPutRaces = 64;

int64_t PayloadBytes(const PackedColumn& column, int64_t item_bytes) {
  return column.offsets.back() * item_bytes;
}

}  // namespace

absl::StatusOr<std::shared_ptr<StepCells>> DockImpl::ActivateForPut(
    const PutInput& in, std::string* blocked, bool* activated) {
  const int64_t step = in.step;
  *activated = false;
  {
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = ring_.Of(step);
    switch (ring_.Classify(mu_, step)) {
      case StepState::kLive:
        TDOCK_RETURN_IF_ERROR(CheckUnwrittenLocked(part, in));
        return part.cells(mu_);
      case StepState::kFree:
        // No cells yet: only the rows' token budgets, and keys other steps'
        // rows have, can refuse the Put.
        TDOCK_RETURN_IF_ERROR(CheckBudgetsLocked(part, in));
        TDOCK_RETURN_IF_ERROR(CheckKeysLocked(part, in));
        break;
      case StepState::kBlocked:
        *blocked = absl::StrCat(Where(step), " waits for step ",
                                ring_.BlockingStep(mu_, step),
                                " to be released from partition ", part.index());
        return std::shared_ptr<StepCells>();
      case StepState::kReleased:
        return Refuse(Refusal::kReleased, absl::FailedPreconditionError(
                                              absl::StrCat(Where(step), " is already released")));
    }
  }
  tdock::MutexLock lock(&mu_);
  Partition& part = ring_.Of(step);
  if (ring_.Classify(mu_, step) == StepState::kFree) {
    part.Activate(mu_, step, store_->OpenStep());
    *activated = true;
  }
  if (ring_.Classify(mu_, step) != StepState::kLive) {
    return std::shared_ptr<StepCells>();  // raced with another change: retry
  }
  return part.cells(mu_);
}

void DockImpl::DeactivateIfUnused(int64_t step,
                                  const std::shared_ptr<StepCells>& cells) {
  tdock::MutexLock lock(&mu_);
  Partition& part = ring_.Of(step);
  if (ring_.Classify(mu_, step) != StepState::kLive || part.cells(mu_) != cells ||
      cells->used_bytes() != 0 || part.sealed(mu_) || part.seal_pending(mu_)) {
    return;
  }
  tdock::MutexLock commit(&part.row_index().mu());
  // A Drop or Seal decided on the step stays with it, and so do rows
  // reserved in it or assigned to an append.
  const std::array<int64_t, kDropReasons>& drops = part.drops(mu_);
  const bool dropped = std::any_of(drops.begin(), drops.end(), [](int64_t n) { return n > 0; });
  if (!dropped && !part.row_index().drops_in_flight() && !part.row_index().has_reservations() &&
      !part.row_index().has_append_claims()) {
    part.Deactivate(mu_);
  }
}

absl::Status DockImpl::PrecheckPut(const PutInput& in) const {
  // Its columns the dock has: those it adds have no cell anywhere.
  PutInput known = in;
  known.columns.clear();
  for (const PackedColumn& column : in.columns) {
    if (columns_.IndexOf(column.name) >= 0) known.columns.push_back(column);
  }
  tdock::ReaderMutexLock lock(&mu_);
  const Partition& part = ring_.Of(in.step);
  switch (ring_.Classify(mu_, in.step)) {
    case StepState::kLive:
      if (in.rows.empty() && (part.sealed(mu_) || part.seal_pending(mu_))) {
        return Refuse(Refusal::kSealed, absl::FailedPreconditionError(absl::StrCat(
                                            Where(in.step), " is sealed: no new rows join it")));
      }
      return CheckUnwrittenLocked(part, known);
    case StepState::kFree:
      TDOCK_RETURN_IF_ERROR(CheckBudgetsLocked(part, known));
      return CheckKeysLocked(part, known);
    case StepState::kBlocked:
      return absl::OkStatus();
    case StepState::kReleased:
      return Refuse(Refusal::kReleased, absl::FailedPreconditionError(absl::StrCat(
                                            Where(in.step), " is already released")));
  }
  return absl::OkStatus();
}

absl::Status DockImpl::CheckUnwrittenLocked(const Partition& part,
                                            const PutInput& in) const {
  for (int64_t row : in.rows) {
    if (!part.dropped(row)) continue;
    const DropReason reason = part.drop_reason(mu_, row);
    if (reason == DropReason::kUnused) {
      // The group's declared rows come first; the rest are closed.
      const int64_t group = row / group_size_;
      int64_t size = 0;
      while (size < group_size_ &&
             part.drop_reason(mu_, group * group_size_ + size) != DropReason::kUnused) {
        ++size;
      }
      return RefuseDropped(
          reason,
          absl::FailedPreconditionError(absl::StrCat(
              Where(in.step), ": row ", row, " is past the size of its group ", group,
              ", declared with ", size, " rows when it was appended: a group larger than "
              "declared; nothing was written")));
    }
    return RefuseDropped(reason, absl::FailedPreconditionError(absl::StrCat(
                                     Where(in.step), ": row ", row, " was dropped (",
                                     DropReasonName(reason), "); nothing was written")));
  }
  TDOCK_RETURN_IF_ERROR(CheckKeysLocked(part, in));
  TDOCK_RETURN_IF_ERROR(CheckBudgetsLocked(part, in));
  for (const PackedColumn& column : in.columns) {
    const int c = columns_.IndexOf(column.name);
    if (columns_[c].rewritable) continue;
    for (int64_t row : in.rows) {
      if (part.cell(c, row) != nullptr) {
        return absl::AlreadyExistsError(absl::StrCat(
            Where(in.step), ": cell (row ", row, ", column '", column.name,
            "') is already written and the column is not rewritable"));
      }
    }
  }
  return absl::OkStatus();
}

// One column of one Put, and where its cells went.
struct StagedColumn {
  int column = 0;
  const CellBlock* blocks = nullptr;  // the cell of each of the Put's rows
};

PutAttempt DockImpl::TryPut(PutInput& in) {
  // A concurrent Put that started the step and then undid it (it could not
  // get memory) is no reason to wait: look again at once.
  PutAttempt attempt;
  for (int race = 0; race < kMaxPutRaces; ++race) {
    attempt = TryPutOnce(in);
    if (!attempt.raced) break;
  }
  attempt.raced = false;
  return attempt;
}

PutAttempt DockImpl::TryPutOnce(PutInput& in) {
  PutAttempt attempt;
  std::string blocked;
  bool activated = false;
  absl::StatusOr<std::shared_ptr<StepCells>> cells =
      ActivateForPut(in, &blocked, &activated);
  if (!cells.ok()) {
    attempt.done = cells.status();
    return attempt;
  }
  if (*cells == nullptr) {
    attempt.raced = blocked.empty();
    attempt.park_reason = blocked.empty() ? Where(in.step) + " is changing" : blocked;
    // The step holding the partition may be done and its release record may
    // have failed: ask again (a no-op unless it is done and not releasing).
    if (!blocked.empty()) {
      int64_t holder = -1;
      {
        tdock::ReaderMutexLock lock(&mu_);
        const Partition& part = ring_.Of(in.step);
        if (part.live(mu_) && part.step(mu_) < in.step) holder = part.step(mu_);
      }
      if (holder >= 0) MaybeAutoRelease(holder);
    }
    return attempt;
  }
  if (in.rows.empty()) {
    // New rows: assigned once the step is live, kept across retries.
    if (absl::Status assigned = AssignRows(in); !assigned.ok()) {
      if (activated) DeactivateIfUnused(in.step, *cells);
      if (absl::IsAborted(assigned)) {
        attempt.raced = true;  // the step was started and undone meanwhile
        attempt.park_reason = std::string(assigned.message());
      } else {
        attempt.done = std::move(assigned);
      }
      return attempt;
    }
  }
  std::vector<StagedColumn> staged(in.columns.size());
  std::vector<int64_t> item_bytes(in.columns.size());
  PutResult result{static_cast<int64_t>(in.rows.size()), 0, {}, in.step};
  if (in.new_rows > 0) result.assigned = in.rows;
  for (size_t i = 0; i < in.columns.size(); ++i) {
    staged[i].column = columns_.IndexOf(in.columns[i].name);
    item_bytes[i] = columns_[staged[i].column].item_bytes();
    result.bytes += PayloadBytes(in.columns[i], item_bytes[i]);
  }
  // The copy: outside every lock; `cells` keeps the bytes even if the step
  // is released meanwhile.
  std::vector<const CellBlock*> blocks;
  // The oldest step's Puts, and a carry (it lets the step before go), are
  // not held back by the memory limit.
  if (!(*cells)->Write(in.columns, item_bytes,
                       /*past_limit=*/in.carried_from >= 0 || IsOldestLiveStep(in.step),
                       blocks)) {
    if (activated) DeactivateIfUnused(in.step, *cells);
    attempt.park_reason = MemoryReason(in.step);
    attempt.memory_limited = true;
    return attempt;
  }
  for (size_t i = 0; i < in.columns.size(); ++i) staged[i].blocks = blocks[i];
  absl::StatusOr<PutResult> committed = CommitPut(in, *cells, staged, result, &attempt.columns);
  if (absl::IsAborted(committed.status())) {
    // The step was started and undone by a concurrent Put: try again.
    attempt.raced = true;
    attempt.park_reason = std::string(committed.status().message());
    return attempt;
  }
  if (committed.ok()) attempt.cells = *cells;
  attempt.done = std::move(committed);
  return attempt;
}

absl::StatusOr<PutResult> DockImpl::CommitPut(const PutInput& in,
                                              const std::shared_ptr<StepCells>& cells,
                                              const std::vector<StagedColumn>& staged,
                                              PutResult result,
                                              std::vector<WrittenColumn>* columns) {
  tdock::ReaderMutexLock lock(&mu_);
  Partition& part = ring_.Of(in.step);
  const StepState state = ring_.Classify(mu_, in.step);
  // Our start of the step was undone by a concurrent Put (and maybe made
  // again): the caller tries again. A released step never becomes live.
  if (state == StepState::kFree || (state == StepState::kLive && part.cells(mu_) != cells)) {
    return absl::AbortedError(absl::StrCat(Where(in.step), " is starting"));
  }
  if (state != StepState::kLive) {
    return Refuse(Refusal::kReleased,
                  absl::FailedPreconditionError(absl::StrCat(
                      Where(in.step), " was released while the Put was in progress")));
  }
  tdock::MutexLock commit(&part.row_index().mu());
  // Re-check under the commit lock: a concurrent Put may have written the
  // same cells since the first check.
  TDOCK_RETURN_IF_ERROR(CheckUnwrittenLocked(part, in));
  TDOCK_RETURN_IF_ERROR(CheckOpenLocked(part, in));
  // The rows its groups leave unused take no Put until they are dropped.
  if (!in.unused.empty()) part.row_index().SetUnused(in.unused, /*closed=*/true);
  TDOCK_RETURN_IF_ERROR(SetKeysLocked(part, in));  // before any cell is ready
  for (int64_t row : in.rows) part.row_index().AddPendingWrite(row, 1);  // until recorded
  columns->reserve(staged.size());
  for (const StagedColumn& column : staged) {
    const bool rewritable = columns_[column.column].rewritable;
    WrittenColumn written{column.column, column.blocks, {}};
    if (rewritable) written.staged.resize(in.rows.size());
    for (size_t i = 0; i < in.rows.size(); ++i) {
      // Ready once stored (its versions first); a rewrite is not even seen
      // until then (the cell it replaces is served meanwhile, and stays if
      // the record fails). A first write, rewritable or not, is staged: a
      // Seal, an append or another Put deciding meanwhile sees the row
      // written.
      const bool first = !rewritable || part.cell(column.column, in.rows[i]) == nullptr;
      if (first) part.Stage(column.column, in.rows[i], &column.blocks[i]);
      if (rewritable) written.staged[i] = first;
    }
    columns->push_back(std::move(written));
  }
  // Its rows have cells now, and its unused rows are closed.
  if (in.append_claim != 0) part.row_index().ReleaseAppendClaim(in.append_claim);
  return result;
}

absl::Status DockImpl::CheckOpenLocked(Partition& part, const PutInput& in) const {
  for (int64_t row : in.rows) {
    switch (part.row_index().closed(row)) {
      case RowIndex::Closed::kSealing:
        return RefuseDropped(
            DropReason::kSealed,
            absl::FailedPreconditionError(absl::StrCat(
                Where(in.step), " is being sealed: row ", row, ", not written when the seal "
                "was decided, is dropped with it; nothing was written")));
      case RowIndex::Closed::kUnused:
        return RefuseDropped(
            DropReason::kUnused,
            absl::FailedPreconditionError(absl::StrCat(
                Where(in.step), ": row ", row, " is past the size declared for its group ",
                row / group_size_, " by an append being stored: a group larger than "
                "declared; nothing was written")));
      case RowIndex::Closed::kExpiring:
        return RefuseDropped(
            DropReason::kExpired,
            absl::FailedPreconditionError(absl::StrCat(
                Where(in.step), ": row ", row, " belongs to a reservation that expired "
                "before it was written, and is being dropped (expired); nothing was "
                "written")));
      case RowIndex::Closed::kOpen:
        break;
    }
    TDOCK_RETURN_IF_ERROR(CheckUnclaimedLocked(part, in, row));
  }
  for (int64_t row : in.unused) {
    if (part.row_index().closed(row) != RowIndex::Closed::kOpen) {
      // Past a group this Put declares, and closed by a Seal meanwhile.
      return Refuse(Refusal::kSealed,
                    absl::FailedPreconditionError(absl::StrCat(
                        Where(in.step), ": row ", row,
                        ", past the size this Put declares for its group ", row / group_size_,
                        ", was closed by a Seal meanwhile; nothing was written")));
    }
  }
  return absl::OkStatus();
}

absl::Status DockImpl::CheckUnclaimedLocked(Partition& part, const PutInput& in,
                                            int64_t row) const {
  const uint64_t claim = part.row_index().append_claim(row);
  if (claim == 0 || claim == in.append_claim) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      Where(in.step), ": row ", row, " is assigned to an append that is not yet written; "
      "nothing was written"));
}

bool DockImpl::IsOldestLiveStep(int64_t step) const {
  tdock::ReaderMutexLock lock(&mu_);
  for (const auto& part : ring_.partitions()) {
    if (part->live(mu_) && part->step(mu_) < step) return false;
  }
  return true;
}

std::string DockImpl::MemoryReason(int64_t step) const {
  return absl::StrCat(Where(step), ": memory limit of ", store_->limit_bytes(),
                      " bytes reached (", store_->reserved_bytes(), " bytes held)");
}

bool DockImpl::CanPutNow(const PutInput& in) const {
  tdock::ReaderMutexLock lock(&mu_);
  const StepState state = ring_.Classify(mu_, in.step);
  return state != StepState::kBlocked;
}

void DockImpl::FinishPut(const PutInput& in, PutAttempt attempt, PutCallback done) {
  absl::StatusOr<PutResult> result = *std::move(attempt.done);
  if (!result.ok()) {
    std::move(done)(std::move(result));
    return;
  }
  // Answers once the cells are stored.
  RecordPut(in, *result, std::move(attempt.cells), std::move(attempt.columns), std::move(done));
}

void DockImpl::EndAppend(int64_t step, uint64_t claim) {
  std::shared_ptr<StepCells> cells;
  {
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = ring_.Of(step);
    if (!part.live(mu_) || part.step(mu_) != step) return;
    tdock::MutexLock commit(&part.row_index().mu());
    // Released at its commit, unless it was answered without one (refused,
    // expired, cancelled, shut down): its rows are given back then, and the
    // step its claim alone kept started is taken off its partition.
    if (!part.row_index().ReleaseAppendClaim(claim)) return;
    cells = part.cells(mu_);
  }
  DeactivateIfUnused(step, cells);
}

void DockImpl::Put(PutInput input, PutCallback done) {
  if (input.put_id != 0) {
    input.put_fingerprint = PutFingerprint(input);
    PutIdTable::Stored stored;
    switch (put_ids_.Begin(input.put_id, &stored)) {
      case PutIdTable::Claim::kAnswered:
        if (stored.fingerprint != input.put_fingerprint) {
          std::move(done)(absl::InvalidArgumentError(absl::StrCat(
              Where(input.step), ": put_id ", input.put_id, " is the id of another Put, stored "
              "in step ", stored.answer.step, " (its step, rows, keys, lease, reservation or "
              "columns differ); each Put needs an id of its own")));
          return;
        }
        // Its rows were lost with their shard since: what it stored is gone.
        if (std::vector<int64_t> lost = LostRowsOfPut(input, stored.answer); !lost.empty()) {
          std::move(done)(absl::DataLossError(absl::StrCat(
              Where(stored.answer.step), ": the Put with put_id ", input.put_id,
              " was stored, but rows ", absl::StrJoin(lost, ", "),
              " were dropped as lost since, with their shard's cells; what it wrote there is "
              "gone: write those samples again in new rows")));
          return;
        }
        stored.answer.replayed = true;
        std::move(done)(std::move(stored.answer));
        return;
      case PutIdTable::Claim::kInFlight:
        std::move(done)(absl::AbortedError(absl::StrCat(
            Where(input.step), ": a Put with put_id ", input.put_id,
            " is being stored; ask again for its answer")));
        return;
      case PutIdTable::Claim::kNew:
        done = [this, id = input.put_id,
                done = std::move(done)](absl::StatusOr<PutResult> result) mutable {
          put_ids_.End(id);
          std::move(done)(std::move(result));
        };
        break;
    }
  }
  if (input.ack_lease != 0) {
    PutAndAck(std::move(input), std::move(done));
    return;
  }
  WritePut(std::move(input), std::move(done));
}

void DockImpl::WritePut(PutInput input, PutCallback done) {
  // Whether the Put names its rows (keys and reservations name them else).
  const bool rows_named = !input.rows.empty();
  const int64_t asked = input.new_rows;
  if (input.rows.empty() && !input.keys.empty() && input.new_rows == 0) {
    // Rows named by their keys, or new rows for new keys.
    absl::StatusOr<std::vector<int64_t>> rows = RowsOfKeys(input.step, input.keys);
    if (!rows.ok()) {
      std::move(done)(rows.status());
      return;
    }
    input.rows = *std::move(rows);
    if (input.rows.empty()) input.new_rows = static_cast<int64_t>(input.keys.size());
  }
  absl::Status valid = input.reservation != 0 ? RowsOfReservation(input) : absl::OkStatus();
  absl::StatusOr<std::vector<ColumnSpec>> adding = std::vector<ColumnSpec>();
  if (valid.ok()) adding = ColumnsToAdd(input);
  if (valid.ok()) valid = adding.status();
  if (valid.ok()) valid = checks_.Put(input, *adding);
  if (valid.ok() && !adding->empty()) valid = PrecheckPut(input);
  if (!valid.ok()) {
    std::move(done)(valid);
    return;
  }
  if (!adding->empty()) {
    // Its columns first (each recorded), then this again from the start:
    // every check, and its keys' rows, as they are then.
    if (!rows_named) input.rows.clear();
    input.new_rows = asked;
    AddColumnsThenPut(*std::move(adding), std::move(input), std::move(done));
    return;
  }
  if (input.rows.empty()) {
    // An append: the rows it is assigned are its own until it is answered.
    input.append_claim = ring_.Of(input.step).row_index().NewAppendClaim();
    done = [this, step = input.step, claim = input.append_claim,
            done = std::move(done)](absl::StatusOr<PutResult> result) mutable {
      EndAppend(step, claim);
      std::move(done)(std::move(result));
    };
  }
  PutAttempt attempt = TryPut(input);
  if (attempt.done.has_value()) {
    FinishPut(input, std::move(attempt), std::move(done));
    return;
  }
  if (input.wait <= absl::ZeroDuration()) {
    std::move(done)(CapacityError(attempt.park_reason));
    return;
  }
  ParkPut(std::move(input), std::move(attempt), std::move(done));
}

}  // namespace tdock::internal
