#include "server/service/wait_call.h"

#include <utility>

#include "absl/time/clock.h"
#include "proto/tdock/v1/convert.h"
#include "server/service/byte_buffers.h"

namespace tdock::internal {

void WaitCall::Start(const std::shared_ptr<Dock>& dock, GetInput input,
                     ServiceObserver* observer) {
  dock_ = dock;
  observer_ = observer;
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

void WaitCall::OnCancel() {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (!completed_) id = waiter_id_;
  }
  if (id == 0) return;  // not parked yet (Start cancels) or already done
  if (std::shared_ptr<Dock> dock = dock_.lock()) dock->Cancel(id);
}

void WaitCall::Complete(absl::StatusOr<Batch> result) {
  {
    absl::MutexLock lock(&mu_);
    completed_ = true;
  }
  absl::Status status = result.status();
  if (status.ok()) {
    Observe(*result);
    status = WriteResponse(*std::move(result));
  }
  // Last use of `this`: after Finish, OnDone may delete it at any time.
  Finish(ToGrpcStatus(status));
}

void WaitCall::Observe(const Batch& batch) const {
  if (observer_ == nullptr || batch.rows.empty()) return;
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

absl::Status GetCall::WriteResponse(Batch batch) {
  *response_ = BatchToByteBuffer(std::move(batch));
  return absl::OkStatus();
}

absl::Status SampleCall::WriteResponse(Batch batch) {
  ToProto(batch, response_);
  return absl::OkStatus();
}

}  // namespace tdock::internal
