// DockImpl's columns added while it runs (AddColumn): checked, then, as a
// change of the spec (dock_consumers.cc), recorded before each partition
// gets the column's state and the column table publishes it.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<DockSpec> DockImpl::CheckColumnLocked(const ColumnSpec& column) const {
  TDOCK_RETURN_IF_ERROR(ValidateName("column name", column.name));
  TDOCK_RETURN_IF_ERROR(CheckNoServerState(name_, column));
  if (consumers_.spec(mu_).ColumnIndex(column.name) >= 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("dock '", name_, "': column '", column.name, "' already exists"));
  }
  DockSpec next = consumers_.spec(mu_);
  next.columns.push_back(column);
  next.columns.back().added = true;
  // The column's own checks, and the bound on the cells of a dock.
  TDOCK_ASSIGN_OR_RETURN(next, NormalizeSpec(std::move(next)));
  if (columns_.size() >= columns_.capacity()) {
    return CapacityError(absl::StrCat(
        "dock '", name_, "': column '", column.name, "': the dock has ", columns_.size(),
        " columns, the most it can hold",
        limits_.max_columns > 0 ? " (the server's --max_columns_per_dock)" : ""));
  }
  return next;
}

}  // namespace tdock::internal
