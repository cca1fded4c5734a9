// DockImpl's rows whose cells are on a shard that is gone or away (a
// controller's docks, whose cells are locations): found by reading each
// live row's locations; a gone shard's are dropped as "lost" through the
// drop path, an away shard's are held back from hand-outs until it is back;
// so are the rows whose cells a shard no longer holds, found when it
// reconciles its inventory.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/cell_location.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Calls `on(where)` for the location of each cell of `row` in `part` until
// it returns true; returns whether one did.
template <typename On>
bool AnyLocation(const Partition& part, const StepCells& cells, const ColumnTable& columns,
                 int64_t row, On on) {
  for (int c = 0; c < static_cast<int>(columns.size()); ++c) {
    const CellBlock* block = part.cell(c, row);
    if (block == nullptr) continue;
    absl::StatusOr<CellLocation> where =
        DecodeCellLocation(cells.Bytes(*block, columns[c].item_bytes()));
    if (where.ok() && on(*where)) return true;
  }
  return false;
}

}  // namespace

std::vector<int64_t> DockImpl::RowsOnShards(const Partition& part,
                                            const std::vector<ShardIncarnation>& shards) const {
  return RowsWhere(part, [&shards](const CellLocation& where) {
    return std::any_of(shards.begin(), shards.end(),
                       [&where](const ShardIncarnation& s) { return s.Holds(where); });
  });
}

std::vector<int64_t> DockImpl::RowsWhere(
    const Partition& part, const std::function<bool(const CellLocation&)>& where) const {
  std::vector<int64_t> rows;
  const StepCells& cells = *part.cells(mu_);
  for (int64_t row = 0; row < rows_per_step_; ++row) {
    if (part.dropped(row)) continue;
    if (AnyLocation(part, cells, columns_, row, where)) rows.push_back(row);
  }
  return rows;
}

std::vector<int64_t> DockImpl::LostRowsOfPut(const PutInput& input,
                                             const PutResult& answer) const {
  std::vector<int64_t> lost;
  if (limits_.cells != CellForm::kLocations) return lost;
  tdock::ReaderMutexLock lock(&mu_);
  if (!ring_.Holds(mu_, answer.step)) return lost;
  const Partition& part = ring_.Of(answer.step);
  std::vector<int64_t> rows = !input.rows.empty() ? input.rows : answer.assigned;
  if (rows.empty() && !input.keys.empty()) {
    // Rows named by their keys: a dropped row's key is out of the key
    // index, but its row keeps it.
    const absl::flat_hash_set<std::string> keys(input.keys.begin(), input.keys.end());
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      const std::string* key = part.row_index().key(row);
      if (key != nullptr && keys.contains(*key)) rows.push_back(row);
    }
  }
  for (int64_t row : rows) {
    if (row >= 0 && row < rows_per_step_ && part.dropped(row) &&
        part.drop_reason(mu_, row) == DropReason::kLost) {
      lost.push_back(row);
    }
  }
  return lost;
}

std::vector<ShardIncarnation> DockImpl::ShardsOfLiveRows() const {
  std::set<ShardIncarnation> found;
  if (limits_.cells == CellForm::kLocations) {
    tdock::ReaderMutexLock lock(&mu_);
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      const StepCells& cells = *part->cells(mu_);
      for (int64_t row = 0; row < rows_per_step_; ++row) {
        if (part->dropped(row)) continue;
        AnyLocation(*part, cells, columns_, row, [&found](const CellLocation& where) {
          found.insert({where.shard, static_cast<uint32_t>(where.extent >> 32)});
          return false;
        });
      }
    }
  }
  return {found.begin(), found.end()};
}

void DockImpl::HoldShards(std::vector<ShardIncarnation> away) {
  if (limits_.cells != CellForm::kLocations) return;
  bool let_go = false;
  {
    tdock::MutexLock serial(&holds_mu_);
    if (away.empty() && held_shards_.empty()) return;
    held_shards_ = std::move(away);
    tdock::ReaderMutexLock lock(&mu_);
    for (const auto& part : ring_.partitions()) {
      std::vector<int64_t> rows;
      // A step being released too: its release may fail and serve it again.
      if (!held_shards_.empty() && part->live(mu_)) rows = RowsOnShards(*part, held_shards_);
      let_go |= part->SetHeld(rows);
    }
  }
  if (let_go) WakeGets({});
}

std::vector<StoredExtent> DockImpl::ExtentsOnShard(uint64_t shard, uint32_t incarnation,
                                                   uint64_t below) const {
  std::map<uint64_t, StoredExtent> found;
  if (limits_.cells == CellForm::kLocations) {
    const ShardIncarnation on{shard, incarnation};
    tdock::ReaderMutexLock lock(&mu_);
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      const StepCells& cells = *part->cells(mu_);
      const int64_t step = part->step(mu_);
      // A step being released goes with its cells anyway (as DropLost).
      const bool releasing = part->releasing(mu_);
      for (int64_t row = 0; row < rows_per_step_; ++row) {
        const bool live_row = !part->dropped(row) && !releasing;
        AnyLocation(*part, cells, columns_, row, [&](const CellLocation& where) {
          if (on.Holds(where) && where.extent < below) {
            StoredExtent& stored = found[where.extent];
            stored.extent = where.extent;
            stored.step = step;
            stored.live_rows |= live_row;
          }
          return false;
        });
      }
    }
  }
  std::vector<StoredExtent> out;
  for (const auto& [extent, stored] : found) out.push_back(stored);
  return out;
}

void DockImpl::DropLost(uint64_t shard, uint32_t incarnation, RowsCallback done) {
  const ShardIncarnation on{shard, incarnation};
  DropLostWhere([on](const CellLocation& where) { return on.Holds(where); }, std::move(done));
}

void DockImpl::DropLostExtents(uint64_t shard, std::vector<uint64_t> extents,
                               RowsCallback done) {
  DropLostWhere(
      [shard, &extents](const CellLocation& where) {
        return where.shard == shard &&
               std::binary_search(extents.begin(), extents.end(), where.extent);
      },
      std::move(done));
}

void DockImpl::DropLostWhere(const std::function<bool(const CellLocation&)>& lost,
                             RowsCallback done) {
  std::vector<DockJournal::DropRecord> drops;
  if (limits_.cells == CellForm::kLocations) {
    tdock::ReaderMutexLock lock(&mu_);
    bool whole_groups = false;
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) whole_groups |= plan.whole_groups;
    for (const auto& part : ring_.partitions()) {
      // A step being released goes with its cells anyway.
      if (!part->live(mu_) || part->releasing(mu_)) continue;
      std::vector<int64_t> rows;
      for (int64_t row : RowsWhere(*part, lost)) {
        if (!whole_groups) {
          rows.push_back(row);
          continue;
        }
        // A whole-group consumer could never take the group: all of it goes.
        const int64_t first = row / group_size_ * group_size_;
        for (int64_t r = first; r < first + group_size_; ++r) {
          if (rows.empty() || rows.back() < r) rows.push_back(r);
        }
      }
      if (rows.empty()) continue;
      tdock::MutexLock commit(&part->row_index().mu());
      part->row_index().AddDropInFlight(/*seal=*/false, {}, 1);  // until recorded
      drops.push_back({part->step(mu_), std::move(rows), DropReason::kLost});
    }
  }
  if (drops.empty()) {
    std::move(done)(int64_t{0});
    return;
  }
  // One answer once every step's drop is: the rows dropped, or the first error.
  struct Pending {
    std::mutex mu;
    size_t left;
    absl::StatusOr<int64_t> total = int64_t{0};
    RowsCallback done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = drops.size();
  pending->done = std::move(done);
  for (DockJournal::DropRecord& record : drops) {
    RecordAndApplyDrop(std::move(record), /*in_flight=*/true,
                       [pending](absl::StatusOr<int64_t> dropped) {
                         RowsCallback finish;
                         absl::StatusOr<int64_t> total;
                         {
                           std::lock_guard<std::mutex> lock(pending->mu);
                           if (!dropped.ok() && pending->total.ok()) {
                             pending->total = dropped.status();
                           } else if (dropped.ok() && pending->total.ok()) {
                             pending->total = *pending->total + *dropped;
                           }
                           if (--pending->left > 0) return;
                           finish = std::move(pending->done);
                           total = pending->total;
                         }
                         std::move(finish)(std::move(total));
                       });
  }
}

}  // namespace tdock::internal
