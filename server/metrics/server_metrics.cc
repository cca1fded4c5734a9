#include "server/metrics/server_metrics.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/metrics/dock_collector.h"
#include "server/metrics/process_collector.h"
#include "server/metrics/rpc_metrics.h"
#include "server/metrics/serve_metrics.h"

#ifndef TDOCK_VERSION
#define TDOCK_VERSION "unknown"
#endif

namespace tdock {

ServerMetrics::ServerMetrics(DockRegistry* registry, const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_(std::make_unique<RpcMetrics>(*registry_)),
      serve_(std::make_unique<ServeMetrics>(*registry_)),
      docks_(std::make_shared<DockCollector>(RegistrySource(registry))),
      process_(std::make_shared<ProcessCollector>(
          version.empty() ? TDOCK_VERSION : version)) {}

ServerMetrics::~ServerMetrics() = default;

absl::StatusOr<std::unique_ptr<ServerMetrics>> ServerMetrics::Create(
    DockRegistry* registry, MetricsOptions options) {
  std::unique_ptr<ServerMetrics> metrics(
      new ServerMetrics(registry, options.version));
  if (options.listen.empty()) return metrics;
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == options.listen.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", options.listen, "' is not host:port"));
  }
  try {
    // civetweb throws when it cannot bind; nothing else here does.
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(options.listen, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", options.listen, ": ", e.what()));
  }
  for (const std::weak_ptr<prometheus::Collectable>& c :
       std::vector<std::weak_ptr<prometheus::Collectable>>{
           metrics->registry_, metrics->docks_, metrics->process_}) {
    metrics->exposer_->RegisterCollectable(c, "/metrics");
  }
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  metrics->address_ = absl::StrCat(options.listen.substr(0, colon), ":",
                                   ports.empty() ? 0 : ports.front());
  return metrics;
}

ServiceObserver* ServerMetrics::observer() { return serve_.get(); }

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServerMetrics::NewInterceptorFactory() {
  return rpc_->NewInterceptorFactory();
}

std::string ServerMetrics::Scrape() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (const prometheus::Collectable* c :
       {static_cast<const prometheus::Collectable*>(docks_.get()),
        static_cast<const prometheus::Collectable*>(process_.get())}) {
    std::vector<prometheus::MetricFamily> more = c->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tdock
