// DockImpl's parked calls: long-polling Gets and Puts under backpressure,
// kept in the dock's WaiterTable (waiter_table.h): parking, wake-ups and
// their retries, cancellation, wait bounds.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Parked Puts waiting for memory are retried at least this often: memory
// comes back when the last batch pinning a released step goes away.
constexpr absl::Duration kPutRetryInterval = absl::Milliseconds(50);

}  // namespace

void DockImpl::EndWaiter(std::shared_ptr<Waiter> w, Waiter::End end) {
  absl::Status status;
  switch (end) {
    case Waiter::End::kCancelled:
      status = absl::CancelledError(absl::StrCat("dock '", name_, "': call cancelled"));
      break;
    case Waiter::End::kShutdown:
      status = ShuttingDown();
      break;
    case Waiter::End::kExpired:
      if (w->is_put) status = absl::ResourceExhaustedError(w->put_reason);
      break;
    case Waiter::End::kNone:
      return;
  }
  if (w->is_put) {
    std::move(w->put_done)(status);
    return;
  }
  if (!status.ok()) {
    std::move(w->get_done)(status);
    return;
  }
  Batch empty;
  empty.timed_out = true;
  std::move(w->get_done)(std::move(empty));
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
      attempt.done = absl::ResourceExhaustedError(absl::StrCat(
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
    w->is_put = true;
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
  absl::StatusOr<ConsumerPlan> plan = PlanFor(w->get);
  GetAttempt attempt;
  if (!plan.ok()) attempt.done = plan.status();
  const Waiter::End end = waiters_.FinishGetRetry(w, [&] {
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
  if (id >> 63) {
    CancelReservation(id);
    return;
  }
  if (std::shared_ptr<Waiter> w = waiters_.Cancel(id)) {
    EndWaiter(std::move(w), Waiter::End::kCancelled);
  }
}

void DockImpl::OnAlarm() {
  ExpireLeases();
  const absl::Time now = limits_.clock->Now();
  WaiterTable::Expiry expiry = waiters_.Expire(now);
  WakeReservations();  // answers those past their wait
  // relaxed: a hint; the Gets it wakes re-check everything under locks.
  int64_t retry = stale_retry_at_ns_.load(std::memory_order_relaxed);
  if (retry != 0 && absl::ToUnixNanos(now) >= retry &&
      stale_retry_at_ns_.compare_exchange_strong(retry, 0, std::memory_order_relaxed)) {
    WakeGets({});  // passing over stale rows may be tried again
  }
  absl::Time next = std::min({leases_->NextDeadline(), expiry.next, ExpireReservations(now)});
  if (expiry.puts_parked) next = std::min(next, now + kPutRetryInterval);
  if (next != absl::InfiniteFuture()) alarm_->RingAt(next);
  for (auto& w : expiry.expired) EndWaiter(std::move(w), Waiter::End::kExpired);
  if (expiry.puts_parked) WakePuts();
}

void DockImpl::WakeConsumersOf(const std::vector<int>& columns) {
  std::vector<bool> wanted;
  {
    tdock::ReaderMutexLock lock(&mu_);
    wanted.assign(plans_.size(), false);
    for (const ConsumerPlan& plan : plans_) {
      for (int c : plan.columns) {
        if (std::find(columns.begin(), columns.end(), c) != columns.end()) {
          wanted[plan.index] = true;
        }
      }
    }
  }
  if (std::find(wanted.begin(), wanted.end(), true) != wanted.end()) WakeGets(wanted);
}

}  // namespace tdock::internal
