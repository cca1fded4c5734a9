// Put throughput with persistence off, async and sync (RocksDB), and the
// time to recover 1 GiB of cells, measured in one run so the ratios compare
// like with like on a shared machine.
//
//   build-bench/bench/tdock_persist_bench [--dir=DIR] [--repetitions=3]
//
// Each Put is one batch of 256 rows x 4096 int32 tokens (4 MiB) for a whole
// step, written straight into a Dock (no gRPC: the transport is measured by
// transport_bench). With P producer threads, each writes its own steps; the
// journal group-commits what they queue together. Prints one line per
// configuration with MB/s and the ratio to persistence off, then the
// recovery line.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/dock/dock.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"

ABSL_FLAG(std::string, dir, "", "directory for the stores (default: a new one under $TMPDIR)");
ABSL_FLAG(int, repetitions, 3, "runs per configuration (the median is printed)");
ABSL_FLAG(int, puts, 48, "Puts per run (each a step of 4 MiB)");

namespace tdock {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kTokens = 4096;

DockSpec PutSpec(const std::string& name, int64_t rows, int32_t steps) {
  DockSpec spec;
  spec.name = name;
  spec.num_prompts = rows;
  spec.steps_in_flight = steps;
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"reader", {"tokens"}, rows, 1, false, Policy::kFifo, 0}};
  return spec;
}

struct Payload {
  std::vector<int32_t> values;
  PackedColumn column;
};

Payload MakePayload(int64_t rows, int64_t tokens) {
  Payload p;
  p.values.resize(rows * tokens);
  for (size_t i = 0; i < p.values.size(); ++i) p.values[i] = static_cast<int32_t>(i * 2654435761u);
  p.column.name = "tokens";
  p.column.dtype = DType::kInt32;
  for (int64_t r = 0; r <= rows; ++r) p.column.offsets.push_back(r * tokens);
  p.column.segments.emplace_back(reinterpret_cast<const char*>(p.values.data()),
                                 p.values.size() * sizeof(int32_t));
  return p;
}

absl::Status PutStep(Dock& dock, const Payload& payload, int64_t step, int64_t rows) {
  PutInput in;
  in.step = step;
  for (int64_t r = 0; r < rows; ++r) in.rows.push_back(r);
  in.columns.push_back(payload.column);
  std::promise<absl::Status> done;
  dock.Put(std::move(in), [&done](absl::StatusOr<PutResult> r) { done.set_value(r.status()); });
  return done.get_future().get();
}

// MB/s of `puts` Puts by `producers` threads into a fresh dock; `mode`: off,
// async or sync.
double RunPuts(const std::string& mode, int producers, int puts, const std::string& dir,
               const Payload& payload) {
  std::unique_ptr<persist::Persistence> persistence;
  DockRegistry registry;
  if (mode != "off") {
    std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
    persistence = persist::Persistence::Open(
                      {.data_dir = dir,
                       .durability = mode == "sync" ? persist::Durability::kSync
                                                    : persist::Durability::kAsync})
                      .value();
    (void)persistence->Recover(registry).value();
  }
  std::shared_ptr<Dock> dock = registry.Create(PutSpec("bench", kRows, 64)).value();
  std::atomic<int> next{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t) {
    threads.emplace_back([&] {
      for (int step; (step = next.fetch_add(1)) < puts;) {
        absl::Status s = PutStep(*dock, payload, step, kRows);
        if (!s.ok()) {
          std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
          std::exit(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (persistence != nullptr) (void)persistence->journal().Flush();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  registry.Shutdown();
  return static_cast<double>(puts) * kRows * kTokens * sizeof(int32_t) / seconds / 1e6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Recovery(const std::string& dir) {
  // 16 steps of 4096 rows x 4096 int32 (64 MiB) = 1 GiB of cells.
  constexpr int64_t kRecoveryRows = 4096;
  const Payload payload = MakePayload(kRecoveryRows, kTokens);
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  {
    auto persistence = persist::Persistence::Open(
                           {.data_dir = dir, .durability = persist::Durability::kAsync})
                           .value();
    DockRegistry registry;
    (void)persistence->Recover(registry).value();
    std::shared_ptr<Dock> dock = registry.Create(PutSpec("big", kRecoveryRows, 16)).value();
    for (int64_t step = 0; step < 16; ++step) {
      absl::Status s = PutStep(*dock, payload, step, kRecoveryRows);
      if (!s.ok()) {
        std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    }
    (void)persistence->journal().Flush();
    registry.Shutdown();
  }
  const absl::Time start = absl::Now();
  auto persistence = persist::Persistence::Open({.data_dir = dir}).value();
  DockRegistry registry;
  const persist::RecoveryStats stats = persistence->Recover(registry).value();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("recovery: %lld docks, %lld steps, %lld cells, %.2f GiB in %.2f s (%.2f GiB/s), "
              "open + rebuild\n",
              static_cast<long long>(stats.docks), static_cast<long long>(stats.steps),
              static_cast<long long>(stats.cells), stats.bytes / double(1 << 30), seconds,
              stats.bytes / double(1 << 30) / seconds);
  registry.Shutdown();
}

int Main() {
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tdock_persist_bench");
  }
  std::system(absl::StrCat("mkdir -p '", dir, "'").c_str());
  const Payload payload = MakePayload(kRows, kTokens);
  const int reps = std::max(1, absl::GetFlag(FLAGS_repetitions));
  const int puts = std::max(1, std::min(64, absl::GetFlag(FLAGS_puts)));
  std::printf("Put of %lld rows x %lld int32 tokens (%.1f MiB) per call, %d calls per run, "
              "median of %d runs\n",
              static_cast<long long>(kRows), static_cast<long long>(kTokens),
              kRows * kTokens * 4 / double(1 << 20), puts, reps);
  std::printf("%-10s %9s %10s %12s\n", "mode", "producers", "MB/s", "vs off");
  for (int producers : {1, 4}) {
    double off = 0;
    for (const char* mode : {"off", "async", "sync"}) {
      std::vector<double> runs;
      for (int r = 0; r < reps; ++r) {
        runs.push_back(RunPuts(mode, producers, puts, dir + "/store", payload));
      }
      const double mbs = Median(runs);
      if (std::string(mode) == "off") off = mbs;
      std::printf("%-10s %9d %10.0f %11.2fx\n", mode, producers, mbs, mbs / off);
    }
  }
  Recovery(dir + "/recovery");
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return 0;
}

}  // namespace
}  // namespace tdock

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tdock::Main();
}
