// DockImpl's write path: validate, find or start the step's partition,
// reserve arena space, copy the payload once, then publish under the
// partition's commit lock so a Put is all-or-nothing.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

int64_t PayloadBytes(const PackedColumn& column, int64_t item_bytes) {
  return column.offsets.back() * item_bytes;
}

}  // namespace

absl::Status DockImpl::ValidatePut(const PutInput& in) const {
  const std::string where = Where(in.step);
  if (in.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": step is negative"));
  }
  if (in.rows.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": no rows"));
  std::vector<bool> seen(static_cast<size_t>(rows_per_step_), false);
  for (int64_t row : in.rows) {
    if (row < 0 || row >= rows_per_step_) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": row ", row, " is out of range [0, ", rows_per_step_, ")"));
    }
    if (seen[row]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": row ", row, " appears twice"));
    }
    seen[row] = true;
  }
  if (in.columns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no columns"));
  }
  std::vector<bool> given(columns_.size(), false);
  for (const PackedColumn& column : in.columns) {
    auto it = std::find_if(columns_.begin(), columns_.end(),
                           [&](const ColumnSpec& c) { return c.name == column.name; });
    if (it == columns_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": column '", column.name, "' is unknown"));
    }
    const ColumnSpec& spec = *it;
    if (given[it - columns_.begin()]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": column '", column.name, "' appears twice"));
    }
    given[it - columns_.begin()] = true;
    if (column.dtype != spec.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": column '", column.name, "' has dtype ", DTypeName(spec.dtype),
          ", the request sent ", DTypeName(column.dtype)));
    }
    absl::Status packed = ValidatePacked(column, static_cast<int64_t>(in.rows.size()),
                                         spec.item_bytes());
    if (!packed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", packed.message()));
    }
    for (size_t i = 0; spec.max_len > 0 && i < in.rows.size(); ++i) {
      if (column.length(i) > spec.max_len) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": row ", in.rows[i], " of column '", column.name, "' has ",
            column.length(i), " items, more than max_len ", spec.max_len));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<StepArena>> DockImpl::ActivateForPut(
    int64_t step, std::string* blocked) {
  {
    tdock::ReaderMutexLock lock(&mu_);
    if (ClassifyLocked(step) == StepState::kLive) return PartitionOf(step).arena();
  }
  tdock::MutexLock lock(&mu_);
  Partition& part = PartitionOf(step);
  switch (ClassifyLocked(step)) {
    case StepState::kLive:
      return part.arena();
    case StepState::kFree:
      part.Activate(step, std::make_shared<StepArena>(pool_));
      return part.arena();
    case StepState::kBlocked:
      *blocked = absl::StrCat(Where(step), " waits for step ", part.step(),
                              " to be released from partition ", part.index());
      return std::shared_ptr<StepArena>();
    case StepState::kReleased:
      break;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(Where(step), " is already released"));
}

absl::Status DockImpl::CheckUnwrittenLocked(const Partition& part,
                                            const PutInput& in) const {
  TDOCK_RETURN_IF_ERROR(CheckBudgetsLocked(part, in));
  for (const PackedColumn& column : in.columns) {
    const int c = static_cast<int>(
        std::find_if(columns_.begin(), columns_.end(),
                     [&](const ColumnSpec& s) { return s.name == column.name; }) -
        columns_.begin());
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

namespace {

// The arena regions of one column of one Put.
struct StagedColumn {
  int column = 0;
  CellBlock* blocks = nullptr;  // one per row
};

// Copies a column's payload into `arena`: one region when it fits a chunk
// (rows stay contiguous), else one region per row. False when the memory
// limit refuses space.
bool StageColumn(StepArena& arena, const PackedColumn& in, int64_t item_bytes,
                 int64_t chunk_bytes, StagedColumn& out) {
  const int64_t rows = in.rows();
  out.blocks = reinterpret_cast<CellBlock*>(
      arena.Allocate(rows * static_cast<int64_t>(sizeof(CellBlock))));
  if (out.blocks == nullptr) return false;
  const int64_t total = PayloadBytes(in, item_bytes);
  char* region = total <= chunk_bytes ? arena.Allocate(total) : nullptr;
  if (total <= chunk_bytes && region == nullptr) return false;
  if (region != nullptr) CopyFromSegments(in.segments, 0, total, region);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t begin = in.offsets[i] * item_bytes;
    const int64_t len = in.length(i) * item_bytes;
    char* dest = region != nullptr ? region + begin : arena.Allocate(len);
    if (dest == nullptr) return false;
    if (region == nullptr && len > 0) CopyFromSegments(in.segments, begin, len, dest);
    new (&out.blocks[i]) CellBlock{dest, in.length(i)};
  }
  return true;
}

}  // namespace

DockImpl::PutAttempt DockImpl::TryPut(const PutInput& in) {
  PutAttempt attempt;
  std::string blocked;
  absl::StatusOr<std::shared_ptr<StepArena>> arena = ActivateForPut(in.step, &blocked);
  if (!arena.ok()) {
    attempt.done = arena.status();
    return attempt;
  }
  if (*arena == nullptr) {
    attempt.park_reason = std::move(blocked);
    return attempt;
  }
  Partition& part = PartitionOf(in.step);
  {
    tdock::ReaderMutexLock lock(&mu_);
    absl::Status unwritten = CheckUnwrittenLocked(part, in);
    if (!unwritten.ok()) {
      attempt.done = unwritten;
      return attempt;
    }
  }
  // Under a memory limit, park before staging anything rather than waste
  // arena space on a Put that cannot fit (one chunk of slack: the current one).
  int64_t estimate = 0;
  for (const PackedColumn& column : in.columns) {
    estimate += column.data_bytes() +
                static_cast<int64_t>(in.rows.size() * sizeof(CellBlock)) + 128;
  }
  if (pool_->limit_bytes() > 0 &&
      estimate > pool_->available_bytes() + pool_->chunk_bytes()) {
    attempt.park_reason = MemoryReason(in.step);
    attempt.memory_limited = true;
    return attempt;
  }
  // The copy: outside every lock; `arena` pins the memory even if the step
  // is released meanwhile.
  std::vector<StagedColumn> staged(in.columns.size());
  PutResult result{static_cast<int64_t>(in.rows.size()), 0};
  for (size_t i = 0; i < in.columns.size(); ++i) {
    staged[i].column = static_cast<int>(
        std::find_if(columns_.begin(), columns_.end(),
                     [&](const ColumnSpec& s) { return s.name == in.columns[i].name; }) -
        columns_.begin());
    const int64_t item = columns_[staged[i].column].item_bytes();
    if (!StageColumn(**arena, in.columns[i], item, pool_->chunk_bytes(), staged[i])) {
      attempt.park_reason = MemoryReason(in.step);
      attempt.memory_limited = true;
      return attempt;
    }
    result.bytes += PayloadBytes(in.columns[i], item);
  }
  tdock::ReaderMutexLock lock(&mu_);
  if (ClassifyLocked(in.step) != StepState::kLive || part.arena() != *arena) {
    attempt.done = absl::FailedPreconditionError(
        absl::StrCat(Where(in.step), " was released while the Put was in progress"));
    return attempt;
  }
  tdock::MutexLock commit(&part.commit_mu());
  absl::Status unwritten = CheckUnwrittenLocked(part, in);
  if (!unwritten.ok()) {
    attempt.done = unwritten;
    return attempt;
  }
  for (const StagedColumn& column : staged) {
    for (size_t i = 0; i < in.rows.size(); ++i) {
      part.Publish(column.column, in.rows[i], &column.blocks[i]);
    }
  }
  attempt.done = result;
  return attempt;
}

std::string DockImpl::MemoryReason(int64_t step) const {
  return absl::StrCat(Where(step), ": memory limit of ", pool_->limit_bytes(),
                      " bytes reached (", pool_->reserved_bytes(), " bytes held)");
}

bool DockImpl::CanPutNow(const PutInput& in) const {
  tdock::ReaderMutexLock lock(&mu_);
  const StepState state = ClassifyLocked(in.step);
  return state != StepState::kBlocked;
}

void DockImpl::FinishPut(const PutInput& in, absl::StatusOr<PutResult> result,
                         PutCallback done) {
  if (result.ok()) {
    // Wake the consumers that need any column this Put wrote.
    std::vector<bool> wanted;
    {
      tdock::ReaderMutexLock lock(&mu_);
      wanted.assign(plans_.size(), false);
      for (const ConsumerPlan& plan : plans_) {
        for (int c : plan.columns) {
          for (const PackedColumn& column : in.columns) {
            if (columns_[c].name == column.name) wanted[plan.index] = true;
          }
        }
      }
    }
    if (std::find(wanted.begin(), wanted.end(), true) != wanted.end()) {
      WakeGets(wanted);
    }
  }
  std::move(done)(std::move(result));
}

void DockImpl::Put(PutInput input, PutCallback done) {
  absl::Status valid = ValidatePut(input);
  if (!valid.ok()) {
    std::move(done)(valid);
    return;
  }
  PutAttempt attempt = TryPut(input);
  if (attempt.done.has_value()) {
    FinishPut(input, std::move(*attempt.done), std::move(done));
    return;
  }
  if (input.wait <= absl::ZeroDuration()) {
    std::move(done)(absl::ResourceExhaustedError(attempt.park_reason));
    return;
  }
  ParkPut(std::move(input), std::move(attempt), std::move(done));
}

}  // namespace tdock::internal
