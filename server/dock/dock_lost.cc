// DockImpl's drops of rows whose cells were on a shard that is gone (a
// controller's docks, whose cells are locations): found by reading each
// live row's locations, dropped as "lost" through the drop path.
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/cell_location.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::DropLost(uint64_t shard, uint32_t incarnation, RowsCallback done) {
  std::vector<DockJournal::DropRecord> drops;
  if (limits_.cells == CellForm::kLocations) {
    tdock::ReaderMutexLock lock(&mu_);
    bool whole_groups = false;
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) whole_groups |= plan.whole_groups;
    for (const auto& part : ring_.partitions()) {
      // A step being released goes with its cells anyway.
      if (!part->live(mu_) || part->releasing(mu_)) continue;
      const std::shared_ptr<StepCells>& cells = part->cells(mu_);
      std::vector<int64_t> rows;
      for (int64_t row = 0; row < rows_per_step_; ++row) {
        if (part->dropped(row)) continue;
        bool lost = false;
        for (int c = 0; c < static_cast<int>(columns_.size()) && !lost; ++c) {
          const CellBlock* block = part->cell(c, row);
          if (block == nullptr) continue;
          absl::StatusOr<CellLocation> where =
              DecodeCellLocation(cells->Bytes(*block, columns_[c].item_bytes()));
          lost = where.ok() && where->shard == shard &&
                 (incarnation == 0 || where->extent >> 32 == incarnation);
        }
        if (!lost) continue;
        // A whole-group consumer could never take the group: all of it goes.
        if (whole_groups) {
          const int64_t first = row / group_size_ * group_size_;
          for (int64_t r = first; r < first + group_size_; ++r) {
            if (rows.empty() || rows.back() < r) rows.push_back(r);
          }
        } else {
          rows.push_back(row);
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
