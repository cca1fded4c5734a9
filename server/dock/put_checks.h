// PutChecks: the checks a Put or a Reserve passes before it touches any of
// the dock's state — its step and rows (or the new rows it asks for), group
// sizes, versions, keys, columns, dtypes, packing and max_len; a Reserve's
// version, rows, groups and deadline. In a dock that holds locations
// (CellForm::kLocations) a column's data is one location a row, each as many
// bytes long as the row's items (ValidateCells). Each failure is INVALID_ARGUMENT (a
// version newer than the dock's: FAILED_PRECONDITION) and names what was
// wrong; nothing is changed by a check.
//
// What the checks read: constants of the dock, its column table as it is now
// (AddColumn may add more meanwhile; a Put naming a column added after the
// check is refused as unknown, as if it came first) and its policy version.
// What they cannot check alone, because it needs the dock's lock, stays with
// the dock: a Put's rows against its step (RowIndex, under the commit lock),
// whether the columns a Put adds fit (ConsumerTable), a Reserve's admission
// bound.
//
// Thread safety: const after construction and lock-free; any thread may call
// any method. The column table and the version must outlive it.
#ifndef TDOCK_SERVER_DOCK_PUT_CHECKS_H_
#define TDOCK_SERVER_DOCK_PUT_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cell_location.h"
#include "common/spec.h"
#include "server/dock/column_table.h"
#include "server/dock/policy_version.h"
#include "server/dock/types.h"

namespace tdock::internal {

class PutChecks final {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  // A reservation's deadline is in (0, kMaxReservationDeadline].
  static constexpr absl::Duration kMaxReservationDeadline = absl::Hours(24);

  PutChecks(std::string dock, int64_t rows_per_step, int32_t group_size,
            bool add_columns_on_write, const ColumnTable& columns, const PolicyVersion& version,
            CellForm form = CellForm::kBytes);
  PutChecks(const PutChecks&) = delete;
  PutChecks& operator=(const PutChecks&) = delete;

  // "dock 'x' step 3": how every refusal about a step starts.
  std::string Where(int64_t step) const;

  // The whole Put: step, rows or new_rows, keys, group sizes, versions and
  // every column. `adding`: the columns the Put adds first (ColumnsToAdd),
  // checked as if the dock had them.
  absl::Status Put(const PutInput& in, absl::Span<const ColumnSpec> adding = {}) const;
  // add_columns_on_write: the columns `in` writes that the table lacks now,
  // as they would be added (from in.new_columns, else name and dtype), once
  // the Put's definitions pass (each names a column it writes, once, with
  // its dtype). Whether they fit the dock's spec is the dock's check.
  absl::StatusOr<std::vector<ColumnSpec>> ColumnsToAdd(const PutInput& in) const;
  // A Reserve's version (none newer than the dock's), rows or group sizes
  // and capacity; then (the dock checks its admission bound in between) its
  // deadline.
  absl::Status Reserve(const ReserveInput& in) const;
  absl::Status ReserveDeadline(const ReserveInput& in) const;
  // One key: neither empty nor over kMaxKeyBytes.
  static absl::Status Key(absl::string_view where, absl::string_view key);

 private:
  // group_sizes: only for assigned rows, each in [1, n], adding up to them.
  absl::Status GroupSizes(const PutInput& in) const;
  // versions: none, one for all rows, or one per row; none negative or
  // newer than the dock's.
  absl::Status Versions(const PutInput& in) const;
  // keys: none, or one per row, each a valid key, no two alike.
  absl::Status Keys(const PutInput& in) const;

  const std::string dock_;
  const int64_t rows_per_step_;
  const int32_t group_size_;
  const bool add_columns_on_write_;
  const ColumnTable& columns_;
  const PolicyVersion& version_;
  const CellForm form_;  // what a Put's column data is: bytes, or locations
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_PUT_CHECKS_H_
