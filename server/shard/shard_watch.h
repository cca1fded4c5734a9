// ShardWatch: what a controller does about its shards' comings and goings,
// over its ShardTable and its docks.
//
//   live ──not heard from for away_after──▶ away ──for lost_after──▶ lost
//    ▲                                        │
//    └──────────── registers again ───────────┘
//
// - An **away** shard's rows are held back from hand-outs in every dock
//   (Dock::HoldShards): they wait, nobody gets rows it cannot read. Back, they
//   are let go.
// - A **lost** shard (never back, or back as another incarnation: it
//   restarted without its cells) is gone with its cells: in every dock the
//   rows with a cell on it are dropped as "lost" (Dock::DropLost, recorded
//   first). Its rows stay held until the drops are stored; a drop that failed
//   is tried again at the next Watch. The incarnation stays lost (Lost): its
//   registrations and Puts of cells on it are refused, and the shard starts
//   again as a new incarnation (ShardStore::Reincarnate).
// - A restarted controller expects the shard incarnations its recovered
//   docks' live rows name (ExpectRecovered): they are away until they
//   register, lost if they do not within lost_after, and an incarnation
//   replaced by another is lost at once.
//
// Nothing here is recorded: it follows from the docks' journaled locations
// and the shards' registrations, and a restarted controller rebuilds it.
//
// Thread safety: thread-safe. Watch runs on the controller's watch thread,
// Register on gRPC's; holds are pushed to the docks one set at a time.
#ifndef TDOCK_SERVER_SHARD_SHARD_WATCH_H_
#define TDOCK_SERVER_SHARD_SHARD_WATCH_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cell_location.h"
#include "common/mutex.h"
#include "server/dock/registry.h"
#include "server/shard/shard_table.h"

namespace tdock::shard {

struct ShardWatchOptions {
  // Not heard from for this long: away (its rows wait). Shards register every
  // second or so.
  absl::Duration away_after = absl::Seconds(5);
  // Not heard from for this long: lost (its rows are dropped).
  absl::Duration lost_after = absl::Seconds(60);
};

class ShardWatch final {
 public:
  // `table` and `docks` are borrowed. `on_lost` runs once for each shard
  // incarnation declared lost (a metric).
  ShardWatch(ShardTable* table, DockRegistry* docks, ShardWatchOptions options,
             std::function<void()> on_lost = nullptr);

  // A shard registers (ShardTable::Register): incarnations it replaces are
  // lost; a shard whose rows were held (away, expected) is let go.
  // FAILED_PRECONDITION for an incarnation declared lost (one of the latest
  // 4096): its cells are counted gone, and a drop tried again would take
  // its new rows; the shard starts again as a new incarnation.
  absl::Status Register(ShardEntry shard, absl::Time now = ShardTable::Now());
  // After recovery, before serving: every shard incarnation holding a cell of
  // a live row is expected since `now`, and its rows are held until it
  // registers.
  void ExpectRecovered(absl::Time now = ShardTable::Now());
  // One look at `now`: shards past lost_after are declared lost (returned),
  // failed drops are tried again, and the holds of every dock follow the
  // shards away.
  std::vector<ShardEntry> Watch(absl::Time now = ShardTable::Now());
  // The shards, `away` set for those whose rows are held now (as of the
  // last Watch or registration).
  std::vector<ShardEntry> List() const;
  const ShardWatchOptions& options() const { return options_; }
  // `shard` was declared lost (one of the latest 4096 so declared): a Put
  // of cells there is refused, since the controller counts them gone.
  bool Lost(ShardIncarnation shard) const;

 private:
  // A lost incarnation: its rows stay held while drops are being stored.
  struct Losing {
    int pending = 0;      // docks whose drop is not answered yet
    bool failed = false;  // some dock's drop failed: tried again at Watch
  };
  // `shards` are being lost: their rows stay held until dropped. Under
  // holds_mu_, with the table's change that took them out.
  void MarkLosing(const std::vector<ShardEntry>& shards);
  // Logs, counts and drops a shard that MarkLosing took in.
  void Lose(const ShardEntry& shard, const std::string& why);
  // Drops the rows of `lost` in every dock.
  void DropEverywhere(ShardIncarnation lost);
  // Holds, in every dock, the rows on the shards unavailable at `now` and on
  // those being lost.
  void PushHolds(absl::Time now);

  // Shared with the drops' callbacks, which may outlive the watch.
  struct Losses {
    tdock::Mutex mu;
    std::map<ShardIncarnation, Losing> losing ABSL_GUARDED_BY(mu);
    // Every incarnation declared lost, the latest kRemembered, oldest first.
    std::set<ShardIncarnation> lost ABSL_GUARDED_BY(mu);
    std::deque<ShardIncarnation> lost_order ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kRemembered = 4096;

  ShardTable* const table_;
  DockRegistry* const docks_;
  const ShardWatchOptions options_;
  const std::function<void()> on_lost_;
  const std::shared_ptr<Losses> losses_ = std::make_shared<Losses>();
  // One computation and push of the holds at a time, and the table's
  // changes that lose shards; before the table's lock, every dock's locks
  // and Losses::mu.
  mutable tdock::Mutex holds_mu_;
  std::vector<ShardIncarnation> held_ ABSL_GUARDED_BY(holds_mu_);  // as last pushed
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_WATCH_H_
