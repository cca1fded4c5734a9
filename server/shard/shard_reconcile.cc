#include "server/shard/shard_reconcile.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tdock::shard {
namespace {

uint64_t RandomIncarnation() {
  std::random_device random;
  uint64_t incarnation = 0;
  while (incarnation == 0) incarnation = (uint64_t{random()} << 32) | random();
  return incarnation;
}

bool Has(const std::vector<uint64_t>& sorted, uint64_t extent) {
  return std::binary_search(sorted.begin(), sorted.end(), extent);
}

}  // namespace

ShardReconciler::ShardReconciler(DockRegistry* docks)
    : docks_(docks), incarnation_(RandomIncarnation()) {}

absl::Status ShardReconciler::BeginCommit(const std::string& dock, const Extents& extents) {
  tdock::MutexLock lock(&mu_);
  for (const auto& [shard, ids] : extents) {
    for (uint64_t extent : ids) {
      if (given_up_.contains(Key{shard, extent})) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Put on dock '", dock, "': its cells (shard ", shard, " extent ", extent,
            ") were given up when the shard reconciled with this controller, which had not "
            "stored them; the shard freed them"));
      }
    }
  }
  for (const auto& [shard, ids] : extents) {
    for (uint64_t extent : ids) ++in_flight_[{shard, extent}];
  }
  return absl::OkStatus();
}

void ShardReconciler::EndCommit(const Extents& extents) {
  tdock::MutexLock lock(&mu_);
  for (const auto& [shard, ids] : extents) {
    for (uint64_t extent : ids) {
      auto it = in_flight_.find({shard, extent});
      if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
    }
  }
}

absl::Status ShardReconciler::Check(const Inventory& inventory) {
  const std::string what = absl::StrCat("ReconcileShard of shard ", inventory.shard);
  for (const std::vector<uint64_t>* extents : {&inventory.held, &inventory.unresolved}) {
    const char* name = extents == &inventory.held ? "held" : "unresolved";
    for (size_t i = 0; i < extents->size(); ++i) {
      const uint64_t extent = (*extents)[i];
      if (static_cast<uint32_t>(extent >> 32) != inventory.incarnation) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " extent ", extent,
                                                       " is not of incarnation ",
                                                       inventory.incarnation));
      }
      if (i > 0 && extent <= (*extents)[i - 1]) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": ", name, " extents are not ascending at ", extent));
      }
      if (extent >= inventory.next_extent) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": ", name, " extent ", extent, " is not below next_extent ",
            inventory.next_extent));
      }
    }
  }
  for (uint64_t extent : inventory.unresolved) {
    if (!Has(inventory.held, extent)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unresolved extent ", extent, " is not held"));
    }
  }
  return absl::OkStatus();
}

void ShardReconciler::Reconcile(Inventory inventory,
                                std::function<void(absl::StatusOr<Outcome>)> done) {
  if (absl::Status bad = Check(inventory); !bad.ok()) {
    done(bad);
    return;
  }
  const uint64_t shard = inventory.shard;
  // The unresolved extents no commit in flight names are given up from now
  // on, unless a dock is found to hold them below.
  std::vector<uint64_t> marked;
  {
    tdock::MutexLock lock(&mu_);
    for (uint64_t extent : inventory.unresolved) {
      const Key key{shard, extent};
      if (in_flight_.contains(key)) continue;
      marked.push_back(extent);
      if (given_up_.contains(key)) continue;
      given_up_[key] = ++given_up_count_;
      given_up_order_.push_back({key, given_up_count_});
      while (given_up_.size() > kRemembered) {
        const auto [oldest, number] = given_up_order_.front();
        given_up_order_.pop_front();
        if (auto it = given_up_.find(oldest); it != given_up_.end() && it->second == number) {
          given_up_.erase(it);
        }
      }
    }
  }
  std::map<uint64_t, int64_t> stored;  // unresolved extent -> its step
  std::vector<std::pair<std::shared_ptr<Dock>, std::vector<uint64_t>>> missing;
  for (const std::shared_ptr<Dock>& dock : docks_->List()) {
    std::vector<uint64_t> gone;
    for (const StoredExtent& held :
         dock->ExtentsOnShard(shard, inventory.incarnation, inventory.next_extent)) {
      if (Has(inventory.unresolved, held.extent)) {
        stored[held.extent] = held.step;
      } else if (inventory.complete && held.live_rows && !Has(inventory.held, held.extent)) {
        gone.push_back(held.extent);
      }
    }
    if (!gone.empty()) missing.emplace_back(dock, std::move(gone));
  }
  Outcome outcome;
  {
    tdock::MutexLock lock(&mu_);
    for (uint64_t extent : inventory.unresolved) {
      if (auto it = stored.find(extent); it != stored.end()) {
        outcome.stored.push_back(*it);
        given_up_.erase(Key{shard, extent});
      } else if (Has(marked, extent)) {
        outcome.given_up.push_back(extent);
      } else {
        ++outcome.left;
      }
    }
  }
  if (missing.empty()) {
    done(std::move(outcome));
    return;
  }
  for (const auto& [dock, extents] : missing) {
    TDOCK_LOG(WARNING) << "shard " << shard << " incarnation " << inventory.incarnation
                       << " no longer holds " << extents.size() << " Puts of dock '"
                       << dock->name() << "' stored here (extents " << extents.front()
                       << "...): their rows are dropped as lost";
  }
  // One answer once every dock's drop is stored.
  struct Pending {
    std::mutex mu;
    size_t left = 0;
    Outcome outcome;
    std::function<void(absl::StatusOr<Outcome>)> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = missing.size();
  pending->outcome = std::move(outcome);
  pending->done = std::move(done);
  for (auto& [dock, extents] : missing) {
    dock->DropLostExtents(shard, std::move(extents), [pending](absl::StatusOr<int64_t> dropped) {
      std::function<void(absl::StatusOr<Outcome>)> finish;
      absl::StatusOr<Outcome> answer;
      {
        std::lock_guard<std::mutex> lock(pending->mu);
        if (dropped.ok()) {
          pending->outcome.lost_rows += *dropped;
        } else {
          // The answers stand; the missing cells are looked for again.
          TDOCK_LOG(WARNING) << "the rows of missing cells could not be dropped: "
                             << dropped.status();
          pending->outcome.unsettled = true;
        }
        if (--pending->left > 0) return;
        finish = std::move(pending->done);
        answer = std::move(pending->outcome);
      }
      finish(std::move(answer));
    });
  }
}

}  // namespace tdock::shard
