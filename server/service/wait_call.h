// Reactors for the calls that may park in a dock: Get (raw response, zero
// copy) and Sample (typed response, metadata only).
#ifndef TDOCK_SERVER_SERVICE_WAIT_CALL_H_
#define TDOCK_SERVER_SERVICE_WAIT_CALL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/dock/dock.h"
#include "server/dock/types.h"
#include "server/service/observer.h"
#include "tdock/v1/dock.pb.h"

namespace tdock::internal {

// One Get-like call. The dock completes it exactly once through its callback
// (served, timed out, CANCELLED after Cancel, UNAVAILABLE at shutdown), which
// writes the response and calls Finish; Finish is called from nowhere else.
// OnCancel (client cancel or deadline) asks the dock to cancel the parked
// waiter, which makes the callback run.
//
// Thread safety: the dock callback may run inside Start (immediate result),
// on another thread while Start is still returning, or concurrently with
// OnCancel; mu_ orders the waiter id between them. gRPC calls OnDone only
// after the handler has returned, Finish has been called and OnCancel (if
// any) has returned, so `this` is valid in each of those.
// Ownership: heap-allocated by the method handler, deleted in OnDone. Holds
// the dock weakly, so a parked call does not keep a deleted dock alive (a
// deleted or destroyed dock completes its waiters with UNAVAILABLE).
class WaitCall : public grpc::ServerUnaryReactor {
 public:
  WaitCall(const WaitCall&) = delete;
  WaitCall& operator=(const WaitCall&) = delete;

  // Starts the dock call; a served batch is reported to `observer` (may be
  // null). REQUIRES: called once, from the method handler, before the
  // handler returns this reactor.
  void Start(const std::shared_ptr<Dock>& dock, GetInput input,
             ServiceObserver* observer);

 protected:
  WaitCall() = default;
  ~WaitCall() override = default;

  // Writes a served batch into the call's response; runs once, before Finish.
  virtual absl::Status WriteResponse(Batch batch) = 0;

 private:
  void OnCancel() override;
  void OnDone() override { delete this; }
  // The dock's callback: the only place that calls Finish.
  void Complete(absl::StatusOr<Batch> result);

  // Reports a served batch to observer_.
  void Observe(const Batch& batch) const;

  // Set once in Start, before any reaction can use them.
  std::weak_ptr<Dock> dock_;
  ServiceObserver* observer_ = nullptr;
  std::string dock_name_;
  std::string consumer_;
  int32_t rank_ = 0;
  absl::Time started_;

  absl::Mutex mu_;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not parked
  bool completed_ ABSL_GUARDED_BY(mu_) = false;  // the callback has run
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // OnCancel has run
};

// Get: the batch goes out as a raw tdock.v1.GetResponse whose column payload
// is sent from the arena as pinned slices.
class GetCall final : public WaitCall {
 public:
  // `response` is the call's response buffer, owned by gRPC until OnDone.
  explicit GetCall(grpc::ByteBuffer* response) : response_(response) {}

 private:
  absl::Status WriteResponse(Batch batch) override;
  grpc::ByteBuffer* const response_;
};

// Sample: rows and token counts only, as a typed tdock.v1.SampleResponse.
class SampleCall final : public WaitCall {
 public:
  // `response` is owned by gRPC until OnDone.
  explicit SampleCall(v1::SampleResponse* response) : response_(response) {}

 private:
  absl::Status WriteResponse(Batch batch) override;
  v1::SampleResponse* const response_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_SERVICE_WAIT_CALL_H_
