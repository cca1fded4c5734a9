// ColumnTable: a dock's columns, which only grow (AddColumn). Readers on any
// thread see a prefix of them without a lock; the one writer at a time (the
// dock's mutex held exclusively) appends up to a capacity fixed at creation,
// so a column, once there, never moves.
#ifndef TDOCK_SERVER_DOCK_COLUMN_TABLE_H_
#define TDOCK_SERVER_DOCK_COLUMN_TABLE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/spec.h"

namespace tdock::internal {

class ColumnTable final {
 public:
  ColumnTable(const std::vector<ColumnSpec>& columns, size_t capacity)
      : slots_(new ColumnSpec[std::max(capacity, columns.size())]),
        capacity_(std::max(capacity, columns.size())),
        size_(columns.size()) {
    for (size_t c = 0; c < columns.size(); ++c) slots_[c] = columns[c];
  }
  ColumnTable(const ColumnTable&) = delete;
  ColumnTable& operator=(const ColumnTable&) = delete;

  // The columns a dock can hold: the server's limit (max_columns > 0), or
  // 256 more than it starts with.
  static size_t Capacity(size_t initial, int64_t max_columns) {
    constexpr size_t kRoomWithoutLimit = 256;
    return max_columns > 0 ? static_cast<size_t>(max_columns) : initial + kRoomWithoutLimit;
  }

  size_t capacity() const { return capacity_; }
  // The columns there now. acquire: pairs with Append's release, so a
  // column counted is fully written.
  absl::Span<const ColumnSpec> view() const {
    return {slots_.get(), size_.load(std::memory_order_acquire)};
  }
  size_t size() const { return size_.load(std::memory_order_acquire); }
  // REQUIRES: c below a size seen.
  const ColumnSpec& operator[](size_t c) const { return slots_[c]; }
  const ColumnSpec* begin() const { return view().begin(); }
  // The index of the column named `name` among those there now; -1: none.
  int IndexOf(absl::string_view name) const {
    const absl::Span<const ColumnSpec> columns = view();
    for (size_t c = 0; c < columns.size(); ++c) {
      if (columns[c].name == name) return static_cast<int>(c);
    }
    return -1;
  }
  const ColumnSpec* end() const { return view().end(); }

  // One writer at a time. REQUIRES: size() < capacity().
  void Append(ColumnSpec column) {
    const size_t c = size_.load(std::memory_order_relaxed);
    TDOCK_CHECK(c < capacity_) << "column table full";
    slots_[c] = std::move(column);
    size_.store(c + 1, std::memory_order_release);
  }

 private:
  const std::unique_ptr<ColumnSpec[]> slots_;
  const size_t capacity_;
  std::atomic<size_t> size_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_COLUMN_TABLE_H_
