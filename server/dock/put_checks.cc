#include "server/dock/put_checks.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/packed.h"
#include "common/status.h"

namespace tdock::internal {

PutChecks::PutChecks(std::string dock, int64_t rows_per_step, int32_t group_size,
                     bool add_columns_on_write, const ColumnTable& columns,
                     const PolicyVersion& version, CellForm form)
    : dock_(std::move(dock)),
      rows_per_step_(rows_per_step),
      group_size_(group_size),
      add_columns_on_write_(add_columns_on_write),
      columns_(columns),
      version_(version),
      form_(form) {}

std::string PutChecks::Where(int64_t step) const {
  return absl::StrCat("dock '", dock_, "' step ", step);
}

absl::Status PutChecks::Put(const PutInput& in,
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
  TDOCK_RETURN_IF_ERROR(Keys(in));
  TDOCK_RETURN_IF_ERROR(GroupSizes(in));
  TDOCK_RETURN_IF_ERROR(Versions(in));
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
    const ColumnSpec& spec =
        index < columns.size() ? columns[index] : adding[index - columns.size()];
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
    absl::Status packed = ValidateCells(form_, column, in.row_count(), spec.item_bytes());
    if (!packed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", packed.message()));
    }
    for (int64_t i = 0; spec.max_len > 0 && i < in.row_count(); ++i) {
      if (column.length(i) > spec.max_len) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": row ", in.rows.empty() ? i : in.rows[i], " of column '", column.name,
            "' has ", column.length(i), " items, more than max_len ", spec.max_len));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PutChecks::GroupSizes(const PutInput& in) const {
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

absl::Status PutChecks::Versions(const PutInput& in) const {
  if (in.versions.empty()) return absl::OkStatus();
  const std::string where = Where(in.step);
  if (in.versions.size() != 1 && static_cast<int64_t>(in.versions.size()) != in.row_count()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", in.versions.size(),
                                                   " versions for ", in.row_count(),
                                                   " rows; give one for all, or one per row"));
  }
  const int64_t now = version_.current();
  for (size_t i = 0; i < in.versions.size(); ++i) {
    // Which row: by number when the Put names them, else by its place.
    const std::string of =
        in.versions.size() == 1 ? std::string()
        : in.rows.empty()       ? absl::StrCat(" of the Put's row ", i)
                                : absl::StrCat(" of row ", in.rows[i]);
    if (in.versions[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": version ", in.versions[i], of, " is negative"));
    }
    if (in.versions[i] > now) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": version ", in.versions[i], of, " is newer than the dock's version ", now,
          ": no weights of that version exist yet (the trainer sets the version)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PutChecks::Keys(const PutInput& in) const {
  if (in.keys.empty()) return absl::OkStatus();
  const std::string where = Where(in.step);
  if (static_cast<int64_t>(in.keys.size()) != in.row_count()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", in.keys.size(),
                                                   " keys for ", in.row_count(),
                                                   " rows; give one key per row"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& key : in.keys) {
    TDOCK_RETURN_IF_ERROR(Key(where, key));
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": key '", key, "' appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status PutChecks::Key(absl::string_view where, absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": a key is empty"));
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a key of ", key.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxKeyBytes));
  }
  return absl::OkStatus();
}
absl::StatusOr<std::vector<ColumnSpec>> PutChecks::ColumnsToAdd(const PutInput& in) const {
  std::vector<ColumnSpec> adding;
  if (in.new_columns.empty() && !add_columns_on_write_) return adding;
  const std::string where = Where(in.step);
  if (!in.new_columns.empty() && !add_columns_on_write_) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the Put defines new_columns; the dock adds no columns on write (its spec does "
        "not set add_columns_on_write)"));
  }
  if (in.new_columns.size() > columns_.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the Put defines ", in.new_columns.size(), " new columns; a dock holds at most ",
        columns_.capacity()));
  }
  const auto written = [&](const std::string& name) {
    return std::find_if(in.columns.begin(), in.columns.end(),
                        [&](const PackedColumn& c) { return c.name == name; });
  };
  for (size_t i = 0; i < in.new_columns.size(); ++i) {
    const std::string& name = in.new_columns[i].name;
    if (written(name) == in.columns.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": new_columns[", i, "] defines column '", name,
          "', which the Put does not write"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (in.new_columns[j].name == name) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": new_columns defines column '", name, "' twice"));
      }
    }
    if (in.new_columns[i].dtype != written(name)->dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": new_columns[", i, "] defines column '", name, "' as ",
          DTypeName(in.new_columns[i].dtype), "; the Put writes it as ",
          DTypeName(written(name)->dtype)));
    }
  }
  if (!add_columns_on_write_) return adding;
  const absl::Span<const ColumnSpec> columns = columns_.view();
  for (const PackedColumn& column : in.columns) {
    const auto named = [&](const ColumnSpec& c) { return c.name == column.name; };
    if (std::any_of(columns.begin(), columns.end(), named) ||
        std::any_of(adding.begin(), adding.end(), named)) {
      continue;
    }
    auto defined = std::find_if(in.new_columns.begin(), in.new_columns.end(), named);
    if (defined != in.new_columns.end()) {
      adding.push_back(*defined);
    } else {
      ColumnSpec plain;
      plain.name = column.name;
      plain.dtype = column.dtype;
      adding.push_back(std::move(plain));
    }
  }
  return adding;
}

absl::Status PutChecks::Reserve(const ReserveInput& in) const {
  const std::string who = absl::StrCat("dock '", dock_, "': reservation");
  if (in.version.has_value() && *in.version < 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": version ", *in.version, " is negative"));
  }
  const int64_t now = version_.current();
  if (in.version.has_value() && *in.version > now) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": version ", *in.version, " is newer than the dock's version ", now,
        ": no weights of that version exist yet (the trainer sets the version)"));
  }
  if (in.rows < 0 || (in.rows > 0) == !in.group_sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " asks for ", in.rows, " rows and ", in.group_sizes.size(),
        " group sizes: ask for rows, or for groups of given sizes"));
  }
  for (int32_t size : in.group_sizes) {
    if (size < 1 || size > group_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": group size ", size, " is out of range [1, ", group_size_,
          "] (n_samples_per_prompt)"));
    }
  }
  const int64_t rows = in.row_count();
  const int64_t groups = in.group_sizes.empty() ? (rows + group_size_ - 1) / group_size_
                                                : static_cast<int64_t>(in.group_sizes.size());
  if (groups * group_size_ > rows_per_step_) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " of ", rows, " rows (", groups, " groups) is over a step's capacity of ",
        rows_per_step_, " rows (max_rows_per_step)"));
  }
  return absl::OkStatus();
}

absl::Status PutChecks::ReserveDeadline(const ReserveInput& in) const {
  if (in.deadline <= absl::ZeroDuration() || in.deadline > kMaxReservationDeadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dock '", dock_, "': reservation: deadline ", absl::FormatDuration(in.deadline),
        " is out of range (0, 24h]: rows not written by then are dropped"));
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
