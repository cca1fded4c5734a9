// DockImpl's spec changing while it runs: consumers added (AddConsumer),
// removed (RemoveConsumer) and optional ones joining with their first Get;
// columns added (AddColumn). Changes go one at a time, in the order asked;
// with a journal, the new spec is recorded before the change takes effect (an
// added consumer takes no Get, a removed one still holds its steps, a joining
// one gets nothing, an added column takes no Put), so the stored spec is
// always one the dock has served.
#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

absl::string_view ChangeName(SpecChange::Kind kind) {
  switch (kind) {
    case SpecChange::Kind::kAdd: return "addition";
    case SpecChange::Kind::kRemove: return "removal";
    case SpecChange::Kind::kJoin: return "join";
    case SpecChange::Kind::kAddColumn: return "addition";
  }
  return "change";
}

// Answers the change's caller (AddColumn's once its column is done).
void Answer(SpecChange& change, ChangeAnswer answer) {
  if (change.kind == SpecChange::Kind::kAddColumn) {
    if (!change.column_done) return;
    if (!answer.status.ok()) {
      std::move(change.column_done)(std::move(answer.status));
    } else {
      std::move(change.column_done)(std::move(answer.column));
    }
    return;
  }
  if (!change.done) return;
  if (!answer.status.ok()) {
    std::move(change.done)(std::move(answer.status));
  } else {
    std::move(change.done)(std::move(answer.consumer));
  }
}

}  // namespace

void DockImpl::AddConsumer(ConsumerSpec consumer, ConsumerCallback done) {
  ChangeSpec({SpecChange::Kind::kAdd, std::move(consumer), std::move(done)});
}

void DockImpl::RemoveConsumer(const std::string& consumer, ConsumerCallback done) {
  ConsumerSpec named;
  named.name = consumer;
  ChangeSpec({SpecChange::Kind::kRemove, std::move(named), std::move(done)});
}

void DockImpl::RequestJoin(const ConsumerPlan& plan) {
  {
    tdock::MutexLock lock(&mu_);
    ConsumerPlan& now = consumers_.life(mu_, plan.index);
    if (!now.optional || now.joined || now.removed || now.joining) return;
    now.joining = true;
    now.join_failed = absl::OkStatus();
  }
  SpecChange change;
  change.kind = SpecChange::Kind::kJoin;
  change.consumer.name = plan.name;
  change.join_index = plan.index;
  ChangeSpec(std::move(change));
}

void DockImpl::ChangeSpec(SpecChange change) {
  {
    tdock::MutexLock lock(&mu_);
    // Else the change in progress goes on to it.
    if (!consumers_.Enqueue(mu_, std::move(change))) return;
  }
  NextChange();
}

void DockImpl::NextChange() {
  for (;;) {
    SpecChange change;
    ChangeAnswer answer;
    DockSpec to_record;
    bool record = false;
    int index = -1;
    {
      tdock::MutexLock lock(&mu_);
      SpecChange* first = consumers_.Next(mu_);
      if (first == nullptr) return;
      const SpecChange::Kind kind = first->kind;
      absl::StatusOr<DockSpec> next = CheckChangeLocked(*first, &index);
      if (!next.ok()) {
        answer.status = next.status();
      } else if (*next == consumers_.spec(mu_)) {
        answer = AnswerLocked(kind, index, absl::OkStatus());  // nothing to change
        if (kind == SpecChange::Kind::kJoin) consumers_.life(mu_, index).joining = false;
      } else {
        // Record first; the change takes effect once the record is stored.
        // Until then an added consumer takes no Get (no hand-out can name
        // it), but Puts keep to its budget.
        record = true;
        to_record = *next;
        consumers_.StartRecording(mu_, *std::move(next),
                                  kind == SpecChange::Kind::kAdd ? index : -1);
      }
      if (!record) change = consumers_.Pop(mu_);
    }
    if (record) {
      // Whichever comes second, this loop or the record's completion, goes
      // on with the next change: a record completed at once continues the
      // loop instead of nesting a call per queued change.
      auto second = std::make_shared<std::atomic<bool>>(false);
      commit_.Commit(
          [&to_record](DockJournal& journal, DockJournal::Done stored) {
            journal.SpecChanged(to_record, std::move(stored));
          },
          [this, index, second](absl::Status stored) {
            FinishChange(index, stored);
            // acq_rel: the change is finished before the next one starts.
            if (second->exchange(true, std::memory_order_acq_rel)) NextChange();
          });
      if (!second->exchange(true, std::memory_order_acq_rel)) return;
      continue;
    }
    if (answer.status.ok()) AfterChange(change.kind, index);
    Answer(change, std::move(answer));
  }
}

void DockImpl::FinishChange(int index, const absl::Status& stored) {
  SpecChange change;
  ChangeAnswer answer;
  {
    tdock::MutexLock lock(&mu_);
    change = consumers_.Pop(mu_);
    DockSpec next = consumers_.EndRecording(mu_);
    if (stored.ok()) {
      // Nothing else changed the spec meanwhile: changes go one at a time.
      ApplyChangeLocked(change, index, std::move(next));
      answer = AnswerLocked(change.kind, index, absl::OkStatus());
    } else {
      const std::string& name = change.kind == SpecChange::Kind::kAddColumn
                                    ? change.column.name
                                    : change.consumer.name;
      answer.status = absl::UnavailableError(absl::StrCat(
          "dock '", name_, "': ",
          change.kind == SpecChange::Kind::kAddColumn ? "column '" : "consumer '", name, "': ",
          ChangeName(change.kind), " not stored (", stored.message(), ")"));
      if (change.kind == SpecChange::Kind::kJoin) {
        // Its parked Gets fail with this; its next Get tries again.
        consumers_.life(mu_, index).joining = false;
        consumers_.life(mu_, index).join_failed = answer.status;
      }
    }
  }
  if (answer.status.ok() || change.kind == SpecChange::Kind::kJoin) {
    AfterChange(change.kind, index);
  }
  Answer(change, std::move(answer));
}

ChangeAnswer DockImpl::AnswerLocked(SpecChange::Kind kind, int index,
                                              absl::Status status) const {
  ChangeAnswer answer;
  answer.status = std::move(status);
  if (kind == SpecChange::Kind::kAddColumn) {
    answer.column = consumers_.spec(mu_).columns[index];
  } else {
    answer.consumer = consumers_.spec(mu_).consumers[index];
  }
  return answer;
}

absl::StatusOr<DockSpec> DockImpl::CheckChangeLocked(const SpecChange& change,
                                                     int* index) const {
  if (change.kind == SpecChange::Kind::kAddColumn) {
    TDOCK_ASSIGN_OR_RETURN(DockSpec next, CheckColumnsLocked({change.column}));
    *index = static_cast<int>(next.columns.size()) - 1;
    return next;
  }
  DockSpec next = consumers_.spec(mu_);
  if (change.kind == SpecChange::Kind::kAdd) {
    TDOCK_ASSIGN_OR_RETURN(ConsumerSpec consumer, CheckConsumerLocked(change.consumer));
    consumer.added = true;
    next.consumers.push_back(std::move(consumer));
    *index = static_cast<int>(next.consumers.size()) - 1;
    return next;
  }
  if (change.kind == SpecChange::Kind::kJoin) {
    // The consumer whose Get asked, if it still has not joined (a consumer
    // of the same name added since is another one).
    *index = change.join_index;
    const ConsumerPlan& plan = consumers_.plan(mu_, *index);
    if (plan.optional && !plan.removed) next.consumers[*index].joined = true;
    return next;
  }
  const std::string& name = change.consumer.name;
  TDOCK_RETURN_IF_ERROR(ValidateName("consumer name", name));
  TDOCK_ASSIGN_OR_RETURN(*index, consumers_.Find(mu_, name));
  ConsumerSpec& consumer = next.consumers[*index];
  const std::optional<SealWhen>& seal_when = consumers_.spec(mu_).seal_when;
  if (seal_when.has_value() && seal_when->consumer == name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dock '", name_, "': consumer '", name,
        "' cannot be removed: the dock's seal_when counts its groups"));
  }
  consumer.removed = true;
  return next;
}

void DockImpl::ApplyChangeLocked(SpecChange& change, int index, DockSpec next) {
  switch (change.kind) {
    case SpecChange::Kind::kAdd:
      AddConsumerLocked(next.consumers[index]);
      break;
    case SpecChange::Kind::kRemove:
      consumers_.Replace(mu_, std::move(next));
      consumers_.life(mu_, index).removed = true;
      break;
    case SpecChange::Kind::kJoin:
      consumers_.Replace(mu_, std::move(next));
      consumers_.life(mu_, index).joined = true;
      consumers_.life(mu_, index).joining = false;
      break;
    case SpecChange::Kind::kAddColumn:
      // Every partition first, then the table: a Put that finds the column
      // finds its cells.
      for (size_t p = 0; p < ring_.partitions().size(); ++p) {
        ring_.partitions()[p]->AddColumn(mu_, std::move((*change.column_states)[p]));
      }
      columns_.Append(next.columns[index]);
      consumers_.Replace(mu_, std::move(next));
      break;
  }
}

void DockImpl::AfterChange(SpecChange::Kind kind, int index) {
  // Nobody needs a column just added, nor waits for a consumer just added.
  if (kind == SpecChange::Kind::kAdd || kind == SpecChange::Kind::kAddColumn) return;
  // Parked Gets of a removed consumer learn it; those of a joined one are
  // served (or fail, if the join was not stored).
  std::vector<bool> wanted;
  std::vector<int64_t> live;
  {
    tdock::ReaderMutexLock lock(&mu_);
    wanted.assign(consumers_.plans(mu_).size(), false);
    wanted[index] = true;
    for (const auto& part : ring_.partitions()) {
      if (part->live(mu_)) live.push_back(part->step(mu_));
    }
  }
  WakeGets(wanted);
  // A removed consumer held steps the others may be done with, as did one
  // whose join was being recorded (and failed).
  if (kind == SpecChange::Kind::kRemove || kind == SpecChange::Kind::kJoin) {
    std::sort(live.begin(), live.end());
    for (int64_t step : live) MaybeAutoRelease(step);
    // Its staleness bound no longer paces admission.
    WakeReservations();
  }
}

absl::StatusOr<ConsumerSpec> DockImpl::CheckConsumerLocked(ConsumerSpec consumer) const {
  TDOCK_RETURN_IF_ERROR(CheckNoServerState(name_, consumer));
  TDOCK_ASSIGN_OR_RETURN(consumer, NormalizeConsumer(consumers_.spec(mu_), std::move(consumer)));
  if (consumers_.IndexOf(mu_, consumer.name) >= 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "dock '", name_, "': consumer '", consumer.name, "' already exists"));
  }
  if (static_cast<int64_t>(consumers_.spec(mu_).consumers.size()) >= DockSpec::kMaxConsumers) {
    return CapacityError(absl::StrCat(
        "dock '", name_, "': consumer '", consumer.name, "': the dock has held ",
        consumers_.spec(mu_).consumers.size(), " consumers (removed ones count), the most it can"));
  }
  {
    // Rows already written must fit one response to it, or it could never
    // be served.
    DockSpec with = consumers_.spec(mu_);
    with.consumers.push_back(consumer);
    TDOCK_RETURN_IF_ERROR(
        CheckWrittenFitLocked(MakePlan(with, static_cast<int>(with.consumers.size()) - 1)));
  }
  if (consumer.micro_batch.has_value()) {
    // Rows already written must fit the new consumer's budget, or it could
    // never be served.
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      for (int64_t row = 0; row < rows_per_step_; ++row) {
        const int64_t tokens = reader_.Tokens(*part, row);
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
  for (auto& part : ring_.partitions()) {
    part->AddConsumer(mu_, {consumer.whole_groups, consumer.dp_size * consumer.replicas});
  }
  const ConsumerPlan& plan = consumers_.Add(mu_, consumer);
  // Rows dropped before it came are done for it too.
  for (auto& part : ring_.partitions()) {
    if (!part->live(mu_)) continue;
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      if (part->dropped(row)) CountDroppedLocked(*part, plan, row);
    }
  }
}

absl::Status DockImpl::CheckWrittenFitLocked(const ConsumerPlan& plan) const {
  for (const auto& part : ring_.partitions()) {
    if (!part->live(mu_)) continue;
    if (absl::Status fits = sizes_.CheckWritten(*part, plan); !fits.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Where(part->step(mu_)), ": ", fits.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
