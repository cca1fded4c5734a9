#include "server/shard/shard_table.h"

#include "absl/strings/str_cat.h"

namespace tdock::shard {

absl::Status ShardTable::Register(ShardEntry shard) {
  if (shard.id == 0) return absl::InvalidArgumentError("a shard's id must be positive, got 0");
  if (shard.address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard.id, " registers with no address"));
  }
  tdock::MutexLock lock(&mu_);
  auto [it, added] = shards_.emplace(shard.id, shard);
  if (!added) {
    if (it->second.address != shard.address) {
      return absl::AlreadyExistsError(absl::StrCat(
          "shard id ", shard.id, " is held by the shard at ", it->second.address,
          "; the shard at ", shard.address, " needs another id"));
    }
    it->second = std::move(shard);
  }
  return absl::OkStatus();
}

std::vector<ShardEntry> ShardTable::List() const {
  tdock::ReaderMutexLock lock(&mu_);
  std::vector<ShardEntry> out;
  for (const auto& [id, shard] : shards_) out.push_back(shard);
  return out;
}

}  // namespace tdock::shard
