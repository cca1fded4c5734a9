// Admission under concurrency (also run under ThreadSanitizer): three
// producers reserve rows for the dock's newest version, waiting for
// admission, and write them naming the reservation; one in seven of their
// reservations is never written (a producer that died) and expires. A
// trainer takes each step whole under leases (bounded at one version),
// sets the next version and then acknowledges, releasing the step.
//
// Checked: no row is trained past the bound, and admission kept every row
// within it (none passed over as stale); the reservations never written
// expired and did not hold their steps (every step the trainer waited for
// ended); producers did wait for admission.
#include <atomic>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::OwnedColumn;

constexpr int kSteps = 12;
constexpr int64_t kBound = 1;

DockSpec Spec() {
  DockSpec spec;
  spec.name = "admission";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 3;
  spec.length_columns = {"a"};
  spec.columns = {{"a", DType::kInt32, {}, 0, false}};
  // The whole step in one Get: rows dropped as expired after a partial
  // batch would otherwise leave the end of the step behind the lease.
  spec.consumers = {{"actor", {"a"}, 8, 1, false, Policy::kFifo, 0}};
  spec.consumers[0].max_staleness = kBound;
  spec.consumers[0].lease_ms = 600'000;
  return spec;
}

struct Shared {
  std::atomic<bool> training{true};
  std::atomic<int64_t> too_old{0};
  std::atomic<int64_t> abandoned{0};
};

void Produce(Dock& dock, int seed, Shared& shared) {
  std::mt19937 rng(seed);
  while (shared.training) {
    ReserveInput in;
    in.rows = 2;
    in.wait = absl::Milliseconds(100);
    const bool dies = rng() % 7 == 0;
    in.deadline = dies ? absl::Milliseconds(30) : absl::Seconds(60);
    absl::StatusOr<Reservation> granted = dock.Reserve(in);
    ASSERT_OK(granted);
    if (granted->timed_out) continue;
    if (dies) {
      ++shared.abandoned;
      continue;
    }
    PutInput put;
    put.step = granted->step;
    put.reservation = granted->id;
    std::vector<std::vector<int32_t>> values(granted->rows.size(), {1, 2, 3});
    OwnedColumn cells = OwnedColumn::Of<int32_t>("a", DType::kInt32, values);
    put.columns.push_back(cells.View());
    ASSERT_OK(testing::PutSync(dock, std::move(put)).status());
  }
}

void Train(Dock& dock, Shared& shared) {
  int64_t step = 0;
  std::vector<uint64_t> leases;
  while (step < kSteps) {
    GetInput in = testing::GetOf("actor", 0, absl::Milliseconds(50));
    in.step = step;
    const int64_t before = dock.version();
    absl::StatusOr<Batch> got = testing::GetSync(dock, in);
    ASSERT_OK(got);
    for (int64_t version : got->versions) shared.too_old += version < before - kBound;
    if (got->lease_id != 0) leases.push_back(got->lease_id);
    if (!got->end_of_step) continue;
    // The step's update makes the next version; then its leases are
    // acknowledged, which releases it.
    ASSERT_OK(dock.SetVersion(before + 1));
    for (uint64_t lease : std::exchange(leases, {})) ASSERT_OK(dock.Ack("actor", lease).status());
    ++step;
  }
  shared.training = false;
}

TEST(AdmissionConcurrency, ProducersArePacedAndExpiredReservationsHoldNoStep) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(Spec()));
  Shared shared;
  std::vector<std::thread> threads;
  for (int p = 0; p < 3; ++p) threads.emplace_back(Produce, std::ref(*dock), 7 + p, std::ref(shared));
  Train(*dock, shared);
  for (std::thread& t : threads) t.join();

  const DockStats stats = dock->Stats();
  EXPECT_EQ(shared.too_old, 0);
  EXPECT_EQ(stats.staleness[0].stale_rows, 0) << "admission kept every row within the bound";
  EXPECT_GT(stats.staleness[0].count, 0);
  EXPECT_GT(shared.abandoned, 0);
  EXPECT_GT(stats.rows_dropped_total[static_cast<int>(DropReason::kExpired)], 0);
  EXPECT_GT(stats.admission_waits_total, 0) << "the producers ran ahead and were held back";
  EXPECT_EQ(dock->version(), kSteps);
}

}  // namespace
}  // namespace tdock
