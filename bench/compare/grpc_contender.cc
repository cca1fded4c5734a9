// The plain gRPC contender: tdock.bench.Baseline (bench/baseline.proto), a
// unary service carrying a chunk's bytes in one protobuf `bytes` field, served
// by bench/baseline_server.cc in its own process (tdock_compare
// --serve_baseline).
//
// Put pass: one Send per chunk whose Blob holds the chunk's bytes (all its
// columns back to back). Blobs are built in Prepare, outside timing, so only
// serialization and transfer are timed, as in bench/transport_bench.cc. Get
// pass: one Fetch per chunk of the chunk's size; the server copies that many
// bytes of its payload into the response, as a plain service must.
#include "bench/compare/grpc_contender.h"

#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baseline.grpc.pb.h"
#include "bench/baseline_server.h"
#include "bench/compare/contender.h"
#include "common/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace tdock::compare {
namespace {

constexpr int kMaxMessageBytes = 1 << 30;
constexpr uint64_t kBaselineSeed = 0x5eed0ba5e11e;

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view call) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("plain gRPC ", call, ": ", status.error_message()));
}

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
}

class GrpcContender final : public Contender {
 public:
  explicit GrpcContender(std::unique_ptr<bench::Baseline::Stub> stub)
      : stub_(std::move(stub)) {}

  std::string name() const override { return "grpc"; }

  absl::Status Prepare(const Workload& workload) override {
    workload_ = &workload;
    blobs_.clear();
    int64_t largest = 0;
    for (const Chunk& chunk : workload.chunks()) {
      bench::Blob& blob = blobs_.emplace_back();
      std::string* data = blob.mutable_data();
      data->reserve(workload.ChunkBytes(chunk));
      for (int64_t c = 0; c < workload.shape().columns; ++c) {
        const ByteSpan rows = workload.Rows(c, chunk.begin, chunk.end);
        data->append(rows.data(), rows.size());
      }
      largest = std::max(largest, workload.ChunkBytes(chunk));
    }
    payload_ = BaselinePayload(largest);
    return absl::OkStatus();
  }

  absl::Status Verify() override {
    for (bench::Blob& blob : blobs_) {
      blob.set_want_checksum(true);
      bench::Ack ack;
      absl::Status status = Send(blob, ack);
      blob.set_want_checksum(false);
      TDOCK_RETURN_IF_ERROR(status);
      const std::string& data = blob.data();
      if (ack.checksum() != bench::Checksum(ByteSpan(data.data(), data.size()))) {
        return absl::InternalError("plain gRPC Send: the server received other bytes");
      }
    }
    return GetPass(/*check=*/true);
  }

  absl::StatusOr<double> TimePut() override {
    const auto start = std::chrono::steady_clock::now();
    for (const bench::Blob& blob : blobs_) {
      bench::Ack ack;
      TDOCK_RETURN_IF_ERROR(Send(blob, ack));
    }
    return Since(start);
  }

  absl::StatusOr<double> TimeGet() override {
    const auto start = std::chrono::steady_clock::now();
    TDOCK_RETURN_IF_ERROR(GetPass(/*check=*/false));
    return Since(start);
  }

  absl::Status Finish() override {
    blobs_.clear();
    return absl::OkStatus();
  }

 private:
  absl::Status Send(const bench::Blob& blob, bench::Ack& ack) {
    grpc::ClientContext context;
    SetDeadline(context);
    TDOCK_RETURN_IF_ERROR(FromGrpc(stub_->Send(&context, blob, &ack), "Send"));
    if (ack.bytes() != static_cast<int64_t>(blob.data().size())) {
      return absl::InternalError(absl::StrCat("plain gRPC Send: the server got ",
                                              ack.bytes(), " bytes"));
    }
    return absl::OkStatus();
  }

  absl::Status GetPass(bool check) {
    for (const Chunk& chunk : workload_->chunks()) {
      const int64_t bytes = workload_->ChunkBytes(chunk);
      bench::FetchRequest request;
      request.set_bytes(bytes);
      grpc::ClientContext context;
      SetDeadline(context);
      bench::Blob blob;
      TDOCK_RETURN_IF_ERROR(FromGrpc(stub_->Fetch(&context, request, &blob), "Fetch"));
      if (static_cast<int64_t>(blob.data().size()) != bytes ||
          (check && std::memcmp(blob.data().data(), payload_->data(), bytes) != 0)) {
        return absl::InternalError("plain gRPC Fetch: other bytes than the payload");
      }
    }
    return absl::OkStatus();
  }

  std::unique_ptr<bench::Baseline::Stub> stub_;
  const Workload* workload_ = nullptr;
  std::vector<bench::Blob> blobs_;
  std::unique_ptr<Buffer> payload_;
};

}  // namespace

std::unique_ptr<Buffer> BaselinePayload(int64_t bytes) {
  return std::make_unique<Buffer>(bytes, kBaselineSeed);
}

absl::StatusOr<std::unique_ptr<Contender>> MakeGrpcContender(
    const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(10))) {
    return absl::UnavailableError(
        absl::StrCat("plain gRPC server ", address, " not reachable"));
  }
  return std::make_unique<GrpcContender>(bench::Baseline::NewStub(channel));
}

}  // namespace tdock::compare
