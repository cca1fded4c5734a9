// Groups of any size: an append may declare the sizes of the groups it
// opens (at most n each). A declared group takes one of the step's groups of
// n rows; its rows past the size are closed ("unused") once the Put is
// stored, so whole-group consumers take it complete at its size and
// balanced rounds balance groups of unequal sizes. A write past a declared
// size, and every bad declaration, fails naming it and changes nothing.
#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::OwnedColumn;
using testing::Reader;

// 2 prompts x 4 samples planned, room for 16 rows (4 groups).
DockSpec GroupSpec(std::vector<ConsumerSpec> consumers) {
  DockSpec spec = testing::DropSpec(std::move(consumers));
  spec.num_prompts = 2;
  spec.n_samples_per_prompt = 4;
  spec.max_rows_per_step = 16;
  return spec;
}

// Appends groups of `sizes` to `step`, writing `columns` (one token a
// cell), or `keys` when given.
absl::StatusOr<PutResult> AppendGroups(Dock& dock, int64_t step, std::vector<int32_t> sizes,
                                       std::vector<std::string> columns = {"prompt"},
                                       std::vector<std::string> keys = {}) {
  PutInput in;
  in.step = step;
  in.wait = testing::kLongWait;  // for a partition of the ring
  for (int32_t size : sizes) in.new_rows += size;
  const int64_t rows = keys.empty() ? in.new_rows : static_cast<int64_t>(keys.size());
  if (!keys.empty()) in.new_rows = 0;  // new keys ask for the rows
  in.keys = std::move(keys);
  in.group_sizes = std::move(sizes);
  std::vector<OwnedColumn> cells;
  for (const std::string& name : columns) {
    cells.push_back(Cells(name, std::vector<int64_t>(static_cast<size_t>(rows), 0)));
  }
  for (const OwnedColumn& c : cells) in.columns.push_back(c.View());
  return testing::PutSync(dock, std::move(in));
}

// The batches of a consumer until its end of `step`, as lists of rows.
std::vector<std::vector<int64_t>> TakeStep(Dock& dock, const std::string& consumer,
                                           int64_t step, int32_t rank = 0) {
  std::vector<std::vector<int64_t>> batches;
  for (int i = 0; i < 100; ++i) {
    GetInput in = GetOf(consumer);
    in.rank = rank;
    in.step = step;
    absl::StatusOr<Batch> batch = GetSync(dock, in);
    EXPECT_OK(batch);
    if (!batch.ok()) break;
    if (!batch->rows.empty()) batches.push_back(batch->rows);
    if (batch->end_of_step || (batch->rows.empty() && batch->round < 0)) break;
  }
  return batches;
}

TEST(GroupsTest, DeclaredGroupsAreTakenCompleteAtTheirSize) {
  // "groups" takes one group per Get.
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(GroupSpec({Reader("groups", {"prompt", "response"}, 4, true),
                                               Reader("rows", {"prompt"}, 8)})));
  ASSERT_OK_AND_ASSIGN(PutResult put, AppendGroups(*dock, 0, {3, 1, 4}));
  EXPECT_EQ(put.assigned, (std::vector<int64_t>{0, 1, 2, 4, 8, 9, 10, 11}))
      << "one of the step's groups per declared group, its first rows";
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  std::vector<int64_t> unused;
  for (const RowState& row : listing.rows) {
    if (row.dropped == DropReason::kUnused) unused.push_back(row.row);
  }
  EXPECT_EQ(unused, (std::vector<int64_t>{3, 5, 6, 7})) << "closed past each declared size";
  EXPECT_EQ(dock->Stats().steps[0].dropped_rows[static_cast<int>(DropReason::kUnused)], 4);

  // A group is complete once its declared rows have every needed column.
  EXPECT_TRUE(TakeStep(*dock, "groups", 0).empty());
  ASSERT_OK(testing::PutSync(*dock, 0, {0, 1, 2, 4}, {Cells("response", {0, 1, 2, 4})}));
  EXPECT_EQ(TakeStep(*dock, "groups", 0),
            (std::vector<std::vector<int64_t>>{{0, 1, 2}, {4}}));
  EXPECT_EQ(TakeStep(*dock, "rows", 0), (std::vector<std::vector<int64_t>>{put.assigned}))
      << "closed rows are done for row consumers too";

  // A write past a declared size is refused, naming it.
  EXPECT_STATUS(testing::PutSync(*dock, 0, {3}, {Cells("response", {3})}),
                absl::StatusCode::kFailedPrecondition,
                "row 3 is past the size of its group 0, declared with 3 rows when it was "
                "appended: a group larger than declared");
  EXPECT_STATUS(testing::PutSync(*dock, 0, {5}, {Cells("prompt", {5})}),
                absl::StatusCode::kFailedPrecondition, "group 1, declared with 1 rows");

  // Keys open declared groups the same way.
  ASSERT_OK_AND_ASSIGN(PutResult keyed, AppendGroups(*dock, 0, {2}, {"prompt"}, {"u0", "u1"}));
  EXPECT_EQ(keyed.assigned, (std::vector<int64_t>{12, 13}));
  ASSERT_OK(testing::PutSync(*dock, 0, {8, 9, 10, 11, 12, 13},
                             {Cells("response", {8, 9, 10, 11, 12, 13})}));
  EXPECT_EQ(TakeStep(*dock, "groups", 0),
            (std::vector<std::vector<int64_t>>{{8, 9, 10, 11}, {12, 13}}));
  EXPECT_EQ(TakeStep(*dock, "rows", 0), (std::vector<std::vector<int64_t>>{{12, 13}}));
  EXPECT_TRUE(dock->Stats().steps.empty()) << "every group taken: the step was released";
}

TEST(GroupsTest, BalancedRoundsBalanceGroupsOfUnequalSizes) {
  // Two ranks take whole groups in one round of the step's 4 groups.
  ConsumerSpec actor{"actor", {"prompt"}, 16, 2, true, Policy::kBalanced, 0};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(GroupSpec({actor})));
  ASSERT_OK(AppendGroups(*dock, 0, {4, 1, 2, 3}));
  std::vector<int64_t> sizes;  // rows per rank
  std::set<int64_t> rows;
  for (int32_t rank : {0, 1}) {
    GetInput in = GetOf("actor");
    in.rank = rank;
    in.step = 0;
    ASSERT_OK_AND_ASSIGN(Batch share, GetSync(*dock, in));
    sizes.push_back(static_cast<int64_t>(share.rows.size()));
    std::set<int64_t> groups;
    for (int64_t row : share.rows) {
      rows.insert(row);
      groups.insert(row / 4);
    }
    // Whole groups: each of its groups' declared rows is in the share.
    for (int64_t g : groups) {
      for (int64_t row = g * 4; row < g * 4 + std::vector<int64_t>{4, 1, 2, 3}[g]; ++row) {
        EXPECT_TRUE(std::count(share.rows.begin(), share.rows.end(), row)) << row;
      }
    }
  }
  EXPECT_EQ(rows.size(), 10u) << "every declared row, once";
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5})) << "{4, 1} and {2, 3}: 5 rows each";
}

TEST(GroupsTest, BadDeclarationsChangeNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(GroupSpec({Reader("groups", {"prompt"}, 4, true)})));
  EXPECT_STATUS(AppendGroups(*dock, 0, {2, 0}), absl::StatusCode::kInvalidArgument,
                "group 1 of the Put is declared with 0 rows; a group has 1 to 4");
  EXPECT_STATUS(AppendGroups(*dock, 0, {5}), absl::StatusCode::kInvalidArgument,
                "declared with 5 rows; a group has 1 to 4 (n_samples_per_prompt)");
  EXPECT_STATUS(AppendGroups(*dock, 0, {1, 1, 1, 1, 1}), absl::StatusCode::kInvalidArgument,
                "the Put declares 5 groups; a step holds 4");
  EXPECT_STATUS(AppendGroups(*dock, 0, {2, 2}, {"prompt"}, {"a", "b", "c"}),
                absl::StatusCode::kInvalidArgument, "group_sizes add up to 4 rows; the Put writes 3");
  EXPECT_TRUE(dock->Stats().steps.empty()) << "no step was started";

  ASSERT_OK(testing::PutSync(*dock, 0, {0, 1}, {Cells("prompt", {0, 1})}, absl::ZeroDuration(),
                             0, {"a", "b"}));
  EXPECT_STATUS(AppendGroups(*dock, 0, {2}, {"prompt"}, {"a", "b"}),
                absl::StatusCode::kInvalidArgument,
                "group_sizes declares the groups of rows the server assigns; this Put names its "
                "rows (or keys live rows have)");
  EXPECT_STATUS(dock->Drop(testing::DropOf(0, {2}, DropReason::kUnused)),
                absl::StatusCode::kInvalidArgument, "reason 'unused' is the server's own");
  ASSERT_OK_AND_ASSIGN(PutResult full, AppendGroups(*dock, 0, {1, 2, 3}));
  EXPECT_EQ(full.assigned, (std::vector<int64_t>{4, 8, 9, 12, 13, 14}))
      << "groups 1 to 3: nothing was taken before";
  EXPECT_STATUS(AppendGroups(*dock, 0, {1}), absl::StatusCode::kResourceExhausted,
                "no room for 1 new rows (1 groups)");
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  for (const RowState& row : listing.rows) {
    EXPECT_EQ(row.dropped != DropReason::kUnspecified,
              row.row == 5 || row.row == 6 || row.row == 7 || row.row == 10 || row.row == 11 ||
                  row.row == 15)
        << row.row;
  }
}

// Under ThreadSanitizer: producers append groups of random sizes while a
// sealer seals steps part-way and whole-group and balanced consumers take
// them. Every acknowledged group reaches each consumer exactly once and
// whole (all its rows in one batch), nothing else does, and every step
// ends (none waits on a closed or never-written row).
TEST(GroupsConcurrency, AppendsOfAnySizeRaceWithSealsAndRounds) {
  constexpr int kSteps = 6;
  DockSpec spec = GroupSpec({Reader("groups", {"prompt", "response"}, 8, true),
                             {"balanced", {"prompt"}, 8, 2, true, Policy::kBalanced, 0}});
  spec.max_rows_per_step = 32;
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  tdock::Mutex mu;
  std::map<int64_t, std::vector<int64_t>> acked;  // step * 1000 + first row -> rows
  std::atomic<int> producing{2};
  auto produce = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    for (int64_t step = 0; step < kSteps; ++step) {
      for (;;) {
        const int32_t size = 1 + static_cast<int32_t>(rng() % 4);
        absl::StatusOr<PutResult> put =
            AppendGroups(*dock, step, {size}, {"prompt", "response"});
        if (!put.ok()) {
          // Full, sealed, or (a row sealed before its cells were staged)
          // dropped: the next step.
          EXPECT_TRUE(absl::IsResourceExhausted(put.status()) ||
                      absl::IsFailedPrecondition(put.status()))
              << put.status();
          break;
        }
        tdock::MutexLock lock(&mu);
        acked[step * 1000 + put->assigned[0]] = put->assigned;
      }
    }
    --producing;
  };
  auto seal = [&] {
    std::mt19937 rng(3);
    for (int64_t step = 0; step < kSteps; ++step) {
      absl::SleepFor(absl::Microseconds(rng() % 400));
      absl::StatusOr<int64_t> sealed = dock->Seal(SealInput{step, {"prompt", "response"}});
      if (!sealed.ok()) {
        // Not started yet (or already released): wait for it.
        EXPECT_EQ(sealed.status().code(), absl::StatusCode::kFailedPrecondition) << sealed.status();
        if (absl::StrContains(sealed.status().message(), "has not started")) --step;
      }
    }
  };
  std::map<std::string, std::vector<std::vector<int64_t>>> taken;  // taker -> step-tagged batches
  auto consume = [&](const std::string& consumer, int32_t rank) {
    std::vector<std::vector<int64_t>> batches;
    for (int idle = 0; idle < 500;) {
      GetInput in = GetOf(consumer, 0, absl::Milliseconds(20));
      in.rank = rank;
      absl::StatusOr<Batch> got = GetSync(*dock, in);
      ASSERT_OK(got);
      if (got->rows.empty()) {
        if (producing == 0 && dock->Stats().steps.empty()) break;
        idle += producing == 0;
        continue;
      }
      std::vector<int64_t> rows = {got->step};
      rows.insert(rows.end(), got->rows.begin(), got->rows.end());
      batches.push_back(std::move(rows));
    }
    tdock::MutexLock lock(&mu);
    taken[absl::StrCat(consumer, rank)] = std::move(batches);
  };
  std::vector<std::thread> threads;
  threads.emplace_back(produce, 1);
  threads.emplace_back(produce, 2);
  threads.emplace_back(seal);
  threads.emplace_back(consume, "groups", 0);
  threads.emplace_back(consume, "balanced", 0);
  threads.emplace_back(consume, "balanced", 1);
  for (std::thread& t : threads) t.join();

  EXPECT_TRUE(dock->Stats().steps.empty()) << "a step was left waiting";
  tdock::MutexLock lock(&mu);
  ASSERT_FALSE(acked.empty());
  for (const std::string consumer : {"groups", "balanced"}) {
    // Each acknowledged group, found whole in one batch of one rank.
    std::map<int64_t, int> seen;  // group key -> times
    int64_t rows = 0;
    for (const std::string& taker : {consumer + "0", consumer + "1"}) {
      for (const std::vector<int64_t>& batch : taken[taker]) {
        const int64_t step = batch[0];
        std::set<int64_t> in_batch(batch.begin() + 1, batch.end());
        rows += static_cast<int64_t>(in_batch.size());
        for (int64_t row : in_batch) {
          auto group = acked.find(step * 1000 + row);
          if (group == acked.end()) continue;  // not a group's first row
          ++seen[group->first];
          for (int64_t r : group->second) EXPECT_TRUE(in_batch.count(r)) << consumer << " " << r;
        }
      }
    }
    int64_t acked_rows = 0;
    for (const auto& [key, group] : acked) {
      acked_rows += static_cast<int64_t>(group.size());
      EXPECT_EQ(seen[key], 1) << consumer << " group at " << key;
    }
    EXPECT_EQ(rows, acked_rows) << consumer << ": exactly the acknowledged rows";
  }
}

}  // namespace
}  // namespace tdock
