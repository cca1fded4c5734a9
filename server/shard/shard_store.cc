#include "server/shard/shard_store.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/local_cell_store.h"

namespace tdock::shard {

namespace {

uint32_t RandomIncarnation() {
  std::random_device random;
  uint32_t incarnation = 0;
  while (incarnation == 0) incarnation = static_cast<uint32_t>(random());
  return incarnation;
}

}  // namespace

ShardStore::ShardStore(uint64_t shard, int64_t chunk_bytes, int64_t limit_bytes,
                       absl::Duration read_grace, std::shared_ptr<Clock> clock,
                       std::shared_ptr<internal::ChunkMemory> memory)
    : shard_(shard),
      incarnation_(RandomIncarnation()),
      pool_(std::make_shared<internal::ChunkPool>(chunk_bytes, limit_bytes, std::move(memory))),
      read_grace_(read_grace),
      clock_(clock != nullptr ? std::move(clock) : Clock::Real()),
      // The high 32 bits: this store's incarnation; extents count up from it.
      next_extent_((uint64_t{incarnation_.load()} << 32) | 1) {}

absl::Status ShardStore::Recover(ShardJournal* journal, RecoveredShard recovered) {
  tdock::MutexLock lock(&mu_);
  journal_ = journal;
  if (recovered.incarnation == 0) {
    if (journal_ != nullptr) journal_->Reincarnated(incarnation_.load());
    return absl::OkStatus();
  }
  incarnation_.store(recovered.incarnation, std::memory_order_release);
  next_extent_ = (uint64_t{recovered.incarnation} << 32) | 1;
  for (ShardJournal::Extent& record : recovered.extents) {
    if ((record.id >> 32) != recovered.incarnation) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard ", shard_, ": extent ", record.id, " is not of incarnation ",
          recovered.incarnation));
    }
    PackedColumn column;
    column.name = "cells";
    column.dtype = DType::kUint8;
    column.offsets.push_back(0);
    for (uint64_t bytes : record.cell_bytes) {
      column.offsets.push_back(column.offsets.back() + static_cast<int64_t>(bytes));
    }
    column.segments.push_back(ByteSpan(record.payload.data(), record.payload.size()));
    TDOCK_RETURN_IF_ERROR(ValidatePacked(column, column.rows(), 1));
    DockCells& held = docks_[record.dock];
    std::shared_ptr<internal::LocalStepCells> cells;
    if (record.step < 0) {
      cells = std::make_shared<internal::LocalStepCells>(pool_);
    } else {
      std::shared_ptr<internal::LocalStepCells>& slot = held.steps[record.step];
      if (slot == nullptr) slot = std::make_shared<internal::LocalStepCells>(pool_);
      cells = slot;
    }
    std::vector<const internal::CellBlock*> blocks;
    // What was held before the restart is held again, limit or not.
    if (!cells->Write({column}, {1}, /*past_limit=*/true, blocks)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shard ", shard_, ": no memory for the ", record.payload.size(),
          " bytes of extent ", record.id));
    }
    Extent extent{record.dock, record.step, record.committed,
                  static_cast<int64_t>(record.payload.size()), {}, cells};
    // A staged Put's commit may or may not have been stored: the controller
    // says when the shard reconciles.
    extent.unresolved = !record.committed;
    for (int64_t r = 0; r < column.rows(); ++r) {
      extent.cells.push_back({static_cast<uint64_t>(column.offsets[r]),
                              cells->Bytes(blocks[0][r], 1)});
    }
    extents_.emplace(record.id, std::move(extent));
    next_extent_ = std::max(next_extent_, record.id + 1);
  }
  // Ids given to extents freed since are not given again.
  if ((recovered.next_id >> 32) == recovered.incarnation) {
    next_extent_ = std::max(next_extent_, recovered.next_id);
  }
  return absl::OkStatus();
}

void ShardStore::Record(uint64_t extent, ShardJournal::Done done) {
  absl::AnyInvocable<void() &&> then;
  {
    // Queued under the lock: a release that frees the extent records that
    // after this.
    tdock::ReaderMutexLock lock(&mu_);
    auto it = extents_.find(extent);
    if (it == extents_.end() || it->second.prepared) {
      then = [this, extent, done = std::move(done)]() mutable {
        std::move(done)(absl::NotFoundError(
            absl::StrCat("shard ", shard_, " holds no staged Put ", extent)));
      };
    } else if (journal_ == nullptr) {
      then = [done = std::move(done)]() mutable { std::move(done)(absl::OkStatus()); };
    } else {
      const Extent& held = it->second;
      ShardJournal::Extent record{extent, held.dock, held.step, held.committed, {}, {}};
      std::vector<ByteSpan> cells;
      for (const Cell& cell : held.cells) {
        record.cell_bytes.push_back(cell.bytes.size());
        cells.push_back(cell.bytes);
      }
      then = journal_->Staged(record, next_extent_, std::move(cells), held.step_cells,
                              std::move(done));
    }
  }
  if (then) std::move(then)();
}

uint32_t ShardStore::Reincarnate() {
  // Freed once the lock is let go.
  absl::flat_hash_map<std::string, DockCells> docks;
  absl::flat_hash_map<uint64_t, Extent> extents;
  tdock::MutexLock lock(&mu_);
  docks.swap(docks_);
  extents.swap(extents_);
  uint32_t incarnation = RandomIncarnation();
  while (incarnation == incarnation_.load(std::memory_order_relaxed)) {
    incarnation = RandomIncarnation();
  }
  incarnation_.store(incarnation, std::memory_order_release);
  next_extent_ = (uint64_t{incarnation} << 32) | 1;
  if (journal_ != nullptr) journal_->Reincarnated(incarnation);
  return incarnation;
}

absl::StatusOr<ShardStore::Staged> ShardStore::Stage(const std::string& dock,
                                                     std::optional<int64_t> step,
                                                     absl::Span<const PackedColumn> columns,
                                                     absl::Span<const int64_t> item_bytes) {
  return Place(dock, step, columns, item_bytes, /*copy=*/true);
}

absl::StatusOr<ShardStore::Prepared> ShardStore::Prepare(const std::string& dock,
                                                         std::optional<int64_t> step,
                                                         absl::Span<const PackedColumn> columns,
                                                         absl::Span<const int64_t> item_bytes) {
  TDOCK_ASSIGN_OR_RETURN(Staged placed, Place(dock, step, columns, item_bytes, /*copy=*/false));
  Prepared out{placed.extent, {}};
  tdock::ReaderMutexLock lock(&mu_);
  auto it = extents_.find(placed.extent);
  if (it == extents_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dock '", dock, "': the Put prepared as ", placed.extent, " was released meanwhile"));
  }
  size_t cell = 0;
  for (const std::vector<CellLocation>& column : placed.locations) {
    std::vector<absl::Span<char>>& regions = out.regions.emplace_back();
    for (size_t r = 0; r < column.size(); ++r, ++cell) {
      const ByteSpan bytes = it->second.cells[cell].bytes;
      if (bytes.empty()) continue;
      // The writer's memory: the bytes are not read until Fill.
      char* data = const_cast<char*>(bytes.data());
      if (!regions.empty() && regions.back().data() + regions.back().size() == data) {
        regions.back() = absl::Span<char>(regions.back().data(),
                                          regions.back().size() + bytes.size());
      } else {
        regions.emplace_back(data, bytes.size());
      }
    }
  }
  return out;
}

absl::StatusOr<ShardStore::Staged> ShardStore::Fill(uint64_t extent, const std::string& dock,
                                                    std::optional<int64_t> step,
                                                    absl::Span<const PackedColumn> columns,
                                                    absl::Span<const int64_t> item_bytes) {
  if (columns.size() != item_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(columns.size(), " columns but ",
                                                   item_bytes.size(), " item sizes"));
  }
  tdock::MutexLock lock(&mu_);
  auto it = extents_.find(extent);
  if (it == extents_.end() || !it->second.prepared || it->second.dock != dock) {
    return absl::NotFoundError(absl::StrCat(
        "shard ", shard_, " holds no Put prepared as ", extent, " for dock '", dock,
        "' (filled already, released, or prepared by another shard)"));
  }
  Extent& held = it->second;
  if (held.free_at != absl::InfiniteFuture()) {
    return Refuse(Refusal::kReleased,
                  absl::FailedPreconditionError(absl::StrCat(
                      "dock '", dock, "' step ", held.step, " was released: shard ", shard_,
                      " takes no Put of it")));
  }
  if (held.step != step.value_or(-1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Put ", extent, " was prepared for step ", held.step, " (-1: a reservation's), not ",
        step.value_or(-1)));
  }
  Staged staged{extent, {}};
  size_t cell = 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    TDOCK_RETURN_IF_ERROR(ValidateOffsets(columns[i], columns[i].rows()));
    std::vector<CellLocation>& locations = staged.locations.emplace_back();
    for (int64_t r = 0; r < columns[i].rows(); ++r, ++cell) {
      const uint64_t bytes = static_cast<uint64_t>(columns[i].length(r) * item_bytes[i]);
      if (cell >= held.cells.size() || held.cells[cell].bytes.size() != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column '", columns[i].name, "' row ", r, ": ", bytes,
            " bytes, but Put ", extent, " was prepared for other cells"));
      }
      locations.push_back({shard_, extent, held.cells[cell].offset, bytes});
    }
  }
  if (cell != held.cells.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Put ", extent, " was prepared for ", held.cells.size(), " cells, the Put has ", cell));
  }
  held.prepared = false;
  return staged;
}

absl::StatusOr<ShardStore::Staged> ShardStore::Place(const std::string& dock,
                                                     std::optional<int64_t> step,
                                                     absl::Span<const PackedColumn> columns,
                                                     absl::Span<const int64_t> item_bytes,
                                                     bool copy) {
  if (columns.size() != item_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(columns.size(), " columns but ",
                                                   item_bytes.size(), " item sizes"));
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    TDOCK_RETURN_IF_ERROR(copy ? ValidatePacked(columns[i], columns[i].rows(), item_bytes[i])
                               : ValidateOffsets(columns[i], columns[i].rows()));
  }
  std::shared_ptr<internal::LocalStepCells> cells;
  uint64_t extent = 0;
  bool oldest = false;
  {
    tdock::MutexLock lock(&mu_);
    DockCells& held = docks_[dock];
    oldest = step.has_value() && *step == held.front;
    if (!step.has_value()) {
      cells = std::make_shared<internal::LocalStepCells>(pool_);
    } else {
      if (held.released.count(*step) != 0) {
        return Refuse(Refusal::kReleased,
                      absl::FailedPreconditionError(absl::StrCat(
                          "dock '", dock, "' step ", *step, " was released: shard ", shard_,
                          " takes no Put of it")));
      }
      std::shared_ptr<internal::LocalStepCells>& slot = held.steps[*step];
      if (slot == nullptr) slot = std::make_shared<internal::LocalStepCells>(pool_);
      cells = slot;
    }
    extent = next_extent_++;
    placing_.insert(extent);
  }
  // The copy, with no lock held.
  std::vector<const internal::CellBlock*> blocks;
  const std::string where =
      step.has_value() ? absl::StrCat("dock '", dock, "' step ", *step)
                       : absl::StrCat("dock '", dock, "' (a reservation's step)");
  const auto write = [&](bool past_limit) {
    return copy ? cells->Write(columns, item_bytes, past_limit, blocks)
                : cells->Reserve(columns, item_bytes, past_limit, blocks);
  };
  bool written = write(/*past_limit=*/false);
  if (!written) {
    // Retired cells give way to a Put: their grace ends early.
    std::vector<Extent> retired;
    {
      tdock::MutexLock lock(&mu_);
      retired = TakeRetired(absl::InfiniteFuture());
    }
    if (!retired.empty()) {
      retired.clear();
      written = write(/*past_limit=*/false);
    }
  }
  // The oldest live step goes in past the limit: the step that must end
  // first always can.
  if (!written && oldest) written = write(/*past_limit=*/true);
  if (!written) {
    {
      tdock::MutexLock lock(&mu_);
      placing_.erase(extent);
    }
    return CapacityError(absl::StrCat("shard ", shard_, " has no room for ", columns.size(),
                                      " columns of ", where, " under its memory limit of ",
                                      pool_->limit_bytes(), " bytes"));
  }
  Staged staged{extent, {}};
  Extent held{dock, step.value_or(-1), false, 0, {}, cells};
  uint64_t offset = 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    std::vector<CellLocation>& locations = staged.locations.emplace_back();
    for (int64_t r = 0; r < columns[i].rows(); ++r) {
      const ByteSpan bytes = cells->Bytes(blocks[i][r], item_bytes[i]);
      locations.push_back({shard_, extent, offset, bytes.size()});
      held.cells.push_back({offset, bytes});
      offset += bytes.size();
    }
  }
  held.bytes = static_cast<int64_t>(offset);
  held.prepared = !copy;
  tdock::MutexLock lock(&mu_);
  placing_.erase(extent);
  // A release meanwhile took the step: the Put is not kept.
  auto dock_it = docks_.find(dock);
  // Reincarnated meanwhile: its cells went with the former incarnation.
  if ((extent >> 32) != incarnation_.load(std::memory_order_relaxed) ||
      dock_it == docks_.end() ||
      (step.has_value() && dock_it->second.released.count(*step) != 0)) {
    return Refuse(Refusal::kReleased,
                  absl::FailedPreconditionError(absl::StrCat(
                      where, " was released while shard ", shard_, " stored a Put")));
  }
  extents_.emplace(extent, std::move(held));
  return staged;
}

absl::Status ShardStore::Commit(uint64_t extent, int64_t step, ShardJournal::Done recorded) {
  absl::Status committed = DoCommit(extent, step, recorded);
  // Without a journal (or not committed), answered here, with no lock held.
  if (recorded) std::move(recorded)(committed);
  return committed;
}

absl::Status ShardStore::DoCommit(uint64_t extent, int64_t step,
                                      ShardJournal::Done& recorded) {
  tdock::MutexLock lock(&mu_);
  auto it = extents_.find(extent);
  if (it == extents_.end() || it->second.prepared) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard_, " holds no staged Put ", extent));
  }
  Extent& held = it->second;
  held.committed = true;
  held.step = step;
  if (journal_ != nullptr) journal_->Committed(extent, step, std::exchange(recorded, nullptr));
  // Its step was released meanwhile (a reservation's, learnt only now): it
  // retires as the step's other cells did.
  if (auto dock = docks_.find(held.dock);
      held.free_at == absl::InfiniteFuture() && dock != docks_.end() &&
      dock->second.released.count(step) != 0) {
    held.free_at = clock_->Now() + read_grace_;
  }
  return absl::OkStatus();
}

void ShardStore::Abort(uint64_t extent) {
  std::optional<Extent> freed;  // destroyed once the lock is let go
  tdock::MutexLock lock(&mu_);
  if (auto it = extents_.find(extent); it != extents_.end()) {
    freed = std::move(it->second);
    extents_.erase(it);
    if (journal_ != nullptr) journal_->Freed({extent});
  }
}

void ShardStore::Unresolved(uint64_t extent) {
  tdock::MutexLock lock(&mu_);
  if (auto it = extents_.find(extent);
      it != extents_.end() && !it->second.committed && !it->second.prepared) {
    it->second.unresolved = true;
  }
}

ShardStore::Inventory ShardStore::GetInventory() const {
  Inventory inventory;
  tdock::ReaderMutexLock lock(&mu_);
  inventory.incarnation = incarnation_.load(std::memory_order_acquire);
  // An extent being placed has its id but is not held yet: the inventory
  // speaks only of the extents below it.
  inventory.next_extent = placing_.empty() ? next_extent_ : *placing_.begin();
  for (const auto& [id, extent] : extents_) {
    if (id >= inventory.next_extent) continue;
    inventory.held.push_back(id);
    if (extent.unresolved && !extent.committed) inventory.unresolved.push_back(id);
  }
  std::sort(inventory.held.begin(), inventory.held.end());
  std::sort(inventory.unresolved.begin(), inventory.unresolved.end());
  return inventory;
}

bool ShardStore::HasUnresolved() const {
  tdock::ReaderMutexLock lock(&mu_);
  return std::any_of(extents_.begin(), extents_.end(), [](const auto& held) {
    return held.second.unresolved && !held.second.committed;
  });
}

void ShardStore::Resolve(uint64_t extent, std::optional<int64_t> step,
                         ShardJournal::Done recorded) {
  bool commit = false;
  {
    tdock::MutexLock lock(&mu_);
    auto it = extents_.find(extent);
    const bool unresolved =
        it != extents_.end() && it->second.unresolved && !it->second.committed;
    commit = unresolved && step.has_value();
    if (unresolved && !step.has_value()) {
      // Not in a live step of the controller: never stored, or stored in a
      // step released since, whose last rows a consumer may still be
      // reading. It retires, as a released step's cells do.
      Extent& held = it->second;
      held.unresolved = false;
      held.free_at = std::min(held.free_at, clock_->Now() + read_grace_);
    }
  }
  if (!commit) {
    if (recorded) std::move(recorded)(absl::OkStatus());
    return;
  }
  // Only the reconcile resolves: the extent is still unresolved, or a
  // release took it meanwhile, which Commit answers.
  Commit(extent, *step, std::move(recorded)).IgnoreError();  // answered through `recorded`
}

absl::Status ShardStore::NotHeld(const CellLocation& where, const std::string& why) {
  return absl::NotFoundError(absl::StrCat("shard ", where.shard, " extent ", where.extent,
                                          " offset ", where.offset, " (", where.bytes,
                                          " bytes): ", why,
                                          "; the batch or the shard listing is stale"));
}

absl::StatusOr<ShardStore::Cells> ShardStore::Read(const std::string& dock,
                                                   absl::Span<const CellLocation> where) const {
  Cells out;
  out.cells.reserve(where.size());
  const absl::Time now = clock_->Now();
  tdock::ReaderMutexLock lock(&mu_);
  const internal::LocalStepCells* last_pinned = nullptr;
  for (const CellLocation& cell : where) {
    if (cell.shard != shard_) {
      return NotHeld(cell, absl::StrCat("this is shard ", shard_));
    }
    auto it = extents_.find(cell.extent);
    if (it == extents_.end() || it->second.dock != dock) {
      return NotHeld(cell, absl::StrCat("shard ", shard_, " holds no such extent of dock '",
                                        dock, "'"));
    }
    if (it->second.free_at <= now) {
      return NotHeld(cell, "its step was released and its read grace has passed");
    }
    if (it->second.prepared) return NotHeld(cell, "its Put was prepared, not written yet");
    // A staged Put's cells are read too: the controller hands out only
    // locations it stored, and may do so before the shard hears its answer.
    const Extent& extent = it->second;
    auto found = std::lower_bound(
        extent.cells.begin(), extent.cells.end(), cell.offset,
        [](const Cell& held, uint64_t offset) { return held.offset < offset; });
    // An empty cell shares its offset with the next one.
    while (found != extent.cells.end() && found->offset == cell.offset &&
           found->bytes.size() != cell.bytes) {
      ++found;
    }
    if (found == extent.cells.end() || found->offset != cell.offset) {
      return NotHeld(cell, "no cell starts there with that length");
    }
    out.cells.push_back(found->bytes);
    if (extent.step_cells.get() != last_pinned) {
      out.pins.push_back(extent.step_cells);
      last_pinned = extent.step_cells.get();
    }
  }
  return out;
}

void ShardStore::SetFrontStep(const std::string& dock, int64_t step) {
  tdock::MutexLock lock(&mu_);
  DockCells& held = docks_[dock];
  held.front = std::max(held.front, step);
}

void ShardStore::Release(const std::string& dock, int64_t step) {
  // Freed once the lock is let go.
  std::shared_ptr<internal::LocalStepCells> step_cells;
  std::vector<Extent> freed;
  tdock::MutexLock lock(&mu_);
  DockCells& held = docks_[dock];
  held.released.insert(step);
  if (auto it = held.steps.find(step); it != held.steps.end()) {
    step_cells = std::move(it->second);
    held.steps.erase(it);
  }
  Retire(dock, step);
  freed = TakeRetired(clock_->Now());
}

void ShardStore::SetWindow(const std::string& dock, int64_t front_step,
                           std::vector<int64_t> admitted) {
  std::vector<int64_t> released;
  {
    tdock::ReaderMutexLock lock(&mu_);
    auto it = docks_.find(dock);
    if (it != docks_.end() && it->second.front == front_step &&
        it->second.admitted == admitted) {
      return;  // nothing moved (a snapshot after the feed came back)
    }
    const int64_t partitions = static_cast<int64_t>(admitted.size());
    const auto done = [&](int64_t step) {
      return step >= 0 &&
             (step < front_step || (partitions > 0 && step < admitted[step % partitions]));
    };
    if (it != docks_.end()) {
      for (const auto& [step, cells] : it->second.steps) {
        if (done(step)) released.push_back(step);
      }
    }
    for (const auto& [id, extent] : extents_) {
      if (extent.dock == dock && extent.free_at == absl::InfiniteFuture() && done(extent.step)) {
        released.push_back(extent.step);
      }
    }
  }
  std::sort(released.begin(), released.end());
  released.erase(std::unique(released.begin(), released.end()), released.end());
  // Released first: a Put the new window admits never finds an older step
  // of its partition still taking Puts here.
  for (int64_t step : released) Release(dock, step);
  tdock::MutexLock lock(&mu_);
  DockCells& held = docks_[dock];
  held.front = std::max(held.front, front_step);
  held.admitted = std::move(admitted);
}

void ShardStore::ForgetWindows() {
  tdock::MutexLock lock(&mu_);
  for (auto& [name, held] : docks_) held.admitted.clear();
}

bool ShardStore::Waits(const std::string& dock, int64_t step) const {
  tdock::ReaderMutexLock lock(&mu_);
  auto it = docks_.find(dock);
  if (it == docks_.end() || it->second.admitted.empty() || step < 0) return false;
  const std::vector<int64_t>& admitted = it->second.admitted;
  return step > admitted[step % static_cast<int64_t>(admitted.size())];
}

void ShardStore::ForgetDock(const std::string& dock) {
  std::vector<Extent> freed;
  std::optional<DockCells> forgotten;
  tdock::MutexLock lock(&mu_);
  if (auto it = docks_.find(dock); it != docks_.end()) {
    forgotten = std::move(it->second);
    docks_.erase(it);
  }
  Retire(dock, std::nullopt);
  freed = TakeRetired(clock_->Now());
}

void ShardStore::Sweep() {
  std::vector<Extent> freed;
  tdock::MutexLock lock(&mu_);
  freed = TakeRetired(clock_->Now());
}

void ShardStore::Retire(const std::string& dock, std::optional<int64_t> step) {
  const absl::Time now = clock_->Now();
  for (auto& [id, extent] : extents_) {
    if (extent.dock == dock && (!step.has_value() || extent.step == *step) &&
        extent.free_at == absl::InfiniteFuture()) {
      extent.free_at = now + (extent.prepared ? std::max(read_grace_, kPreparedHold) : read_grace_);
    }
  }
}

std::vector<ShardStore::Extent> ShardStore::TakeRetired(absl::Time by) {
  std::vector<Extent> out;
  std::vector<uint64_t> ids;
  const absl::Time now = clock_->Now();
  for (auto it = extents_.begin(); it != extents_.end();) {
    // A prepared one's writer may be copying into it: only its time frees it.
    const absl::Time due = it->second.prepared ? std::min(by, now) : by;
    if (it->second.free_at != absl::InfiniteFuture() && it->second.free_at <= due) {
      ids.push_back(it->first);
      out.push_back(std::move(it->second));
      extents_.erase(it++);
    } else {
      ++it;
    }
  }
  if (journal_ != nullptr && !ids.empty()) journal_->Freed(ids);
  return out;
}

std::map<std::string, std::vector<int64_t>> ShardStore::HeldSteps() const {
  std::map<std::string, std::set<int64_t>> held;
  tdock::ReaderMutexLock lock(&mu_);
  for (const auto& [name, dock] : docks_) {
    for (const auto& [step, cells] : dock.steps) held[name].insert(step);
  }
  for (const auto& [id, extent] : extents_) {
    if (extent.free_at == absl::InfiniteFuture()) held[extent.dock].insert(extent.step);
  }
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& [name, steps] : held) out[name].assign(steps.begin(), steps.end());
  return out;
}

ShardStore::Stats ShardStore::GetStats() const {
  Stats stats;
  tdock::ReaderMutexLock lock(&mu_);
  for (const auto& [id, extent] : extents_) {
    if (extent.free_at != absl::InfiniteFuture()) {
      stats.retired_bytes += extent.bytes;
      continue;
    }
    (extent.prepared    ? stats.prepared_puts
     : extent.committed ? stats.committed_puts
                        : stats.staged_puts) += 1;
    stats.cell_bytes += extent.bytes;
  }
  stats.reserved_bytes = pool_->reserved_bytes();
  stats.limit_bytes = pool_->limit_bytes();
  return stats;
}

}  // namespace tdock::shard
