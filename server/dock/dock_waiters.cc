// DockImpl's parked calls: long-polling Gets and Puts under backpressure,
// kept in the dock's WaiterTable (waiter_table.h): parking, wake-ups and
// their retries, cancellation, wait bounds.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Parked Puts waiting for memory are retried at least this often: memory
// comes back when the last batch pinning a released step goes away.
constexpr absl::Duration kPutRetryInterval = absl::Milliseconds(50);

// A waiting call ended: `status`, or (OK: its wait passed) a `Result` that
// says it timed out.
template <typename Result, typename Done>
void AnswerEnded(Done& done, const absl::Status& status) {
  if (!status.ok()) {
    std::move(done)(status);
    return;
  }
  Result none;
  none.timed_out = true;
  std::move(done)(std::move(none));
}

}  // namespace

void DockImpl::EndWaiter(std::shared_ptr<Waiter> w, Waiter::End end) {
  absl::Status status;
  switch (end) {
    case Waiter::End::kCancelled:
      status = absl::CancelledError(absl::StrCat(
          "dock '", name_, "': ", w->kind == Waiter::Kind::kReserve ? "reservation" : "call",
          " cancelled"));
      break;
    case Waiter::End::kShutdown:
      status = ShuttingDown();
      break;
    case Waiter::End::kExpired:
      if (w->kind == Waiter::Kind::kPut) status = CapacityError(w->put_reason);
      break;
    case Waiter::End::kNone:
      return;
  }
  switch (w->kind) {
    case Waiter::Kind::kPut:
      std::move(w->put_done)(status);
      break;
    case Waiter::Kind::kGet:
      AnswerEnded<Batch>(w->get_done, status);
      break;
    case Waiter::Kind::kReserve:
      AnswerEnded<Reservation>(w->reserve_done, status);
      break;
  }
}

absl::Status DockImpl::ShuttingDown() const {
  return absl::UnavailableError(absl::StrCat("dock '", name_, "': shutting down"));
}

uint64_t DockImpl::ParkGet(GetInput in, const ConsumerPlan& plan, GetCallback done) {
  std::shared_ptr<Waiter> w = WaiterTable::New(limits_.clock->Now() + in.wait);
  w->consumer = plan.index;
  w->get = std::move(in);
  w->get_done = std::move(done);
  GetAttempt attempt;
  // The re-check under the table's lock makes wake-ups lossless.
  switch (waiters_.Park(w, limits_.max_parked_gets_per_consumer, [&] {
    attempt = TryGet(w->get, plan);
    return attempt.done.has_value();
  })) {
    case WaiterTable::Parking::kParked:
      alarm_->RingAt(w->deadline);
      break;
    case WaiterTable::Parking::kServed:
      break;
    case WaiterTable::Parking::kShuttingDown:
      attempt.done = ShuttingDown();
      break;
    case WaiterTable::Parking::kTooMany:
      attempt.done = CapacityError(absl::StrCat(
          "dock '", name_, "' consumer '", plan.name, "': ",
          limits_.max_parked_gets_per_consumer,
          " Gets are already waiting, the server's limit "
          "(--max_parked_gets_per_consumer); retry later or wait longer per Get"));
      break;
  }
  AfterGet(attempt, plan.index);
  if (!attempt.done.has_value()) return w->id;
  std::move(w->get_done)(std::move(*attempt.done));
  return 0;
}

void DockImpl::ParkPut(PutInput in, PutAttempt attempt, PutCallback done) {
  for (;;) {
    std::shared_ptr<Waiter> w = WaiterTable::New(limits_.clock->Now() + in.wait);
    w->kind = Waiter::Kind::kPut;
    w->put = std::move(in);
    w->put_done = std::move(done);
    w->put_reason = std::move(attempt.park_reason);
    // A Put blocked by an older step re-checks the partition under the
    // table's lock, so a release between its attempt and here is not
    // missed. One held up by the memory limit is retried by the timer tick
    // and on every release.
    const bool memory_limited = attempt.memory_limited;
    const WaiterTable::Parking parking = waiters_.Park(
        w, 0, [&] { return !memory_limited && CanPutNow(w->put); });
    if (parking == WaiterTable::Parking::kParked) {
      // Memory that comes back when a batch pinning a released step goes
      // away wakes nobody: parked Puts also retry on a tick.
      alarm_->RingAt(std::min(w->deadline, limits_.clock->Now() + kPutRetryInterval));
      return;
    }
    in = std::move(w->put);
    done = std::move(w->put_done);
    if (parking == WaiterTable::Parking::kShuttingDown) break;
    attempt = TryPut(in);
    if (attempt.done.has_value()) {
      FinishPut(in, std::move(attempt), std::move(done));
      return;
    }
  }
  std::move(done)(ShuttingDown());
}

void DockImpl::WakeGets(const std::vector<bool>& wanted) {
  for (auto& w : waiters_.TakeGets(wanted)) RetryGet(std::move(w));
}

void DockImpl::WakePuts() {
  for (auto& w : waiters_.TakePuts()) RetryPut(std::move(w));
}

void DockImpl::RetryGet(std::shared_ptr<Waiter> w) {
  // The consumer it parked for: if that one was removed, TryGet says so,
  // even when a consumer of the same name was added since.
  absl::StatusOr<ConsumerPlan> plan = PlanFor(w->get, w->consumer);
  GetAttempt attempt;
  if (!plan.ok()) attempt.done = plan.status();
  const Waiter::End end = waiters_.FinishRetry(w, [&] {
    if (plan.ok()) attempt = TryGet(w->get, *plan);
    return attempt.done.has_value();
  });
  if (plan.ok()) AfterGet(attempt, plan->index);
  if (attempt.done.has_value()) {
    std::move(w->get_done)(std::move(*attempt.done));
  } else if (end != Waiter::End::kNone) {
    EndWaiter(std::move(w), end);
  }
}

void DockImpl::RetryPut(std::shared_ptr<Waiter> w) {
  PutAttempt attempt;
  Waiter::End end = Waiter::End::kNone;
  for (;;) {
    if (!waiters_.Ended(w)) attempt = TryPut(w->put);
    // In retry, only this thread touches the waiter's fields.
    if (!attempt.done.has_value()) w->put_reason = std::move(attempt.park_reason);
    const WaiterTable::AfterRetry after =
        waiters_.FinishPutRetry(w, attempt.done.has_value(), &end);
    if (after == WaiterTable::AfterRetry::kAgain) continue;
    if (after == WaiterTable::AfterRetry::kParked) return;
    break;
  }
  if (attempt.done.has_value()) {
    FinishPut(w->put, std::move(attempt), std::move(w->put_done));
  } else {
    EndWaiter(std::move(w), end);
  }
}

void DockImpl::Cancel(uint64_t id) {
  if (std::shared_ptr<Waiter> w = waiters_.Cancel(id)) {
    EndWaiter(std::move(w), Waiter::End::kCancelled);
  }
}

void DockImpl::OnAlarm() {
  ExpireLeases();
  const absl::Time now = limits_.clock->Now();
  WaiterTable::Expiry expiry = waiters_.Expire(now);
  // Passing over stale rows may be tried again.
  if (retries_.TakeDue(RetryTimes::kStaleGets, now)) WakeGets({});
  if (retries_.TakeDue(RetryTimes::kReserves, now)) WakeReservations();  // after lost races
  if (retries_.TakeDue(RetryTimes::kOrphans, now)) {
    for (int64_t step : LiveSteps()) {
      DropOrphans(step);
      CarryForward(step);  // one the next step refused while it was being sealed, say
    }
  }
  ExpireReservations(now);
  absl::Time next = std::min({leases_->NextDeadline(), expiry.next,
                               reservations_.NextDeadline(), retries_.Next()});
  if (expiry.puts_parked) next = std::min(next, now + kPutRetryInterval);
  if (next != absl::InfiniteFuture()) alarm_->RingAt(next);
  for (auto& w : expiry.expired) EndWaiter(std::move(w), Waiter::End::kExpired);
  if (expiry.puts_parked) WakePuts();
}

void DockImpl::WakeConsumersOf(const std::vector<int>& columns, std::optional<int64_t> step) {
  std::vector<bool> wanted;
  std::vector<int64_t> dispatch;
  {
    tdock::ReaderMutexLock lock(&mu_);
    wanted.assign(consumers_.plans(mu_).size(), false);
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
      dispatch.push_back(plan.dispatch_size);
      for (int c : plan.columns) {
        if (std::find(columns.begin(), columns.end(), c) != columns.end()) {
          wanted[plan.index] = true;
        }
      }
    }
  }
  if (std::find(wanted.begin(), wanted.end(), true) == wanted.end()) return;
  if (step.has_value()) {
    // Retrying a parked Get that cannot be answered costs a claim attempt;
    // with thousands of ranks parked, every Put paid it for each of them.
    // The waiters' lock comes before the dock's: the counts first. A Get
    // parked after them ran its last check after this Put's cells were
    // ready.
    std::vector<int64_t> fewest(dispatch.size(), 0);
    for (size_t c = 0; c < dispatch.size(); ++c) {
      if (wanted[c]) fewest[c] = waiters_.Asked(static_cast<int>(c), dispatch[c]).fewest;
    }
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = ring_.Of(*step);
    const bool live = part.live(mu_) && part.step(mu_) == *step && !part.releasing(mu_);
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
      if (plan.index >= static_cast<int>(fewest.size()) || !wanted[plan.index]) continue;
      if (fewest[plan.index] == 0) {  // none parked
        wanted[plan.index] = false;
        continue;
      }
      if (!live || plan.max_staleness.has_value()) continue;  // tried, as before
      const ConsumerState& state = part.consumer(mu_, plan.index);
      const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
      const int64_t units = plan.whole_groups ? part.groups() : part.rows();
      // acquire: pairs with the claimers' increments (as ServeLocked reads it).
      const int64_t remaining =
          units - state.consumed_rows.load(std::memory_order_acquire) / unit_rows;
      if (remaining == 0) continue;  // the step may be over for it
      const int64_t count = fewest[plan.index] / unit_rows;
      const int64_t need =
          std::min(plan.policy == Policy::kBalanced ? count * plan.dp_size : count, remaining);
      if (CountAvailable(part, state, plan, need, kNoVersion) < need) {
        wanted[plan.index] = false;  // as TryGet would find: nothing to answer
      }
    }
  }
  if (std::find(wanted.begin(), wanted.end(), true) != wanted.end()) WakeGets(wanted);
}

}  // namespace tdock::internal
