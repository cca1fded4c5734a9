#include "server/dock/leases.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock::internal {
namespace {

// How many ended leases are remembered for late Acks.
constexpr size_t kRemembered = size_t{1} << 16;

}  // namespace

LeaseTable::LeaseTable(std::string who, absl::AnyInvocable<void(absl::Time)> wake_at,
                       uint64_t first_id)
    : who_(std::move(who)), wake_at_(std::move(wake_at)),
      next_id_(std::max<uint64_t>(first_id, 1)) {}

absl::Time LeaseTable::NextDeadline() const {
  tdock::MutexLock lock(&mu_);
  return deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
}

LeaseCounts& LeaseTable::CountsLocked(int consumer) {
  if (static_cast<size_t>(consumer) >= counts_.size()) counts_.resize(consumer + 1);
  return counts_[consumer];
}

uint64_t LeaseTable::Add(Lease lease, bool pinned) {
  lease.id = 0;
  return AddWithId(std::move(lease), pinned);
}

bool LeaseTable::AddRecovered(Lease lease, bool pinned) {
  {
    tdock::MutexLock lock(&mu_);
    if (leases_.contains(lease.id)) return false;
  }
  AddWithId(std::move(lease), pinned);
  return true;
}

uint64_t LeaseTable::AddWithId(Lease lease, bool pinned) {
  tdock::MutexLock lock(&mu_);
  if (lease.id == 0) {
    lease.id = next_id_++;
  } else {
    next_id_ = std::max(next_id_, lease.id + 1);
  }
  const uint64_t id = lease.id;
  if (!pinned) {
    deadlines_.emplace(lease.deadline, id);
    wake_at_(lease.deadline);
  }
  if (lease.round >= 0) {
    shares_[{lease.consumer, lease.step, lease.round, lease.rank}] = id;
  }
  ++CountsLocked(lease.consumer).in_flight;
  leases_.emplace(id, Entry{std::move(lease), pinned});
  return id;
}

absl::StatusOr<absl::flat_hash_map<uint64_t, LeaseTable::Entry>::iterator>
LeaseTable::FindLocked(uint64_t id) {
  auto it = leases_.find(id);
  if (it != leases_.end()) {
    if (it->second.pinned) {
      return absl::FailedPreconditionError(absl::StrCat(
          who_, ": lease ", id, " is being acknowledged or returned"));
    }
    return it;
  }
  if (id == 0 || id >= next_id_) {
    return absl::NotFoundError(
        absl::StrCat(who_, ": lease ", id, " was never handed out"));
  }
  auto ended = ended_.find(id);
  return Refuse(ended != ended_.end() ? ended->second.refusal : Refusal::kLeaseEnded,
                absl::FailedPreconditionError(absl::StrCat(
                    who_, ": lease ", id, " is not in flight: ",
                    ended != ended_.end() ? ended->second.why : "it ended long ago")));
}

Lease LeaseTable::EndLocked(absl::flat_hash_map<uint64_t, Entry>::iterator it,
                            std::string why, Refusal refusal) {
  Lease lease = std::move(it->second.lease);
  const bool pinned = it->second.pinned;
  leases_.erase(it);
  if (!pinned) {
    auto [first, last] = deadlines_.equal_range(lease.deadline);
    for (auto d = first; d != last; ++d) {
      if (d->second == lease.id) {
        deadlines_.erase(d);
        break;
      }
    }
  }
  if (lease.round >= 0) {
    auto share = shares_.find({lease.consumer, lease.step, lease.round, lease.rank});
    if (share != shares_.end() && share->second == lease.id) shares_.erase(share);
  }
  --CountsLocked(lease.consumer).in_flight;
  RememberEndLocked(lease.id, {std::move(why), refusal});
  return lease;
}

void LeaseTable::RememberEndLocked(uint64_t id, Ended ended) {
  if (!ended_.emplace(id, std::move(ended)).second) return;
  ended_order_.push_back(id);
  if (ended_order_.size() > kRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void LeaseTable::RecoverAcknowledged(uint64_t id) {
  tdock::MutexLock lock(&mu_);
  RememberEndLocked(id, {"it was already acknowledged"});
}

absl::Status LeaseTable::Pin(uint64_t id) {
  tdock::MutexLock lock(&mu_);
  auto found = FindLocked(id);
  if (!found.ok()) return found.status();
  Entry& entry = (*found)->second;
  auto [first, last] = deadlines_.equal_range(entry.lease.deadline);
  for (auto d = first; d != last; ++d) {
    if (d->second == id) {
      deadlines_.erase(d);
      break;
    }
  }
  entry.pinned = true;
  return absl::OkStatus();
}

void LeaseTable::Unpin(uint64_t id, std::optional<absl::Time> deadline) {
  tdock::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || !it->second.pinned) return;
  it->second.pinned = false;
  if (deadline.has_value()) it->second.lease.deadline = *deadline;
  deadlines_.emplace(it->second.lease.deadline, id);
  wake_at_(it->second.lease.deadline);
}

absl::StatusOr<Lease> LeaseTable::PinFor(uint64_t id, int consumer,
                                         absl::string_view consumer_name) {
  {
    tdock::MutexLock lock(&mu_);
    auto found = FindLocked(id);
    if (!found.ok()) return found.status();
    if ((*found)->second.lease.consumer != consumer) {
      return absl::InvalidArgumentError(absl::StrCat(
          who_, ": lease ", id, " was not handed to consumer '", consumer_name, "'"));
    }
  }
  TDOCK_RETURN_IF_ERROR(Pin(id));
  tdock::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    return Refuse(Refusal::kLeaseEnded,
                  absl::FailedPreconditionError(absl::StrCat(who_, ": lease ", id, " ended")));
  }
  return it->second.lease;
}

Lease LeaseTable::TakePinned(uint64_t id, End end) {
  tdock::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  // A pinned lease leaves only through here or DropStep.
  if (it == leases_.end()) return Lease{};
  LeaseCounts& counts = CountsLocked(it->second.lease.consumer);
  switch (end) {
    case End::kAcked:
      return EndLocked(it, "it was already acknowledged");
    case End::kNacked:
      ++counts.nacked;
      counts.rows_returned += it->second.lease.rows;
      return EndLocked(it, "it was returned by Nack");
    case End::kExpired:
      ++counts.expired;
      counts.rows_returned += it->second.lease.rows;
      return EndLocked(
          it,
          absl::StrCat("it expired at ", absl::FormatTime(it->second.lease.deadline),
                       " and its rows were handed back to be handed out again"),
          Refusal::kExpired);
    case End::kUnrecorded:
      counts.rows_returned += it->second.lease.rows;
      return EndLocked(it, "its hand-out could not be stored, so its rows were handed back");
  }
  return Lease{};
}

std::optional<Lease> LeaseTable::Pinned(uint64_t id) const {
  tdock::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || !it->second.pinned) return std::nullopt;
  return it->second.lease;
}

std::vector<Lease> LeaseTable::PinExpired(absl::Time now) {
  tdock::MutexLock lock(&mu_);
  std::vector<Lease> out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    Entry& entry = leases_.at(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    entry.pinned = true;
    out.push_back(entry.lease);
  }
  return out;
}

uint64_t LeaseTable::ShareLease(int consumer, int64_t step, int64_t round, int32_t rank) const {
  tdock::MutexLock lock(&mu_);
  auto share = shares_.find({consumer, step, round, rank});
  if (share == shares_.end()) return 0;
  auto it = leases_.find(share->second);
  return it != leases_.end() && !it->second.pinned ? share->second : 0;
}

bool LeaseTable::SharePinned(int consumer, int64_t step, int64_t round, int32_t rank) const {
  tdock::MutexLock lock(&mu_);
  auto share = shares_.find({consumer, step, round, rank});
  if (share == shares_.end()) return false;
  auto it = leases_.find(share->second);
  return it != leases_.end() && it->second.pinned;
}

std::optional<Lease> LeaseTable::TakeShare(int consumer, int64_t step,
                                           int64_t round, int32_t rank) {
  tdock::MutexLock lock(&mu_);
  auto share = shares_.find({consumer, step, round, rank});
  if (share == shares_.end()) return std::nullopt;
  auto it = leases_.find(share->second);
  if (it == leases_.end() || it->second.pinned) return std::nullopt;
  return EndLocked(it, absl::StrCat("rank ", rank, " asked for round ", round,
                                    " of step ", step, " again"));
}

void LeaseTable::NoteSuperseded(uint64_t old_id, uint64_t by) {
  tdock::MutexLock lock(&mu_);
  auto ended = ended_.find(old_id);
  if (ended != ended_.end()) {
    absl::StrAppend(&ended->second.why, "; lease ", by, " replaced it");
  }
}

void LeaseTable::DropStep(int64_t step) {
  tdock::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, entry] : leases_) {
    if (entry.lease.step == step) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    EndLocked(leases_.find(id), absl::StrCat("its step ", step, " was released"),
              Refusal::kReleased);
  }
}

std::vector<Lease> LeaseTable::Unpinned(int64_t step) const {
  tdock::MutexLock lock(&mu_);
  std::vector<Lease> out;
  for (const auto& [id, entry] : leases_) {
    if (entry.lease.step == step && !entry.pinned) out.push_back(entry.lease);
  }
  return out;
}

Lease LeaseTable::TakeUnpinned(uint64_t id, std::string why) {
  tdock::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.pinned) return Lease{};
  return EndLocked(it, std::move(why));
}

LeaseCounts LeaseTable::Counts(int consumer) const {
  tdock::MutexLock lock(&mu_);
  if (static_cast<size_t>(consumer) >= counts_.size()) return LeaseCounts{};
  return counts_[consumer];
}

std::vector<Lease> LeaseTable::InFlight(int consumer) const {
  std::vector<Lease> out;
  {
    tdock::MutexLock lock(&mu_);
    for (const auto& [id, entry] : leases_) {
      if (entry.lease.consumer == consumer) out.push_back(entry.lease);
    }
  }
  std::sort(out.begin(), out.end(), [](const Lease& a, const Lease& b) { return a.id < b.id; });
  return out;
}

}  // namespace tdock::internal
