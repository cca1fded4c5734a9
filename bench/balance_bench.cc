// Balanced partitioning and micro-batch planning on long-tail lengths.
//
//   BM_Partition/<rows>/<parts>/<equal>/<algorithm>
//     algorithm 0 = auto, 1 = Karmarkar–Karp, 2 = greedy LPT, 3 = KK without
//     refinement, 4 = greedy without refinement. Counter max/bound: heaviest
//     part over the lower bound max(total / k, largest row).
//   BM_PlanRound/<planner>/<padded>
//     4,096 rows over 8 ranks, micro-batches of at most 16,384 tokens
//     (round_to 128 when padded). Counters: micro-batches per rank, rank
//     max/mean, padding ratio.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/balance/cost_model.h"
#include "common/balance/partition.h"
#include "common/balance/round.h"

namespace tdock {
namespace {

// Lognormal lengths (median ~1100 tokens, mean ~1800), capped at 16,384.
std::vector<int64_t> LongTail(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(7.0, 1.0);
  std::vector<int64_t> out(n);
  for (int64_t& l : out) {
    l = static_cast<int64_t>(std::clamp(std::round(dist(rng)), 1.0, 16384.0));
  }
  return out;
}

PartitionOptions OptionsFor(bool equal, int algorithm) {
  PartitionOptions options;
  options.constraint =
      equal ? PartitionConstraint::kEqualSize : PartitionConstraint::kNone;
  switch (algorithm) {
    case 1: options.algorithm = PartitionAlgorithm::kKarmarkarKarp; break;
    case 2: options.algorithm = PartitionAlgorithm::kGreedy; break;
    case 3:
      options.algorithm = PartitionAlgorithm::kKarmarkarKarp;
      options.refine = false;
      break;
    case 4:
      options.algorithm = PartitionAlgorithm::kGreedy;
      options.refine = false;
      break;
    default: options.algorithm = PartitionAlgorithm::kAuto; break;
  }
  return options;
}

void BM_Partition(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  const PartitionOptions options =
      OptionsFor(state.range(2) != 0, static_cast<int>(state.range(3)));
  const std::vector<double> costs = CostModel{}.Costs(LongTail(n, 42));
  std::vector<std::vector<int>> parts;
  for (auto _ : state) {
    parts = *Partition(costs, k, options);
    benchmark::DoNotOptimize(parts.data());
  }
  const std::vector<double> sums = PartCosts(costs, parts);
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  const double bound =
      std::max(total / k, *std::max_element(costs.begin(), costs.end()));
  state.counters["max/bound"] =
      *std::max_element(sums.begin(), sums.end()) / bound;
}

void PartitionArgs(benchmark::internal::Benchmark* b) {
  for (int n : {1024, 4096, 16384, 65536}) {
    for (int k : {8, 64}) {
      for (int equal : {1, 0}) {
        for (int algorithm : {0, 1, 2, 3, 4}) b->Args({n, k, equal, algorithm});
      }
    }
  }
}
BENCHMARK(BM_Partition)->Apply(PartitionArgs)->Unit(benchmark::kMillisecond);

void BM_PlanRound(benchmark::State& state) {
  const std::vector<int64_t> lengths = LongTail(4096, 7);
  RoundOptions options;
  options.dp_size = 8;
  MicroBatchOptions mb;
  mb.max_tokens = 16384;
  mb.planner = state.range(0) == 0 ? MicroBatchPlanner::kBalanced
                                   : MicroBatchPlanner::kPacked;
  mb.padded = state.range(1) != 0;
  mb.round_to = mb.padded ? 128 : 1;
  options.micro_batch = mb;
  RoundPlan round;
  for (auto _ : state) {
    round = *PlanRound(lengths, options);
    benchmark::DoNotOptimize(round.ranks.data());
  }
  state.counters["mb/rank"] =
      static_cast<double>(round.ranks[0].micro_batches.size());
  state.counters["rank max/mean"] = round.stats.rank_cost.max_over_mean();
  state.counters["mb max/mean"] = round.stats.micro_batch_tokens.max_over_mean();
  state.counters["padding"] = round.stats.padding_ratio;
}
BENCHMARK(BM_PlanRound)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tdock
