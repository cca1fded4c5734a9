#include "server/dock/reservation_table.h"

#include <algorithm>

namespace tdock::internal {

ReservationTable::ReservationTable(uint64_t first_id)
    : next_id_(std::max<uint64_t>(1, first_id)) {}

uint64_t ReservationTable::NewId() {
  return next_id_.fetch_add(1, std::memory_order_relaxed);
}

void ReservationTable::NoteRecoveredId(uint64_t id) {
  uint64_t next = next_id_.load(std::memory_order_relaxed);
  while (next <= id &&
         !next_id_.compare_exchange_weak(next, id + 1, std::memory_order_relaxed)) {
  }
}

void ReservationTable::Add(uint64_t id, Entry entry) {
  tdock::MutexLock lock(&mu_);
  EraseLocked(id);
  expired_.erase(id);
  by_deadline_.emplace(entry.deadline, id);
  by_step_[entry.step].insert(id);
  live_.emplace(id, std::move(entry));
}

void ReservationTable::Erase(uint64_t id) {
  tdock::MutexLock lock(&mu_);
  EraseLocked(id);
}

void ReservationTable::ForgetStep(int64_t step) {
  tdock::MutexLock lock(&mu_);
  auto it = by_step_.find(step);
  if (it == by_step_.end()) return;
  const std::set<uint64_t> ids = std::move(it->second);
  by_step_.erase(it);
  for (uint64_t id : ids) EraseLocked(id);
}

ReservationTable::Lookup ReservationTable::Find(uint64_t id) const {
  Lookup out;
  tdock::MutexLock lock(&mu_);
  if (auto it = live_.find(id); it != live_.end()) {
    out.kind = Lookup::Kind::kLive;
    out.entry = it->second;
  } else if (auto gone = expired_.find(id); gone != expired_.end()) {
    out.kind = Lookup::Kind::kExpired;
    out.entry.step = gone->second.first;
    out.entry.deadline = gone->second.second;
  }
  return out;
}

std::vector<std::pair<uint64_t, ReservationTable::Entry>> ReservationTable::TakeExpired(
    absl::Time now) {
  std::vector<std::pair<uint64_t, Entry>> out;
  tdock::MutexLock lock(&mu_);
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const uint64_t id = by_deadline_.begin()->second;
    auto it = live_.find(id);
    Entry entry = std::move(it->second);
    EraseLocked(id);
    RememberExpiredLocked(id, entry.step, entry.deadline);
    out.emplace_back(id, std::move(entry));
  }
  return out;
}

absl::Time ReservationTable::NextDeadline() const {
  tdock::MutexLock lock(&mu_);
  return by_deadline_.empty() ? absl::InfiniteFuture() : by_deadline_.begin()->first;
}

void ReservationTable::CountAdmissionWait(absl::Duration waited) {
  tdock::MutexLock lock(&mu_);
  ++counts_.admission_waits;
  counts_.admission_wait_seconds += absl::ToDoubleSeconds(waited);
}

ReservationTable::Counts ReservationTable::counts() const {
  tdock::MutexLock lock(&mu_);
  Counts counts = counts_;
  counts.live = static_cast<int64_t>(live_.size());
  return counts;
}

void ReservationTable::EraseLocked(uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  by_deadline_.erase({it->second.deadline, id});
  if (auto step = by_step_.find(it->second.step); step != by_step_.end()) {
    step->second.erase(id);
    if (step->second.empty()) by_step_.erase(step);
  }
  live_.erase(it);
}

void ReservationTable::RememberExpiredLocked(uint64_t id, int64_t step, absl::Time deadline) {
  expired_[id] = {step, deadline};
  // The oldest ids go first.
  if (expired_.size() > kExpiredRemembered) expired_.erase(expired_.begin());
}

}  // namespace tdock::internal
