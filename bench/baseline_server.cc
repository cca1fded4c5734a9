#include "bench/baseline_server.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baseline.grpc.pb.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace tdock::bench {
namespace {

// Send acknowledges the bytes it received; Fetch copies the requested prefix
// of the payload into the response, as a plain protobuf service must.
class BaselineService final : public Baseline::Service {
 public:
  explicit BaselineService(ByteSpan payload) : payload_(payload) {}

  grpc::Status Send(grpc::ServerContext*, const Blob* request, Ack* ack) override {
    ack->set_bytes(static_cast<int64_t>(request->data().size()));
    if (request->want_checksum()) {
      ack->set_checksum(Checksum(ByteSpan(request->data().data(), request->data().size())));
    }
    return grpc::Status::OK;
  }

  grpc::Status Fetch(grpc::ServerContext*, const FetchRequest* request,
                     Blob* blob) override {
    if (request->bytes() < 0 || request->bytes() > static_cast<int64_t>(payload_.size())) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("Fetch: bytes ", request->bytes(),
                                       " is out of range [0, ", payload_.size(), "]"));
    }
    blob->set_data(payload_.data(), static_cast<size_t>(request->bytes()));
    return grpc::Status::OK;
  }

 private:
  const ByteSpan payload_;
};

}  // namespace

uint64_t Checksum(ByteSpan data) {
  uint64_t hash = 0xcbf29ce484222325ull;
  constexpr uint64_t kPrime = 0x100000001b3ull;
  size_t i = 0;
  for (; i + sizeof(uint64_t) <= data.size(); i += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, data.data() + i, sizeof(word));
    hash = (hash ^ word) * kPrime;
  }
  for (; i < data.size(); ++i) {
    hash = (hash ^ static_cast<unsigned char>(data[i])) * kPrime;
  }
  return hash;
}

absl::StatusOr<std::unique_ptr<BaselineServer>> BaselineServer::Start(
    ByteSpan payload, int max_message_bytes) {
  auto service = std::make_unique<BaselineService>(payload);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError("baseline server: cannot listen on 127.0.0.1:0");
  }
  return std::unique_ptr<BaselineServer>(
      new BaselineServer(std::move(service), std::move(server), port));
}

BaselineServer::BaselineServer(std::unique_ptr<grpc::Service> service,
                               std::unique_ptr<grpc::Server> server, int port)
    : service_(std::move(service)), server_(std::move(server)), port_(port) {}

BaselineServer::~BaselineServer() {
  server_->Shutdown();
  server_->Wait();
}

}  // namespace tdock::bench
