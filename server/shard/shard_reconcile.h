// ShardReconciler: a controller's side of a shard's inventory check. A shard
// that restarted, or whose controller did, or that holds staged Puts whose
// commit was never answered, sends what it holds; the controller sets that
// against the locations its docks hold:
//
//   - a staged Put whose commit was never answered ("unresolved"): stored
//     (a live step has cells of it: the shard commits it, in that step), or
//     never stored (the shard frees it, and a late commit naming it is
//     refused here from then on), or left for a later call while a commit
//     naming it is in flight here;
//   - a committed Put's cells missing at the shard (a live row has a cell of
//     an extent the shard gave before its inventory but no longer holds):
//     the rows are dropped as "lost" (Dock::DropLostExtents).
//
// Giving a Put up is safe against its own commit arriving late: an extent
// is marked given up while no commit naming it is in flight, before the
// docks are looked at, so a commit either was applied before (and is found)
// or starts after (and is refused). Nothing here is recorded: a
// restarted controller has no commit in flight, and the shard asks again.
//
// Thread safety: thread-safe. mu_ is a leaf: no dock lock is taken under it.
#ifndef TDOCK_SERVER_SHARD_SHARD_RECONCILE_H_
#define TDOCK_SERVER_SHARD_SHARD_RECONCILE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/dock/registry.h"

namespace tdock::shard {

class ShardReconciler final {
 public:
  // `docks` is borrowed.
  explicit ShardReconciler(DockRegistry* docks);

  // Random for each controller: a shard that sees it change reconciles.
  uint64_t controller_incarnation() const { return incarnation_; }

  // A Put's commit of `dock` naming cells in `extents` (by shard): one is
  // FAILED_PRECONDITION if one of them was given up (its shard freed its
  // cells); else they are in flight until EndCommit(extents).
  using Extents = std::map<uint64_t, std::vector<uint64_t>>;
  absl::Status BeginCommit(const std::string& dock, const Extents& extents);
  void EndCommit(const Extents& extents);

  struct Inventory {
    uint64_t shard = 0;
    uint32_t incarnation = 0;
    std::vector<uint64_t> held;        // ascending
    std::vector<uint64_t> unresolved;  // ascending; each also in held
    uint64_t next_extent = 0;          // extents from here on are not checked
    bool complete = false;  // held is every extent: cells missing from it are lost
  };
  struct Outcome {
    std::vector<std::pair<uint64_t, int64_t>> stored;  // extent, step
    std::vector<uint64_t> given_up;
    int64_t left = 0;       // unresolved extents a commit in flight names
    int64_t lost_rows = 0;  // rows dropped as lost
    bool unsettled = false;  // a drop of lost rows failed: ask again, complete
  };
  // Sets `inventory` against every dock; `done` once the lost rows' drops
  // are stored (unsettled if one failed). INVALID_ARGUMENT (at once) for
  // extents of another incarnation, not ascending, unresolved ones not held,
  // or at or past next_extent.
  void Reconcile(Inventory inventory, std::function<void(absl::StatusOr<Outcome>)> done);

 private:
  static absl::Status Check(const Inventory& inventory);

  DockRegistry* const docks_;
  const uint64_t incarnation_;
  tdock::Mutex mu_;
  using Key = std::pair<uint64_t, uint64_t>;  // shard, extent
  // The commits in flight naming each extent.
  absl::flat_hash_map<Key, int> in_flight_ ABSL_GUARDED_BY(mu_);
  // Extents given up, the latest kRemembered: each with the number of its
  // giving up, in order (an entry whose number is not the map's is stale).
  absl::flat_hash_map<Key, uint64_t> given_up_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<Key, uint64_t>> given_up_order_ ABSL_GUARDED_BY(mu_);
  uint64_t given_up_count_ ABSL_GUARDED_BY(mu_) = 0;
  static constexpr size_t kRemembered = 1 << 16;
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_RECONCILE_H_
