// TransportEnv: what transport_bench runs against, in one process: a real
// tdock::Server on 127.0.0.1 with one Put dock and one Get dock per payload
// size, a tdock::Client connected to it, the plain gRPC BaselineServer on
// another loopback port with a stub, and one prepared payload.
//
// Payloads are batches of kRows rows × `tokens` int32 tokens, laid out as one
// packed column: row i is the `tokens` values starting at element i·tokens of
// the payload buffer (64-byte aligned, seeded random values). Every size uses
// a prefix of the same buffer.
//
// Thread safety: one benchmark thread uses it at a time.
// Ownership: owns the servers, the client, the stub and the payload buffer.
#ifndef TDOCK_BENCH_TRANSPORT_ENV_H_
#define TDOCK_BENCH_TRANSPORT_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baseline.grpc.pb.h"
#include "bench/baseline_server.h"
#include "client/client.h"
#include "common/packed.h"
#include "server/dock/dock.h"
#include "server/server.h"

namespace tdock::bench {

inline constexpr int64_t kRows = 256;
inline constexpr char kColumn[] = "tokens";
inline constexpr char kConsumer[] = "trainer";

class TransportEnv final {
 public:
  // Starts both servers with docks for every size in `tokens_per_row`.
  static absl::StatusOr<std::unique_ptr<TransportEnv>> Start(
      const std::vector<int64_t>& tokens_per_row);
  ~TransportEnv();
  TransportEnv(const TransportEnv&) = delete;
  TransportEnv& operator=(const TransportEnv&) = delete;

  Client& client() { return *client_; }
  Baseline::Stub& baseline() { return *baseline_stub_; }

  static std::string PutDock(int64_t tokens);
  static std::string GetDock(int64_t tokens);
  // The server-side dock, for untimed setup (fill, release) and verification.
  absl::StatusOr<std::shared_ptr<Dock>> FindDock(const std::string& name);
  // A step of `dock` never used before (steps only move forward).
  int64_t NextStep(const std::string& dock) { return next_step_[dock]++; }

  // The payload of one batch: kRows · tokens int32 values.
  ByteSpan Payload(int64_t tokens) const;
  // Offsets of the packed column (kRows + 1 entries).
  static std::vector<int64_t> Offsets(int64_t tokens);

  // Writes a full batch of `tokens` into `step` of `dock` through the core
  // (no transport).
  absl::Status FillStep(Dock& dock, int64_t step, int64_t tokens) const;
  // Checks that `column` holds exactly the batch of `tokens`, rows in order.
  absl::Status Verify(const PackedColumn& column, int64_t tokens) const;

 private:
  TransportEnv() = default;

  std::unique_ptr<char, void (*)(void*)> payload_{nullptr, nullptr};
  int64_t payload_bytes_ = 0;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<BaselineServer> baseline_server_;
  std::unique_ptr<Baseline::Stub> baseline_stub_;
  std::map<std::string, int64_t> next_step_;
};

}  // namespace tdock::bench

#endif  // TDOCK_BENCH_TRANSPORT_ENV_H_
