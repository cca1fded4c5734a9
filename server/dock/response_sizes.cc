#include "server/dock/response_sizes.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tdock::internal {
namespace {

constexpr int64_t kFixedResponseBytes = 64 << 10;
constexpr int64_t kRowResponseBytes = 64;     // index, token count, plan share
constexpr int64_t kOffsetResponseBytes = 10;  // a row's offset in one column

}  // namespace

ResponseSizes::ResponseSizes(const ColumnTable& columns, int64_t rows_per_step,
                             int32_t group_size, int64_t max_bytes, CellForm form)
    : columns_(columns),
      rows_per_step_(rows_per_step),
      group_size_(group_size),
      max_bytes_(max_bytes),
      form_(form) {}

int64_t ResponseSizes::CellBytes(int c, int64_t items) const {
  return StoredCellBytes(form_, items, columns_[c].item_bytes());
}

int64_t ResponseSizes::Fixed() { return kFixedResponseBytes; }

int64_t ResponseSizes::Row(const Partition& part, const ConsumerPlan& plan, int64_t row) const {
  int64_t bytes = kRowResponseBytes;
  for (int c : plan.columns) {
    bytes += kOffsetResponseBytes;
    if (const CellBlock* cell = part.cell(c, row); cell != nullptr) {
      bytes += CellBytes(c, cell->length);
    }
  }
  return bytes;
}

size_t ResponseSizes::FittingUnits(const Partition& part, const ConsumerPlan& plan,
                                   const std::vector<int64_t>& units) const {
  if (max_bytes_ <= 0) return units.size();
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  int64_t bytes = kFixedResponseBytes;
  for (size_t i = 0; i < units.size(); ++i) {
    for (int32_t r = 0; r < unit_rows; ++r) bytes += Row(part, plan, units[i] * unit_rows + r);
    if (bytes > max_bytes_) return i;
  }
  return units.size();
}

absl::Status ResponseSizes::CheckPut(const Partition& part, const PutInput& in,
                                     absl::Span<const ConsumerPlan* const> plans) const {
  if (max_bytes_ <= 0) return absl::OkStatus();
  // The Put's cells by column and row (they replace what the row holds).
  std::vector<const PackedColumn*> given(columns_.size(), nullptr);
  for (const PackedColumn& column : in.columns) given[columns_.IndexOf(column.name)] = &column;
  // Rows of a group other than the Put's own are looked up by row (only for
  // whole-group consumers).
  absl::flat_hash_map<int64_t, int64_t> position;
  // The row at position `at` of the Put (-1: not in it).
  auto row_bytes = [&](const ConsumerPlan& plan, int64_t row, int64_t at) {
    int64_t bytes = kRowResponseBytes;
    for (int c : plan.columns) {
      bytes += kOffsetResponseBytes;
      if (given[c] != nullptr && at >= 0) {
        bytes += CellBytes(c, given[c]->length(at));
      } else if (const CellBlock* cell = part.cell(c, row); cell != nullptr) {
        bytes += CellBytes(c, cell->length);
      }
    }
    return bytes;
  };
  for (const ConsumerPlan* each : plans) {
    const ConsumerPlan& plan = *each;
    if (plan.whole_groups && position.empty()) {
      for (size_t i = 0; i < in.rows.size(); ++i) position[in.rows[i]] = static_cast<int64_t>(i);
    }
    for (size_t i = 0; i < in.rows.size(); ++i) {
      const int64_t row = in.rows[i];
      int64_t bytes = kFixedResponseBytes;
      if (!plan.whole_groups) {
        bytes += row_bytes(plan, row, static_cast<int64_t>(i));
      } else {
        const int64_t first = row / group_size_ * group_size_;
        for (int64_t r = first; r < first + group_size_; ++r) {
          const auto at = position.find(r);
          bytes += row_bytes(plan, r, at == position.end() ? -1 : at->second);
        }
      }
      if (bytes > max_bytes_) return TooLarge(plan, row, bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status ResponseSizes::CheckWritten(const Partition& part,
                                         const ConsumerPlan& plan) const {
  if (max_bytes_ <= 0) return absl::OkStatus();
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  for (int64_t first = 0; first < rows_per_step_; first += unit_rows) {
    int64_t bytes = kFixedResponseBytes;
    for (int64_t row = first; row < first + unit_rows; ++row) bytes += Row(part, plan, row);
    if (bytes > max_bytes_) return TooLarge(plan, first, bytes);
  }
  return absl::OkStatus();
}

absl::Status ResponseSizes::TooLarge(const ConsumerPlan& plan, int64_t row,
                                     int64_t bytes) const {
  return absl::InvalidArgumentError(absl::StrCat(
      plan.whole_groups ? "the group of row " : "row ", row, " would take ", bytes,
      " bytes in a response to consumer '", plan.name, "', more than one response carries (",
      max_bytes_, " bytes: the server's max_message_mb)"));
}

}  // namespace tdock::internal
