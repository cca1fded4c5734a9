// Balance statistics of a round: how evenly cost and tokens spread over the
// ranks and over the micro-batches, and how much padding the plan carries.
//
//   BalanceStatsBuilder builder;
//   for (const RankPlan& rank : round.ranks) {
//     builder.AddRank(rank.cost, rank.tokens);
//     for (const MicroBatch& mb : rank.micro_batches) builder.AddMicroBatch(mb);
//   }
//   BalanceStats stats = builder.Build();
//   // stats.rank_cost.max_over_mean() == 1.0 means perfectly balanced ranks.
#ifndef TDOCK_COMMON_BALANCE_STATS_H_
#define TDOCK_COMMON_BALANCE_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/balance/micro_batch.h"

namespace tdock {

// Min, max and mean of a set of values; all zero for an empty set.
struct Spread {
  double min = 0;
  double max = 0;
  double mean = 0;

  // max / mean; 1 when the mean is 0 (nothing to balance).
  double max_over_mean() const { return mean > 0 ? max / mean : 1.0; }

  bool operator==(const Spread&) const = default;
};

Spread Summarize(absl::Span<const double> values);

struct BalanceStats {
  // Over ranks: cost(L) sums and token sums.
  Spread rank_cost;
  Spread rank_tokens;
  // Over all micro-batches of all ranks (empty ones included); all zero when
  // no micro-batches were planned.
  Spread micro_batch_cost;
  Spread micro_batch_tokens;
  int64_t micro_batches = 0;
  // Real tokens of all ranks.
  int64_t tokens = 0;
  // Σ MicroBatch::padded_tokens: rows × padded length under padded
  // counting, real tokens under packed counting; equals `tokens` when no
  // micro-batches were planned.
  int64_t padded_tokens = 0;
  // padded_tokens / tokens; 1 when there are no tokens.
  double padding_ratio = 1;

  bool operator==(const BalanceStats&) const = default;
};

// Accumulates a round rank by rank. Thread-compatible value type.
class BalanceStatsBuilder final {
 public:
  void AddRank(double cost, int64_t tokens);
  void AddMicroBatch(const MicroBatch& micro_batch);
  BalanceStats Build() const;

 private:
  std::vector<double> rank_cost_;
  std::vector<double> rank_tokens_;
  std::vector<double> micro_batch_cost_;
  std::vector<double> micro_batch_tokens_;
  int64_t tokens_ = 0;
  int64_t padded_tokens_ = 0;
};

// Stats of one rank's micro-batch plan (a round of one rank).
BalanceStats PlanStats(const MicroBatchPlan& plan);

}  // namespace tdock

#endif  // TDOCK_COMMON_BALANCE_STATS_H_
