// ServeMetrics: the data plane's metrics per dock and consumer, fed by the
// service as it hands out rows (a ServiceObserver):
// tdock_get_wait_seconds (how long a Get waited for its rows: the pipeline
// bubble), and of balanced rounds and micro-batch plans the rank imbalance
// and padding ratio, as last-value gauges and as histograms.
//
// The series of a (dock, consumer) are resolved on its first served Get and
// kept; later Gets find them with one map lookup under a reader lock.
//
// Thread safety: OnGetServed runs concurrently on gRPC threads. Ownership:
// the registry is borrowed and must outlive this object.
#ifndef TDOCK_SERVER_METRICS_SERVE_METRICS_H_
#define TDOCK_SERVER_METRICS_SERVE_METRICS_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/service/observer.h"

namespace tdock {

class ServeMetrics final : public ServiceObserver {
 public:
  explicit ServeMetrics(prometheus::Registry& registry);
  ServeMetrics(const ServeMetrics&) = delete;
  ServeMetrics& operator=(const ServeMetrics&) = delete;

  void OnGetServed(const ServedGet& get) override;
  void OnPayload(int64_t in_bytes, int64_t out_bytes) override;
  void OnShmPayload(int64_t in_bytes, int64_t out_bytes) override;
  void OnShmPins(int64_t change) override;
  void OnShardLost() override;
  void OnShardWait(ShardWait reason) override;
  void OnStepFeed(bool live) override;

 private:
  struct Series {
    prometheus::Histogram* wait = nullptr;
    prometheus::Gauge* last_imbalance = nullptr;
    prometheus::Gauge* last_padding = nullptr;
    prometheus::Histogram* imbalance = nullptr;
    prometheus::Histogram* padding = nullptr;
  };
  using Key = std::pair<std::string, std::string>;  // dock, consumer

  // The series of (dock, consumer), created on first use; the balance
  // series only once `with_balance` is asked for (consumers without rounds
  // or micro-batches never export them).
  Series& Find(std::string_view dock, std::string_view consumer,
               bool with_balance);

  prometheus::Family<prometheus::Histogram>& wait_;
  prometheus::Family<prometheus::Gauge>& last_imbalance_;
  prometheus::Family<prometheus::Gauge>& last_padding_;
  prometheus::Family<prometheus::Histogram>& imbalance_;
  prometheus::Family<prometheus::Histogram>& padding_;
  // tdock_payload_bytes_total{direction="in"|"out"}.
  prometheus::Family<prometheus::Counter>& payload_;
  prometheus::Counter& payload_in_;
  prometheus::Counter& payload_out_;
  // tdock_shm_payload_bytes_total{direction}: of those, through a shard's
  // shared memory.
  prometheus::Family<prometheus::Counter>& shm_payload_;
  prometheus::Counter& shm_payload_in_;
  prometheus::Counter& shm_payload_out_;
  // tdock_shm_pins: readers' pins a shard holds.
  prometheus::Gauge& shm_pins_;
  // tdock_shards_lost_total: a controller's shards declared lost.
  prometheus::Counter& shards_lost_;
  // tdock_shard_put_waits_total{reason="admission"|"memory"}: Puts that
  // waited at a shard.
  prometheus::Family<prometheus::Counter>& shard_waits_;
  prometheus::Counter& shard_waits_admission_;
  prometheus::Counter& shard_waits_memory_;
  // tdock_shard_step_feed_up: 1 while a shard follows its controller's
  // step feed.
  prometheus::Gauge& step_feed_up_;

  absl::Mutex mu_;
  // Values are stable (heap nodes): a Series stays valid while this lives.
  absl::flat_hash_map<Key, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock

#endif  // TDOCK_SERVER_METRICS_SERVE_METRICS_H_
