// BaselineServer: a plain gRPC unary service (tdock.bench.Baseline) that
// carries a payload in one protobuf `bytes` field, as an application without
// tdock would. transport_bench compares tdock's Put and Get against its Send
// and Fetch, over the same loopback and with the same message size limits.
//
// Thread safety: the service handles calls on gRPC's threads; Start and the
// destructor are called from one thread.
// Ownership: borrows the payload that Fetch serves; it must outlive the server.
#ifndef TDOCK_BENCH_BASELINE_SERVER_H_
#define TDOCK_BENCH_BASELINE_SERVER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/packed.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace tdock::bench {

// FNV-1a over 64-bit words (and the trailing bytes): cheap enough to verify
// tens of MiB once, outside timing.
uint64_t Checksum(ByteSpan data);

class BaselineServer final {
 public:
  // Listens on 127.0.0.1 (a free port). Fetch returns prefixes of `payload`.
  static absl::StatusOr<std::unique_ptr<BaselineServer>> Start(
      ByteSpan payload, int max_message_bytes);
  ~BaselineServer();  // shuts the server down
  BaselineServer(const BaselineServer&) = delete;
  BaselineServer& operator=(const BaselineServer&) = delete;

  int port() const { return port_; }

 private:
  BaselineServer(std::unique_ptr<grpc::Service> service,
                 std::unique_ptr<grpc::Server> server, int port);

  // The server is destroyed before the service it calls.
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace tdock::bench

#endif  // TDOCK_BENCH_BASELINE_SERVER_H_
