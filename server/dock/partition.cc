#include "server/dock/partition.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace tdock::internal {

ColumnState::ColumnState(int64_t rows, int64_t groups)
    : ready(rows),
      group_ready(groups),
      cells(new std::atomic<const CellBlock*>[rows]),
      group_counts(new std::atomic<int32_t>[groups]) {
  for (int64_t r = 0; r < rows; ++r) cells[r].store(nullptr, std::memory_order_relaxed);
  for (int64_t g = 0; g < groups; ++g) group_counts[g].store(0, std::memory_order_relaxed);
}

Partition::Partition(const tdock::Mutex* dock_mu, int index, int64_t rows,
                     int32_t group_size, int num_columns,
                     const std::vector<ConsumerShape>& consumers, size_t column_capacity)
    : dock_mu_(dock_mu),
      index_(index),
      rows_(rows),
      group_size_(group_size),
      groups_(rows / group_size),
      drop_reasons_(static_cast<size_t>(rows), DropReason::kUnspecified),
      dropped_(rows),
      live_rows_(new std::atomic<int32_t>[rows / group_size]),
      held_rows_(rows),
      held_groups_(rows / group_size),
      row_index_(rows) {
  for (int64_t g = 0; g < groups_; ++g) {
    live_rows_[g].store(group_size_, std::memory_order_relaxed);
  }
  columns_.reserve(std::max(column_capacity, static_cast<size_t>(num_columns)));
  for (int c = 0; c < num_columns; ++c) {
    columns_.push_back(std::make_unique<ColumnState>(rows_, groups_));
  }
  for (const ConsumerShape& shape : consumers) consumers_.push_back(NewConsumer(shape));
}

std::unique_ptr<ConsumerState> Partition::NewConsumer(ConsumerShape shape) const {
  return std::make_unique<ConsumerState>(shape.whole_groups ? groups_ : rows_, shape.takers);
}

void Partition::AddConsumer(const tdock::Mutex& dock_mu, ConsumerShape shape) {
  HeldExclusive(dock_mu);
  consumers_.push_back(NewConsumer(shape));
}

void Partition::AddColumn(const tdock::Mutex& dock_mu, std::unique_ptr<ColumnState> column) {
  HeldExclusive(dock_mu);
  TDOCK_CHECK(columns_.size() < columns_.capacity()) << "partition " << index_ << ": no room";
  columns_.push_back(std::move(column));
}

void Partition::Activate(const tdock::Mutex& dock_mu, int64_t step,
                         std::shared_ptr<StepCells> cells) {
  HeldExclusive(dock_mu);
  step_ = step;
  cells_ = std::move(cells);
}

void Partition::MarkReleased(const tdock::Mutex& dock_mu, int64_t step) {
  HeldExclusive(dock_mu);
  last_released_ = std::max(last_released_, step);
}

void Partition::Deactivate(const tdock::Mutex& dock_mu) {
  HeldExclusive(dock_mu);
  step_ = -1;
  cells_ = nullptr;
}

std::shared_ptr<StepCells> Partition::Release(const tdock::Mutex& dock_mu) {
  HeldExclusive(dock_mu);
  // relaxed stores: the caller holds the dock's mutex exclusively, and the
  // next user of this partition acquires that mutex.
  for (auto& column : columns_) {
    column->ready.Reset();
    column->group_ready.Reset();
    for (int64_t r = 0; r < rows_; ++r) {
      column->cells[r].store(nullptr, std::memory_order_relaxed);
    }
    for (int64_t g = 0; g < groups_; ++g) {
      column->group_counts[g].store(0, std::memory_order_relaxed);
    }
  }
  for (auto& consumer : consumers_) {
    consumer->consumed.Reset();
    consumer->consumed_rows.store(0, std::memory_order_relaxed);
    consumer->handed_rows.store(0, std::memory_order_relaxed);
    consumer->handed_total.store(0, std::memory_order_relaxed);
    consumer->in_flight_rows.store(0, std::memory_order_relaxed);
    consumer->stale_unrecorded.store(0, std::memory_order_relaxed);
    consumer->stale_retry_ns.store(0, std::memory_order_relaxed);
    {
      tdock::MutexLock lock(&consumer->book.mu());
      consumer->book.Reset();
    }
    tdock::MutexLock order(&consumer->order_mu);
    consumer->order = {};
  }
  {
    tdock::MutexLock commit(&row_index_.mu());
    row_index_.Reset();
  }
  dropped_.Reset();
  held_rows_.Reset();
  held_groups_.Reset();
  holding_.store(false, std::memory_order_relaxed);
  std::fill(drop_reasons_.begin(), drop_reasons_.end(), DropReason::kUnspecified);
  drops_.fill(0);
  for (int64_t g = 0; g < groups_; ++g) {
    live_rows_[g].store(group_size_, std::memory_order_relaxed);
  }
  sealed_ = false;
  seal_pending_ = false;
  carry_ = {};
  last_released_ = std::max(last_released_, step_);
  step_ = -1;
  releasing_ = false;
  return std::exchange(cells_, nullptr);
}

bool Partition::SetHeld(const std::vector<int64_t>& rows) {
  if (rows.empty() && !holding()) return false;
  std::vector<uint64_t> row_words(static_cast<size_t>(held_rows_.num_words()));
  std::vector<uint64_t> group_words(static_cast<size_t>(held_groups_.num_words()));
  for (int64_t row : rows) {
    row_words[row >> 6] |= uint64_t{1} << (row & 63);
    const int64_t group = row / group_size_;
    group_words[group >> 6] |= uint64_t{1} << (group & 63);
  }
  // release: a claim that sees the flag sees the bits set after it.
  if (!rows.empty()) holding_.store(true, std::memory_order_release);
  bool let_go = false;
  bool changed = false;
  auto store = [&](AtomicBitmap& bits, const std::vector<uint64_t>& words) {
    for (int64_t w = 0; w < bits.num_words(); ++w) {
      const uint64_t before = bits.Exchange(w, words[w]);
      let_go |= (before & ~words[w]) != 0;
      changed |= before != words[w];
    }
  };
  store(held_rows_, row_words);
  store(held_groups_, group_words);
  if (rows.empty()) holding_.store(false, std::memory_order_release);
  // A claim order built before (oldest_first) may list units held now.
  if (changed) NoteAvailable();
  return let_go;
}

void Partition::Publish(int c, int64_t row, const CellBlock* block) {
  if (Stage(c, row, block) == nullptr) MakeReady(c, row);
}

const CellBlock* Partition::Stage(int c, int64_t row, const CellBlock* block) {
  // release: the block and its payload are visible to whoever loads it.
  return columns_[c]->cells[row].exchange(block, std::memory_order_acq_rel);
}

void Partition::Unstage(int c, int64_t row, const CellBlock* block) {
  const CellBlock* expected = block;
  // Only our own staged block, and only while it is not ready.
  if (!columns_[c]->ready.Test(row)) {
    columns_[c]->cells[row].compare_exchange_strong(expected, nullptr,
                                                    std::memory_order_acq_rel);
  }
}

void Partition::MakeReady(int c, int64_t row) {
  ColumnState& column = *columns_[c];
  if (column.ready.Test(row)) return;  // a rewrite: ready and group counts stand
  // A row dropped while its cell was recorded: it is never handed out, and
  // its group no longer waits for it.
  if (dropped_.Test(row)) return;
  column.ready.Set(row);
  const int64_t g = row / group_size_;
  // acq_rel: the increment that completes the group must see the others'
  // publications before it sets the group bit (release).
  if (column.group_counts[g].fetch_add(1, std::memory_order_acq_rel) + 1 == live_rows(g)) {
    column.group_ready.Set(g);
  }
}

bool Partition::MarkDropped(const tdock::Mutex& dock_mu, int64_t row, DropReason reason) {
  HeldExclusive(dock_mu);
  if (!dropped_.Set(row)) return false;
  drop_reasons_[row] = reason;
  ++drops_[static_cast<int>(reason)];
  const int64_t g = row / group_size_;
  // relaxed: every access to these counters here is under the dock's mutex
  // held exclusively; claimers read them under its shared side.
  const int32_t live = live_rows_[g].fetch_sub(1, std::memory_order_relaxed) - 1;
  for (auto& column : columns_) {
    if (column->ready.Test(row)) {
      // A ready row leaves the group's count with the row; the ready bit
      // stays (statistics count what was written).
      column->group_counts[g].fetch_sub(1, std::memory_order_relaxed);
    }
    if (live > 0 && column->group_counts[g].load(std::memory_order_relaxed) == live) {
      column->group_ready.Set(g);
    }
  }
  NoteAvailable();
  return true;
}

void Partition::AppendUnitRows(const tdock::Mutex& dock_mu, int64_t unit, bool whole_groups,
                               std::vector<int64_t>& rows) const {
  HeldShared(dock_mu);
  if (!whole_groups) {
    if (!dropped_.Test(unit)) rows.push_back(unit);
    return;
  }
  for (int64_t row = unit * group_size_; row < (unit + 1) * group_size_; ++row) {
    if (!dropped_.Test(row)) rows.push_back(row);
  }
}

bool Partition::UnitDropped(const tdock::Mutex& dock_mu, int64_t unit, bool whole_groups) const {
  HeldShared(dock_mu);
  return whole_groups ? live_rows(unit) == 0 : dropped_.Test(unit);
}

std::vector<int64_t> UnitsOfRows(absl::Span<const int64_t> rows, bool whole_groups,
                                 int32_t group_size) {
  if (!whole_groups) return std::vector<int64_t>(rows.begin(), rows.end());
  std::vector<int64_t> units;
  for (int64_t row : rows) units.push_back(row / group_size);
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  return units;
}

int64_t Partition::CompleteGroups(const tdock::Mutex& dock_mu, const std::vector<int>& columns,
                                  int64_t enough) const {
  HeldShared(dock_mu);
  int64_t complete = 0;
  for (int64_t w = 0; w * 64 < groups_ && complete < enough; ++w) {
    uint64_t word = column(columns[0]).group_ready.word(w);
    for (int c : columns) word &= column(c).group_ready.word(w);
    for (; word != 0; word &= word - 1) {
      const int64_t g = (w << 6) + std::countr_zero(word);
      if (g < groups_ && live_rows(g) > 0) ++complete;
    }
  }
  return complete;
}

std::vector<int64_t> Partition::SurplusRows(const tdock::Mutex& dock_mu, int consumer,
                                            bool whole_groups, const std::vector<int>& columns,
                                            int64_t groups) const {
  HeldShared(dock_mu);
  const ConsumerState& state = *consumers_[consumer];
  auto complete = [&](int64_t g) {
    if (live_rows(g) == 0) return false;
    for (int c : columns) {
      if (!column(c).group_ready.Test(g)) return false;
    }
    return true;
  };
  auto taken = [&](int64_t g) {
    if (whole_groups) return state.consumed.Test(g);
    for (int64_t row = g * group_size_; row < (g + 1) * group_size_; ++row) {
      if (!dropped(row) && state.consumed.Test(row)) return true;
    }
    return false;
  };
  std::vector<bool> kept(static_cast<size_t>(groups_), false);
  int64_t left = groups;
  for (bool first_taken : {true, false}) {
    for (int64_t g = 0; g < groups_ && left > 0; ++g) {
      if (!kept[g] && complete(g) && (!first_taken || taken(g))) {
        kept[g] = true;
        --left;
      }
    }
  }
  std::vector<int64_t> rows;
  for (int64_t g = 0; g < groups_; ++g) {
    if (!kept[g]) AppendUnitRows(dock_mu, g, /*whole_groups=*/true, rows);
  }
  return rows;
}

}  // namespace tdock::internal
