// Reactors for the calls that may park in a dock: Get (raw response, zero
// copy), GetStream (the same, in parts) and Sample (typed response, metadata
// only).
#ifndef TDOCK_SERVER_SERVICE_WAIT_CALL_H_
#define TDOCK_SERVER_SERVICE_WAIT_CALL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
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

// The dock side of one Get-like call: starts the dock's Get and cancels its
// parked waiter when the call is cancelled. The dock completes it exactly
// once (served, timed out, CANCELLED after Cancel, UNAVAILABLE at shutdown);
// a served batch is reported to the observer, then the result goes to
// `deliver`.
//
// Thread safety: the dock's callback may run inside Start (immediate
// result), on another thread while Start is still returning, or
// concurrently with Cancel; mu_ orders the waiter id between them. The
// reactor that owns it outlives both (gRPC calls OnDone only after the
// handler returned, Finish was called and OnCancel returned).
// Ownership: holds the dock weakly, so a parked call does not keep a deleted
// dock alive (a deleted or destroyed dock completes its waiters with
// UNAVAILABLE).
class ParkedGet {
 public:
  using Deliver = absl::AnyInvocable<void(absl::StatusOr<Batch>)>;

  ParkedGet() = default;
  ParkedGet(const ParkedGet&) = delete;
  ParkedGet& operator=(const ParkedGet&) = delete;

  // REQUIRES: called once, from the method handler, before the handler
  // returns the reactor.
  void Start(const std::shared_ptr<Dock>& dock, GetInput input,
             ServiceObserver* observer, Deliver deliver);
  // From the reactor's OnCancel.
  void Cancel();

 private:
  // The dock's callback.
  void Complete(absl::StatusOr<Batch> result);
  // Reports a served batch to observer_.
  void Observe(const Batch& batch) const;

  // Set once in Start, before any reaction can use them.
  std::weak_ptr<Dock> dock_;
  ServiceObserver* observer_ = nullptr;
  Deliver deliver_;
  std::string dock_name_;
  std::string consumer_;
  int32_t rank_ = 0;
  absl::Time started_;

  absl::Mutex mu_;
  uint64_t waiter_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0: not parked
  bool completed_ ABSL_GUARDED_BY(mu_) = false;  // the callback has run
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // Cancel has run
};

// One unary Get-like call: the delivered result is written into the
// response, then Finish; Finish is called from nowhere else.
// Ownership: heap-allocated by the method handler, deleted in OnDone.
class WaitCall : public grpc::ServerUnaryReactor {
 public:
  WaitCall(const WaitCall&) = delete;
  WaitCall& operator=(const WaitCall&) = delete;

  // Starts the dock call (ParkedGet::Start).
  void Start(const std::shared_ptr<Dock>& dock, GetInput input,
             ServiceObserver* observer);

 protected:
  WaitCall() = default;
  ~WaitCall() override = default;

  // Writes a served batch into the call's response; runs once, before Finish.
  virtual absl::Status WriteResponse(Batch batch) = 0;

 private:
  void OnCancel() override { parked_.Cancel(); }
  void OnDone() override { delete this; }

  ParkedGet parked_;
};

// GetStream: the batch goes out in parts (BatchToByteBufferParts), one write
// after another; the last write carries the status. Finish (or the write
// that finishes) is called once, from the delivery or from OnWriteDone.
// Ownership: heap-allocated by the method handler, deleted in OnDone; the
// parts (and the arena pins they hold) live until then.
class GetStreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GetStreamCall() = default;
  GetStreamCall(const GetStreamCall&) = delete;
  GetStreamCall& operator=(const GetStreamCall&) = delete;

  // Starts the dock call (ParkedGet::Start).
  void Start(const std::shared_ptr<Dock>& dock, GetInput input,
             ServiceObserver* observer);

 private:
  ~GetStreamCall() override = default;
  void Deliver(absl::StatusOr<Batch> result);
  // Writes parts_[next_], finishing with it when it is the last.
  void WriteNext();
  void OnWriteDone(bool ok) override;
  void OnCancel() override { parked_.Cancel(); }
  void OnDone() override { delete this; }

  ParkedGet parked_;
  // Set once by Deliver, then read by the writes it starts, one at a time.
  std::vector<grpc::ByteBuffer> parts_;
  size_t next_ = 0;
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
