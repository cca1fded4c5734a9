#include "server/metrics/serve_metrics.h"

#include "prometheus/labels.h"

namespace tdock {
namespace {

// 0 (ready at once) and 1 ms .. ~2 min, doubling.
prometheus::Histogram::BucketBoundaries WaitBuckets() {
  prometheus::Histogram::BucketBoundaries buckets{0.0005};
  for (double b = 0.001; b < 150; b *= 2) buckets.push_back(b);
  return buckets;
}

// Ratios >= 1 (1 is perfect balance or no padding).
prometheus::Histogram::BucketBoundaries RatioBuckets() {
  return {1.001, 1.005, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5, 2, 3, 5};
}

}  // namespace

ServeMetrics::ServeMetrics(prometheus::Registry& registry)
    : wait_(prometheus::BuildHistogram()
                .Name("tdock_get_wait_seconds")
                .Help("How long a Get that returned rows waited for them "
                      "(0 when they were ready).")
                .Register(registry)),
      last_imbalance_(prometheus::BuildGauge()
                          .Name("tdock_last_round_rank_imbalance_ratio")
                          .Help("Last balanced round: heaviest rank's cost "
                                "over the mean.")
                          .Register(registry)),
      last_padding_(prometheus::BuildGauge()
                        .Name("tdock_last_round_padding_ratio")
                        .Help("Last batch with micro-batches: padded tokens "
                              "over real tokens.")
                        .Register(registry)),
      imbalance_(prometheus::BuildHistogram()
                     .Name("tdock_round_rank_imbalance_ratio")
                     .Help("Rank imbalance (max/mean cost) of every balanced "
                           "round.")
                     .Register(registry)),
      padding_(prometheus::BuildHistogram()
                   .Name("tdock_round_padding_ratio")
                   .Help("Padding ratio of every batch with micro-batches.")
                   .Register(registry)),
      payload_(prometheus::BuildCounter()
                   .Name("tdock_payload_bytes_total")
                   .Help("Cell bytes this server took in (Puts) and sent out (Gets, Reads, "
                         "a shard's ReadCells); a controller's cell locations are not "
                         "counted: it carries none.")
                   .Register(registry)),
      payload_in_(payload_.Add({{"direction", "in"}})),
      payload_out_(payload_.Add({{"direction", "out"}})),
      shm_payload_(prometheus::BuildCounter()
                       .Name("tdock_shm_payload_bytes_total")
                       .Help("Of tdock_payload_bytes_total, the bytes a shard's same-host "
                             "clients wrote (in) and read (out) in its shared memory; the "
                             "rest crossed a socket (gRPC).")
                       .Register(registry)),
      shm_payload_in_(shm_payload_.Add({{"direction", "in"}})),
      shm_payload_out_(shm_payload_.Add({{"direction", "out"}})),
      shm_pins_(prometheus::BuildGauge()
                    .Name("tdock_shm_pins")
                    .Help("Reads of a shard's shared memory whose cells it keeps for their "
                          "readers (their views alive, or not yet given back).")
                    .Register(registry)
                    .Add({})),
      shards_lost_(prometheus::BuildCounter()
                       .Name("tdock_shards_lost_total")
                       .Help("Shards this controller declared lost (not heard from for "
                             "--shard_lost_after_ms); their rows are dropped as lost.")
                       .Register(registry)
                       .Add({})),
      shard_waits_(prometheus::BuildCounter()
                       .Name("tdock_shard_put_waits_total")
                       .Help("Puts that waited at this shard: for their step to be admitted "
                             "(the controller's step feed), or for memory under "
                             "--shard_memory_limit_mb.")
                       .Register(registry)),
      shard_waits_admission_(shard_waits_.Add({{"reason", "admission"}})),
      shard_waits_memory_(shard_waits_.Add({{"reason", "memory"}})),
      step_feed_up_(prometheus::BuildGauge()
                        .Name("tdock_shard_step_feed_up")
                        .Help("1 while this shard follows its controller's step feed (Puts "
                              "of steps not yet admitted wait here, released steps' cells "
                              "are freed as told); 0: it asks every second instead.")
                        .Register(registry)
                        .Add({})) {}

void ServeMetrics::OnShardLost() { shards_lost_.Increment(); }

void ServeMetrics::OnStepFeed(bool live) { step_feed_up_.Set(live ? 1 : 0); }

void ServeMetrics::OnShardWait(ShardWait reason) {
  (reason == ShardWait::kAdmission ? shard_waits_admission_ : shard_waits_memory_).Increment();
}

void ServeMetrics::OnPayload(int64_t in_bytes, int64_t out_bytes) {
  if (in_bytes > 0) payload_in_.Increment(static_cast<double>(in_bytes));
  if (out_bytes > 0) payload_out_.Increment(static_cast<double>(out_bytes));
}

void ServeMetrics::OnShmPayload(int64_t in_bytes, int64_t out_bytes) {
  if (in_bytes > 0) shm_payload_in_.Increment(static_cast<double>(in_bytes));
  if (out_bytes > 0) shm_payload_out_.Increment(static_cast<double>(out_bytes));
}

void ServeMetrics::OnShmPins(int64_t change) {
  shm_pins_.Increment(static_cast<double>(change));
}

ServeMetrics::Series& ServeMetrics::Find(std::string_view dock,
                                         std::string_view consumer,
                                         bool with_balance) {
  Key key{std::string(dock), std::string(consumer)};
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = series_.find(key);
    if (it != series_.end() && (!with_balance || it->second->padding != nullptr)) {
      return *it->second;
    }
  }
  absl::MutexLock lock(&mu_);
  const prometheus::Labels labels{{"dock", key.first}, {"consumer", key.second}};
  std::unique_ptr<Series>& slot = series_[key];
  if (slot == nullptr) {
    slot = std::make_unique<Series>();
    slot->wait = &wait_.Add(labels, WaitBuckets());
  }
  if (with_balance && slot->padding == nullptr) {
    slot->last_imbalance = &last_imbalance_.Add(labels);
    slot->last_padding = &last_padding_.Add(labels);
    slot->imbalance = &imbalance_.Add(labels, RatioBuckets());
    // Readers (under mu_) take a non-null `padding` for all four.
    slot->padding = &padding_.Add(labels, RatioBuckets());
  }
  return *slot;
}

void ServeMetrics::OnGetServed(const ServedGet& get) {
  Series& series = Find(get.dock, get.consumer, get.balance != nullptr);
  series.wait->Observe(absl::ToDoubleSeconds(get.waited));
  if (get.balance == nullptr) return;
  // Every rank's share of a balanced round carries the round's statistics:
  // count a round once, at rank 0's share.
  const bool round = get.round >= 0;
  if (round && get.rank != 0) return;
  if (get.balance->micro_batches > 0) {
    series.last_padding->Set(get.balance->padding_ratio);
    series.padding->Observe(get.balance->padding_ratio);
  }
  if (round) {
    const double imbalance = get.balance->rank_cost.max_over_mean();
    series.last_imbalance->Set(imbalance);
    series.imbalance->Observe(imbalance);
  }
}

}  // namespace tdock
