// DockCollector: dock state as Prometheus metrics, read at scrape time.
//
//   auto collector = std::make_shared<DockCollector>(RegistrySource(&registry));
//   exposer.RegisterCollectable(collector);
//
// Each scrape calls the source once and turns the DockStats snapshots into
// metric families (tdock_rows_ready, tdock_rows_available, ... : see README
// "Metrics"). Nothing runs on the data path: Dock::Stats() reads the bitmaps
// and counters without stopping Puts and Gets.
//
// Thread safety: Collect may run concurrently (the exposer's threads); the
// source must allow that. Ownership: a registry source borrows the registry,
// which must outlive the collector.
#ifndef TDOCK_SERVER_METRICS_DOCK_COLLECTOR_H_
#define TDOCK_SERVER_METRICS_DOCK_COLLECTOR_H_

#include <functional>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/dock/registry.h"
#include "server/dock/types.h"

namespace tdock {

class DockCollector final : public prometheus::Collectable {
 public:
  // Returns a snapshot of every dock.
  using Source = std::function<std::vector<DockStats>()>;

  explicit DockCollector(Source source) : source_(std::move(source)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Source source_;
};

// The Stats() of every dock of `registry`.
DockCollector::Source RegistrySource(DockRegistry* registry);

}  // namespace tdock

#endif  // TDOCK_SERVER_METRICS_DOCK_COLLECTOR_H_
