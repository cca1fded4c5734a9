// DockImpl's response sizes: a Get never claims more than one response can
// carry (DockLimits::max_batch_bytes), and a Put never writes a row (or, for
// whole-group consumers, a group) that no response could carry.
//
// A batch's size is bounded from above: its cells' bytes, per row its index,
// token count and offset in every column and its share of the micro-batch
// plan, plus a fixed allowance for the rest of the response.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

constexpr int64_t kFixedResponseBytes = 64 << 10;
constexpr int64_t kRowResponseBytes = 64;     // index, token count, plan share
constexpr int64_t kOffsetResponseBytes = 10;  // a row's offset in one column

}  // namespace

int64_t DockImpl::FixedResponseBytes() { return kFixedResponseBytes; }

int64_t DockImpl::RowResponseBytesLocked(const Partition& part, const ConsumerPlan& plan,
                                         int64_t row) const {
  int64_t bytes = kRowResponseBytes;
  for (int c : plan.columns) {
    bytes += kOffsetResponseBytes;
    if (const CellBlock* cell = part.cell(c, row); cell != nullptr) {
      bytes += cell->length * columns_[c].item_bytes();
    }
  }
  return bytes;
}

size_t DockImpl::FittingUnitsLocked(const Partition& part, const ConsumerPlan& plan,
                                    const std::vector<int64_t>& units) const {
  if (limits_.max_batch_bytes <= 0) return units.size();
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  int64_t bytes = kFixedResponseBytes;
  for (size_t i = 0; i < units.size(); ++i) {
    for (int32_t r = 0; r < unit_rows; ++r) {
      bytes += RowResponseBytesLocked(part, plan, units[i] * unit_rows + r);
    }
    if (bytes > limits_.max_batch_bytes) return i;
  }
  return units.size();
}

absl::Status DockImpl::CheckResponseSizesLocked(const Partition& part,
                                                const PutInput& in) const {
  if (limits_.max_batch_bytes <= 0) return absl::OkStatus();
  // The Put's cells by column and row (they replace what the row holds).
  std::vector<const PackedColumn*> given(columns_.size(), nullptr);
  for (const PackedColumn& column : in.columns) given[ColumnIndex(column.name)] = &column;
  // Rows of a group other than the Put's own are looked up by row (only for
  // whole-group consumers).
  absl::flat_hash_map<int64_t, int64_t> position;
  // The row at position `at` of the Put (-1: not in it).
  auto row_bytes = [&](const ConsumerPlan& plan, int64_t row, int64_t at) {
    int64_t bytes = kRowResponseBytes;
    for (int c : plan.columns) {
      bytes += kOffsetResponseBytes;
      const int64_t item = columns_[c].item_bytes();
      if (given[c] != nullptr && at >= 0) {
        bytes += given[c]->length(at) * item;
      } else if (const CellBlock* cell = part.cell(c, row); cell != nullptr) {
        bytes += cell->length * item;
      }
    }
    return bytes;
  };
  std::vector<const ConsumerPlan*> plans;
  for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
    if (!plan.removed) plans.push_back(&plan);  // a removed one takes no more rows
  }
  // A consumer being added checked the rows written so far; it must fit
  // the rows written while its record is stored as well.
  if (const ConsumerPlan* adding = consumers_.recording_plan(mu_)) plans.push_back(adding);
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
      if (bytes > limits_.max_batch_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(in.step), ": ", plan.whole_groups ? "the group of row " : "row ", row,
            " would take ", bytes, " bytes in a response to consumer '", plan.name,
            "', more than one response carries (", limits_.max_batch_bytes,
            " bytes: the server's max_message_mb)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DockImpl::CheckWrittenFitLocked(const ConsumerPlan& plan) const {
  if (limits_.max_batch_bytes <= 0) return absl::OkStatus();
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  for (const auto& part : ring_.partitions()) {
    if (!part->live(mu_)) continue;
    for (int64_t first = 0; first < rows_per_step_; first += unit_rows) {
      int64_t bytes = kFixedResponseBytes;
      for (int64_t row = first; row < first + unit_rows; ++row) {
        bytes += RowResponseBytesLocked(*part, plan, row);
      }
      if (bytes > limits_.max_batch_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(part->step(mu_)), ": ", plan.whole_groups ? "the group of row " : "row ", first,
            " would take ", bytes, " bytes in a response to consumer '", plan.name,
            "', more than one response carries (", limits_.max_batch_bytes,
            " bytes: the server's max_message_mb)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
