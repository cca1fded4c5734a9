// Appends: a Put may ask the server for new rows (or give keys no live row
// has) instead of naming rows; the server assigns whole groups from the
// step's first free one, up to max_rows_per_step, and answers with them. A
// step with room to over-generate is sealed when it has what it needs; bad
// requests change nothing.
#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

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
using testing::Reader;

// 2 prompts x 2 samples planned, room for 8 rows (4 groups).
DockSpec AppendSpec(std::vector<ConsumerSpec> consumers) {
  DockSpec spec = testing::DropSpec(std::move(consumers));
  spec.num_prompts = 2;
  spec.max_rows_per_step = 8;
  return spec;
}

absl::StatusOr<PutResult> Append(Dock& dock, int64_t step, int64_t count,
                                 std::vector<std::string> keys = {}) {
  PutInput in;
  in.step = step;
  in.new_rows = keys.empty() ? count : 0;
  in.keys = std::move(keys);
  // Row i of the Put holds i + 1 tokens.
  testing::OwnedColumn cells = Cells("prompt", Iota(0, count));
  in.columns.push_back(cells.View());
  return testing::PutSync(dock, std::move(in));
}

TEST(AppendTest, TheServerAssignsWholeGroupsUpToTheCapacity) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(AppendSpec({Reader("actor", {"prompt"}, 0)})));
  EXPECT_EQ(dock->spec().max_rows_per_step, 8);
  EXPECT_EQ(dock->spec().consumers[0].dispatch_size, 4) << "planned rows, not the capacity";
  ASSERT_OK_AND_ASSIGN(PutResult first, Append(*dock, 0, 2));
  EXPECT_EQ(first.assigned, (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(PutResult odd, Append(*dock, 0, 3));
  EXPECT_EQ(odd.assigned, (std::vector<int64_t>{2, 3, 4})) << "groups 1 and 2; row 5 stays open";
  ASSERT_OK_AND_ASSIGN(PutResult keyed, Append(*dock, 0, 2, {"a", "b"}));
  EXPECT_EQ(keyed.assigned, (std::vector<int64_t>{6, 7}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->ReadKeys({"b"}, {"prompt"}));
  EXPECT_EQ(read.rows, std::vector<int64_t>{7});
  const absl::StatusOr<PutResult> full = Append(*dock, 0, 1);
  EXPECT_STATUS(full, absl::StatusCode::kResourceExhausted,
                "no room for 1 new rows (1 groups): the step holds 8 rows");
  EXPECT_REFUSED(full, Refusal::kCapacity, DropReason::kUnspecified);
  EXPECT_EQ(RefusalOf(full.status()).free_groups, 0) << "the step's 4 groups are taken";
  // Sealed: the open row is dropped and the actor's end of step comes.
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Seal(SealInput{0, {}}));
  EXPECT_EQ(dropped, 1);
  EXPECT_STATUS(Append(*dock, 0, 1), absl::StatusCode::kFailedPrecondition, "is sealed");
  std::vector<int64_t> got;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("actor")));
    got.insert(got.end(), batch.rows.begin(), batch.rows.end());
    if (batch.end_of_step) break;
    ASSERT_FALSE(batch.rows.empty());
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3, 4, 6, 7}));
}

TEST(AppendTest, BadAppendsChangeNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(AppendSpec({Reader("actor", {"prompt"}, 4)})));
  ASSERT_OK(Append(*dock, 0, 2, {"a", "b"}));
  EXPECT_STATUS(Append(*dock, 0, 9), absl::StatusCode::kInvalidArgument,
                "ask for new rows in [1, 8]");
  PutInput both;
  both.step = 0;
  both.rows = {4};
  both.new_rows = 1;
  testing::OwnedColumn cells = Cells("prompt", {4});
  both.columns.push_back(cells.View());
  std::promise<absl::Status> answered;
  dock->Put(std::move(both),
            [&](absl::StatusOr<PutResult> r) { answered.set_value(r.status()); });
  EXPECT_STATUS(answered.get_future().get(), absl::StatusCode::kInvalidArgument,
                "new_rows 1 with rows named");
  EXPECT_STATUS(Append(*dock, 0, 2, {"c", "a"}), absl::StatusCode::kInvalidArgument,
                "key 'c' is new and key 'a' is not");
  // Nothing was assigned: the next append takes group 1.
  ASSERT_OK_AND_ASSIGN(PutResult next, Append(*dock, 0, 2));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{2, 3}));

  DockSpec bad = AppendSpec({});
  bad.max_rows_per_step = 7;
  EXPECT_STATUS(Dock::Create(bad).status(), absl::StatusCode::kInvalidArgument,
                "max_rows_per_step 7 must be a multiple of n_samples_per_prompt 2");
  bad.max_rows_per_step = 2;
  EXPECT_STATUS(Dock::Create(bad).status(), absl::StatusCode::kInvalidArgument,
                "in [num_prompts x n = 4,");
}

// An append its rows' tokens refuse takes no group and starts no step.
TEST(AppendTest, RefusedAppendTakesNothing) {
  ConsumerSpec actor = Reader("actor", {"prompt"}, 4);
  actor.micro_batch = MicroBatchOptions{};
  actor.micro_batch->max_tokens = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(AppendSpec({actor})));
  // Its second row holds 2 tokens, its third 3: over the budget.
  EXPECT_STATUS(Append(*dock, 0, 3), absl::StatusCode::kInvalidArgument,
                "over the micro-batch budget");
  EXPECT_TRUE(dock->Stats().steps.empty()) << "the step was not started";
  ASSERT_OK_AND_ASSIGN(PutResult next, Append(*dock, 0, 2));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{0, 1})) << "group 0 is still free";
}

// Room for 3 chunks of 64 KB: the oldest step's, and one more step's; an
// append of two 80 KB rows (LargeAppend) fits only while its step is the
// oldest.
DockSpec MemoryLimitedSpec() {
  DockSpec spec = AppendSpec({Reader("actor", {"prompt"}, 4)});
  spec.steps_in_flight = 2;
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 192 << 10;
  return spec;
}

struct LargeAppend {
  LargeAppend(int64_t step, absl::Duration wait)
      : cells(testing::OwnedColumn::Of<int32_t>(
            "prompt", DType::kInt32,
            {std::vector<int32_t>(20000, 7), std::vector<int32_t>(20000, 8)})) {
    in.step = step;
    in.new_rows = 2;
    in.wait = wait;
    in.columns.push_back(cells.View());
  }
  LargeAppend(const LargeAppend&) = delete;  // `in` points into `cells`
  testing::OwnedColumn cells;
  PutInput in;
};

// An append waiting for memory keeps the rows it was assigned: another
// append gets the next groups, a Put naming one of its rows is refused, and
// once memory is back it writes its own rows.
TEST(AppendTest, AnAppendWaitingForMemoryKeepsItsRows) {
  std::promise<absl::StatusOr<PutResult>> answer;  // outlives the dock
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(MemoryLimitedSpec()));
  ASSERT_OK(Append(*dock, 0, 2));  // the oldest step holds a chunk
  LargeAppend large(1, absl::Hours(1));
  dock->Put(large.in, [&](absl::StatusOr<PutResult> put) { answer.set_value(put); });
  std::future<absl::StatusOr<PutResult>> answered = answer.get_future();
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the large append waits for memory";

  ASSERT_OK_AND_ASSIGN(PutResult next, Append(*dock, 1, 2));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{2, 3})) << "group 0 is the waiting append's";
  EXPECT_STATUS(testing::PutSync(*dock, 1, {0}, {Cells("prompt", {0})}),
                absl::StatusCode::kFailedPrecondition,
                "row 0 is assigned to an append that is not yet written");

  ASSERT_OK(dock->ReleaseStep(0));  // step 1 is the oldest: past the limit
  ASSERT_OK_AND_ASSIGN(PutResult put, answered.get());
  EXPECT_EQ(put.assigned, (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(RowListing rows, dock->ListRows(1));
  int written = 0;
  for (const RowState& row : rows.rows) written += row.written.empty() ? 0 : 1;
  EXPECT_EQ(written, 4);
}

// An append answered without writing (its wait ran out) gives its rows
// back, and the step it alone started is taken off its partition again.
TEST(AppendTest, AnAppendThatGivesUpFreesItsRows) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(MemoryLimitedSpec()));
  ASSERT_OK(Append(*dock, 0, 2));
  LargeAppend large(1, absl::Milliseconds(20));
  EXPECT_STATUS(testing::PutSync(*dock, large.in), absl::StatusCode::kResourceExhausted,
                "memory limit");
  EXPECT_EQ(dock->Stats().steps.size(), 1u) << "step 1 is not left started";
  ASSERT_OK(testing::PutSync(*dock, 1, {0}, {Cells("prompt", {0})}));
  ASSERT_OK_AND_ASSIGN(PutResult next, Append(*dock, 1, 2));
  EXPECT_EQ(next.assigned, (std::vector<int64_t>{2, 3})) << "group 0 is written";
}

// A step that only a waiting append started keeps a Drop made on it when
// the append gives up: the step stays started, the row dropped.
TEST(AppendTest, AStepAWaitingAppendStartedKeepsADropWhenTheAppendGivesUp) {
  auto clock = std::make_shared<ManualClock>();
  auto timers = std::make_shared<TimerService>(clock);
  std::promise<absl::Status> answer;  // outlives the dock
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(MemoryLimitedSpec(),
                                               DockLimits{.timers = timers, .clock = clock}));
  ASSERT_OK(Append(*dock, 0, 2));
  LargeAppend large(1, absl::Seconds(10));
  dock->Put(large.in, [&](absl::StatusOr<PutResult> put) { answer.set_value(put.status()); });
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Drop(DropInput{1, {6}, {}, DropReason::kFailed}));
  EXPECT_EQ(dropped, 1);
  clock->Advance(absl::Seconds(11));  // the append's wait runs out
  EXPECT_STATUS(answer.get_future().get(), absl::StatusCode::kResourceExhausted, "memory limit");
  ASSERT_OK_AND_ASSIGN(RowListing rows, dock->ListRows(1));
  ASSERT_EQ(rows.rows.size(), 8u);
  EXPECT_EQ(rows.rows[6].dropped, DropReason::kFailed);
}

// Under ThreadSanitizer: producers append groups at once until the step is
// full; every row is assigned to exactly one of them, and a reader, once the
// step is full, takes every row.
TEST(AppendConcurrency, ProducersShareTheStepsRows) {
  DockSpec spec = AppendSpec({Reader("reader", {"prompt"}, 4)});
  spec.max_rows_per_step = 256;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::vector<std::vector<int64_t>> assigned(4);
  std::vector<std::thread> producers;
  for (size_t p = 0; p < assigned.size(); ++p) {
    producers.emplace_back([&, p] {
      for (;;) {
        absl::StatusOr<PutResult> put = Append(*dock, 0, 2);
        if (!put.ok()) {
          // Full; or, its every row taken, released already.
          EXPECT_TRUE(absl::IsResourceExhausted(put.status()) ||
                      absl::IsFailedPrecondition(put.status()))
              << put.status();
          return;
        }
        assigned[p].insert(assigned[p].end(), put->assigned.begin(), put->assigned.end());
      }
    });
  }
  std::vector<int64_t> got;
  for (int i = 0; i < 1000 && got.size() < 256; ++i) {
    GetInput in = GetOf("reader", 4, absl::Milliseconds(50));
    in.step = 0;
    ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
    got.insert(got.end(), batch.rows.begin(), batch.rows.end());
  }
  for (std::thread& t : producers) t.join();
  std::vector<int64_t> all;
  for (const auto& rows : assigned) all.insert(all.end(), rows.begin(), rows.end());
  std::sort(all.begin(), all.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(all, Iota(0, 256));
  EXPECT_EQ(got, Iota(0, 256));
}

}  // namespace
}  // namespace tdock
