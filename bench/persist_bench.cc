// Put throughput with persistence off, async and sync, and the time to
// recover 1 GiB of cells, measured in one run so the ratios compare like
// with like on a shared machine.
//
//   build/bench/tdock_persist_bench [--dir=DIR] [--repetitions=3] [--puts=64]
//       [--paths=grpc,core] [--producers=1,4] [--modes=off,async,sync]
//       [--recovery=true]
//
// Each Put is one batch of 256 rows x 4096 int32 tokens (4 MiB) for a whole
// step. Two paths: `grpc`, the C++ Client's Put into a tdock::Server in this
// process over loopback (what a producer sees), and `core`, Dock::Put with no
// transport (what the journal itself sustains). Producers run as a pipeline
// does: each Put goes to a new step and a step is released once 8 newer ones
// are written, so the store holds a bounded window, as in training.
//
// Per path, producer count (1, 4) and mode, a fresh store first takes a
// pass of --puts Puts (printed as "first pass": new log files), then
// --repetitions timed passes (their median is "MB/s"; by then the value
// log writes over segments it recycled). Ratios are to "off" on the same
// path and producer count.
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
#include "client/client.h"
#include "common/malloc_tuning.h"
#include "server/dock/dock.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "server/server.h"

ABSL_FLAG(std::string, dir, "", "directory for the stores (default: a new one under $TMPDIR)");
ABSL_FLAG(int, repetitions, 3, "timed passes per configuration (the median is printed)");
ABSL_FLAG(int, puts, 64, "Puts per pass (each a step of 4 MiB)");
ABSL_FLAG(std::vector<std::string>, paths, std::vector<std::string>({"grpc", "core"}),
          "paths to measure: grpc, core");
ABSL_FLAG(std::vector<std::string>, producers, std::vector<std::string>({"1", "4"}),
          "producer counts");
ABSL_FLAG(std::vector<std::string>, modes, std::vector<std::string>({"off", "async", "sync"}),
          "persistence modes: off, async, sync (ratios need off first)");
ABSL_FLAG(bool, recovery, true, "also measure the recovery of 1 GiB");

namespace tdock {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kTokens = 4096;
constexpr int64_t kWindow = 8;  // steps a producer keeps before releasing

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

persist::PersistenceOptions Options(const std::string& mode, const std::string& dir) {
  persist::PersistenceOptions options;
  options.data_dir = dir;
  options.durability = mode == "sync" ? persist::Durability::kSync : persist::Durability::kAsync;
  return options;
}

// Where the Puts go: a dock in this process, or a server through a client.
class Target {
 public:
  virtual ~Target() = default;
  virtual absl::Status Put(int64_t step) = 0;
  virtual absl::Status Release(int64_t step) = 0;
  // Everything acknowledged so far is on disk (async: waits for the sync).
  virtual void Flush() = 0;
};

class CoreTarget final : public Target {
 public:
  CoreTarget(const std::string& mode, const std::string& dir, const Payload& payload)
      : payload_(payload) {
    if (mode != "off") {
      persistence_ = persist::Persistence::Open(Options(mode, dir)).value();
      (void)persistence_->Recover(registry_).value();
    }
    dock_ = registry_.Create(PutSpec("bench", kRows, 64)).value();
  }
  ~CoreTarget() override { registry_.Shutdown(); }
  absl::Status Put(int64_t step) override { return PutStep(*dock_, payload_, step, kRows); }
  absl::Status Release(int64_t step) override { return dock_->ReleaseStep(step); }
  void Flush() override {
    if (persistence_ != nullptr) (void)persistence_->journal().Flush();
  }

 private:
  const Payload& payload_;
  std::unique_ptr<persist::Persistence> persistence_;
  DockRegistry registry_;
  std::shared_ptr<Dock> dock_;
};

class GrpcTarget final : public Target {
 public:
  GrpcTarget(const std::string& mode, const std::string& dir, const Payload& payload) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.docks.push_back(PutSpec("bench", kRows, 64));
    if (mode != "off") options.persistence = Options(mode, dir);
    server_ = std::make_unique<Server>(std::move(options));
    Check(server_->Start());
    ClientOptions client_options;
    client_options.address = absl::StrCat("127.0.0.1:", server_->port());
    client_ = Client::Connect(client_options).value();
    put_.dock = "bench";
    for (int64_t r = 0; r < kRows; ++r) put_.rows.push_back(r);
    put_.columns.push_back(ClientColumn::View(
        "tokens", DType::kInt32, payload.column.offsets, payload.column.segments[0]));
  }
  ~GrpcTarget() override { server_->Shutdown(); }
  absl::Status Put(int64_t step) override {
    ClientPut put = put_;
    put.step = step;
    return client_->Put(put).status();
  }
  absl::Status Release(int64_t step) override { return client_->ReleaseStep("bench", step); }
  void Flush() override {
    if (server_->persistence() != nullptr) Check(server_->persistence()->journal().Flush());
  }

  static void Check(const absl::Status& status) {
    if (!status.ok()) {
      std::fprintf(stderr, "persist_bench: %s\n", status.ToString().c_str());
      std::exit(1);
    }
  }

 private:
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  ClientPut put_;
};

// One pass: `puts` Puts to steps first, first + 1, ... by `producers`
// threads, each releasing its own steps kWindow behind, and the rest at
// the end. MB/s.
double Pass(Target& target, int producers, int64_t first, int puts) {
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> mine;
      for (int64_t i = t; i < puts; i += producers) {
        const int64_t step = first + i;
        GrpcTarget::Check(target.Put(step));
        mine.push_back(step);
        if (static_cast<int64_t>(mine.size()) > kWindow) {
          GrpcTarget::Check(target.Release(mine[mine.size() - 1 - kWindow]));
        }
      }
      const size_t kept = std::min<size_t>(mine.size(), kWindow);
      for (size_t i = mine.size() - kept; i < mine.size(); ++i) {
        GrpcTarget::Check(target.Release(mine[i]));
      }
    });
  }
  for (auto& t : threads) t.join();
  target.Flush();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
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
  const int puts = std::max(1, absl::GetFlag(FLAGS_puts));
  std::printf("Put of %lld rows x %lld int32 tokens (%.1f MiB) per call, %d calls per pass, "
              "releasing steps %lld behind; median of %d passes after a first pass\n",
              static_cast<long long>(kRows), static_cast<long long>(kTokens),
              kRows * kTokens * 4 / double(1 << 20), puts, static_cast<long long>(kWindow), reps);
  std::printf("%-5s %-6s %9s %8s %8s %11s\n", "path", "mode", "producers", "MB/s", "vs off",
              "first pass");
  for (const std::string& path : absl::GetFlag(FLAGS_paths)) {
    for (const std::string& count : absl::GetFlag(FLAGS_producers)) {
      const int producers = std::max(1, std::atoi(count.c_str()));
      double off = 0;
      for (const std::string& mode : absl::GetFlag(FLAGS_modes)) {
        const std::string store = dir + "/store";
        std::system(absl::StrCat("rm -rf '", store, "'").c_str());
        std::unique_ptr<Target> target;
        if (path == "grpc") {
          target = std::make_unique<GrpcTarget>(mode, store, payload);
        } else {
          target = std::make_unique<CoreTarget>(mode, store, payload);
        }
        const double first = Pass(*target, producers, 0, puts);
        std::vector<double> runs;
        for (int r = 0; r < reps; ++r) {
          runs.push_back(Pass(*target, producers, int64_t{r + 1} * puts, puts));
        }
        const double mbs = Median(runs);
        if (mode == "off") off = mbs;
        std::printf("%-5s %-6s %9d %8.0f %7.2fx %11.0f\n", path.c_str(), mode.c_str(), producers, mbs,
                    mbs / off, first);
        std::fflush(stdout);
      }
    }
  }
  if (absl::GetFlag(FLAGS_recovery)) Recovery(dir + "/recovery");
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return 0;
}

}  // namespace
}  // namespace tdock

int main(int argc, char** argv) {
  tdock::TuneMallocForLargeMessages();  // as tdock-server does
  absl::ParseCommandLine(argc, argv);
  return tdock::Main();
}
