// DockImpl's consumers added while it runs (AddConsumer): one addition at a
// time, in the order asked; with a journal, the new spec is recorded before
// the consumer exists, so no hand-out can name a consumer the store does not
// know, while Puts already keep to its budgets.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::AddConsumer(ConsumerSpec consumer, ConsumerCallback done) {
  {
    tdock::MutexLock lock(&mu_);
    adding_.push_back({std::move(consumer), std::move(done)});
    if (adding_busy_) return;  // the addition in progress goes on to it
    adding_busy_ = true;
  }
  NextAddition();
}

void DockImpl::NextAddition() {
  for (;;) {
    ConsumerCallback done;
    absl::StatusOr<ConsumerSpec> answer;
    DockSpec to_record;
    {
      tdock::MutexLock lock(&mu_);
      if (adding_.empty()) {
        adding_busy_ = false;
        return;
      }
      answer = CheckConsumerLocked(adding_.front().consumer);
      if (answer.ok() && journal_ != nullptr) {
        // Record first: until the spec is stored the consumer takes no Get
        // (no hand-out can name it), but Puts keep to its budget.
        recording_consumer_ = *answer;
        to_record = spec_;
        to_record.consumers.push_back(*answer);
        recording_plan_ = MakePlan(to_record, static_cast<int>(to_record.consumers.size()) - 1);
      } else {
        if (answer.ok()) AddConsumerLocked(*answer);
        done = std::move(adding_.front().done);
        adding_.pop_front();
      }
    }
    if (done) {
      std::move(done)(std::move(answer));
      continue;
    }
    journal_->SpecChanged(to_record, KeepAlive([this](absl::Status stored) {
      FinishAddition(stored);
    }));
    return;
  }
}

void DockImpl::FinishAddition(const absl::Status& stored) {
  ConsumerCallback done;
  absl::StatusOr<ConsumerSpec> answer;
  {
    tdock::MutexLock lock(&mu_);
    ConsumerSpec consumer = *std::move(recording_consumer_);
    recording_consumer_.reset();
    recording_plan_.reset();
    done = std::move(adding_.front().done);
    adding_.pop_front();
    if (stored.ok()) {
      AddConsumerLocked(consumer);
      answer = std::move(consumer);
    } else {
      answer = absl::UnavailableError(absl::StrCat("dock '", name_, "': consumer '",
                                                   consumer.name, "': not stored (",
                                                   stored.message(), ")"));
    }
  }
  std::move(done)(std::move(answer));
  NextAddition();
}

absl::StatusOr<ConsumerSpec> DockImpl::CheckConsumerLocked(ConsumerSpec consumer) const {
  TDOCK_ASSIGN_OR_RETURN(consumer, NormalizeConsumer(spec_, std::move(consumer)));
  if (spec_.ConsumerIndex(consumer.name) >= 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "dock '", name_, "': consumer '", consumer.name, "' already exists"));
  }
  {
    // Rows already written must fit one response to it, or it could never
    // be served.
    DockSpec with = spec_;
    with.consumers.push_back(consumer);
    TDOCK_RETURN_IF_ERROR(
        CheckWrittenFitLocked(MakePlan(with, static_cast<int>(with.consumers.size()) - 1)));
  }
  if (consumer.micro_batch.has_value()) {
    // Rows already written must fit the new consumer's budget, or it could
    // never be served.
    for (const auto& part : partitions_) {
      if (!part->live(mu_)) continue;
      for (int64_t row = 0; row < rows_per_step_; ++row) {
        const int64_t tokens = TokenCountLocked(*part, row);
        if (consumer.micro_batch->RowLoad(tokens) > consumer.micro_batch->max_tokens) {
          return absl::InvalidArgumentError(absl::StrCat(
              Where(part->step(mu_)), ": row ", row, " has ", tokens,
              " tokens, over the micro-batch budget of consumer '", consumer.name,
              "' (max_tokens ", consumer.micro_batch->max_tokens, ")"));
        }
      }
    }
  }
  return consumer;
}

void DockImpl::AddConsumerLocked(const ConsumerSpec& consumer) {
  spec_.consumers.push_back(consumer);
  for (auto& part : partitions_) {
    part->AddConsumer(mu_, {consumer.whole_groups, consumer.dp_size * consumer.replicas});
  }
  plans_.push_back(MakePlan(spec_, static_cast<int>(spec_.consumers.size()) - 1));
  // Rows dropped before it came are done for it too.
  for (auto& part : partitions_) {
    if (!part->live(mu_)) continue;
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      if (part->dropped(row)) CountDroppedLocked(*part, plans_.back(), row);
    }
  }
}

}  // namespace tdock::internal
