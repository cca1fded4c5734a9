#include "server/service/wait_call.h"

#include <utility>

#include "absl/time/clock.h"
#include "proto/tdock/v1/convert.h"
#include "server/service/byte_buffers.h"

namespace tdock::internal {

void ParkedGet::Start(const std::shared_ptr<Dock>& dock, GetInput input,
                      ServiceObserver* observer, Deliver deliver) {
  dock_ = dock;
  observer_ = observer;
  deliver_ = std::move(deliver);
  if (observer_ != nullptr) {
    dock_name_ = dock->name();
    consumer_ = input.consumer;
    rank_ = input.rank;
    started_ = absl::Now();
  }
  // No lock is held across dock->Get: its callback may run inside it.
  const uint64_t id = dock->Get(
      std::move(input),
      [this](absl::StatusOr<Batch> result) { Complete(std::move(result)); });
  if (id == 0) return;  // completed already
  bool cancel_now = false;
  {
    absl::MutexLock lock(&mu_);
    if (completed_) return;
    waiter_id_ = id;
    cancel_now = cancelled_;
  }
  if (cancel_now) dock->Cancel(id);
}

void ParkedGet::Cancel() {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (!completed_) id = waiter_id_;
  }
  if (id == 0) return;  // not parked yet (Start cancels) or already done
  if (std::shared_ptr<Dock> dock = dock_.lock()) dock->Cancel(id);
}

void ParkedGet::Complete(absl::StatusOr<Batch> result) {
  {
    absl::MutexLock lock(&mu_);
    completed_ = true;
  }
  if (result.ok()) Observe(*result);
  // Last use of `this`: the delivery finishes the call, after which its
  // reactor (and this) may be deleted at any time.
  deliver_(std::move(result));
}

void ParkedGet::Observe(const Batch& batch) const {
  if (observer_ == nullptr || batch.rows.empty()) return;
  if (!batch.cell_locations) observer_->OnPayload(0, batch.payload_bytes());
  ServedGet served;
  served.dock = dock_name_;
  served.consumer = consumer_;
  served.rank = rank_;
  served.step = batch.step;
  served.round = batch.round;
  served.rows = static_cast<int64_t>(batch.rows.size());
  served.waited = absl::Now() - started_;
  if (batch.balance.has_value()) served.balance = &*batch.balance;
  observer_->OnGetServed(served);
}

void WaitCall::Start(const std::shared_ptr<Dock>& dock, GetInput input,
                     ServiceObserver* observer) {
  parked_.Start(dock, std::move(input), observer, [this](absl::StatusOr<Batch> result) {
    absl::Status status = result.status();
    if (status.ok()) status = WriteResponse(*std::move(result));
    Finish(ToGrpcStatus(status));
  });
}

void GetStreamCall::Start(const std::shared_ptr<Dock>& dock, GetInput input,
                          ServiceObserver* observer) {
  parked_.Start(dock, std::move(input), observer,
                [this](absl::StatusOr<Batch> result) { Deliver(std::move(result)); });
}

void GetStreamCall::Deliver(absl::StatusOr<Batch> result) {
  if (!result.ok()) {
    Finish(ToGrpcStatus(result.status()));
    return;
  }
  parts_ = BatchToByteBufferParts(*std::move(result));
  WriteNext();
}

void GetStreamCall::WriteNext() {
  grpc::ByteBuffer* part = &parts_[next_++];
  if (next_ == parts_.size()) {
    StartWriteAndFinish(part, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    StartWrite(part);
  }
}

void GetStreamCall::OnWriteDone(bool ok) {
  if (!ok) {  // the call is over (the client went away); no more writes
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "GetStream: a write failed"));
    return;
  }
  WriteNext();
}

absl::Status GetCall::WriteResponse(Batch batch) {
  *response_ = BatchToByteBuffer(std::move(batch));
  return absl::OkStatus();
}

absl::Status SampleCall::WriteResponse(Batch batch) {
  ToProto(batch, response_);
  return absl::OkStatus();
}

}  // namespace tdock::internal
