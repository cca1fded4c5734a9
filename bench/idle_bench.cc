// The CPU an idle dock uses while calls wait in it: N Reserves parked for
// admission and one Put parked behind an unreleased step (a parked Put keeps
// the dock's alarm ticking every 50 ms). Nothing else happens during the
// measured window, so every CPU second in it is the cost of waiting.
//
//   tdock_idle_bench [--reserves=0,3000] [--seconds=2] [--rounds=2]
//
// For each round and each N (alternating), prints the process's CPU time over
// the window as a share of one core; the last line is the ratio of the mean
// share with the largest N to that with the smallest.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/dock/dock.h"

namespace tdock {
namespace {

constexpr int32_t kRows = 8;

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

DockSpec IdleSpec() {
  DockSpec spec;
  spec.name = "idle-bench";
  spec.num_prompts = 1;
  spec.n_samples_per_prompt = kRows;
  spec.steps_in_flight = 1;
  spec.length_columns = {"response_ids"};
  ColumnSpec column;
  column.name = "response_ids";
  column.dtype = DType::kInt32;
  spec.columns.push_back(column);
  ConsumerSpec consumer;
  consumer.name = "actor";
  consumer.columns = {"response_ids"};
  consumer.dispatch_size = kRows;
  consumer.max_staleness = 0;
  spec.consumers.push_back(consumer);
  return spec;
}

// CPU share of one core over `window` with `reserves` Reserves and one Put
// parked; every parked call is answered (shutdown) before it returns.
absl::StatusOr<double> Measure(int64_t reserves, absl::Duration window) {
  absl::StatusOr<std::unique_ptr<Dock>> created = Dock::Create(IdleSpec());
  if (!created.ok()) return created.status();
  Dock& dock = **created;
  ReserveInput all;
  all.rows = kRows;
  all.deadline = absl::Hours(1);
  absl::StatusOr<Reservation> first = dock.Reserve(all);  // step 0, every row
  if (!first.ok()) return first.status();

  // Step 1 waits for step 0's partition.
  std::vector<int32_t> tokens = {1, 2, 3};
  PutInput put;
  put.step = 1;
  put.rows = {0};
  put.wait = absl::Hours(1);
  PackedColumn column;
  column.name = "response_ids";
  column.dtype = DType::kInt32;
  column.offsets = {0, 3};
  column.segments.emplace_back(reinterpret_cast<const char*>(tokens.data()),
                               tokens.size() * sizeof(int32_t));
  put.columns.push_back(std::move(column));
  absl::Notification put_done;
  dock.Put(std::move(put), [&](absl::StatusOr<PutResult>) { put_done.Notify(); });

  std::vector<absl::Notification> answered(static_cast<size_t>(reserves));
  for (int64_t i = 0; i < reserves; ++i) {
    ReserveInput in = all;
    in.wait = absl::Hours(1);
    dock.Reserve(in, [&answered, i](absl::StatusOr<Reservation>) { answered[i].Notify(); });
  }
  const DockStats stats = dock.Stats();
  if (stats.reservations_parked != reserves || stats.parked_puts != 1) {
    return absl::InternalError("the calls did not park");
  }
  absl::SleepFor(absl::Milliseconds(200));  // settle
  const double cpu0 = ProcessCpuSeconds();
  const absl::Time t0 = absl::Now();
  absl::SleepFor(window);
  const double cpu = ProcessCpuSeconds() - cpu0;
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  created->reset();  // ends every parked call
  put_done.WaitForNotification();
  for (auto& n : answered) n.WaitForNotification();
  return cpu / wall;
}

int Run(int argc, char** argv) {
  std::vector<int64_t> counts = {0, 3000};
  double seconds = 2;
  int rounds = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool ok = true;
    if (arg.rfind("--reserves=", 0) == 0) {
      counts.clear();
      for (absl::string_view n : absl::StrSplit(arg.substr(11), ',')) {
        int64_t v = 0;
        ok = ok && absl::SimpleAtoi(n, &v) && v >= 0;
        counts.push_back(v);
      }
      ok = ok && !counts.empty();
    } else if (arg.rfind("--seconds=", 0) == 0) {
      ok = absl::SimpleAtod(arg.substr(10), &seconds) && seconds > 0;
    } else if (arg.rfind("--rounds=", 0) == 0) {
      ok = absl::SimpleAtoi(arg.substr(9), &rounds) && rounds > 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "usage: %s [--reserves=N,...] [--seconds=S] [--rounds=R]\n", argv[0]);
      return 2;
    }
  }
  std::vector<double> sums(counts.size(), 0);
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < counts.size(); ++k) {
      absl::StatusOr<double> share = Measure(counts[k], absl::Seconds(seconds));
      if (!share.ok()) {
        std::fprintf(stderr, "%s\n", std::string(share.status().message()).c_str());
        return 1;
      }
      sums[k] += *share;
      std::printf("round %d  parked_reserves %6lld  cpu %.2f%% of a core\n", r,
                  static_cast<long long>(counts[k]), *share * 100);
    }
  }
  std::printf("mean cpu, %lld parked vs %lld: %.2f%% vs %.2f%% (ratio %.2f)\n",
              static_cast<long long>(counts.back()), static_cast<long long>(counts.front()),
              sums.back() / rounds * 100, sums.front() / rounds * 100,
              sums.front() > 0 ? sums.back() / sums.front() : 0.0);
  return 0;
}

}  // namespace
}  // namespace tdock

int main(int argc, char** argv) { return tdock::Run(argc, argv); }
