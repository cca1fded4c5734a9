// DockImpl's parked calls: long-polling Gets and Puts under backpressure.
//
// A waiter lives in waiters_ (by id) and deadlines_ until it ends. A wake-up
// marks it in_retry and retries it outside the lock; an end decided meanwhile
// (cancel, expiry, shutdown) is recorded in `end` and carried out by the
// retrier, so every callback runs exactly once.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Ids are unique across docks so a transport can cancel by id alone.
std::atomic<uint64_t> g_next_waiter_id{1};

// Parked Puts waiting for memory are retried at least this often: memory
// comes back when the last batch pinning a released step goes away.
constexpr absl::Duration kPutRetryInterval = absl::Milliseconds(50);

uint64_t NextId() {
  // relaxed: uniqueness only.
  return g_next_waiter_id.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void DockImpl::RemoveWaiterLocked(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  auto range = deadlines_.equal_range(it->second->deadline);
  for (auto d = range.first; d != range.second; ++d) {
    if (d->second == id) {
      deadlines_.erase(d);
      break;
    }
  }
  waiters_.erase(it);
}

void DockImpl::EndWaiter(std::shared_ptr<Waiter> w, Waiter::End end) {
  absl::Status status;
  switch (end) {
    case Waiter::End::kCancelled:
      status = absl::CancelledError(absl::StrCat("dock '", name_, "': call cancelled"));
      break;
    case Waiter::End::kShutdown:
      status = absl::UnavailableError(absl::StrCat("dock '", name_, "': shutting down"));
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

int64_t DockImpl::ParkedGetsLocked(int consumer) const {
  int64_t parked = 0;
  for (const auto& [id, w] : waiters_) parked += !w->is_put && w->consumer == consumer;
  return parked;
}

uint64_t DockImpl::ParkGet(GetInput in, const ConsumerPlan& plan, GetCallback done) {
  auto w = std::make_shared<Waiter>();
  w->id = NextId();
  w->deadline = absl::Now() + in.wait;
  w->consumer = plan.index;
  GetAttempt attempt;
  {
    tdock::MutexLock lock(&waiters_mu_);
    if (shutting_down_) {
      attempt.done = absl::UnavailableError(
          absl::StrCat("dock '", name_, "': shutting down"));
    } else if (limits_.max_parked_gets_per_consumer > 0 &&
               ParkedGetsLocked(plan.index) >= limits_.max_parked_gets_per_consumer) {
      attempt.done = absl::ResourceExhaustedError(absl::StrCat(
          "dock '", name_, "' consumer '", plan.name, "': ",
          limits_.max_parked_gets_per_consumer,
          " Gets are already waiting, the server's limit "
          "(--max_parked_gets_per_consumer); retry later or wait longer per Get"));
    } else {
      attempt = TryGet(in, plan);  // the re-check that makes wake-ups lossless
      if (!attempt.done.has_value()) {
        w->get = std::move(in);
        w->get_done = std::move(done);
        waiters_.emplace(w->id, w);
        deadlines_.emplace(w->deadline, w->id);
        alarm_->RingAt(w->deadline);
      }
    }
  }
  AfterGet(attempt, plan.index);
  if (!attempt.done.has_value()) return w->id;
  std::move(done)(std::move(*attempt.done));
  return 0;
}

void DockImpl::ParkPut(PutInput in, PutAttempt attempt, PutCallback done) {
  for (;;) {
    {
      tdock::MutexLock lock(&waiters_mu_);
      if (shutting_down_) break;
      // A Put blocked by an older step re-checks the partition under the lock,
      // so a release between its attempt and here is not missed. One held up
      // by the memory limit is retried by the timer tick and on every release.
      if (attempt.memory_limited || !CanPutNow(in)) {
        auto w = std::make_shared<Waiter>();
        w->id = NextId();
        w->deadline = absl::Now() + in.wait;
        w->is_put = true;
        w->put = std::move(in);
        w->put_done = std::move(done);
        w->put_reason = std::move(attempt.park_reason);
        waiters_.emplace(w->id, w);
        deadlines_.emplace(w->deadline, w->id);
        // Memory that comes back when a batch pinning a released step goes
        // away wakes nobody: parked Puts also retry on a tick.
        alarm_->RingAt(std::min(w->deadline, absl::Now() + kPutRetryInterval));
        return;
      }
    }
    attempt = TryPut(in);
    if (attempt.done.has_value()) {
      FinishPut(in, std::move(attempt), std::move(done));
      return;
    }
  }
  std::move(done)(absl::UnavailableError(
      absl::StrCat("dock '", name_, "': shutting down")));
}

void DockImpl::WakeGets(const std::vector<bool>& wanted) {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    tdock::MutexLock lock(&waiters_mu_);
    for (auto& [id, w] : waiters_) {
      if (w->is_put || w->in_retry) continue;
      if (!wanted.empty() &&
          (w->consumer >= static_cast<int>(wanted.size()) || !wanted[w->consumer])) {
        continue;
      }
      w->in_retry = true;
      woken.push_back(w);
    }
  }
  for (auto& w : woken) RetryGet(std::move(w));
}

void DockImpl::WakePuts() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    tdock::MutexLock lock(&waiters_mu_);
    for (auto& [id, w] : waiters_) {
      if (!w->is_put) continue;
      if (w->in_retry) {
        w->woken_in_retry = true;  // its retrier tries once more
        continue;
      }
      w->in_retry = true;
      woken.push_back(w);
    }
  }
  for (auto& w : woken) RetryPut(std::move(w));
}

void DockImpl::RetryGet(std::shared_ptr<Waiter> w) {
  absl::StatusOr<ConsumerPlan> plan = PlanFor(w->get);
  GetAttempt attempt;
  if (!plan.ok()) attempt.done = plan.status();
  Waiter::End end = Waiter::End::kNone;
  {
    tdock::MutexLock lock(&waiters_mu_);
    if (plan.ok() && w->end == Waiter::End::kNone) attempt = TryGet(w->get, *plan);
    if (attempt.done.has_value() || w->end != Waiter::End::kNone) {
      end = w->end;
      RemoveWaiterLocked(w->id);
    } else {
      w->in_retry = false;
    }
  }
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
    bool ended = false;
    {
      tdock::MutexLock lock(&waiters_mu_);
      ended = w->end != Waiter::End::kNone;
      w->woken_in_retry = false;
    }
    if (!ended) attempt = TryPut(w->put);
    tdock::MutexLock lock(&waiters_mu_);
    if (!attempt.done.has_value() && w->end == Waiter::End::kNone) {
      w->put_reason = std::move(attempt.park_reason);
      // A release during TryPut woke nobody (we were in retry): go again.
      if (w->woken_in_retry) continue;
      w->in_retry = false;
      return;
    }
    end = w->end;
    RemoveWaiterLocked(w->id);
    break;
  }
  if (attempt.done.has_value()) {
    FinishPut(w->put, std::move(attempt), std::move(w->put_done));
  } else {
    EndWaiter(std::move(w), end);
  }
}

void DockImpl::Cancel(uint64_t id) {
  std::shared_ptr<Waiter> w;
  {
    tdock::MutexLock lock(&waiters_mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    if (it->second->in_retry) {
      it->second->end = Waiter::End::kCancelled;
      return;
    }
    w = it->second;
    RemoveWaiterLocked(id);
  }
  EndWaiter(std::move(w), Waiter::End::kCancelled);
}

void DockImpl::OnAlarm() {
  ExpireLeases();
  std::vector<std::shared_ptr<Waiter>> expired;
  bool retry_puts = false;
  absl::Time next = leases_->NextDeadline();
  {
    tdock::MutexLock lock(&waiters_mu_);
    const absl::Time now = absl::Now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      auto it = waiters_.find(deadlines_.begin()->second);
      deadlines_.erase(deadlines_.begin());
      if (it == waiters_.end()) continue;
      std::shared_ptr<Waiter> w = it->second;
      if (w->in_retry) {
        w->end = Waiter::End::kExpired;
        continue;
      }
      waiters_.erase(it);
      expired.push_back(std::move(w));
    }
    for (const auto& [id, w] : waiters_) retry_puts |= w->is_put;
    if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
    if (retry_puts) next = std::min(next, now + kPutRetryInterval);
  }
  if (next != absl::InfiniteFuture()) alarm_->RingAt(next);
  for (auto& w : expired) EndWaiter(std::move(w), Waiter::End::kExpired);
  if (retry_puts) WakePuts();
}

}  // namespace tdock::internal
