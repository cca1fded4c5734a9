// RpcMetrics: per-method call metrics, recorded by a gRPC server interceptor.
//
//   RpcMetrics rpc(registry);
//   std::vector<std::unique_ptr<ServerInterceptorFactoryInterface>> creators;
//   creators.push_back(rpc.NewInterceptorFactory());
//   builder.experimental().SetInterceptorCreators(std::move(creators));
//
// Families (README "Metrics"): tdock_requests_total{method,code},
// tdock_request_duration_seconds{method}, tdock_received_bytes_total{method},
// tdock_sent_bytes_total{method}. The Dock service's methods are resolved at
// construction; other methods (the health service) on first use. A call costs
// one small interceptor object and a few atomic increments.
//
// Thread safety: Record and the interceptors run concurrently on gRPC
// threads. Ownership: the registry is borrowed and must outlive this object,
// which must outlive the server using its interceptors.
#ifndef TDOCK_SERVER_METRICS_RPC_METRICS_H_
#define TDOCK_SERVER_METRICS_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace grpc::experimental {
class ServerInterceptorFactoryInterface;
}  // namespace grpc::experimental

namespace tdock {

class RpcMetrics final {
 public:
  explicit RpcMetrics(prometheus::Registry& registry);
  RpcMetrics(const RpcMetrics&) = delete;
  RpcMetrics& operator=(const RpcMetrics&) = delete;

  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // One finished call. `full_method`: "/tdock.v1.Dock/Put"; `code`: a gRPC
  // status code (0..16).
  void Record(std::string_view full_method, int code, absl::Duration latency,
              int64_t received_bytes, int64_t sent_bytes);

  // The label of a method: the RPC name for the Dock service, the full name
  // without the leading '/' otherwise.
  static std::string MethodLabel(std::string_view full_method);

 private:
  static constexpr int kCodes = 17;
  // One method's series; requests are resolved per code on first use.
  struct Method {
    std::string label;
    prometheus::Histogram* duration = nullptr;
    prometheus::Counter* received = nullptr;
    prometheus::Counter* sent = nullptr;
    std::array<std::atomic<prometheus::Counter*>, kCodes> requests{};
  };

  Method& Find(std::string_view full_method);
  Method& AddLocked(std::string full_method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& received_;
  prometheus::Family<prometheus::Counter>& sent_;

  absl::Mutex mu_;
  // Nodes are stable: Method pointers stay valid while this object lives.
  std::map<std::string, std::unique_ptr<Method>, std::less<>> methods_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock

#endif  // TDOCK_SERVER_METRICS_RPC_METRICS_H_
