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

namespace {

void FillBalance(const BalanceStats& stats, v1::BalanceStats* out) {
  const wire::BalanceMessage fields = ToBalanceMessage(stats);
  out->set_rank_cost_min(fields.rank_cost_min);
  out->set_rank_cost_max(fields.rank_cost_max);
  out->set_rank_cost_mean(fields.rank_cost_mean);
  out->set_rank_tokens_min(fields.rank_tokens_min);
  out->set_rank_tokens_max(fields.rank_tokens_max);
  out->set_rank_tokens_mean(fields.rank_tokens_mean);
  out->set_micro_batch_tokens_min(fields.micro_batch_tokens_min);
  out->set_micro_batch_tokens_max(fields.micro_batch_tokens_max);
  out->set_micro_batch_tokens_mean(fields.micro_batch_tokens_mean);
  out->set_micro_batches(fields.micro_batches);
  out->set_tokens(fields.tokens);
  out->set_padded_tokens(fields.padded_tokens);
  out->set_padding_ratio(fields.padding_ratio);
}

}  // namespace

absl::Status SampleCall::WriteResponse(Batch batch) {
  response_->set_step(batch.step);
  response_->mutable_rows()->Assign(batch.rows.begin(), batch.rows.end());
  response_->mutable_token_counts()->Assign(batch.token_counts.begin(),
                                            batch.token_counts.end());
  response_->set_end_of_step(batch.end_of_step);
  response_->set_timed_out(batch.timed_out);
  response_->set_round(batch.round);
  response_->set_lease_id(batch.lease_id);
  response_->set_lease_ms(absl::ToInt64Milliseconds(batch.lease));
  for (const MicroBatchInfo& mb : batch.micro_batches) {
    v1::MicroBatch* out = response_->add_micro_batches();
    out->set_begin(mb.begin);
    out->set_end(mb.end);
    out->set_padded_len(mb.padded_len);
    out->set_tokens(mb.tokens);
    out->set_padded_tokens(mb.padded_tokens);
  }
  if (batch.balance.has_value()) FillBalance(*batch.balance, response_->mutable_balance());
  return absl::OkStatus();
}

}  // namespace tdock::internal
