// DockImpl's checks of a Put before it touches the dock: step, rows (or new
// rows), keys, columns, dtypes, packing, max_len. Nothing locked: the column
// table is read as it is now (AddColumn may add more meanwhile).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

absl::Status DockImpl::ValidatePut(const PutInput& in,
                                   absl::Span<const ColumnSpec> adding) const {
  const std::string where = Where(in.step);
  if (in.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": step is negative"));
  }
  if (in.row_count() == 0) return absl::InvalidArgumentError(absl::StrCat(where, ": no rows"));
  if (in.new_rows < 0 || in.new_rows > rows_per_step_ || (in.new_rows > 0 && !in.rows.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": new_rows ", in.new_rows, in.rows.empty() ? "" : " with rows named",
        " (ask for new rows in [1, ", rows_per_step_, "] without naming rows)"));
  }
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
  TDOCK_RETURN_IF_ERROR(ValidateKeys(in));
  TDOCK_RETURN_IF_ERROR(ValidateGroupSizes(in));
  TDOCK_RETURN_IF_ERROR(ValidateVersions(in));
  if (in.columns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no columns"));
  }
  // The columns there now (AddColumn may add more meanwhile), then those
  // the Put adds.
  const absl::Span<const ColumnSpec> columns = columns_.view();
  std::vector<bool> given(columns.size() + adding.size(), false);
  for (const PackedColumn& column : in.columns) {
    const auto named = [&](const ColumnSpec& c) { return c.name == column.name; };
    size_t index = std::find_if(columns.begin(), columns.end(), named) - columns.begin();
    if (index == columns.size()) {
      index += std::find_if(adding.begin(), adding.end(), named) - adding.begin();
    }
    if (index == given.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": column '", column.name, "' is unknown",
          add_columns_on_write_ ? "" : " (the dock's spec does not set add_columns_on_write)"));
    }
    const ColumnSpec& spec = index < columns.size() ? columns[index] : adding[index - columns.size()];
    if (given[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": column '", column.name, "' appears twice"));
    }
    given[index] = true;
    if (column.dtype != spec.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": column '", column.name, "' has dtype ", DTypeName(spec.dtype),
          ", the request sent ", DTypeName(column.dtype)));
    }
    absl::Status packed = ValidatePacked(column, in.row_count(), spec.item_bytes());
    if (!packed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", packed.message()));
    }
    for (int64_t i = 0; spec.max_len > 0 && i < in.row_count(); ++i) {
      if (column.length(i) > spec.max_len) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": row ", in.rows.empty() ? i : in.rows[i], " of column '", column.name, "' has ",
            column.length(i), " items, more than max_len ", spec.max_len));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DockImpl::ValidateGroupSizes(const PutInput& in) const {
  if (in.group_sizes.empty()) return absl::OkStatus();
  const std::string where = Where(in.step);
  if (!in.rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": group_sizes declares the groups of rows the server assigns; this Put names ",
        "its rows (or keys live rows have), whose groups are open already (drop the rows of a ",
        "named group it will not use instead)"));
  }
  const int64_t groups = rows_per_step_ / group_size_;
  if (static_cast<int64_t>(in.group_sizes.size()) > groups) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the Put declares ",
                                                   in.group_sizes.size(), " groups; a step holds ",
                                                   groups, " (max_rows_per_step / n)"));
  }
  int64_t total = 0;
  for (size_t i = 0; i < in.group_sizes.size(); ++i) {
    const int32_t size = in.group_sizes[i];
    if (size < 1 || size > group_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": group ", i, " of the Put is declared with ", size, " rows; a group has 1 to ",
          group_size_, " (n_samples_per_prompt)"));
    }
    total += size;
  }
  if (total != in.new_rows) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": group_sizes add up to ", total,
                                                   " rows; the Put writes ", in.new_rows));
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
