#include "common/balance/stats.h"

#include <algorithm>

namespace tdock {

Spread Summarize(absl::Span<const double> values) {
  Spread out;
  if (values.empty()) return out;
  const auto [min, max] = std::minmax_element(values.begin(), values.end());
  out.min = *min;
  out.max = *max;
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / static_cast<double>(values.size());
  return out;
}

void BalanceStatsBuilder::AddRank(double cost, int64_t tokens) {
  rank_cost_.push_back(cost);
  rank_tokens_.push_back(static_cast<double>(tokens));
  tokens_ += tokens;
}

void BalanceStatsBuilder::AddMicroBatch(const MicroBatch& micro_batch) {
  micro_batch_cost_.push_back(micro_batch.cost);
  micro_batch_tokens_.push_back(static_cast<double>(micro_batch.tokens));
  padded_tokens_ += micro_batch.padded_tokens;
}

BalanceStats BalanceStatsBuilder::Build() const {
  BalanceStats stats;
  stats.rank_cost = Summarize(rank_cost_);
  stats.rank_tokens = Summarize(rank_tokens_);
  stats.micro_batch_cost = Summarize(micro_batch_cost_);
  stats.micro_batch_tokens = Summarize(micro_batch_tokens_);
  stats.micro_batches = static_cast<int64_t>(micro_batch_cost_.size());
  stats.tokens = tokens_;
  stats.padded_tokens = micro_batch_cost_.empty() ? tokens_ : padded_tokens_;
  stats.padding_ratio =
      tokens_ > 0 ? static_cast<double>(stats.padded_tokens) /
                        static_cast<double>(tokens_)
                  : 1.0;
  return stats;
}

BalanceStats PlanStats(const MicroBatchPlan& plan) {
  BalanceStatsBuilder builder;
  double cost = 0;
  int64_t tokens = 0;
  for (const MicroBatch& mb : plan.micro_batches) {
    builder.AddMicroBatch(mb);
    cost += mb.cost;
    tokens += mb.tokens;
  }
  builder.AddRank(cost, tokens);
  return builder.Build();
}

}  // namespace tdock
