#include "server/shard/shard_watch.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tdock::shard {

ShardWatch::ShardWatch(ShardTable* table, DockRegistry* docks, ShardWatchOptions options,
                       std::function<void()> on_lost)
    : table_(table), docks_(docks), options_(options), on_lost_(std::move(on_lost)) {}

absl::Status ShardWatch::Register(ShardEntry shard, absl::Time now) {
  const uint64_t id = shard.id;
  const uint32_t incarnation = shard.incarnation;
  std::vector<ShardEntry> gone;
  bool held;
  {
    // With the table's change: no push of holds lets a gone incarnation's
    // rows go before it is counted as being lost.
    tdock::MutexLock lock(&holds_mu_);
    {
      tdock::MutexLock losing(&losses_->mu);
      if (incarnation != 0 && (losses_->losing.contains({id, incarnation}) ||
                               losses_->lost.contains({id, incarnation}))) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shard ", id, " incarnation ", incarnation,
            " was declared lost: its cells are counted gone; it drops them and registers "
            "as a new incarnation"));
      }
    }
    if (absl::Status registered = table_->Register(std::move(shard), now, &gone);
        !registered.ok()) {
      return registered;
    }
    MarkLosing(gone);
    held = std::any_of(held_.begin(), held_.end(),
                       [id](const ShardIncarnation& h) { return h.shard == id; });
  }
  // Its rows were held (it was away, or expected): let them go now, not at
  // the next Watch. A gone incarnation's rows are held before their drop.
  if (held || !gone.empty()) PushHolds(now);
  for (const ShardEntry& former : gone) {
    Lose(former, absl::StrCat("restarted (now incarnation ", incarnation, ")"));
  }
  return absl::OkStatus();
}

void ShardWatch::ExpectRecovered(absl::Time now) {
  for (const std::shared_ptr<Dock>& dock : docks_->List()) {
    for (const ShardIncarnation& held : dock->ShardsOfLiveRows()) table_->Expect(held, now);
  }
  PushHolds(now);
}

std::vector<ShardEntry> ShardWatch::Watch(absl::Time now) {
  std::vector<ShardEntry> lost;
  {
    tdock::MutexLock lock(&holds_mu_);  // as in Register
    lost = table_->TakeUnseen(now, options_.lost_after);
    MarkLosing(lost);
  }
  if (!lost.empty()) PushHolds(now);  // held before they are dropped
  for (const ShardEntry& shard : lost) {
    Lose(shard, absl::StrCat("was not heard from for ", absl::FormatDuration(options_.lost_after)));
  }
  std::vector<ShardIncarnation> retry;
  {
    tdock::MutexLock lock(&losses_->mu);
    for (const auto& [shard, losing] : losses_->losing) {
      if (losing.failed && losing.pending == 0) retry.push_back(shard);
    }
  }
  for (const ShardIncarnation& shard : retry) DropEverywhere(shard);
  PushHolds(now);
  return lost;
}

void ShardWatch::MarkLosing(const std::vector<ShardEntry>& shards) {
  tdock::MutexLock lock(&losses_->mu);
  for (const ShardEntry& shard : shards) {
    const ShardIncarnation lost{shard.id, shard.incarnation};
    losses_->losing.try_emplace(lost);
    if (lost.incarnation == 0 || !losses_->lost.insert(lost).second) continue;
    losses_->lost_order.push_back(lost);
    if (losses_->lost_order.size() > kRemembered) {
      losses_->lost.erase(losses_->lost_order.front());
      losses_->lost_order.pop_front();
    }
  }
}

bool ShardWatch::Lost(ShardIncarnation shard) const {
  tdock::MutexLock lock(&losses_->mu);
  return losses_->lost.contains(shard);
}

void ShardWatch::Lose(const ShardEntry& shard, const std::string& why) {
  TDOCK_LOG(WARNING) << "shard " << shard.id << " (incarnation " << shard.incarnation << ")"
                     << (shard.address.empty() ? "" : " at " + shard.address)
                     << (shard.node.empty() ? "" : " on node " + shard.node) << " " << why
                     << ": declared lost; rows with cells on it are dropped as lost";
  if (on_lost_ != nullptr) on_lost_();
  DropEverywhere({shard.id, shard.incarnation});
}

void ShardWatch::DropEverywhere(ShardIncarnation lost) {
  const std::vector<std::shared_ptr<Dock>> docks = docks_->List();
  {
    tdock::MutexLock lock(&losses_->mu);
    Losing& losing = losses_->losing[lost];
    losing.pending += static_cast<int>(docks.size());
    losing.failed = false;
    if (losing.pending == 0) losses_->losing.erase(lost);
  }
  for (const std::shared_ptr<Dock>& dock : docks) {
    dock->DropLost(lost.shard, lost.incarnation,
                   [losses = losses_, lost, name = dock->name()](absl::StatusOr<int64_t> rows) {
                     if (!rows.ok()) {
                       TDOCK_LOG(ERROR) << "dock '" << name << "': the rows of lost shard "
                                        << lost.shard << " were not dropped (tried again): "
                                        << rows.status();
                     } else if (*rows > 0) {
                       TDOCK_LOG(WARNING) << "dock '" << name << "': " << *rows
                                          << " rows with cells on lost shard " << lost.shard
                                          << " dropped as lost";
                     }
                     tdock::MutexLock lock(&losses->mu);
                     auto it = losses->losing.find(lost);
                     if (it == losses->losing.end()) return;
                     it->second.failed |= !rows.ok();
                     if (--it->second.pending == 0 && !it->second.failed) {
                       losses->losing.erase(it);
                     }
                   });
  }
}

void ShardWatch::PushHolds(absl::Time now) {
  tdock::MutexLock lock(&holds_mu_);
  std::vector<ShardIncarnation> held = table_->Unavailable(now, options_.away_after);
  {
    tdock::MutexLock losing(&losses_->mu);
    for (const auto& [shard, state] : losses_->losing) held.push_back(shard);
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (held.empty() && held_.empty()) return;
  for (const std::shared_ptr<Dock>& dock : docks_->List()) dock->HoldShards(held);
  held_ = std::move(held);
}

std::vector<ShardEntry> ShardWatch::List() const {
  std::vector<ShardEntry> shards = table_->List();
  tdock::MutexLock lock(&holds_mu_);
  for (ShardEntry& shard : shards) {
    shard.away = std::any_of(held_.begin(), held_.end(), [&shard](const ShardIncarnation& held) {
      return held.shard == shard.id &&
             (held.incarnation == 0 || held.incarnation == shard.incarnation);
    });
  }
  return shards;
}

}  // namespace tdock::shard
