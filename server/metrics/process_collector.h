// ProcessCollector: the server process as Prometheus metrics, read from
// /proc/self at scrape time: resident memory, CPU time, open file
// descriptors, start time, uptime, and build info with the version.
//
// Thread safety: Collect may run concurrently; the collector holds only
// constants. On a system without /proc the /proc-based samples are left out.
#ifndef TDOCK_SERVER_METRICS_PROCESS_COLLECTOR_H_
#define TDOCK_SERVER_METRICS_PROCESS_COLLECTOR_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace tdock {

class ProcessCollector final : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string version)
      : version_(std::move(version)), started_(absl::Now()) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string version_;
  const absl::Time started_;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_METRICS_PROCESS_COLLECTOR_H_
