#include "server/shard/shard_table.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tdock::shard {

absl::Time ShardTable::Now() {
  return absl::FromUnixNanos(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

absl::Status ShardTable::Register(ShardEntry shard, absl::Time now,
                                  std::optional<ShardEntry>* restarted) {
  if (shard.id == 0) return absl::InvalidArgumentError("a shard's id must be positive, got 0");
  if (shard.address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard.id, " registers with no address"));
  }
  tdock::MutexLock lock(&mu_);
  auto [it, added] = shards_.emplace(shard.id, Held{shard, now});
  if (!added) {
    if (it->second.entry.address != shard.address) {
      return absl::AlreadyExistsError(absl::StrCat(
          "shard id ", shard.id, " is held by the shard at ", it->second.entry.address,
          "; the shard at ", shard.address, " needs another id"));
    }
    if (restarted != nullptr && shard.incarnation != 0 && it->second.entry.incarnation != 0 &&
        shard.incarnation != it->second.entry.incarnation) {
      *restarted = it->second.entry;
    }
    it->second = Held{std::move(shard), std::max(now, it->second.seen)};
  }
  return absl::OkStatus();
}

std::vector<ShardEntry> ShardTable::List() const {
  tdock::ReaderMutexLock lock(&mu_);
  std::vector<ShardEntry> out;
  for (const auto& [id, held] : shards_) out.push_back(held.entry);
  return out;
}

std::optional<absl::Time> ShardTable::LastSeen(uint64_t id) const {
  tdock::ReaderMutexLock lock(&mu_);
  auto it = shards_.find(id);
  if (it == shards_.end()) return std::nullopt;
  return it->second.seen;
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
  return out;
}

}  // namespace tdock::shard
