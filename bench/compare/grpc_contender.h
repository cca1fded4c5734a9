// The plain gRPC contender's shared pieces: the payload that the baseline
// server (tdock_compare --serve_baseline) returns from Fetch, generated the
// same way in the server and in the client so that the client can check it.
#ifndef TDOCK_BENCH_COMPARE_GRPC_CONTENDER_H_
#define TDOCK_BENCH_COMPARE_GRPC_CONTENDER_H_

#include <cstdint>
#include <memory>

#include "bench/compare/workload.h"

namespace tdock::compare {

// The Fetch payload: at least `bytes` bytes, identical in every process.
std::unique_ptr<Buffer> BaselinePayload(int64_t bytes);

}  // namespace tdock::compare

#endif  // TDOCK_BENCH_COMPARE_GRPC_CONTENDER_H_
