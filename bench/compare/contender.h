// Contender: one way of moving a workload's chunks from a client to a server
// (Put) and back (Get), timed per pass by tdock_compare. Implementations:
// tdock (the C++ client), Redis (hiredis) and a plain gRPC unary service.
//
// A pass is Put of every chunk, then Get of every chunk; Get reads what the
// preceding Put wrote where the contender stores data. Verify runs one such
// pass and compares every byte read back with the workload.
//
// Thread safety: one thread uses a contender.
#ifndef TDOCK_BENCH_COMPARE_CONTENDER_H_
#define TDOCK_BENCH_COMPARE_CONTENDER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/compare/workload.h"

namespace tdock::compare {

class Contender {
 public:
  virtual ~Contender() = default;

  virtual std::string name() const = 0;
  // Untimed set-up for a workload (a dock, keys, request buffers).
  virtual absl::Status Prepare(const Workload& workload) = 0;
  // One Put pass and one Get pass, checking every byte read back.
  virtual absl::Status Verify() = 0;
  // Seconds of one Put pass over all chunks.
  virtual absl::StatusOr<double> TimePut() = 0;
  // Seconds of one Get pass over all chunks (of the last Put pass).
  virtual absl::StatusOr<double> TimeGet() = 0;
  // Untimed clean-up of what Prepare made.
  virtual absl::Status Finish() = 0;
};

// The contenders; addresses are host:port.
absl::StatusOr<std::unique_ptr<Contender>> MakeTdockContender(
    const std::string& address);
// wire: commands written with writev, replies read 1 MiB at a time (see
// redis_wire.h); false: stock hiredis redisCommandArgv.
absl::StatusOr<std::unique_ptr<Contender>> MakeRedisContender(
    const std::string& address, bool wire);
absl::StatusOr<std::unique_ptr<Contender>> MakeGrpcContender(
    const std::string& address);

}  // namespace tdock::compare

#endif  // TDOCK_BENCH_COMPARE_CONTENDER_H_
