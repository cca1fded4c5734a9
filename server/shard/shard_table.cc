#include "server/shard/shard_table.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tdock::shard {

absl::Time ShardTable::Now() {
  return absl::FromUnixNanos(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

absl::Status ShardTable::Register(ShardEntry shard, absl::Time now,
                                  std::vector<ShardEntry>* gone) {
  if (shard.id == 0) return absl::InvalidArgumentError("a shard's id must be positive, got 0");
  if (shard.address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard.id, " registers with no address"));
  }
  shard.away = false;
  tdock::MutexLock lock(&mu_);
  auto it = shards_.find(shard.id);
  // The same incarnation at another address: the shard restarted with its
  // data dir somewhere else (a new pod address); it is the same shard.
  const bool same_incarnation = it != shards_.end() && shard.incarnation != 0 &&
                                it->second.entry.incarnation == shard.incarnation;
  if (same_incarnation && it->second.entry.address != shard.address) {
    TDOCK_LOG(WARNING) << "shard " << shard.id << " incarnation " << shard.incarnation
                       << " moved from " << it->second.entry.address << " to " << shard.address;
  }
  if (it != shards_.end() && it->second.entry.address != shard.address && !same_incarnation) {
    return absl::AlreadyExistsError(absl::StrCat(
        "shard id ", shard.id, " is held by the shard at ", it->second.entry.address,
        "; the shard at ", shard.address, " needs another id"));
  }
  if (auto expected = expected_.find(shard.id); expected != expected_.end()) {
    for (uint32_t incarnation : expected->second.incarnations) {
      // A shard that does not say its incarnation is taken to be the one;
      // cells of no incarnation (0) are any incarnation's.
      if (gone != nullptr && shard.incarnation != 0 && incarnation != 0 &&
          incarnation != shard.incarnation) {
        gone->push_back({.id = shard.id, .incarnation = incarnation});
      }
    }
    expected_.erase(expected);
  }
  if (it == shards_.end()) {
    shards_.emplace(shard.id, Held{std::move(shard), now});
    return absl::OkStatus();
  }
  if (gone != nullptr && shard.incarnation != 0 && it->second.entry.incarnation != 0 &&
      shard.incarnation != it->second.entry.incarnation) {
    gone->push_back(it->second.entry);
  }
  it->second = Held{std::move(shard), std::max(now, it->second.seen)};
  return absl::OkStatus();
}

void ShardTable::Expect(ShardIncarnation expected, absl::Time now) {
  tdock::MutexLock lock(&mu_);
  if (auto it = shards_.find(expected.shard);
      it != shards_.end() && it->second.entry.incarnation == expected.incarnation) {
    return;
  }
  auto [it, added] = expected_.emplace(expected.shard, Expected{{}, now});
  it->second.incarnations.insert(expected.incarnation);
}

std::vector<ShardEntry> ShardTable::List(absl::Time now, absl::Duration away_after) const {
  tdock::ReaderMutexLock lock(&mu_);
  std::vector<ShardEntry> out;
  for (const auto& [id, held] : shards_) {
    out.push_back(held.entry);
    out.back().away = now - held.seen > away_after;
  }
  return out;
}

std::optional<absl::Time> ShardTable::LastSeen(uint64_t id) const {
  tdock::ReaderMutexLock lock(&mu_);
  auto it = shards_.find(id);
  if (it == shards_.end()) return std::nullopt;
  return it->second.seen;
}

std::vector<ShardIncarnation> ShardTable::Unavailable(absl::Time now,
                                                      absl::Duration away_after) const {
  std::vector<ShardIncarnation> out;
  tdock::ReaderMutexLock lock(&mu_);
  for (const auto& [id, held] : shards_) {
    if (now - held.seen > away_after) out.push_back({id, held.entry.incarnation});
  }
  for (const auto& [id, expected] : expected_) {
    for (uint32_t incarnation : expected.incarnations) out.push_back({id, incarnation});
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ShardEntry> ShardTable::TakeUnseen(absl::Time now, absl::Duration after) {
  std::vector<ShardEntry> out;
  tdock::MutexLock lock(&mu_);
  for (auto it = shards_.begin(); it != shards_.end();) {
    if (now - it->second.seen > after) {
      out.push_back(std::move(it->second.entry));
      it = shards_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = expected_.begin(); it != expected_.end();) {
    if (now - it->second.since > after) {
      for (uint32_t incarnation : it->second.incarnations) {
        out.push_back({.id = it->first, .incarnation = incarnation});
      }
      it = expected_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace tdock::shard
