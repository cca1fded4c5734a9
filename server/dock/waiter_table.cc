#include "server/dock/waiter_table.h"

#include <atomic>
#include <utility>

namespace tdock::internal {
namespace {

std::atomic<uint64_t> g_next_waiter_id{1};

}  // namespace

std::shared_ptr<Waiter> WaiterTable::New(absl::Time deadline) {
  auto w = std::make_shared<Waiter>();
  // relaxed: uniqueness only.
  w->id = g_next_waiter_id.fetch_add(1, std::memory_order_relaxed);
  w->deadline = deadline;
  return w;
}

WaiterTable::Parking WaiterTable::Park(const std::shared_ptr<Waiter>& w, int64_t max_gets,
                                       absl::FunctionRef<bool()> served) {
  tdock::MutexLock lock(&mu_);
  if (shutting_down_) return Parking::kShuttingDown;
  if (!w->is_put && max_gets > 0) {
    int64_t parked = 0;
    for (const auto& [id, other] : waiters_) {
      parked += !other->is_put && other->consumer == w->consumer;
    }
    if (parked >= max_gets) return Parking::kTooMany;
  }
  if (served()) return Parking::kServed;
  waiters_.emplace(w->id, w);
  deadlines_.emplace(w->deadline, w->id);
  return Parking::kParked;
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::TakeGets(const std::vector<bool>& wanted) {
  std::vector<std::shared_ptr<Waiter>> woken;
  tdock::MutexLock lock(&mu_);
  for (auto& [id, w] : waiters_) {
    if (w->is_put || w->in_retry) continue;
    if (!wanted.empty() &&
        (w->consumer >= static_cast<int>(wanted.size()) || !wanted[w->consumer])) {
      continue;
    }
    w->in_retry = true;
    woken.push_back(w);
  }
  return woken;
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::TakePuts() {
  std::vector<std::shared_ptr<Waiter>> woken;
  tdock::MutexLock lock(&mu_);
  for (auto& [id, w] : waiters_) {
    if (!w->is_put) continue;
    if (w->in_retry) {
      w->woken_in_retry = true;  // its retrier tries once more
      continue;
    }
    w->in_retry = true;
    woken.push_back(w);
  }
  return woken;
}

Waiter::End WaiterTable::FinishGetRetry(const std::shared_ptr<Waiter>& w,
                                        absl::FunctionRef<bool()> served) {
  tdock::MutexLock lock(&mu_);
  const Waiter::End end = w->end;
  if (end != Waiter::End::kNone || served()) {
    RemoveLocked(w->id);
  } else {
    w->in_retry = false;
  }
  return end;
}

bool WaiterTable::Ended(const std::shared_ptr<Waiter>& w) {
  tdock::MutexLock lock(&mu_);
  w->woken_in_retry = false;
  return w->end != Waiter::End::kNone;
}

WaiterTable::AfterRetry WaiterTable::FinishPutRetry(const std::shared_ptr<Waiter>& w, bool done,
                                                    Waiter::End* end) {
  tdock::MutexLock lock(&mu_);
  *end = w->end;
  if (!done && w->end == Waiter::End::kNone) {
    // A release during the attempt woke nobody (it was in retry): go again.
    if (w->woken_in_retry) return AfterRetry::kAgain;
    w->in_retry = false;
    return AfterRetry::kParked;
  }
  RemoveLocked(w->id);
  return AfterRetry::kRemoved;
}

std::shared_ptr<Waiter> WaiterTable::Cancel(uint64_t id) {
  tdock::MutexLock lock(&mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return nullptr;
  if (it->second->in_retry) {
    it->second->end = Waiter::End::kCancelled;
    return nullptr;
  }
  std::shared_ptr<Waiter> w = it->second;
  RemoveLocked(id);
  return w;
}

WaiterTable::Expiry WaiterTable::Expire(absl::Time now) {
  Expiry out;
  tdock::MutexLock lock(&mu_);
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
    out.expired.push_back(std::move(w));
  }
  for (const auto& [id, w] : waiters_) out.puts_parked |= w->is_put;
  if (!deadlines_.empty()) out.next = deadlines_.begin()->first;
  return out;
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::Shutdown() {
  std::vector<std::shared_ptr<Waiter>> parked;
  tdock::MutexLock lock(&mu_);
  shutting_down_ = true;
  for (auto& [id, w] : waiters_) {
    if (w->in_retry) {
      w->end = Waiter::End::kShutdown;
    } else {
      parked.push_back(w);
    }
  }
  for (const auto& w : parked) RemoveLocked(w->id);
  return parked;
}

int64_t WaiterTable::Count(std::vector<int64_t>& gets) const {
  int64_t puts = 0;
  tdock::MutexLock lock(&mu_);
  for (const auto& [id, w] : waiters_) {
    if (w->is_put) {
      ++puts;
    } else if (w->consumer < static_cast<int>(gets.size())) {
      ++gets[w->consumer];
    }
  }
  return puts;
}

void WaiterTable::RemoveLocked(uint64_t id) {
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

}  // namespace tdock::internal
