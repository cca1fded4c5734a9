// Unit tests of the dock core: writes, claims, steps, waiting, status.
#include "server/dock/dock.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;
using testing::RowValues;

// 2 prompts x 2 samples = 4 rows per step.
DockSpec SmallSpec(int32_t steps_in_flight = 1) {
  DockSpec spec;
  spec.name = "small";
  spec.num_prompts = 2;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = steps_in_flight;
  spec.length_columns = {"prompt", "response"};
  spec.columns = {{"prompt", DType::kInt32, {}, 8, false},
                  {"response", DType::kInt32, {}, 0, false},
                  {"reward", DType::kFloat32, {}, 1, true}};
  spec.consumers = {{"actor", {"prompt", "response"}, 2, 2, false, Policy::kFifo, 0},
                    {"reward", {"prompt", "response"}, 2, 1, true, Policy::kFifo, 0}};
  return spec;
}

OwnedColumn Prompts(const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r : rows) values.push_back({static_cast<int32_t>(r), 7});
  return OwnedColumn::Of<int32_t>("prompt", DType::kInt32, values);
}

OwnedColumn Responses(const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r : rows) values.push_back(std::vector<int32_t>(r + 1, 100 + r));
  return OwnedColumn::Of<int32_t>("response", DType::kInt32, values);
}

std::unique_ptr<Dock> MakeDock(DockSpec spec) {
  auto dock = Dock::Create(std::move(spec));
  EXPECT_OK(dock);
  return std::move(dock).value();
}

// A row becomes available only when every column the consumer needs is
// ready, and comes back with the bytes that were written.
TEST(Dock, GetWaitsForAllNeededColumnsAndReturnsWrittenBytes) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {Prompts({0, 1})}));
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, GetOf("actor")));
  EXPECT_TRUE(none.timed_out);
  EXPECT_TRUE(none.rows.empty());

  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {Responses({0, 1})}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("actor")));
  ASSERT_EQ(batch.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(batch.step, 0);
  EXPECT_FALSE(batch.end_of_step);
  EXPECT_EQ(batch.token_counts, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(batch.columns.size(), 2u);
  EXPECT_EQ(batch.columns[1].name, "response");
  EXPECT_EQ(batch.columns[1].offsets, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(RowValues<int32_t>(batch.columns[1], 1), (std::vector<int32_t>{101, 101}));
  EXPECT_EQ(RowValues<int32_t>(batch.columns[0], 0), (std::vector<int32_t>{0, 7}));
  // Rows written by one Put are contiguous: one segment per column.
  EXPECT_EQ(batch.columns[1].segments.size(), 1u);
}

// Each row goes to each consumer once; the Get that takes the last rows says
// end_of_step; a later Get for that step returns empty with end_of_step.
TEST(Dock, ExactlyOncePerConsumerAndEndOfStep) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3}), Responses({0, 1, 2, 3})}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("actor")));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(a.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(b.rows, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(a.end_of_step);
  EXPECT_TRUE(b.end_of_step);
  GetInput again = GetOf("actor");
  again.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch c, GetSync(*dock, again));
  EXPECT_TRUE(c.rows.empty());
  EXPECT_TRUE(c.end_of_step);
  // The other consumer still sees every row.
  ASSERT_OK_AND_ASSIGN(Batch r, GetSync(*dock, GetOf("reward", 4)));
  EXPECT_EQ(r.rows, (std::vector<int64_t>{0, 1, 2, 3}));
}

// The remainder of a step (fewer than dispatch_size rows) is served once it
// is ready, and ends the step for that consumer.
TEST(Dock, RemainderIsServedWithEndOfStep) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3}), Responses({0, 1, 2, 3})}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("actor", 3)));
  EXPECT_EQ(a.rows.size(), 3u);
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("actor", 3)));
  EXPECT_EQ(b.rows, (std::vector<int64_t>{3}));
  EXPECT_TRUE(b.end_of_step);
}

// Whole-group consumers receive only complete groups (all n rows ready).
TEST(Dock, WholeGroupConsumerTakesCompleteGroupsOnly) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Prompts({0, 1, 2}), Responses({0, 1, 2})}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("reward", 2)));
  EXPECT_EQ(a.rows, (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("reward", 2)));
  EXPECT_TRUE(b.timed_out);  // group 1 lacks row 3
  ASSERT_OK(PutSync(*dock, 0, {3}, {Prompts({3}), Responses({3})}));
  ASSERT_OK_AND_ASSIGN(Batch c, GetSync(*dock, GetOf("reward", 2)));
  EXPECT_EQ(c.rows, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(c.end_of_step);
}

// A parked Get is woken by the Put that makes its rows available.
TEST(Dock, LongPollWakesOnPut) {
  auto dock = MakeDock(SmallSpec());
  std::promise<absl::StatusOr<Batch>> got;
  const uint64_t id = dock->Get(GetOf("actor", 2, absl::Seconds(30)),
                                [&](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  EXPECT_NE(id, 0u);
  EXPECT_EQ(dock->Stats().waiters[0], 1);
  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {Prompts({0, 1}), Responses({0, 1})}));
  ASSERT_OK_AND_ASSIGN(Batch batch, got.get_future().get());
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(dock->Stats().waiters[0], 0);
}

// A Put wakes a consumer's parked Gets only once one of them can be
// answered, and then each that can be: with Gets of 1 and 4 rows parked, a
// Put of one row's prompt alone answers nothing, its response answers the
// 1-row Get; the 4-row Get, short of rows, is answered by the Put that ends
// what is left of the step (3 rows).
TEST(Dock, APutAnswersTheParkedGetsItCanServeAndLeavesTheRest) {
  auto dock = MakeDock(SmallSpec());
  std::promise<absl::StatusOr<Batch>> one, four;
  dock->Get(GetOf("actor", 1, absl::Minutes(5)),
            [&](absl::StatusOr<Batch> b) { one.set_value(std::move(b)); });
  dock->Get(GetOf("actor", 4, absl::Minutes(5)),
            [&](absl::StatusOr<Batch> b) { four.set_value(std::move(b)); });
  EXPECT_EQ(dock->Stats().waiters[0], 2);
  ASSERT_OK(PutSync(*dock, 0, {0}, {Prompts({0})}));
  EXPECT_EQ(dock->Stats().waiters[0], 2) << "row 0 lacks its response";
  ASSERT_OK(PutSync(*dock, 0, {0}, {Responses({0})}));
  ASSERT_OK_AND_ASSIGN(Batch first, one.get_future().get());
  EXPECT_EQ(first.rows, (std::vector<int64_t>{0}));
  EXPECT_EQ(dock->Stats().waiters[0], 1);
  ASSERT_OK(PutSync(*dock, 0, {1, 2}, {Prompts({1, 2}), Responses({1, 2})}));
  EXPECT_EQ(dock->Stats().waiters[0], 1) << "2 rows of the 3 left";
  ASSERT_OK(PutSync(*dock, 0, {3}, {Prompts({3}), Responses({3})}));
  ASSERT_OK_AND_ASSIGN(Batch rest, four.get_future().get());
  EXPECT_EQ(rest.rows, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(rest.end_of_step);
}

// A Put is answered before the parked Gets it wakes are served: a producer
// never waits for its consumers' work.
TEST(Dock, PutIsAnsweredBeforeTheGetsItWakes) {
  auto dock = MakeDock(SmallSpec());
  std::atomic<bool> put_answered{false};
  std::vector<std::promise<bool>> saw(2);
  for (int i = 0; i < 2; ++i) {
    dock->Get(GetOf(i == 0 ? "actor" : "reward", 2, absl::Seconds(30)),
              [&, i](absl::StatusOr<Batch> b) {
                EXPECT_OK(b);
                saw[i].set_value(put_answered.load());
              });
  }
  const std::vector<OwnedColumn> columns = {Prompts({0, 1}), Responses({0, 1})};
  PutInput in;
  in.step = 0;
  in.rows = {0, 1};
  for (const OwnedColumn& c : columns) in.columns.push_back(c.View());
  dock->Put(std::move(in), [&](absl::StatusOr<PutResult> r) {
    EXPECT_OK(r);
    put_answered = true;
  });
  EXPECT_TRUE(saw[0].get_future().get()) << "actor's Get was served before the Put's answer";
  EXPECT_TRUE(saw[1].get_future().get()) << "reward's Get was served before the Put's answer";
}
// A parked Get returns empty with timed_out at its wait bound; Cancel ends
// a parked Get with CANCELLED.
TEST(Dock, ParkedGetTimesOutOrIsCancelled) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK_AND_ASSIGN(Batch timed, GetSync(*dock, GetOf("actor", 2, absl::Milliseconds(30))));
  EXPECT_TRUE(timed.timed_out);
  std::promise<absl::StatusOr<Batch>> got;
  const uint64_t id = dock->Get(GetOf("actor", 2, absl::Seconds(30)),
                                [&](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  dock->Cancel(id);
  EXPECT_STATUS(got.get_future().get(), absl::StatusCode::kCancelled, "cancelled");
  dock->Cancel(id);  // a second cancel is a no-op
}

// Steps live in a ring: with one partition, writing step 1 waits until step
// 0 is released, and fails naming step 0 after its wait bound.
TEST(Dock, BackpressureNamesTheBlockingStep) {
  auto dock = MakeDock(SmallSpec(1));
  ASSERT_OK(PutSync(*dock, 0, {0}, {Prompts({0})}));
  EXPECT_STATUS(PutSync(*dock, 1, {0}, {Prompts({0})}, absl::Milliseconds(20)),
                absl::StatusCode::kResourceExhausted, "waits for step 0");
  std::promise<absl::StatusOr<PutResult>> put;
  OwnedColumn column = Prompts({0});
  PutInput in;
  in.step = 1;
  in.rows = {0};
  in.columns = {column.View()};
  in.wait = absl::Seconds(30);
  dock->Put(std::move(in), [&](absl::StatusOr<PutResult> r) { put.set_value(std::move(r)); });
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(put.get_future().get());
  EXPECT_EQ(dock->Stats().steps.at(0).step, 1);
}

// When every consumer has taken every row, the step is released on its own.
TEST(Dock, AutoReleaseWhenEveryConsumerIsDone) {
  auto dock = MakeDock(SmallSpec(1));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3}), Responses({0, 1, 2, 3})}));
  ASSERT_OK(GetSync(*dock, GetOf("actor", 4)));
  EXPECT_EQ(dock->Stats().steps.size(), 1u);
  ASSERT_OK_AND_ASSIGN(Batch last, GetSync(*dock, GetOf("reward", 4)));
  EXPECT_TRUE(last.end_of_step);
  EXPECT_TRUE(dock->Stats().steps.empty());
  GetInput old = GetOf("actor");
  old.step = 0;
  // Any rank asking for the released step learns it is over.
  ASSERT_OK_AND_ASSIGN(Batch over, GetSync(*dock, old));
  EXPECT_TRUE(over.rows.empty());
  EXPECT_TRUE(over.end_of_step);
  const absl::Status released = PutSync(*dock, 0, {0}, {Prompts({0})}).status();
  EXPECT_STATUS(released, absl::StatusCode::kFailedPrecondition, "already released");
  EXPECT_REFUSED(released, Refusal::kReleased, DropReason::kUnspecified);
  ASSERT_OK(PutSync(*dock, 1, {0}, {Prompts({0})}));
}

// A batch keeps its bytes valid after its step is released and the memory
// reused by the next step.
TEST(Dock, BatchOutlivesRelease) {
  auto dock = MakeDock(SmallSpec(1));
  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {Prompts({0, 1}), Responses({0, 1})}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("actor", 2)));
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(PutSync(*dock, 1, {0, 1}, {Prompts({5, 6}), Responses({5, 6})}));
  EXPECT_EQ(RowValues<int32_t>(batch.columns[1], 1), (std::vector<int32_t>{101, 101}));
}

// Get without a step serves the oldest step with available rows.
TEST(Dock, GetWithoutStepServesOldestAvailable) {
  auto dock = MakeDock(SmallSpec(2));
  ASSERT_OK(PutSync(*dock, 1, {0, 1}, {Prompts({0, 1}), Responses({0, 1})}));
  ASSERT_OK(PutSync(*dock, 0, {2, 3}, {Prompts({2, 3}), Responses({2, 3})}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("actor", 2)));
  EXPECT_EQ(a.step, 0);
  EXPECT_EQ(a.rows, (std::vector<int64_t>{2, 3}));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("actor", 2)));
  EXPECT_EQ(b.step, 1);
}

// A consumer added at run time sees every row of live steps as unconsumed.
TEST(Dock, AddConsumerSeesLiveRows) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3}), Responses({0, 1, 2, 3})}));
  ASSERT_OK(GetSync(*dock, GetOf("actor", 4)));
  ASSERT_OK_AND_ASSIGN(ConsumerSpec added,
                       dock->AddConsumer({"critic", {"response"}, 0, 2, false, Policy::kFifo, 0}));
  EXPECT_EQ(added.dispatch_size, 2);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("critic", 4)));
  EXPECT_EQ(batch.rows.size(), 4u);
  EXPECT_STATUS(dock->AddConsumer({"critic", {"response"}, 0, 1, false, Policy::kFifo, 0}),
                absl::StatusCode::kAlreadyExists, "critic");
}

// RANDOM hands out every row exactly once, in a seeded order.
TEST(Dock, RandomPolicyCoversEveryRowOnce) {
  DockSpec spec = SmallSpec();
  spec.num_prompts = 64;
  spec.consumers = {{"shuffled", {"prompt"}, 16, 1, false, Policy::kRandom, 42}};
  auto dock = MakeDock(spec);
  std::vector<int64_t> rows(128);
  for (int64_t i = 0; i < 128; ++i) rows[i] = i;
  ASSERT_OK(PutSync(*dock, 0, rows, {Prompts(rows)}));
  std::vector<int> seen(128, 0);
  bool in_order = true;
  for (int i = 0; i < 8; ++i) {
    ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("shuffled")));
    ASSERT_EQ(b.rows.size(), 16u);
    for (int64_t r : b.rows) ++seen[r];
    if (b.rows.front() != i * 16) in_order = false;
  }
  for (int count : seen) EXPECT_EQ(count, 1);
  EXPECT_FALSE(in_order);
}

// Rewritable columns accept a second write; others refuse it.
TEST(Dock, RewritableColumnAcceptsRewrite) {
  auto dock = MakeDock(SmallSpec());
  auto reward = [](float v) {
    return OwnedColumn::Of<float>("reward", DType::kFloat32, {{v}});
  };
  ASSERT_OK(PutSync(*dock, 0, {0}, {reward(1.0f)}));
  ASSERT_OK(PutSync(*dock, 0, {0}, {reward(2.0f)}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {0}, {"reward"}));
  EXPECT_EQ(RowValues<float>(read.columns[0], 0), (std::vector<float>{2.0f}));
  EXPECT_EQ(dock->Stats().steps[0].ready_rows[2], 1);
}

// Stats report ready rows per column, consumption per consumer, arena use.
TEST(Dock, StatsSnapshot) {
  auto dock = MakeDock(SmallSpec());
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Prompts({0, 1, 2}), Responses({0, 1, 2})}));
  ASSERT_OK(GetSync(*dock, GetOf("actor", 2)));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.name, "small");
  EXPECT_EQ(stats.rows_per_step, 4);
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_EQ(stats.steps[0].ready_rows, (std::vector<int64_t>{3, 3, 0}));
  EXPECT_EQ(stats.steps[0].consumed_rows, (std::vector<int64_t>{2, 0}));
  EXPECT_GT(stats.arena_bytes_used, 0);
  EXPECT_GT(stats.arena_bytes_reserved, 0);
}

// Available rows: ready in every needed column and not taken, counted in
// whole groups for whole-group consumers. Totals since creation keep the
// counts of released steps.
TEST(Dock, StatsAvailableRowsAndTotals) {
  auto dock = MakeDock(SmallSpec(2));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Prompts({0, 1, 2}), Responses({0, 1, 2})}));
  ASSERT_OK(GetSync(*dock, GetOf("actor", 2)));
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  // actor: row 2 (rows 0, 1 taken, row 3 not written); reward: group 0 only.
  EXPECT_EQ(stats.steps[0].available_rows, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(stats.rows_written_total, (std::vector<int64_t>{3, 3, 0}));
  EXPECT_EQ(stats.rows_handed_out_total, (std::vector<int64_t>{2, 0}));

  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(PutSync(*dock, 1, {0}, {Prompts({0})}));
  stats = dock->Stats();
  EXPECT_EQ(stats.steps.at(0).available_rows, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(stats.rows_written_total, (std::vector<int64_t>{4, 3, 0}));
  EXPECT_EQ(stats.rows_handed_out_total, (std::vector<int64_t>{2, 0}));
}

// Under a memory limit a Put that does not fit waits, then fails naming the
// limit; releasing a step frees the memory for the next Put.
TEST(Dock, MemoryLimitBlocksThenFrees) {
  DockSpec spec = SmallSpec(2);
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 256 << 10;
  auto dock = MakeDock(spec);
  std::vector<std::vector<int32_t>> big(4, std::vector<int32_t>(10000, 1));
  OwnedColumn column = OwnedColumn::Of<int32_t>("response", DType::kInt32, big);
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {column}));
  EXPECT_STATUS(PutSync(*dock, 1, {0, 1, 2, 3}, {column}, absl::Milliseconds(100)),
                absl::StatusCode::kResourceExhausted, "memory limit");
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(PutSync(*dock, 1, {0, 1, 2, 3}, {column}, absl::Seconds(5)));
}

// Shutdown ends parked calls with UNAVAILABLE.
TEST(Dock, ShutdownEndsParkedCalls) {
  auto dock = MakeDock(SmallSpec());
  std::promise<absl::StatusOr<Batch>> got;
  dock->Get(GetOf("actor", 2, absl::Seconds(30)),
            [&](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
  dock->Shutdown();
  EXPECT_STATUS(got.get_future().get(), absl::StatusCode::kUnavailable, "shutting down");
}

}  // namespace
}  // namespace tdock

namespace tdock {
namespace {

// Steps use a partition in order: with two partitions, step 2 cannot start
// before step 0 has been released (it would silently skip step 0).
TEST(DockSteps, StepCannotSkipAheadOfItsPartition) {
  auto dock = MakeDock(SmallSpec(2));
  EXPECT_STATUS(PutSync(*dock, 2, {0}, {Prompts({0})}),
                absl::StatusCode::kResourceExhausted, "step 2 waits for step 0");
  EXPECT_TRUE(dock->Stats().steps.empty());
  ASSERT_OK(PutSync(*dock, 0, {0}, {Prompts({0})}));
  ASSERT_OK(PutSync(*dock, 1, {0}, {Prompts({0})}));
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(PutSync(*dock, 2, {0}, {Prompts({0})}));
}

// The window a shard is fed: per partition the step it holds or takes
// next, moved by each release (out of order too), each release told with
// the dock's name.
TEST(DockSteps, TheWindowSaysWhichStepEachPartitionAdmits) {
  std::vector<std::string> told;
  DockLimits limits;
  limits.steps_changed = [&told](const std::string& dock) { told.push_back(dock); };
  auto created = Dock::Create(SmallSpec(2), limits);
  ASSERT_OK(created);
  Dock& dock = **created;
  auto window = [&dock] {
    const StepWindow w = dock.Window();
    return std::pair(w.front_step, w.admitted);
  };
  EXPECT_EQ(window(), std::pair(int64_t{0}, std::vector<int64_t>{0, 1}));
  ASSERT_OK(PutSync(dock, 1, {0}, {Prompts({0})}));
  ASSERT_OK(dock.ReleaseStep(1));  // before step 0
  EXPECT_EQ(window(), std::pair(int64_t{0}, std::vector<int64_t>{0, 3}));
  ASSERT_OK(PutSync(dock, 0, {0}, {Prompts({0})}));
  ASSERT_OK(dock.ReleaseStep(0));
  EXPECT_EQ(window(), std::pair(int64_t{2}, std::vector<int64_t>{2, 3}));
  EXPECT_EQ(told, (std::vector<std::string>{"small", "small"}));
}

// A Put refused for memory leaves nothing behind: no started step, no arena
// space used, so a smaller Put that fits still succeeds.
TEST(DockSteps, PutRefusedForMemoryLeavesNoTrace) {
  DockSpec spec = SmallSpec(2);
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 128 << 10;
  auto dock = MakeDock(spec);
  OwnedColumn small = OwnedColumn::Of<int32_t>(
      "response", DType::kInt32, {std::vector<int32_t>(10000, 1)});
  ASSERT_OK(PutSync(*dock, 0, {0}, {small}));
  const int64_t used = dock->Stats().arena_bytes_used;
  std::vector<std::vector<int32_t>> big(2, std::vector<int32_t>(12000, 2));
  OwnedColumn wide = OwnedColumn::Of<int32_t>("response", DType::kInt32, big);
  EXPECT_STATUS(PutSync(*dock, 1, {0, 1}, {wide}), absl::StatusCode::kResourceExhausted,
                "memory limit");
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);  // step 1 was not started
  EXPECT_EQ(stats.arena_bytes_used, used);
  ASSERT_OK(PutSync(*dock, 0, {1}, {small}));
}

// The memory limit never stalls the ring: a newer step that took the
// memory does not keep the oldest live step from being written in full (its
// Puts may go past the limit); once the oldest is consumed and released, the
// newer step gets the memory back and goes on.
TEST(DockSteps, MemoryLimitNeverStarvesTheOldestStep) {
  DockSpec spec = SmallSpec(2);
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 192 << 10;
  auto dock = MakeDock(spec);
  auto responses = [](int n) {
    return OwnedColumn::Of<int32_t>(
        "response", DType::kInt32,
        std::vector<std::vector<int32_t>>(n, std::vector<int32_t>(10000, 3)));  // 40 KB
  };
  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {responses(2)}));  // two chunks
  ASSERT_OK(PutSync(*dock, 1, {0}, {responses(1)}));     // the third: at the limit
  EXPECT_STATUS(PutSync(*dock, 1, {1}, {responses(1)}), absl::StatusCode::kResourceExhausted,
                "memory limit");  // a newer step waits for memory
  ASSERT_OK(PutSync(*dock, 0, {2, 3}, {responses(2)}));  // the oldest does not
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3})}));
  EXPECT_GT(dock->Stats().arena_bytes_reserved, spec.memory_limit_bytes);
  GetInput actor = GetOf("actor", 4);
  actor.step = 0;
  GetInput reward = GetOf("reward", 4);
  reward.step = 0;
  ASSERT_OK(GetSync(*dock, actor));
  ASSERT_OK(GetSync(*dock, reward));  // step 0 is done and released
  ASSERT_OK(PutSync(*dock, 1, {1, 2, 3}, {responses(3)}, absl::Seconds(30)));
  ASSERT_OK(PutSync(*dock, 1, {0, 1, 2, 3}, {Prompts({0, 1, 2, 3})}));
}

}  // namespace
}  // namespace tdock
