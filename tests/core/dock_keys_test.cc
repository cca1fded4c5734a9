// Row keys: a row's key (a uid) comes with its first write and is unique
// among the dock's live rows; Puts and Reads may name rows by key, batches
// carry them, a drop or the step's release frees them, and the listing shows
// each row's key and state. Bad keys change nothing.
#include <atomic>
#include <future>
#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::DropOf;
using testing::DropSpec;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::kLongWait;
using testing::Reader;
using testing::RowValues;

absl::StatusOr<PutResult> PutKeyed(Dock& dock, int64_t step, std::vector<int64_t> rows,
                                   std::vector<std::string> keys, const std::string& column,
                                   const std::vector<int64_t>& values) {
  PutInput in;
  in.step = step;
  in.rows = std::move(rows);
  in.keys = std::move(keys);
  testing::OwnedColumn cells = Cells(column, values);
  in.columns.push_back(cells.View());
  return testing::PutSync(dock, std::move(in));
}

std::vector<std::string> Uids(int64_t step, const std::vector<int64_t>& rows) {
  std::vector<std::string> keys;
  for (int64_t r : rows) keys.push_back("uid-" + std::to_string(step) + "-" + std::to_string(r));
  return keys;
}

TEST(KeysTest, KeysComeWithTheFirstWriteAndNameRows) {
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Reader("actor", {"prompt", "response"}, 8)})));
  ASSERT_OK(PutKeyed(*dock, 0, Iota(0, 8), Uids(0, Iota(0, 8)), "prompt", Iota(0, 8)));
  // The responses come back by uid, without row numbers, in another order.
  ASSERT_OK(PutKeyed(*dock, 0, {}, {"uid-0-5", "uid-0-2"}, "response", {5, 2}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->ReadKeys({"uid-0-2", "uid-0-5"}, {"response"}));
  EXPECT_EQ(read.rows, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(read.keys, (std::vector<std::string>{"uid-0-2", "uid-0-5"}));
  EXPECT_EQ(RowValues<int32_t>(read.columns[0], 1).size(), 6u) << "row 5 has 6 tokens";
  ASSERT_OK(PutKeyed(*dock, 0, {0, 1, 3, 4, 6, 7}, Uids(0, {0, 1, 3, 4, 6, 7}), "response",
                     {0, 1, 3, 4, 6, 7}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(batch.keys, Uids(0, Iota(0, 8)));
  EXPECT_TRUE(dock->Stats().steps.empty());
  // Released: the keys are free, and a row of a later step may take one.
  EXPECT_STATUS(dock->ReadKeys({"uid-0-2"}, {}), absl::StatusCode::kNotFound,
                "no live row has key 'uid-0-2'");
  ASSERT_OK(PutKeyed(*dock, 1, {0}, {"uid-0-2"}, "prompt", {0}));
}

TEST(KeysTest, BadKeysChangeNothing) {
  DockSpec spec = DropSpec({Reader("actor", {"prompt"}, 8)});
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  ASSERT_OK(PutKeyed(*dock, 0, {0, 1}, {"a", "b"}, "prompt", {0, 1}));
  ASSERT_OK(testing::PutSync(*dock, 0, {2}, {Cells("prompt", {2})}));
  EXPECT_STATUS(PutKeyed(*dock, 0, {3, 4}, {"c", "c"}, "prompt", {3, 4}),
                absl::StatusCode::kInvalidArgument, "key 'c' appears twice");
  EXPECT_STATUS(PutKeyed(*dock, 0, {3, 4}, {"c"}, "prompt", {3, 4}),
                absl::StatusCode::kInvalidArgument, "1 keys for 2 rows");
  EXPECT_STATUS(PutKeyed(*dock, 0, {3}, {""}, "prompt", {3}), absl::StatusCode::kInvalidArgument,
                "a key is empty");
  EXPECT_STATUS(PutKeyed(*dock, 0, {3}, {std::string(2000, 'k')}, "prompt", {3}),
                absl::StatusCode::kInvalidArgument, "over the limit of 1024");
  EXPECT_STATUS(PutKeyed(*dock, 1, {3}, {"a"}, "prompt", {3}), absl::StatusCode::kAlreadyExists,
                "key 'a' is row 0 of step 0");
  EXPECT_STATUS(PutKeyed(*dock, 0, {1}, {"z"}, "response", {1}),
                absl::StatusCode::kFailedPrecondition, "row 1 has key 'b'; the Put names 'z'");
  EXPECT_STATUS(PutKeyed(*dock, 0, {2}, {"c"}, "response", {2}),
                absl::StatusCode::kFailedPrecondition, "row 2 was written without a key");
  EXPECT_STATUS(PutKeyed(*dock, 0, {}, {"nope", "a"}, "response", {0, 1}),
                absl::StatusCode::kInvalidArgument, "key 'nope' is new and key 'a' is not");
  EXPECT_STATUS(PutKeyed(*dock, 1, {}, {"a"}, "response", {0}),
                absl::StatusCode::kFailedPrecondition, "key 'a' is row 0 of step 0");
  // Nothing changed: rows 3 and 4 are unwritten and keyless, "c" is free.
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.rows[3].key, "");
  EXPECT_TRUE(listing.rows[3].written.empty());
  ASSERT_OK(PutKeyed(*dock, 0, {3}, {"c"}, "prompt", {3}));
  EXPECT_EQ(dock->Stats().steps.at(0).ready_rows[0], 4);
  EXPECT_EQ(dock->Stats().steps.size(), 1u) << "the refused Put to step 1 did not start it";
}

TEST(KeysTest, DropFreesTheKeyAndTheListingShowsEveryRow) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 2),
                                                         Reader("groups", {"prompt"}, 2, true)})));
  ASSERT_OK(PutKeyed(*dock, 0, Iota(0, 4), Uids(0, Iota(0, 4)), "prompt", Iota(0, 4)));
  ASSERT_OK(GetSync(*dock, GetOf("actor")));
  ASSERT_OK(dock->Drop(DropOf(0, {3}, DropReason::kFailed)));
  EXPECT_STATUS(dock->ReadKeys({"uid-0-3"}, {}), absl::StatusCode::kNotFound, "uid-0-3");
  // The key is free again.
  ASSERT_OK(PutKeyed(*dock, 0, {4}, {"uid-0-3"}, "prompt", {4}));
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.step, 0);
  ASSERT_EQ(listing.rows.size(), 8u);
  EXPECT_EQ(listing.rows[0],
            (RowState{0, "uid-0-0", 0, {"prompt"}, {"actor"}, DropReason::kUnspecified}));
  EXPECT_EQ(listing.rows[3], (RowState{3, "uid-0-3", 1, {"prompt"}, {}, DropReason::kFailed}));
  EXPECT_EQ(listing.rows[4], (RowState{4, "uid-0-3", 2, {"prompt"}, {}, DropReason::kUnspecified}));
  EXPECT_EQ(listing.rows[7], (RowState{7, "", 3, {}, {}, DropReason::kUnspecified}));
  EXPECT_STATUS(dock->ListRows(5), absl::StatusCode::kFailedPrecondition, "is not live");
}

// Under ThreadSanitizer: writers race to give rows keys, some of them the
// same; a reader takes rows and reads their keys. Each key ends on exactly one
// row, and every batch carries the keys its rows were written with.
TEST(KeysConcurrency, WritersRaceForKeys) {
  constexpr int kWriters = 4;
  DockSpec spec = DropSpec({Reader("reader", {"prompt"}, 2)});
  spec.num_prompts = 32;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::atomic<int> won{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int64_t row = w; row < 64; row += kWriters) {
        // Two writers ask for each key "k<row/2>": exactly one gets it.
        const std::string key = "k" + std::to_string(row / 2);
        absl::StatusOr<PutResult> put = PutKeyed(*dock, 0, {row}, {key}, "prompt", {row});
        if (put.ok()) {
          ++won;
        } else {
          EXPECT_EQ(put.status().code(), absl::StatusCode::kAlreadyExists) << put.status();
        }
      }
    });
  }
  std::set<std::string> seen;
  int64_t rows = 0;
  for (int i = 0; i < 2000 && rows < 32; ++i) {
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader", 2, absl::Milliseconds(50))));
    for (size_t i = 0; i < batch.rows.size(); ++i) {
      ASSERT_EQ(batch.keys.size(), batch.rows.size());
      EXPECT_TRUE(seen.insert(batch.keys[i]).second) << batch.keys[i];
      EXPECT_EQ(batch.keys[i], "k" + std::to_string(batch.rows[i] / 2));
    }
    rows += static_cast<int64_t>(batch.rows.size());
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(won.load(), 32);
  EXPECT_EQ(seen.size(), 32u);
}

// Under ThreadSanitizer: writers of two live steps (two commit locks) ask
// for the same keys at once; each key ends on exactly one row of one step.
TEST(KeysConcurrency, TwoStepsRaceForOneKey) {
  DockSpec spec = DropSpec({Reader("reader", {"prompt"}, 2)});
  spec.num_prompts = 32;
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::atomic<int> won{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int64_t i = 0; i < 32; ++i) {
        const int64_t row = (t / 2) * 32 + i;
        absl::StatusOr<PutResult> put =
            PutKeyed(*dock, t % 2, {row}, {"k" + std::to_string(i)}, "prompt", {row});
        if (put.ok()) {
          ++won;
        } else {
          EXPECT_EQ(put.status().code(), absl::StatusCode::kAlreadyExists) << put.status();
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(won.load(), 32);
  std::multiset<std::string> keys;
  for (int64_t step : {0, 1}) {
    absl::StatusOr<RowListing> listing = dock->ListRows(step);
    if (!listing.ok()) continue;  // every key went to the other step
    for (const RowState& row : listing->rows) {
      if (!row.key.empty()) keys.insert(row.key);
    }
  }
  EXPECT_EQ(keys.size(), 32u);
  for (const std::string& key : keys) EXPECT_EQ(keys.count(key), 1u) << key;
}

}  // namespace
}  // namespace tdock
