// Staleness bounds under concurrency (also run under ThreadSanitizer): two
// producers write rows with versions lagging the dock's by 0-2 while a
// trainer advances the version; a bounded consumer (max_staleness 1, under
// leases, handing some batches back with Nack), a bounded whole-group
// consumer and one without a bound take rows as they come. Run with each
// stale policy.
//
// Checked: no row handed to a bounded consumer is older than the dock's
// version before its Get minus the bound; every row reaches each bounded
// consumer once (acknowledged) or is passed over as stale, and, with
// stale: drop, reaches the unbounded one once unless dropped; every step is
// released.
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

constexpr int kPrompts = 8;
constexpr int kSamples = 2;
constexpr int kRows = kPrompts * kSamples;
constexpr int kSteps = 8;
constexpr int64_t kBound = 1;

DockSpec Spec(StalePolicy stale) {
  DockSpec spec;
  spec.name = "stale";
  spec.num_prompts = kPrompts;
  spec.n_samples_per_prompt = kSamples;
  spec.steps_in_flight = 2;
  spec.length_columns = {"a"};
  spec.columns = {{"a", DType::kInt32, {}, 0, false}, {"b", DType::kInt32, {}, 0, false}};
  spec.consumers = {
      {"bounded", {"a", "b"}, 4, 1, false, Policy::kFifo, 0},
      {"groups", {"a"}, 4, 1, true, Policy::kRandom, 7},
      {"ref", {"a"}, 3, 1, false, Policy::kFifo, 0},
  };
  spec.consumers[0].max_staleness = kBound;
  spec.consumers[0].stale = stale;
  spec.consumers[0].lease_ms = 60'000;
  spec.consumers[1].max_staleness = kBound;
  return spec;
}

OwnedColumn Cells(const char* name, const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r : rows) values.emplace_back(static_cast<size_t>(1 + r % 5), static_cast<int32_t>(r));
  return OwnedColumn::Of<int32_t>(name, DType::kInt32, values);
}

struct Ledger {
  tdock::Mutex mu;
  // (consumer, step, row) -> times handed out and kept (acknowledged).
  std::map<std::tuple<std::string, int64_t, int64_t>, int> kept ABSL_GUARDED_BY(mu);
  int64_t too_old ABSL_GUARDED_BY(mu) = 0;  // rows handed out past the bound
  std::atomic<int> producing{2};
};

void ExpectRaceLost(const absl::Status& status) {
  if (status.ok()) return;
  // A row dropped as stale by the time its second column comes.
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("(stale)"), absl::string_view::npos) << status;
}

void Produce(Dock& dock, int half, Ledger& ledger) {
  std::mt19937 rng(3 + half);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t g = half; g < kPrompts; g += 2) {
      std::vector<int64_t> rows;
      for (int i = 0; i < kSamples; ++i) rows.push_back(g * kSamples + i);
      PutInput a;
      a.step = step;
      a.rows = rows;
      a.wait = absl::Seconds(60);
      a.versions = {std::max<int64_t>(0, dock.version() - static_cast<int64_t>(rng() % 3))};
      OwnedColumn cells = Cells("a", rows);
      a.columns.push_back(cells.View());
      ASSERT_OK(PutSync(dock, std::move(a)).status());
      ExpectRaceLost(PutSync(dock, step, rows, {Cells("b", rows)}, absl::Seconds(60)).status());
    }
  }
  --ledger.producing;
}

void Train(Dock& dock, Ledger& ledger) {
  while (ledger.producing > 0) {
    ASSERT_OK(dock.SetVersion(dock.version() + 1));
    absl::SleepFor(absl::Microseconds(500));
  }
}

void Consume(Dock& dock, const std::string& consumer, bool bounded, Ledger& ledger) {
  int idle = 0, batches = 0;
  for (;;) {
    GetInput in;
    in.consumer = consumer;
    in.wait = absl::Milliseconds(20);
    const int64_t before = dock.version();
    absl::StatusOr<Batch> got = testing::GetSync(dock, in);
    ASSERT_OK(got);
    if (got->rows.empty()) {
      if (ledger.producing == 0 && (dock.Stats().steps.empty() || ++idle > 500)) return;
      continue;
    }
    idle = 0;
    bool keep = true;
    if (got->lease_id != 0 && ++batches % 3 == 0) {
      ASSERT_OK(dock.Nack(consumer, got->lease_id).status());
      keep = false;
    } else if (got->lease_id != 0) {
      ASSERT_OK(dock.Ack(consumer, got->lease_id).status());
    }
    tdock::MutexLock lock(&ledger.mu);
    for (size_t i = 0; i < got->rows.size(); ++i) {
      if (bounded && got->versions[i] < before - kBound) ++ledger.too_old;
      if (keep) ++ledger.kept[{consumer, got->step, got->rows[i]}];
    }
  }
}

class StalenessConcurrency : public ::testing::TestWithParam<StalePolicy> {};

TEST_P(StalenessConcurrency, TheBoundHoldsAsVersionsAdvanceUnderLeases) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(Spec(GetParam())));
  // Past the bound from the start: a row the producers write two versions
  // behind is stale however the threads are scheduled (at version 0 every
  // row was version 0, and a run the trainer had not yet advanced by 2 made
  // none stale).
  ASSERT_OK(dock->SetVersion(10));
  Ledger ledger;
  std::vector<std::thread> threads;
  threads.emplace_back(Consume, std::ref(*dock), "bounded", true, std::ref(ledger));
  threads.emplace_back(Consume, std::ref(*dock), "groups", true, std::ref(ledger));
  threads.emplace_back(Consume, std::ref(*dock), "ref", false, std::ref(ledger));
  threads.emplace_back(Train, std::ref(*dock), std::ref(ledger));
  threads.emplace_back(Produce, std::ref(*dock), 1, std::ref(ledger));
  Produce(*dock, 0, ledger);
  for (std::thread& t : threads) t.join();

  const DockStats stats = dock->Stats();
  for (const StepStats& step : stats.steps) {
    ADD_FAILURE() << "step " << step.step << " was not released: handed out "
                  << absl::StrJoin(step.consumed_rows, ",") << ", available "
                  << absl::StrJoin(step.available_rows, ",") << ", ready "
                  << absl::StrJoin(step.ready_rows, ",");
  }
  tdock::MutexLock lock(&ledger.mu);
  EXPECT_EQ(ledger.too_old, 0);
  const int64_t dropped = stats.rows_dropped_total[static_cast<int>(DropReason::kStale)];
  if (GetParam() == StalePolicy::kLeave) {
    EXPECT_EQ(dropped, 0);
  }
  for (const std::string consumer : {"bounded", "groups", "ref"}) {
    int64_t kept = 0;
    for (const auto& [key, times] : ledger.kept) {
      if (std::get<0>(key) != consumer) continue;
      EXPECT_EQ(times, 1) << consumer << " step " << std::get<1>(key) << " row "
                          << std::get<2>(key);
      kept += times;
    }
    const int k = dock->spec().ConsumerIndex(consumer);
    // Rows a consumer neither kept nor passed over were dropped (by the
    // bounded consumer's stale: drop) before it took them.
    EXPECT_GE(kept + stats.staleness[k].stale_rows + dropped, int64_t{kSteps} * kRows)
        << consumer;
    EXPECT_LE(kept + stats.staleness[k].stale_rows, int64_t{kSteps} * kRows) << consumer;
  }
  EXPECT_EQ(stats.staleness[dock->spec().ConsumerIndex("ref")].stale_rows, 0);
  EXPECT_GT(stats.staleness[0].stale_rows, 0) << "the run made rows stale";
  EXPECT_GT(stats.staleness[0].sum, 0) << "the run handed out rows of older versions";
}

INSTANTIATE_TEST_SUITE_P(Policies, StalenessConcurrency,
                         ::testing::Values(StalePolicy::kLeave, StalePolicy::kDrop),
                         [](const auto& info) {
                           return info.param == StalePolicy::kLeave ? "Leave" : "Drop";
                         });

}  // namespace
}  // namespace tdock
