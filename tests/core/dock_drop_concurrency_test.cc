// Drops and seals racing with Puts, Gets and balanced rounds (also run under
// ThreadSanitizer). A producer writes steps group by group, drops some groups
// as failed half-written and seals each step once written; a dropper drops
// random rows of live steps meanwhile; FIFO, RANDOM, whole-group and
// BALANCED (two ranks of two replicas each, micro-batches) consumers take
// rows as they come.
//
// Checked: every row that is not dropped reaches every consumer (every
// replica of the balanced one) exactly once; no row reaches a consumer through a Get issued after its drop was
// acknowledged; every step ends and is released (none waits on a dropped or
// never-written row).
#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::OwnedColumn;
using testing::PutSync;

constexpr int kPrompts = 16;
constexpr int kSamples = 4;
constexpr int kRows = kPrompts * kSamples;
constexpr int kSteps = 5;

DockSpec Spec() {
  DockSpec spec;
  spec.name = "drops";
  spec.num_prompts = kPrompts;
  spec.n_samples_per_prompt = kSamples;
  spec.steps_in_flight = 2;
  spec.length_columns = {"a"};
  spec.columns = {{"a", DType::kInt32, {}, 0, false}, {"b", DType::kInt32, {}, 0, false}};
  spec.consumers = {
      {"fifo", {"a"}, 6, 1, false, Policy::kFifo, 0},
      {"random", {"b"}, 5, 1, false, Policy::kRandom, 3},
      {"groups", {"a", "b"}, 8, 1, true, Policy::kFifo, 0},
      {"balanced", {"a", "b"}, 4, 2, false, Policy::kBalanced, 0},
  };
  spec.consumers[3].micro_batch = MicroBatchOptions{.max_tokens = 64};
  spec.consumers[3].replicas = 2;
  return spec;
}

OwnedColumn Cells(const char* name, const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r : rows) values.emplace_back(static_cast<size_t>(1 + r % 7), static_cast<int32_t>(r));
  return OwnedColumn::Of<int32_t>(name, DType::kInt32, values);
}

// Stamps order drops' acknowledgements against Gets' issue.
struct Ledger {
  std::atomic<int64_t> clock{0};
  tdock::Mutex mu;
  // (step, row) -> stamp of the first acknowledged drop of it.
  std::map<std::pair<int64_t, int64_t>, int64_t> dropped ABSL_GUARDED_BY(mu);
  // (consumer, step, row) -> times handed out.
  std::map<std::tuple<std::string, int64_t, int64_t>, int> seen ABSL_GUARDED_BY(mu);
  // (consumer, step, row) -> when the first Get that handed it out (to any
  // replica) was issued: the row is handed to the consumer then, and the
  // other replicas get copies of that hand-out.
  std::map<std::tuple<std::string, int64_t, int64_t>, int64_t> first_issued
      ABSL_GUARDED_BY(mu);
  std::atomic<bool> producing{true};

  void Dropped(int64_t step, const std::vector<int64_t>& rows) {
    const int64_t stamp = ++clock;
    tdock::MutexLock lock(&mu);
    for (int64_t row : rows) dropped.emplace(std::make_pair(step, row), stamp);
  }
};

// A drop, seal or Put refused for a race lost (the step released, not yet
// started, or a row of the Put dropped) is FAILED_PRECONDITION; anything else
// is a failure.
void ExpectDropRace(const absl::Status& status) {
  if (status.ok()) return;
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

void Produce(Dock& dock, Ledger& ledger) {
  std::mt19937 rng(11);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t g = 0; g < kPrompts; ++g) {
      std::vector<int64_t> rows;
      for (int i = 0; i < kSamples; ++i) rows.push_back(g * kSamples + i);
      // A Put refused because the dropper took a row of it leaves the rest
      // of the group to the seal.
      absl::StatusOr<PutResult> a = PutSync(dock, step, rows, {Cells("a", rows)}, absl::Seconds(60));
      ExpectDropRace(a.status());
      if (rng() % 5 == 0) {  // the rollout failed half-way: the group goes
        ExpectDropRace(dock.Drop(DropInput{step, {}, {g}, DropReason::kFailed}).status());
        ledger.Dropped(step, rows);
        continue;
      }
      absl::StatusOr<PutResult> b = PutSync(dock, step, rows, {Cells("b", rows)}, absl::Seconds(60));
      ExpectDropRace(b.status());
    }
    ExpectDropRace(dock.Seal(SealInput{step, {"a", "b"}}).status());
  }
  ledger.producing = false;
}

void DropRandomRows(Dock& dock, Ledger& ledger) {
  std::mt19937 rng(5);
  while (ledger.producing) {
    const DockStats stats = dock.Stats();
    if (stats.steps.empty()) {
      std::this_thread::yield();
      continue;
    }
    const int64_t step = stats.steps[rng() % stats.steps.size()].step;
    std::vector<int64_t> rows = {static_cast<int64_t>(rng() % kRows),
                                 static_cast<int64_t>(rng() % kRows)};
    absl::StatusOr<int64_t> dropped = dock.Drop(DropInput{step, rows, {}, DropReason::kFiltered});
    ExpectDropRace(dropped.status());
    if (dropped.ok()) ledger.Dropped(step, rows);
    absl::SleepFor(absl::Microseconds(300));
  }
}

// `taker` names the consumer (and, for the balanced one, the replica) in
// the ledger.
void Consume(Dock& dock, const std::string& consumer, int32_t rank, int32_t replica,
             const std::string& taker, Ledger& ledger) {
  // Once the producer is done, a consumer that finds nothing for 10 s gives
  // up (the test then fails on the steps left) rather than hanging.
  int idle = 0;
  for (;;) {
    GetInput in;
    in.consumer = consumer;
    in.rank = rank;
    in.replica = replica;
    in.wait = absl::Milliseconds(20);
    const int64_t issued = ++ledger.clock;
    absl::StatusOr<Batch> got = testing::GetSync(dock, in);
    ASSERT_OK(got);
    if (got->rows.empty()) {
      if (!ledger.producing && (dock.Stats().steps.empty() || ++idle > 500)) return;
      continue;
    }
    idle = 0;
    tdock::MutexLock lock(&ledger.mu);
    for (int64_t row : got->rows) {
      ++ledger.seen[{taker, got->step, row}];
      auto [first, fresh] = ledger.first_issued.try_emplace({consumer, got->step, row}, issued);
      if (!fresh) first->second = std::min(first->second, issued);
    }
  }
}

TEST(DropConcurrency, DropsAndSealsRaceWithGetsAndRounds) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(Spec()));
  Ledger ledger;
  std::vector<std::thread> threads;
  for (const char* consumer : {"fifo", "random", "groups"}) {
    threads.emplace_back(Consume, std::ref(*dock), consumer, 0, 0, consumer, std::ref(ledger));
  }
  for (int32_t replica : {0, 1}) {
    const std::string taker = "balanced/" + std::to_string(replica);
    for (int32_t rank : {0, 1}) {
      threads.emplace_back(Consume, std::ref(*dock), "balanced", rank, replica, taker,
                           std::ref(ledger));
    }
  }
  threads.emplace_back(DropRandomRows, std::ref(*dock), std::ref(ledger));
  Produce(*dock, ledger);
  for (std::thread& t : threads) t.join();

  const DockStats stats = dock->Stats();
  for (const StepStats& step : stats.steps) {
    ADD_FAILURE() << "step " << step.step << " was not released: sealed " << step.sealed
                  << ", handed out " << absl::StrJoin(step.consumed_rows, ",") << ", available "
                  << absl::StrJoin(step.available_rows, ",") << ", ready "
                  << absl::StrJoin(step.ready_rows, ",") << ", dropped "
                  << absl::StrJoin(step.dropped_rows, ",");
  }
  tdock::MutexLock lock(&ledger.mu);
  int late = 0;  // rows handed out by a Get issued after their drop
  for (const auto& [key, issued] : ledger.first_issued) {
    auto drop = ledger.dropped.find({std::get<1>(key), std::get<2>(key)});
    late += drop != ledger.dropped.end() && drop->second < issued;
  }
  EXPECT_EQ(late, 0);
  int64_t dropped = 0;
  for (int64_t n : stats.rows_dropped_total) dropped += n;
  EXPECT_GT(dropped, 0);
  for (const std::string taker : {"fifo", "random", "groups", "balanced/0", "balanced/1"}) {
    const std::string consumer = taker.substr(0, taker.find('/'));
    int64_t handed = 0;
    for (int64_t step = 0; step < kSteps; ++step) {
      for (int64_t row = 0; row < kRows; ++row) {
        auto seen = ledger.seen.find({taker, step, row});
        const int times = seen == ledger.seen.end() ? 0 : seen->second;
        handed += times;
        EXPECT_LE(times, 1) << taker << " step " << step << " row " << row;
      }
    }
    // Every row is handed out once or dropped (a row may be both: handed
    // out before its drop).
    const int k = dock->spec().ConsumerIndex(consumer);
    EXPECT_EQ(handed, stats.rows_handed_out_total[k]) << taker;
    EXPECT_GE(handed + dropped, int64_t{kSteps} * kRows) << taker;
  }
}

}  // namespace
}  // namespace tdock
