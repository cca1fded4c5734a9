// Helpers of the drop and seal tests: a small GRPO-shaped dock and its
// cells.
#ifndef TDOCK_TESTS_CORE_DROP_TEST_UTIL_H_
#define TDOCK_TESTS_CORE_DROP_TEST_UTIL_H_

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"

namespace tdock::testing {

constexpr absl::Duration kLongWait = absl::Seconds(10);

// 4 prompts x 2 samples: "prompt" and "response" (both count tokens);
// consumers are added per test.
inline DockSpec DropSpec(std::vector<ConsumerSpec> consumers) {
  DockSpec spec;
  spec.name = "drops";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.length_columns = {"prompt", "response"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"response", DType::kInt32, {}, 0, false}};
  spec.consumers = std::move(consumers);
  return spec;
}

inline ConsumerSpec Reader(std::string name, std::vector<std::string> columns,
                           int64_t dispatch, bool whole_groups = false) {
  return ConsumerSpec{std::move(name), std::move(columns), dispatch, 1, whole_groups,
                      Policy::kFifo, 0};
}

// Row r holds r + 1 tokens in `name`.
inline OwnedColumn Cells(const std::string& name, const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r : rows) values.emplace_back(static_cast<size_t>(r + 1), static_cast<int32_t>(r));
  return OwnedColumn::Of<int32_t>(name, DType::kInt32, values);
}

inline std::vector<int64_t> Iota(int64_t from, int64_t to) {
  std::vector<int64_t> rows(static_cast<size_t>(to - from));
  std::iota(rows.begin(), rows.end(), from);
  return rows;
}

inline DropInput DropOf(int64_t step, std::vector<int64_t> rows, DropReason reason,
                        std::vector<int64_t> groups = {}) {
  return DropInput{step, std::move(rows), std::move(groups), reason};
}

inline std::vector<int64_t> Sorted(std::vector<int64_t> rows) {
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace tdock::testing

#endif  // TDOCK_TESTS_CORE_DROP_TEST_UTIL_H_
