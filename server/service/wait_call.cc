#include "server/service/wait_call.h"

#include <utility>

#include "proto/tdock/v1/convert.h"
#include "server/service/byte_buffers.h"

namespace tdock::internal {

void WaitCall::Start(const std::shared_ptr<Dock>& dock, GetInput input) {
  dock_ = dock;
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
  if (status.ok()) status = WriteResponse(*std::move(result));
  // Last use of `this`: after Finish, OnDone may delete it at any time.
  Finish(ToGrpcStatus(status));
}

absl::Status GetCall::WriteResponse(Batch batch) {
  *response_ = BatchToByteBuffer(std::move(batch));
  return absl::OkStatus();
}

absl::Status SampleCall::WriteResponse(Batch batch) {
  response_->set_step(batch.step);
  response_->mutable_rows()->Assign(batch.rows.begin(), batch.rows.end());
  response_->mutable_token_counts()->Assign(batch.token_counts.begin(),
                                            batch.token_counts.end());
  response_->set_end_of_step(batch.end_of_step);
  response_->set_timed_out(batch.timed_out);
  return absl::OkStatus();
}

}  // namespace tdock::internal
