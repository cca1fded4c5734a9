#include "server/metrics/rpc_metrics.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_interceptor.h"
#include "tdock/v1/dock.pb.h"

namespace tdock {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr std::string_view kDockPrefix = "/tdock.v1.Dock/";

// Size of a received request, given the void* an interceptor sees for it.
using RequestSize = int64_t (*)(void* message);

template <typename Message>
int64_t ProtoSize(void* message) {
  return static_cast<int64_t>(static_cast<Message*>(message)->ByteSizeLong());
}

int64_t RawSize(void* message) {
  return static_cast<int64_t>(static_cast<grpc::ByteBuffer*>(message)->Length());
}

// The Dock service's methods and their request types (Put, Get, GetStream
// and Read are raw ByteBuffer methods).
const std::map<std::string_view, RequestSize>& DockMethods() {
  static const auto* methods = new std::map<std::string_view, RequestSize>{
      {"CreateDock", &ProtoSize<v1::CreateDockRequest>},
      {"DeleteDock", &ProtoSize<v1::DeleteDockRequest>},
      {"ListDocks", &ProtoSize<v1::ListDocksRequest>},
      {"GetDockStatus", &ProtoSize<v1::GetDockStatusRequest>},
      {"AddConsumer", &ProtoSize<v1::AddConsumerRequest>},
      {"RemoveConsumer", &ProtoSize<v1::RemoveConsumerRequest>},
      {"AddColumn", &ProtoSize<v1::AddColumnRequest>},
      {"ListRows", &ProtoSize<v1::ListRowsRequest>},
      {"ReleaseStep", &ProtoSize<v1::ReleaseStepRequest>},
      {"SetVersion", &ProtoSize<v1::SetVersionRequest>},
      {"Reserve", &ProtoSize<v1::ReserveRequest>},
      {"Drop", &ProtoSize<v1::DropRequest>},
      {"Seal", &ProtoSize<v1::SealRequest>},
      {"Ack", &ProtoSize<v1::AckRequest>},
      {"Nack", &ProtoSize<v1::AckRequest>},
      {"Checkpoint", &ProtoSize<v1::CheckpointRequest>},
      {"Put", &RawSize},
      {"Get", &RawSize},
      {"GetStream", &RawSize},
      {"Sample", &ProtoSize<v1::GetRequest>},
      {"Read", &RawSize},
  };
  return *methods;
}

// Request sizer of a method; null when its request type is unknown here.
RequestSize SizerOf(std::string_view full_method) {
  if (full_method.substr(0, kDockPrefix.size()) != kDockPrefix) return nullptr;
  const auto& methods = DockMethods();
  auto it = methods.find(full_method.substr(kDockPrefix.size()));
  return it == methods.end() ? nullptr : it->second;
}

// Measures one call: bytes of the request and the response, and the time
// from its creation (the call's arrival) to the status being sent.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(RpcMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), sizer_(SizerOf(method)),
        started_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        sizer_ != nullptr && methods->GetRecvMessage() != nullptr) {
      received_ += sizer_(methods->GetRecvMessage());
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      // Raw responses are ByteBuffers already; typed ones are serialized
      // here instead of a moment later.
      if (grpc::ByteBuffer* sent = methods->GetSerializedSendMessage()) {
        sent_ += static_cast<int64_t>(sent->Length());
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Record(method_, methods->GetSendStatus().error_code(),
                       absl::Now() - started_, received_, sent_);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  const char* const method_;  // owned by gRPC, valid for the call
  const RequestSize sizer_;
  const absl::Time started_;
  int64_t received_ = 0;
  int64_t sent_ = 0;
};

class RpcInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(metrics_, info->method());  // gRPC deletes it
  }

 private:
  RpcMetrics* const metrics_;
};

// 0.5 ms .. ~65 s, doubling.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double b = 0.0005; b < 70; b *= 2) buckets.push_back(b);
  return buckets;
}

}  // namespace

RpcMetrics::RpcMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("tdock_requests_total")
                    .Help("Finished calls by method and gRPC status code.")
                    .Register(registry)),
      duration_(prometheus::BuildHistogram()
                    .Name("tdock_request_duration_seconds")
                    .Help("Call latency from arrival to status (a Get's "
                          "includes its wait).")
                    .Register(registry)),
      received_(prometheus::BuildCounter()
                    .Name("tdock_received_bytes_total")
                    .Help("Request message bytes by method.")
                    .Register(registry)),
      sent_(prometheus::BuildCounter()
                .Name("tdock_sent_bytes_total")
                .Help("Response message bytes by method.")
                .Register(registry)) {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, sizer] : DockMethods()) {
    AddLocked(std::string(kDockPrefix) + std::string(name));
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::NewInterceptorFactory() {
  return std::make_unique<RpcInterceptorFactory>(this);
}

std::string RpcMetrics::MethodLabel(std::string_view full_method) {
  if (full_method.substr(0, kDockPrefix.size()) == kDockPrefix) {
    return std::string(full_method.substr(kDockPrefix.size()));
  }
  if (!full_method.empty() && full_method[0] == '/') full_method.remove_prefix(1);
  return std::string(full_method);
}

RpcMetrics::Method& RpcMetrics::AddLocked(std::string full_method) {
  auto method = std::make_unique<Method>();
  method->label = MethodLabel(full_method);
  method->duration = &duration_.Add({{"method", method->label}}, LatencyBuckets());
  method->received = &received_.Add({{"method", method->label}});
  method->sent = &sent_.Add({{"method", method->label}});
  Method& ref = *method;
  methods_.emplace(std::move(full_method), std::move(method));
  return ref;
}

RpcMetrics::Method& RpcMetrics::Find(std::string_view full_method) {
  absl::MutexLock lock(&mu_);
  auto it = methods_.find(full_method);
  if (it != methods_.end()) return *it->second;
  return AddLocked(std::string(full_method));
}

void RpcMetrics::Record(std::string_view full_method, int code,
                        absl::Duration latency, int64_t received_bytes,
                        int64_t sent_bytes) {
  Method& method = Find(full_method);
  if (code < 0 || code >= kCodes) code = 2;  // UNKNOWN
  // acquire/release: a counter published by one thread is fully built when
  // another loads it; Family::Add returns the same counter to racing adders.
  prometheus::Counter* requests = method.requests[code].load(std::memory_order_acquire);
  if (requests == nullptr) {
    static constexpr const char* kNames[kCodes] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
        "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    requests = &requests_.Add({{"method", method.label}, {"code", kNames[code]}});
    method.requests[code].store(requests, std::memory_order_release);
  }
  requests->Increment();
  method.duration->Observe(absl::ToDoubleSeconds(latency));
  if (received_bytes > 0) method.received->Increment(static_cast<double>(received_bytes));
  if (sent_bytes > 0) method.sent->Increment(static_cast<double>(sent_bytes));
}

}  // namespace tdock
