#include "server/metrics/server_metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
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

namespace {

// Opens and closes a TCP connection to `address` (host:port; a wildcard host
// means this host). Errors are ignored.
void Knock(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

}  // namespace

ServerMetrics::~ServerMetrics() {
  if (exposer_ == nullptr) return;
  // civetweb's listener notices a stop only when its poll of the listening
  // socket returns, which takes up to two seconds on an idle server: a
  // connection now and then makes it return at once, so SIGTERM stops the
  // server promptly.
  std::atomic<bool> stopped{false};
  std::thread knocker([this, &stopped] {
    while (!stopped.load(std::memory_order_acquire)) {
      Knock(address_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped.store(true, std::memory_order_release);
  knocker.join();
}

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
