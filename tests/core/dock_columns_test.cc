// Columns added at run time: a new field (reward extras, teacher log-probs)
// joins a live dock with no cell written; Puts write it in live steps too and
// consumers added later need it, while the consumers there before go on as
// they were. Bad additions name what is wrong and change nothing.
#include <atomic>
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
using testing::DropSpec;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::kLongWait;
using testing::OwnedColumn;
using testing::PutSync;
using testing::Reader;
using testing::RowValues;

ColumnSpec Float(std::string name) { return {std::move(name), DType::kFloat32, {1}, 0, false}; }

OwnedColumn Scores(const std::string& name, const std::vector<int64_t>& rows) {
  std::vector<std::vector<float>> values;
  for (int64_t r : rows) values.push_back({static_cast<float>(r) / 2});
  return OwnedColumn::Of<float>(name, DType::kFloat32, values);
}

TEST(ColumnsTest, AddedColumnIsWrittenAndReadInLiveSteps) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  EXPECT_STATUS(PutSync(*dock, 0, Iota(0, 8), {Scores("teacher", Iota(0, 8))}),
                absl::StatusCode::kInvalidArgument, "column 'teacher' is unknown");

  ASSERT_OK_AND_ASSIGN(ColumnSpec added, dock->AddColumn(Float("teacher")));
  EXPECT_EQ(added.name, "teacher");
  EXPECT_EQ(dock->spec().columns.back(), added);
  ASSERT_OK(dock->AddConsumer(Reader("distill", {"prompt", "teacher"}, 8)));
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, GetOf("distill")));
  EXPECT_TRUE(none.rows.empty()) << "no teacher cell is written yet";
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Scores("teacher", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("distill")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  ASSERT_EQ(batch.columns.size(), 2u);
  EXPECT_EQ(RowValues<float>(batch.columns[1], 3), std::vector<float>{1.5f});
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.columns, (std::vector<std::string>{"prompt", "response", "teacher"}));
  EXPECT_EQ(stats.steps.at(0).ready_rows, (std::vector<int64_t>{8, 0, 8}));

  // The actor, there before, needs only the prompt: it is served as before,
  // and a later step's partition has the column as well.
  ASSERT_OK_AND_ASSIGN(Batch actor, GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(actor.rows, Iota(0, 8));
  EXPECT_TRUE(dock->Stats().steps.empty());
  ASSERT_OK(PutSync(*dock, 1, Iota(0, 8), {Scores("teacher", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(1, {7}, {"teacher"}));
  EXPECT_EQ(RowValues<float>(read.columns[0], 0), std::vector<float>{3.5f});
}

TEST(ColumnsTest, BadAdditionsChangeNothing) {
  DockLimits limits;
  limits.max_columns = 3;
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)}), limits));
  const DockSpec before = dock->spec();
  EXPECT_STATUS(dock->AddColumn(Float("prompt")), absl::StatusCode::kAlreadyExists,
                "column 'prompt' already exists");
  EXPECT_STATUS(dock->AddColumn(Float("bad name!")), absl::StatusCode::kInvalidArgument,
                "column name");
  ColumnSpec no_dtype = Float("extra");
  no_dtype.dtype = DType::kUnspecified;
  EXPECT_STATUS(dock->AddColumn(no_dtype), absl::StatusCode::kInvalidArgument, "'extra'");
  ColumnSpec negative = Float("extra");
  negative.max_len = -1;
  EXPECT_STATUS(dock->AddColumn(negative), absl::StatusCode::kInvalidArgument,
                "max_len -1 is negative");
  ColumnSpec state = Float("extra");
  state.added = true;
  EXPECT_STATUS(dock->AddColumn(state), absl::StatusCode::kInvalidArgument,
                "column 'extra' sets added");
  EXPECT_EQ(dock->spec(), before);
  ASSERT_OK_AND_ASSIGN(ColumnSpec added, dock->AddColumn(Float("extra")));
  EXPECT_TRUE(added.added);
  EXPECT_STATUS(dock->AddColumn(Float("more")), absl::StatusCode::kResourceExhausted,
                "the dock has 3 columns, the most it can hold");
  // A bad column is named as bad, full dock or not.
  negative.name = "other";
  EXPECT_STATUS(dock->AddColumn(negative), absl::StatusCode::kInvalidArgument, "is negative");
  EXPECT_EQ(dock->spec().columns.size(), 3u);
}

// Under ThreadSanitizer: columns are added while a producer writes steps and
// a reader takes them; each new column is written into the live steps as soon
// as it exists. The reader gets every row of every step once.
TEST(ColumnsConcurrency, AdditionsRaceWithPutsAndGets) {
  constexpr int64_t kSteps = 30;
  constexpr int kAdded = 12;
  DockSpec spec = DropSpec({Reader("reader", {"prompt"}, 3)});
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::atomic<int> added{0};
  std::thread adder([&] {
    for (int c = 0; c < kAdded; ++c) {
      ASSERT_OK(dock->AddColumn(Float("extra" + std::to_string(c))));
      added = c + 1;
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::thread producer([&] {
    for (int64_t step = 0; step < kSteps; ++step) {
      ASSERT_OK(PutSync(*dock, step, Iota(0, 8), {Cells("prompt", Iota(0, 8))}, kLongWait));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      // Write the newest column into the step just started (the reader may
      // have released it already: then the Put finds it released).
      const int c = added.load() - 1;
      if (c < 0) continue;
      absl::StatusOr<PutResult> put =
          PutSync(*dock, step, Iota(0, 8), {Scores("extra" + std::to_string(c), Iota(0, 8))});
      if (!put.ok()) {
        EXPECT_EQ(put.status().code(), absl::StatusCode::kFailedPrecondition) << put.status();
      }
    }
  });
  std::vector<std::vector<int64_t>> got(kSteps);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (;;) {
      GetInput in = GetOf("reader", 0, kLongWait);
      in.step = step;
      ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
      got[step].insert(got[step].end(), batch.rows.begin(), batch.rows.end());
      if (batch.end_of_step) break;
    }
  }
  adder.join();
  producer.join();
  for (int64_t step = 0; step < kSteps; ++step) EXPECT_EQ(got[step], Iota(0, 8)) << step;
  EXPECT_EQ(dock->spec().columns.size(), 2u + kAdded);
}

}  // namespace
}  // namespace tdock
