#include "server/dock/waiter_table.h"

#include <algorithm>
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

WaiterTable::Parking WaiterTable::Park(const std::shared_ptr<Waiter>& w, int64_t max,
                                       absl::FunctionRef<bool()> served) {
  tdock::MutexLock lock(&mu_);
  if (shutting_down_) return Parking::kShuttingDown;
  if (w->kind != Waiter::Kind::kPut && max > 0) {
    const absl::flat_hash_set<uint64_t>* parked = IdsOfLocked(*w, /*add=*/false);
    if (parked != nullptr && static_cast<int64_t>(parked->size()) >= max) {
      return Parking::kTooMany;
    }
  }
  if (served()) return Parking::kServed;
  AddLocked(w);
  return Parking::kParked;
}

void WaiterTable::TakeLocked(const absl::flat_hash_set<uint64_t>& ids,
                             absl::FunctionRef<void(Waiter&)> woken,
                             std::vector<std::shared_ptr<Waiter>>& out) {
  for (uint64_t id : ids) {
    const std::shared_ptr<Waiter>& w = waiters_.at(id);
    woken(*w);
    if (w->in_retry) continue;
    w->in_retry = true;
    out.push_back(w);
  }
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::TakeGets(const std::vector<bool>& wanted) {
  std::vector<std::shared_ptr<Waiter>> out;
  tdock::MutexLock lock(&mu_);
  for (const auto& [consumer, ids] : gets_) {
    if (!wanted.empty() &&
        (consumer < 0 || consumer >= static_cast<int>(wanted.size()) || !wanted[consumer])) {
      continue;
    }
    TakeLocked(ids, [](Waiter&) {}, out);
  }
  return out;
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::TakePuts() {
  std::vector<std::shared_ptr<Waiter>> out;
  tdock::MutexLock lock(&mu_);
  TakeLocked(puts_, [](Waiter& w) {
    if (w.in_retry) w.woken_in_retry = true;  // its retrier tries once more
  }, out);
  return out;
}

std::vector<std::shared_ptr<Waiter>> WaiterTable::TakeReserves() {
  std::vector<std::shared_ptr<Waiter>> out;
  tdock::MutexLock lock(&mu_);
  TakeLocked(reserves_, [](Waiter&) {}, out);
  return out;
}

Waiter::End WaiterTable::FinishRetry(const std::shared_ptr<Waiter>& w,
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
  // Waiters in retry stay in waiters_ (their retrier removes them) but
  // leave deadlines_: each is ended once.
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    std::shared_ptr<Waiter> w = it->second;
    if (w->in_retry) {
      w->end = Waiter::End::kExpired;
      continue;
    }
    RemoveLocked(id);
    out.expired.push_back(std::move(w));
  }
  out.puts_parked = !puts_.empty();
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

bool WaiterTable::shutting_down() const {
  tdock::MutexLock lock(&mu_);
  return shutting_down_;
}

WaiterTable::RowsAsked WaiterTable::Asked(int consumer, int64_t dispatch) const {
  RowsAsked asked;
  tdock::MutexLock lock(&mu_);
  auto it = counts_.find(consumer);
  if (it == counts_.end() || it->second.empty()) return asked;
  const std::multiset<int64_t>& counts = it->second;
  const auto counted = counts.upper_bound(0);  // the first Get that asks for a count
  const bool dispatched = *counts.begin() == 0;
  asked.fewest = counted == counts.end() ? dispatch : *counted;
  asked.most = counted == counts.end() ? dispatch : *counts.rbegin();
  if (dispatched) {
    asked.fewest = std::min(asked.fewest, dispatch);
    asked.most = std::max(asked.most, dispatch);
  }
  return asked;
}

WaiterTable::Counts WaiterTable::Count(size_t consumers) const {
  Counts counts;
  counts.gets.assign(consumers, 0);
  tdock::MutexLock lock(&mu_);
  for (const auto& [consumer, ids] : gets_) {
    if (consumer >= 0 && static_cast<size_t>(consumer) < consumers) {
      counts.gets[consumer] = static_cast<int64_t>(ids.size());
    }
  }
  counts.puts = static_cast<int64_t>(puts_.size());
  counts.reserves = static_cast<int64_t>(reserves_.size());
  return counts;
}

void WaiterTable::AddLocked(const std::shared_ptr<Waiter>& w) {
  waiters_.emplace(w->id, w);
  deadlines_.emplace(w->deadline, w->id);
  IdsOfLocked(*w, /*add=*/true)->insert(w->id);
  if (w->kind == Waiter::Kind::kGet) counts_[w->consumer].insert(w->get.count);
}

void WaiterTable::RemoveLocked(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  const Waiter& w = *it->second;
  deadlines_.erase({w.deadline, id});
  IdsOfLocked(w, /*add=*/false)->erase(id);
  if (w.kind == Waiter::Kind::kGet) {
    auto consumer = gets_.find(w.consumer);
    if (consumer->second.empty()) gets_.erase(consumer);
    auto counts = counts_.find(w.consumer);
    counts->second.erase(counts->second.find(w.get.count));
    if (counts->second.empty()) counts_.erase(counts);
  }
  waiters_.erase(it);
}

absl::flat_hash_set<uint64_t>* WaiterTable::IdsOfLocked(const Waiter& w, bool add) {
  switch (w.kind) {
    case Waiter::Kind::kPut:
      return &puts_;
    case Waiter::Kind::kReserve:
      return &reserves_;
    case Waiter::Kind::kGet:
      break;
  }
  if (add) return &gets_[w.consumer];
  auto it = gets_.find(w.consumer);
  return it == gets_.end() ? nullptr : &it->second;
}

}  // namespace tdock::internal
