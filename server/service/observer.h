// ServiceObserver: what the data plane reports as it serves, for metrics.
//
// The service calls it on gRPC threads, concurrently, after the work is done
// and before the call finishes; an implementation must be thread-safe, must
// not block, and must outlive the service. No gRPC or protobuf types cross it.
#ifndef TDOCK_SERVER_SERVICE_OBSERVER_H_
#define TDOCK_SERVER_SERVICE_OBSERVER_H_

#include <cstdint>
#include <string_view>

#include "absl/time/time.h"
#include "common/balance/stats.h"

namespace tdock {

// A Get or Sample that handed out rows.
struct ServedGet {
  std::string_view dock;
  std::string_view consumer;
  int32_t rank = 0;
  int64_t step = 0;
  int64_t round = -1;  // BALANCED: the round of this share; -1 otherwise
  int64_t rows = 0;
  // From the call's arrival until the dock handed out its rows (0 when they
  // were ready at once).
  absl::Duration waited;
  // The round's (BALANCED) or the batch's micro-batch statistics; null when
  // the consumer has neither.
  const BalanceStats* balance = nullptr;
};

class ServiceObserver {
 public:
  virtual ~ServiceObserver() = default;
  virtual void OnGetServed(const ServedGet& get) = 0;
  // Cell bytes this server took in (a Put's) or sent out (a Get's, a
  // Read's, a shard's ReadCells). A controller's cell locations are not
  // payload: it reports none.
  virtual void OnPayload(int64_t in_bytes, int64_t out_bytes) {}
  // Of those, the bytes a shard's same-host clients wrote or read in its
  // shared memory (no socket crossed).
  virtual void OnShmPayload(int64_t in_bytes, int64_t out_bytes) {}
  // Readers' pins of a shard's shared memory taken (+) or given back (-).
  virtual void OnShmPins(int64_t change) {}
  // A controller declared one of its shards lost.
  virtual void OnShardLost() {}
  // Why a Put waits at a shard rather than at its controller.
  enum class ShardWait { kAdmission, kMemory };
  // A Put began to wait at this shard (once a Put and reason).
  virtual void OnShardWait(ShardWait reason) {}
  // A shard's watch of its controller's step feed started (its snapshot
  // applied) or ended.
  virtual void OnStepFeed(bool live) {}
};

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVICE_OBSERVER_H_
