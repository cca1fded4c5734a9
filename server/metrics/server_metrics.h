// ServerMetrics: everything tdock exports to Prometheus, in one object the
// server creates at start-up and injects: the dock collector (read at scrape
// time), the per-method call metrics (a gRPC interceptor), the data plane's
// serve metrics (a ServiceObserver), process metrics, and the HTTP exposer
// serving them at /metrics.
//
//   TDOCK_ASSIGN_OR_RETURN(auto metrics, ServerMetrics::Create(&registry,
//                                           {.listen = "127.0.0.1:9464"}));
//   DockService service(&registry, metrics->observer());
//   builder.experimental().SetInterceptorCreators(...NewInterceptorFactory());
//
// Thread safety: observer(), NewInterceptorFactory() and Scrape() may be used
// from any thread. Ownership: borrows the DockRegistry (must outlive this);
// must outlive the gRPC server that uses its observer and interceptors.
#ifndef TDOCK_SERVER_METRICS_SERVER_METRICS_H_
#define TDOCK_SERVER_METRICS_SERVER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/dock/registry.h"
#include "server/service/observer.h"

namespace grpc::experimental {
class ServerInterceptorFactoryInterface;
}  // namespace grpc::experimental

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace tdock {

class DockCollector;
class ProcessCollector;
class RpcMetrics;
class ServeMetrics;

struct MetricsOptions {
  // host:port of the HTTP endpoint (/metrics); port 0 picks a free port;
  // empty: no endpoint (Scrape() still works). Default: 127.0.0.1:9464.
  std::string listen = "127.0.0.1:9464";
  // Reported by tdock_build_info. Default: the project version.
  std::string version = "";
};

class ServerMetrics final {
 public:
  // Creates every family and, unless options.listen is empty, starts the
  // endpoint. Fails (UNAVAILABLE, naming the address) if it cannot bind.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Create(
      DockRegistry* registry, MetricsOptions options);
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  ServiceObserver* observer();
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // host:port the endpoint listens on, with the bound port; empty without one.
  const std::string& address() const { return address_; }
  // Everything in the Prometheus text format, as a scrape would return it.
  std::string Scrape() const;

 private:
  explicit ServerMetrics(DockRegistry* registry, const std::string& version);

  // Constant after Create.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<RpcMetrics> rpc_;
  std::unique_ptr<ServeMetrics> serve_;
  std::shared_ptr<DockCollector> docks_;
  std::shared_ptr<ProcessCollector> process_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_METRICS_SERVER_METRICS_H_
