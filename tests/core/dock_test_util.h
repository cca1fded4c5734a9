// Helpers for driving a Dock synchronously in tests.
#ifndef TDOCK_TESTS_CORE_DOCK_TEST_UTIL_H_
#define TDOCK_TESTS_CORE_DOCK_TEST_UTIL_H_

#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "server/dock/dock.h"

namespace tdock::testing {

// A Put's column built from rows of T; owns its bytes (keep it alive until
// the Put completes).
struct OwnedColumn {
  std::string name;
  DType dtype;
  std::vector<int64_t> offsets{0};
  std::string bytes;

  template <typename T>
  static OwnedColumn Of(std::string name, DType dtype,
                        const std::vector<std::vector<T>>& rows) {
    OwnedColumn c{std::move(name), dtype, {0}, {}};
    for (const auto& row : rows) {
      c.offsets.push_back(c.offsets.back() + static_cast<int64_t>(row.size()));
      c.bytes.append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(T));
    }
    return c;
  }
  // float32 rows of `lengths` items, counting up from `first`.
  static OwnedColumn Floats(std::string name, const std::vector<int64_t>& lengths,
                            float first) {
    std::vector<std::vector<float>> rows;
    float value = first;
    for (int64_t len : lengths) {
      std::vector<float>& row = rows.emplace_back();
      for (int64_t k = 0; k < len; ++k) row.push_back(value++);
    }
    return Of<float>(std::move(name), DType::kFloat32, rows);
  }
  PackedColumn View() const {
    PackedColumn p;
    p.name = name;
    p.dtype = dtype;
    p.offsets = offsets;
    if (!bytes.empty()) p.segments.emplace_back(bytes.data(), bytes.size());
    return p;
  }
};

// Puts `in` and waits for the answer.
inline absl::StatusOr<PutResult> PutSync(Dock& dock, PutInput in) {
  std::promise<absl::StatusOr<PutResult>> promise;
  auto future = promise.get_future();
  dock.Put(std::move(in), [&promise](absl::StatusOr<PutResult> r) {
    promise.set_value(std::move(r));
  });
  return future.get();
}

inline absl::StatusOr<PutResult> PutSync(Dock& dock, int64_t step,
                                         std::vector<int64_t> rows,
                                         const std::vector<OwnedColumn>& columns,
                                         absl::Duration wait = absl::ZeroDuration(),
                                         uint64_t ack_lease = 0,
                                         std::vector<std::string> keys = {}) {
  PutInput in;
  in.step = step;
  in.rows = std::move(rows);
  in.wait = wait;
  in.ack_lease = ack_lease;
  in.keys = std::move(keys);
  for (const OwnedColumn& c : columns) in.columns.push_back(c.View());
  return PutSync(dock, std::move(in));
}

// Rows of `step` with a cell of column `column` ready (0: not live).
inline int64_t ReadyRows(Dock& dock, int64_t step, int column = 0) {
  for (const StepStats& s : dock.Stats().steps) {
    if (s.step == step) return s.ready_rows[column];
  }
  return 0;
}

inline absl::StatusOr<Batch> GetSync(Dock& dock, GetInput in) {
  std::promise<absl::StatusOr<Batch>> promise;
  auto future = promise.get_future();
  dock.Get(std::move(in), [&promise](absl::StatusOr<Batch> r) {
    promise.set_value(std::move(r));
  });
  return future.get();
}

inline GetInput GetOf(std::string consumer, int64_t count = 0,
                      absl::Duration wait = absl::ZeroDuration()) {
  GetInput in;
  in.consumer = std::move(consumer);
  in.count = count;
  in.wait = wait;
  return in;
}

// Row i of a batch column as T values.
template <typename T>
std::vector<T> RowValues(const PackedColumn& column, int64_t i) {
  std::vector<T> out(static_cast<size_t>(column.length(i)));
  if (!out.empty()) {
    CopyFromSegments(column.segments, column.offsets[i] * static_cast<int64_t>(sizeof(T)),
                     column.length(i) * static_cast<int64_t>(sizeof(T)),
                     reinterpret_cast<char*>(out.data()));
  }
  return out;
}

}  // namespace tdock::testing

#endif  // TDOCK_TESTS_CORE_DOCK_TEST_UTIL_H_
