// Sampling and claiming latency of the dock core, without any transport.
//
//   BM_Claim/rows:<R>/claimers:<C>/metadata_only:<M>
//
// One dock (R rows per step as R/8 prompts × 8 samples, one step in flight)
// and one FIFO consumer with dp_size = C and dispatch_size = max(1, R/(8·C)),
// needing two int32 columns whose lengths are the token counts. Each
// iteration fills one fresh step (timing paused; Puts of 512 rows as rollout
// workers send them), then C claimer threads, one per rank, call Get on that
// step until it is drained (about 8 Gets each). The iteration's time (manual
// time) runs from the start of the first Get to the end of the last Get that
// returned rows, so thread wake-up before the round is not counted.
//
// metadata_only=1: rows and token counts only (GetInput.metadata_only), i.e.
// sampling + claiming. metadata_only=0: the batch also carries the payload
// views into the arena (offsets and segments; no payload byte is copied).
//
// Counters: get_ns (mean latency of a Get that returned rows), get_p50_ns,
// get_p99_ns (over every such Get of the run), claims_per_s (rows claimed per
// second of drain time), gets_per_step, empty_gets_per_step (Gets that lost
// every race or found the step already drained), dispatch.
//
// The first round checks that the claimers took every row exactly once; every
// round checks the row total.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "benchmark/benchmark.h"
#include "server/dock/dock.h"

namespace tdock {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kConsumer[] = "actor";
constexpr int32_t kSamplesPerPrompt = 8;
constexpr int64_t kGetsPerClaimer = 8;
constexpr int64_t kRowsPerPut = 512;
// Empty Gets one claimer tolerates in a round before reporting an error.
constexpr int64_t kMaxEmptyGets = 1'000'000;

// One step's cells, packed per column, and the Puts that write them.
struct StepData {
  struct Column {
    std::string name;
    std::vector<int32_t> tokens;
    std::vector<int64_t> offsets{0};
  };
  std::vector<Column> columns;
  std::vector<PutInput> puts;  // step 0; segments point into `columns`
};

// Token lengths are small and seeded: sampling cost depends on row count,
// not on payload size, and small cells keep the untimed refill short.
StepData MakeStepData(int64_t rows, uint64_t seed) {
  StepData data;
  data.columns = {{"prompt_ids", {}, {0}}, {"response_ids", {}, {0}}};
  std::mt19937_64 rng(seed);
  const int32_t max_len[] = {32, 96};
  for (int c = 0; c < 2; ++c) {
    StepData::Column& column = data.columns[c];
    std::uniform_int_distribution<int32_t> len(2, max_len[c]);
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t n = len(rng);
      for (int32_t i = 0; i < n; ++i) column.tokens.push_back(static_cast<int32_t>(rng()));
      column.offsets.push_back(static_cast<int64_t>(column.tokens.size()));
    }
  }
  for (int64_t begin = 0; begin < rows; begin += kRowsPerPut) {
    const int64_t end = std::min(rows, begin + kRowsPerPut);
    PutInput put;
    put.wait = absl::Seconds(10);
    for (int64_t r = begin; r < end; ++r) put.rows.push_back(r);
    for (const StepData::Column& column : data.columns) {
      PackedColumn packed;
      packed.name = column.name;
      packed.dtype = DType::kInt32;
      for (int64_t r = begin; r <= end; ++r) {
        packed.offsets.push_back(column.offsets[r] - column.offsets[begin]);
      }
      const char* first =
          reinterpret_cast<const char*>(column.tokens.data() + column.offsets[begin]);
      const size_t bytes = (column.offsets[end] - column.offsets[begin]) * sizeof(int32_t);
      packed.segments.emplace_back(first, bytes);
      put.columns.push_back(std::move(packed));
    }
    data.puts.push_back(std::move(put));
  }
  return data;
}

DockSpec ClaimSpec(int64_t rows, int claimers) {
  DockSpec spec;
  spec.name = "claim-bench";
  spec.num_prompts = rows / kSamplesPerPrompt;
  spec.n_samples_per_prompt = kSamplesPerPrompt;
  spec.steps_in_flight = 1;
  spec.length_columns = {"prompt_ids", "response_ids"};
  for (const char* name : {"prompt_ids", "response_ids"}) {
    ColumnSpec column;
    column.name = name;
    column.dtype = DType::kInt32;
    spec.columns.push_back(column);
  }
  ConsumerSpec consumer;
  consumer.name = kConsumer;
  consumer.columns = spec.length_columns;
  consumer.dp_size = claimers;
  consumer.dispatch_size = std::max<int64_t>(1, rows / (kGetsPerClaimer * claimers));
  consumer.policy = Policy::kFifo;
  spec.consumers.push_back(consumer);
  return spec;
}

// Writes every row of `step`; returns the first error.
absl::Status FillStep(Dock& dock, const StepData& data, int64_t step) {
  for (const PutInput& put : data.puts) {
    PutInput in = put;
    in.step = step;
    absl::Status status;
    absl::Notification done;
    dock.Put(std::move(in), [&](absl::StatusOr<PutResult> result) {
      status = result.status();
      done.Notify();
    });
    done.WaitForNotification();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> GetNow(Dock& dock, GetInput in) {
  std::optional<absl::StatusOr<Batch>> result;
  absl::Notification done;
  dock.Get(std::move(in), [&](absl::StatusOr<Batch> batch) {
    result.emplace(std::move(batch));
    done.Notify();
  });
  done.WaitForNotification();
  return std::move(*result);
}

// What one claimer did in one round.
struct ClaimerStats {
  int64_t gets = 0;        // Gets that returned rows
  int64_t empty_gets = 0;  // Gets that returned none
  int64_t rows = 0;
  std::vector<int64_t> latencies_ns;  // of the Gets that returned rows
  std::vector<int64_t> claimed;       // rows, only when asked to keep them
  std::optional<Clock::time_point> first_start;
  Clock::time_point last_end;
  absl::Status error;
};

// `claimers` threads, thread r acting as rank r of the consumer, that drain
// one step per round.
//
// Thread safety: Drain is called by one thread at a time. During a round,
// worker r writes only stats_[r]; Drain reads stats_ after every worker has
// reported under mu_, which orders those writes before the reads.
class ClaimerPool final {
 public:
  ClaimerPool(Dock* dock, int claimers, bool metadata_only)
      : dock_(dock), metadata_only_(metadata_only), stats_(claimers) {
    for (int rank = 0; rank < claimers; ++rank) {
      threads_.emplace_back([this, rank] { Loop(rank); });
    }
  }
  ~ClaimerPool() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& thread : threads_) thread.join();
  }
  ClaimerPool(const ClaimerPool&) = delete;
  ClaimerPool& operator=(const ClaimerPool&) = delete;

  // Runs one round on `step`; `keep_rows` records every claimed row.
  const std::vector<ClaimerStats>& Drain(int64_t step, bool keep_rows) {
    absl::MutexLock lock(&mu_);
    for (ClaimerStats& stats : stats_) stats = ClaimerStats{};
    step_ = step;
    keep_rows_ = keep_rows;
    finished_ = 0;
    ++round_;
    const int claimers = static_cast<int>(stats_.size());
    auto all_done = [this, claimers] {
      mu_.AssertHeld();  // Await evaluates it under mu_
      return finished_ == claimers;
    };
    mu_.Await(absl::Condition(&all_done));
    return stats_;
  }

 private:
  void Loop(int rank) {
    int64_t seen = 0;
    for (;;) {
      int64_t step = 0;
      bool keep_rows = false;
      {
        absl::MutexLock lock(&mu_);
        auto wake = [this, &seen] {
          mu_.AssertHeld();  // Await evaluates it under mu_
          return stop_ || round_ > seen;
        };
        mu_.Await(absl::Condition(&wake));
        if (stop_) return;
        seen = round_;
        step = step_;
        keep_rows = keep_rows_;
      }
      DrainStep(rank, step, keep_rows, stats_[rank]);
      absl::MutexLock lock(&mu_);
      ++finished_;
    }
  }

  void DrainStep(int rank, int64_t step, bool keep_rows, ClaimerStats& out) {
    GetInput in;
    in.consumer = kConsumer;
    in.rank = rank;
    in.step = step;
    in.metadata_only = metadata_only_;
    for (;;) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<Batch> batch = GetNow(*dock_, in);
      const Clock::time_point end = Clock::now();
      if (!batch.ok()) {
        // The step was released: another claimer took its last rows.
        if (!absl::IsFailedPrecondition(batch.status())) out.error = batch.status();
        return;
      }
      if (batch->rows.empty()) {
        if (batch->end_of_step) return;
        if (++out.empty_gets > kMaxEmptyGets) {
          out.error = absl::InternalError(absl::StrCat(
              "rank ", rank, ": ", kMaxEmptyGets, " empty Gets on step ", step));
          return;
        }
        continue;
      }
      if (!out.first_start.has_value()) out.first_start = start;
      out.last_end = end;
      ++out.gets;
      out.rows += static_cast<int64_t>(batch->rows.size());
      out.latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
      if (keep_rows) {
        out.claimed.insert(out.claimed.end(), batch->rows.begin(), batch->rows.end());
      }
      if (batch->end_of_step) return;
    }
  }

  Dock* const dock_;
  const bool metadata_only_;
  std::vector<ClaimerStats> stats_;  // stats_[r] written by worker r in a round
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool keep_rows_ ABSL_GUARDED_BY(mu_) = false;
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// What a run of BM_Claim measured, summed over rounds.
struct Totals {
  double drain_seconds = 0;
  int64_t rows = 0;
  int64_t gets = 0;
  int64_t empty_gets = 0;
  std::vector<int64_t> latencies_ns;
};

// Adds one round to `totals` and returns its drain time in seconds, or an
// error if the round did not take every row (exactly once, when `check_rows`;
// that needs the rows kept).
absl::StatusOr<double> Account(const std::vector<ClaimerStats>& round,
                               int64_t rows, bool check_rows, Totals& totals) {
  std::optional<Clock::time_point> first;
  Clock::time_point last{};
  int64_t claimed = 0;
  std::vector<int64_t> all_rows;
  for (const ClaimerStats& stats : round) {
    if (!stats.error.ok()) return stats.error;
    if (stats.first_start.has_value()) {
      first = first.has_value() ? std::min(*first, *stats.first_start) : *stats.first_start;
      last = std::max(last, stats.last_end);
    }
    claimed += stats.rows;
    totals.gets += stats.gets;
    totals.empty_gets += stats.empty_gets;
    totals.latencies_ns.insert(totals.latencies_ns.end(), stats.latencies_ns.begin(),
                               stats.latencies_ns.end());
    all_rows.insert(all_rows.end(), stats.claimed.begin(), stats.claimed.end());
  }
  if (claimed != rows || !first.has_value()) {
    return absl::InternalError(
        absl::StrCat("claimed ", claimed, " rows of a step of ", rows));
  }
  if (check_rows) {
    std::sort(all_rows.begin(), all_rows.end());
    for (int64_t r = 0; r < rows; ++r) {
      if (all_rows[r] != r) {
        return absl::InternalError(absl::StrCat("row ", r, " was not claimed exactly once"));
      }
    }
  }
  const double seconds = std::chrono::duration<double>(last - *first).count();
  totals.rows += claimed;
  totals.drain_seconds += seconds;
  return seconds;
}

int64_t Percentile(std::vector<int64_t>& values, double q) {
  if (values.empty()) return 0;
  const size_t k = static_cast<size_t>(q * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + k, values.end());
  return values[k];
}

// The benchmark's iterations: fills step after step (timing paused) and
// drains it with `pool`, timing the drain; returns the steps drained. The
// first step's rows are checked to be claimed exactly once.
int64_t DrainSteps(benchmark::State& state, Dock& dock, const StepData& data,
                   ClaimerPool& pool, int64_t rows, Totals& totals) {
  int64_t step = 0;
  for (auto _ : state) {
    state.PauseTiming();
    absl::Status filled = FillStep(dock, data, step);
    state.ResumeTiming();
    if (!filled.ok()) {
      state.SkipWithError(std::string(filled.message()).c_str());
      break;
    }
    absl::StatusOr<double> seconds =
        Account(pool.Drain(step, /*keep_rows=*/step == 0), rows, step == 0, totals);
    if (!seconds.ok()) {
      state.SkipWithError(std::string(seconds.status().message()).c_str());
      break;
    }
    state.SetIterationTime(*seconds);
    ++step;
  }
  return step;
}

void BM_Claim(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const int claimers = static_cast<int>(state.range(1));
  const bool metadata_only = state.range(2) != 0;
  const DockSpec spec = ClaimSpec(rows, claimers);
  absl::StatusOr<std::unique_ptr<Dock>> dock = Dock::Create(spec);
  if (!dock.ok()) {
    state.SkipWithError(std::string(dock.status().message()).c_str());
    return;
  }
  const StepData data = MakeStepData(rows, /*seed=*/rows * 131 + claimers);
  ClaimerPool pool(dock->get(), claimers, metadata_only);
  Totals totals;
  const int64_t step = DrainSteps(state, **dock, data, pool, rows, totals);
  if (totals.gets == 0) return;
  const double steps = static_cast<double>(step);
  double sum_ns = 0;
  for (int64_t ns : totals.latencies_ns) sum_ns += static_cast<double>(ns);
  state.counters["get_ns"] = sum_ns / static_cast<double>(totals.gets);
  state.counters["get_p50_ns"] = static_cast<double>(Percentile(totals.latencies_ns, 0.5));
  state.counters["get_p99_ns"] = static_cast<double>(Percentile(totals.latencies_ns, 0.99));
  state.counters["claims_per_s"] = static_cast<double>(totals.rows) / totals.drain_seconds;
  state.counters["gets_per_step"] = static_cast<double>(totals.gets) / steps;
  state.counters["empty_gets_per_step"] = static_cast<double>(totals.empty_gets) / steps;
  state.counters["dispatch"] = static_cast<double>(spec.consumers[0].dispatch_size);
}

BENCHMARK(BM_Claim)
    ->ArgsProduct({{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10},
                   {1, 4, 16, 64},
                   {1, 0}})
    ->ArgNames({"rows", "claimers", "metadata_only"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One claimer drains a step of `rows` rows of two interleaved versions (even
// rows version 1, odd rows version 0) `kDrainDispatch` rows a Get, with the
// consumer's rows in index order (order:0) or the oldest version first
// (order:1, the default of a consumer with max_staleness). The iteration
// time runs from the first Get to the last.
constexpr int64_t kDrainDispatch = 16;

void BM_DrainByOrder(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const bool oldest_first = state.range(1) != 0;
  DockSpec spec = ClaimSpec(rows, 1);
  spec.consumers[0].dispatch_size = kDrainDispatch;
  spec.consumers[0].max_staleness = 4;  // passes every row over none
  spec.consumers[0].order = oldest_first ? RowOrder::kOldestVersion : RowOrder::kIndex;
  absl::StatusOr<std::unique_ptr<Dock>> dock = Dock::Create(spec);
  absl::Status set = dock.ok() ? (*dock)->SetVersion(1) : dock.status();
  if (!set.ok()) {
    state.SkipWithError(std::string(set.message()).c_str());
    return;
  }
  StepData data = MakeStepData(rows, /*seed=*/rows * 7 + 1);
  for (PutInput& put : data.puts) {
    for (int64_t row : put.rows) put.versions.push_back(row % 2 == 0 ? 1 : 0);
  }
  ClaimerPool pool(dock->get(), 1, /*metadata_only=*/true);
  Totals totals;
  DrainSteps(state, **dock, data, pool, rows, totals);
  if (totals.gets == 0) return;
  state.counters["get_ns"] =
      totals.drain_seconds * 1e9 / static_cast<double>(totals.gets);
}

BENCHMARK(BM_DrainByOrder)
    ->ArgsProduct({{64 << 10}, {0, 1}})
    ->ArgNames({"rows", "oldest_first"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// One producer writes a step of `rows` rows, kRowsPerPut a Put, naming its
// rows (append:0) or asking for new ones (append:1: each append is assigned
// whole groups and holds them until it is answered). Releasing the step
// between iterations is not timed.
void BM_PutStep(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const bool append = state.range(1) != 0;
  absl::StatusOr<std::unique_ptr<Dock>> dock = Dock::Create(ClaimSpec(rows, 1));
  if (!dock.ok()) {
    state.SkipWithError(std::string(dock.status().message()).c_str());
    return;
  }
  StepData data = MakeStepData(rows, /*seed=*/rows * 3 + 1);
  for (PutInput& put : data.puts) {
    if (!append) continue;
    put.new_rows = static_cast<int64_t>(put.rows.size());
    put.rows.clear();
  }
  int64_t step = 0;
  for (auto _ : state) {
    absl::Status filled = FillStep(**dock, data, step);
    state.PauseTiming();
    if (filled.ok()) filled = (*dock)->ReleaseStep(step);
    ++step;
    state.ResumeTiming();
    if (!filled.ok()) {
      state.SkipWithError(std::string(filled.message()).c_str());
      break;
    }
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows * step), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_PutStep)
    ->ArgsProduct({{4 << 10, 64 << 10}, {0, 1}})
    ->ArgNames({"rows", "append"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tdock

BENCHMARK_MAIN();
