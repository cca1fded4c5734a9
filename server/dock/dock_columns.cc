// DockImpl's columns added while it runs (AddColumn, or a Put writing a
// column the dock lacks when its spec sets add_columns_on_write): checked,
// then, as a change of the spec (dock_consumers.cc), recorded before each
// partition gets the column's state and the column table publishes it. A
// Put's columns are checked with the Put, and the Put against its step and
// rows as they are (PrecheckPut), before the first is added; a Put refused
// after that (its step released or sealed meanwhile, a capacity wait that
// ends, a record not stored) leaves them added.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::AddColumn(ColumnSpec column, ColumnCallback done) {
  SpecChange change;
  change.kind = SpecChange::Kind::kAddColumn;
  change.column = std::move(column);
  change.column_done = std::move(done);
  // Each partition's state of the column (a cell slot per row), built
  // before the change holds the dock's lock, where Gets and Puts wait.
  change.column_states = std::make_shared<std::vector<std::unique_ptr<ColumnState>>>();
  for (const auto& part : ring_.partitions()) {
    change.column_states->push_back(
        std::make_unique<ColumnState>(part->rows(), part->groups()));
  }
  ChangeSpec(std::move(change));
}

absl::StatusOr<DockSpec> DockImpl::CheckColumnsLocked(
    absl::Span<const ColumnSpec> columns) const {
  DockSpec next = consumers_.spec(mu_);
  for (const ColumnSpec& column : columns) {
    TDOCK_RETURN_IF_ERROR(ValidateName("column name", column.name));
    TDOCK_RETURN_IF_ERROR(CheckNoServerState(name_, column));
    if (next.ColumnIndex(column.name) >= 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("dock '", name_, "': column '", column.name, "' already exists"));
    }
    next.columns.push_back(column);
    next.columns.back().added = true;
  }
  // The columns' own checks, and the bound on the cells of a dock.
  TDOCK_ASSIGN_OR_RETURN(next, NormalizeSpec(std::move(next)));
  if (columns_.size() + columns.size() > columns_.capacity()) {
    return CapacityError(absl::StrCat(
        "dock '", name_, "': column '", columns.back().name, "': the dock has ", columns_.size(),
        " columns",
        columns.size() == 1
            ? ", the most it can hold"
            : absl::StrCat(" and holds at most ", columns_.capacity(), "; ", columns.size(),
                           " to add"),
        limits_.max_columns > 0 ? " (the server's --max_columns_per_dock)" : ""));
  }
  return next;
}

absl::StatusOr<std::vector<ColumnSpec>> DockImpl::ColumnsToAdd(const PutInput& in) const {
  TDOCK_ASSIGN_OR_RETURN(std::vector<ColumnSpec> adding, checks_.ColumnsToAdd(in));
  if (adding.empty()) return adding;
  absl::StatusOr<DockSpec> checked;
  {
    tdock::ReaderMutexLock lock(&mu_);
    checked = CheckColumnsLocked(adding);
  }
  // Another Put added one of them meanwhile: the next look finds it.
  if (absl::IsAlreadyExists(checked.status())) return ColumnsToAdd(in);
  if (!checked.ok()) {
    return WithMessage(checked.status(),
                       absl::StrCat(Where(in.step), ": adding the columns it writes: ",
                                    checked.status().message(), "; nothing was written"));
  }
  return adding;
}

void DockImpl::AddColumnsThenPut(std::vector<ColumnSpec> adding, PutInput input,
                                 PutCallback done) {
  // In the order the Put names them.
  ColumnSpec column = std::move(adding.front());
  adding.erase(adding.begin());
  AddColumn(std::move(column), [this, adding = std::move(adding), input = std::move(input),
                                done = std::move(done)](absl::StatusOr<ColumnSpec> added) mutable {
    // Added meanwhile by another Put: this one is checked against it.
    if (!added.ok() && !absl::IsAlreadyExists(added.status())) {
      std::move(done)(WithMessage(
          added.status(), absl::StrCat(added.status().message(), "; the Put (step ", input.step,
                                       ") wrote nothing")));
      return;
    }
    if (!adding.empty()) {
      AddColumnsThenPut(std::move(adding), std::move(input), std::move(done));
      return;
    }
    WritePut(std::move(input), std::move(done));
  });
}

}  // namespace tdock::internal
