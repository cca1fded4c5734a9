// Partition: the memory of one step of a dock (step s lives in partition
// s mod steps_in_flight).
//
// Per column: a cell table (an atomic pointer per row to the cell's block,
// held by the step's StepCells), a ready bitmap over rows, a ready counter per group and a
// group-ready bitmap (set when every row of the group that is not dropped is
// ready). Per consumer: a consumed bitmap over rows (over groups for
// whole-group consumers) and a consumed-row counter. Per row: whether it is
// dropped and why; per group: its rows not dropped.
//
// Drops change the structure: MarkDropped needs the dock's mutex exclusively,
// so claims (shared) see a row's drop whole or not at all.
//
// Thread safety: the dock's mutex guards structure (the step held, the
// step's cells, the consumer list); every structural accessor names it, so clang
// checks the caller holds it. Structural changes (Activate, Release,
// AddConsumer, ...) need it exclusively; everything else runs under its
// shared side, concurrently: cells are published with Publish (serialized
// per partition by row_index().mu()), bitmaps are atomic.
//
// Publication invariant: a cell's block is fully written before its pointer
// is stored (release) and before its ready bit is set (release); a reader
// that saw the bit (acquire) and then loads the pointer (acquire) sees the
// block and its payload.
#ifndef TDOCK_SERVER_DOCK_PARTITION_H_
#define TDOCK_SERVER_DOCK_PARTITION_H_

#include <algorithm>
#include <map>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/drop.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "server/dock/bitmap.h"
#include "server/dock/cell_store.h"
#include "server/dock/round_book.h"
#include "server/dock/row_index.h"
#include "server/dock/types.h"

namespace tdock::internal {

struct ColumnState {
  ColumnState(int64_t rows, int64_t groups);
  AtomicBitmap ready;
  AtomicBitmap group_ready;
  std::unique_ptr<std::atomic<const CellBlock*>[]> cells;
  std::unique_ptr<std::atomic<int32_t>[]> group_counts;
};

// The units (rows, or groups of `group_size` for whole-group consumers) of
// `rows`: the rows as given, or their groups ascending, each once.
std::vector<int64_t> UnitsOfRows(absl::Span<const int64_t> rows, bool whole_groups,
                                 int32_t group_size);

struct ConsumerShape {
  bool whole_groups = false;
  int32_t takers = 1;  // dp_size x replicas: who takes rounds (TakerOf)
};

struct ConsumerState {
  ConsumerState(int64_t units, int32_t takers) : consumed(units), book(takers) {}
  AtomicBitmap consumed;  // rows, or groups for whole-group consumers
  // Every unit counts its full size here once it is done for the consumer
  // (taken, passed over, or dropped whole): the step ends for the consumer
  // when it reaches the step's rows.
  std::atomic<int64_t> consumed_rows{0};
  // Rows handed to the consumer (statistics: the step's `consumed`): raised
  // by the rows a claim hands out (a balanced round's when it is formed),
  // lowered only when a lease gives its rows back (or a round's rows are
  // dropped before their rank fetched them). A drop never lowers it.
  std::atomic<int64_t> handed_rows{0};
  // Rows handed out, every hand-out counted (a row given back and handed
  // out again twice; a balanced share once per delivery to its rank's first
  // replica); never lowered: the dock's rows_handed_out_total counter.
  std::atomic<int64_t> handed_total{0};
  // Claims that gave units back (Unclaim): the units available to this
  // consumer may have grown. Raised (release) after the bits are cleared.
  std::atomic<uint64_t> give_backs{0};
  // FIFO consumers with oldest_first: the step's units in claim order (the
  // oldest version first, then index), kept between claims while no unit can
  // have become available since it was built (Partition::availability(),
  // give_backs, the staleness bound); claims go on from `next`. The order
  // never decides what is available: every unit is claimed by its consumed
  // bit, and a list that falls short is built again.
  struct ClaimOrder {
    bool valid = false;
    uint64_t availability = 0;
    uint64_t give_backs = 0;
    int64_t min_version = 0;
    std::vector<int64_t> units;
    size_t next = 0;
  };
  tdock::Mutex order_mu;  // a leaf: taken under the dock's locks
  ClaimOrder order ABSL_GUARDED_BY(order_mu);
  // Consumers with leases: rows handed out and not yet acknowledged. Raised
  // before consumed_rows, so whoever sees every row consumed sees them.
  std::atomic<int64_t> in_flight_rows{0};
  // Consumers with max_staleness, with a journal: units passed over as stale
  // whose record is not stored yet (they do not end the step before it is);
  // and, after such a record failed, when passing over may be tried again
  // (unix ns of the dock's clock).
  std::atomic<int64_t> stale_unrecorded{0};
  std::atomic<int64_t> stale_retry_ns{0};
  // BALANCED consumers only: the rounds (round_book.h).
  RoundBook book;

  // BALANCED: the step (of `rows` rows) is fully claimed, no pass-over is
  // unrecorded, and `taker` (TakerOf: a rank's replica) has fetched every
  // round. `dock_mu`: the dock's mutex, which keeps the state's partition
  // on its step.
  bool RankDone(const tdock::Mutex& dock_mu, int64_t rows, int32_t taker)
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    // acquire: pairs with the round's increment.
    if (consumed_rows.load(std::memory_order_acquire) < rows ||
        stale_unrecorded.load(std::memory_order_acquire) > 0) {
      return false;
    }
    tdock::MutexLock lock(&book.mu());
    return book.Done(taker);
  }
  // BALANCED, once every row is counted: every round is formed and every
  // taker has fetched its share of each (drops may have ended the step with
  // no round marked last, or with none at all).
  bool RoundsDelivered(const tdock::Mutex& dock_mu) ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    tdock::MutexLock lock(&book.mu());
    return book.AllDone();
  }
};

class Partition final {
 public:
  // `consumers[k]` says how consumer k claims (rows or whole groups) and
  // how many ranks it has.
  // `dock_mu` is the dock's mutex, which guards the partition's structure.
  // Room is made for `column_capacity` columns (AddColumn), at least
  // `num_columns`.
  Partition(const tdock::Mutex* dock_mu, int index, int64_t rows, int32_t group_size,
            int num_columns, const std::vector<ConsumerShape>& consumers,
            size_t column_capacity = 0);
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;

  int index() const { return index_; }
  int64_t rows() const { return rows_; }
  int64_t groups() const { return groups_; }
  int32_t group_size() const { return group_size_; }

  // ---- structure: guarded by the dock's mutex, which each call names
  // (`dock_mu`, the mutex given at construction): shared to read, exclusive
  // to change, checked by clang's -Wthread-safety at every call.
  bool live(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return cells_ != nullptr;
  }
  int64_t step(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return step_;
  }
  // Highest step released from this partition, -1 if none.
  int64_t last_released(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return last_released_;
  }
  void Activate(const tdock::Mutex& dock_mu, int64_t step, std::shared_ptr<StepCells> cells)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Recovery: `step` of this partition was released before a restart.
  void MarkReleased(const tdock::Mutex& dock_mu, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Undoes Activate of a step nothing was written to (last_released stays).
  void Deactivate(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // Frees the step: clears all state and returns its cells (which the
  // caller drops outside the dock's lock).
  std::shared_ptr<StepCells> Release(const tdock::Mutex& dock_mu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // With a journal: the step's release is being recorded. Meanwhile the step
  // counts as released (it takes no Put and hands out nothing) but still
  // holds its partition; it is freed once the record is stored, or is live
  // again if the record fails (record before effect).
  bool releasing(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return releasing_;
  }
  void set_releasing(const tdock::Mutex& dock_mu, bool releasing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu) {
    HeldExclusive(dock_mu);
    releasing_ = releasing;
  }
  void AddConsumer(const tdock::Mutex& dock_mu, ConsumerShape shape)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  // A column added to the dock: no cell written (within the capacity given
  // at construction, so no column moves).
  void AddColumn(const tdock::Mutex& dock_mu, std::unique_ptr<ColumnState> column)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);

  // ---- drops and seal (see the file comment)
  // Takes `row` out of the step for `reason`: it no longer counts toward its
  // group's readiness (which may complete the group). False if it was
  // dropped already. The consumers' accounting is the dock's.
  bool MarkDropped(const tdock::Mutex& dock_mu, int64_t row, DropReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu);
  DropReason drop_reason(const tdock::Mutex& dock_mu, int64_t row) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return drop_reasons_[row];
  }
  // Rows dropped, by reason (DropReason's value).
  const std::array<int64_t, kDropReasons>& drops(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return drops_;
  }
  bool sealed(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return sealed_;
  }
  void Seal(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu) {
    HeldExclusive(dock_mu);
    sealed_ = true;
    seal_pending_ = false;
  }
  // With a journal: the dock decided to seal the step itself (seal_when)
  // and records it; no second decision is made meanwhile.
  bool seal_pending(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return seal_pending_;
  }
  void set_seal_pending(const tdock::Mutex& dock_mu, bool pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu) {
    HeldExclusive(dock_mu);
    seal_pending_ = pending;
  }
  // seal_when.carry: the rows of the step (dropped as carried) still to be
  // written into the next step; the step is not released while any are.
  // From the seal's decision until its record is stored (`recorded`), the
  // units of them the consumers had not taken are claimed for them
  // (`claimed`), so that no Get takes a row being carried. `carrying`: the
  // write is in progress.
  struct Carry {
    std::vector<int64_t> rows;  // ascending
    std::vector<ConsumerUnits> taken;  // per consumer, the units of `rows` it took here
    std::vector<ConsumerUnits> claimed;
    bool recorded = false;
    bool carrying = false;
  };
  Carry& carry(const tdock::Mutex& dock_mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(dock_mu) {
    HeldExclusive(dock_mu);
    return carry_;
  }
  bool carry_pending(const tdock::Mutex& dock_mu) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return !carry_.rows.empty();
  }
  // Appends the rows of a unit (a row, or a group for whole-group consumers)
  // that are not dropped, ascending.
  void AppendUnitRows(const tdock::Mutex& dock_mu, int64_t unit, bool whole_groups,
                      std::vector<int64_t>& rows) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Every row of the unit is dropped.
  bool UnitDropped(const tdock::Mutex& dock_mu, int64_t unit, bool whole_groups) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // Groups with a row not dropped that are complete in every column of
  // `columns` (not empty); the count stops once it reaches `enough` (64
  // groups at a time: it may pass it).
  int64_t CompleteGroups(const tdock::Mutex& dock_mu, const std::vector<int>& columns,
                         int64_t enough) const ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // A seal at `groups` groups for consumer `consumer` (whose units are
  // rows, or groups with `whole_groups`) needing `columns`: every row not
  // dropped of the groups beyond the first `groups` complete ones, those
  // the consumer took first, then by index.
  std::vector<int64_t> SurplusRows(const tdock::Mutex& dock_mu, int consumer, bool whole_groups,
                                   const std::vector<int>& columns, int64_t groups) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu);
  // The step's cells (null while the partition holds no step).
  const std::shared_ptr<StepCells>& cells(const tdock::Mutex& dock_mu) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return cells_;
  }
  // Consumer k's state (its fields are atomic or under their own locks).
  ConsumerState& consumer(const tdock::Mutex& dock_mu, int k) const
      ABSL_SHARED_LOCKS_REQUIRED(dock_mu) {
    HeldShared(dock_mu);
    return *consumers_[k];
  }

  // ---- data: REQUIRES the dock's mutex (shared is enough)
  ColumnState& column(int c) { return *columns_[c]; }
  const ColumnState& column(int c) const { return *columns_[c]; }
  const CellBlock* cell(int c, int64_t row) const {
    // acquire: pairs with Publish's release store.
    return columns_[c]->cells[row].load(std::memory_order_acquire);
  }
  // Some column has a ready cell of the row (one that is stored).
  bool has_ready_cell(int64_t row) const {
    for (const auto& column : columns_) {
      if (column->ready.Test(row)) return true;
    }
    return false;
  }
  // Some column has a cell of the row (ready or staged).
  bool has_cell(int64_t row) const {
    for (const auto& column : columns_) {
      if (column->cells[row].load(std::memory_order_acquire) != nullptr) return true;
    }
    return false;
  }

  // Hand-outs claimed in this partition whose record is not yet stored
  // (whatever the step), and stale pass-overs while their record can fail;
  // auto-release waits for them. `release_waits` is set by an auto-release
  // that waited, so that the last of them to end asks again
  // (DockImpl::EndHandOut); a stale pass-over's end runs it in any case.
  std::atomic<int64_t>& unrecorded_handouts() { return unrecorded_handouts_; }
  std::atomic<bool>& release_waits() { return release_waits_; }
  // ---- held units: a controller's rows with a cell on a shard that is
  // away (DockImpl::HoldShards) are held back from claims, per row and per
  // group (a group with a held row); they wait, nobody takes them. Set
  // under the dock's mutex (shared; one change at a time), cleared with the
  // step.
  bool holding() const { return holding_.load(std::memory_order_acquire); }
  const AtomicBitmap& held(bool groups) const { return groups ? held_groups_ : held_rows_; }
  // Holds exactly `rows` (ascending). Returns whether a unit held before
  // is let go (claims may take it now). Raises availability() on a change.
  bool SetHeld(const std::vector<int64_t>& rows);

  // Units may have become available to claims (cells made ready, a row
  // dropped, which can complete a group): raised (release) after the bits.
  void NoteAvailable() { availability_.fetch_add(1, std::memory_order_release); }
  uint64_t availability() const { return availability_.load(std::memory_order_acquire); }
  // Keys, versions, appends, reservations and closed rows (row_index.h);
  // its lock is the step's commit lock, which Publish, Stage, MakeReady and
  // Unstage need held.
  RowIndex& row_index() const { return row_index_; }
  // Stores the cell and, on its first write, sets its ready bit and counts
  // it for its group. REQUIRES: row_index().mu() held.
  void Publish(int c, int64_t row, const CellBlock* block);
  // Publish in two halves, for a Put being recorded: Stage stores the cell
  // (a later Put of it sees it written; consumers do not see it: its ready
  // bit is clear) and returns the previous block (nullptr: a first write);
  // MakeReady sets the ready bit once the cell is stored; Unstage undoes a
  // Stage of `block` that never became ready. REQUIRES: row_index().mu() held.
  const CellBlock* Stage(int c, int64_t row, const CellBlock* block);
  void MakeReady(int c, int64_t row);
  void Unstage(int c, int64_t row, const CellBlock* block);
  bool ready(int c, int64_t row) const { return columns_[c]->ready.Test(row); }
  // The row is dropped (stable under the dock's mutex: drops hold it
  // exclusively).
  bool dropped(int64_t row) const { return dropped_.Test(row); }
  int32_t live_rows(int64_t group) const {
    // relaxed: changed only under the dock's mutex held exclusively.
    return live_rows_[group].load(std::memory_order_relaxed);
  }

 private:
  // Tell the analysis that `dock_mu` held is this partition's guard, and
  // check that it is.
  void HeldShared(const tdock::Mutex& dock_mu) const ABSL_ASSERT_SHARED_LOCK(dock_mu_) {
    TDOCK_CHECK(&dock_mu == dock_mu_) << "partition " << index_ << ": not its dock's mutex";
  }
  void HeldExclusive(const tdock::Mutex& dock_mu) const ABSL_ASSERT_EXCLUSIVE_LOCK(dock_mu_) {
    TDOCK_CHECK(&dock_mu == dock_mu_) << "partition " << index_ << ": not its dock's mutex";
  }
  std::unique_ptr<ConsumerState> NewConsumer(ConsumerShape shape) const;

  // Constant after construction.
  const tdock::Mutex* const dock_mu_;
  const int index_;
  const int64_t rows_;
  const int32_t group_size_;
  const int64_t groups_;
  // Grows (AddColumn) under the dock's mutex held exclusively, within the
  // capacity reserved at construction; read under its shared side.
  std::vector<std::unique_ptr<ColumnState>> columns_;

  std::vector<std::unique_ptr<ConsumerState>> consumers_ ABSL_GUARDED_BY(dock_mu_);
  int64_t step_ ABSL_GUARDED_BY(dock_mu_) = -1;
  int64_t last_released_ ABSL_GUARDED_BY(dock_mu_) = -1;
  bool releasing_ ABSL_GUARDED_BY(dock_mu_) = false;
  std::shared_ptr<StepCells> cells_ ABSL_GUARDED_BY(dock_mu_);
  bool sealed_ ABSL_GUARDED_BY(dock_mu_) = false;
  bool seal_pending_ ABSL_GUARDED_BY(dock_mu_) = false;
  Carry carry_ ABSL_GUARDED_BY(dock_mu_);
  std::vector<DropReason> drop_reasons_ ABSL_GUARDED_BY(dock_mu_);  // per row
  std::array<int64_t, kDropReasons> drops_ ABSL_GUARDED_BY(dock_mu_){};
  AtomicBitmap dropped_;  // per row; set under the dock's mutex held exclusively
  // Per group: rows not dropped (the group is ready for a column when this
  // many of its rows are).
  std::unique_ptr<std::atomic<int32_t>[]> live_rows_;

  std::atomic<int64_t> unrecorded_handouts_{0};
  std::atomic<bool> release_waits_{false};
  std::atomic<uint64_t> availability_{0};  // NoteAvailable
  std::atomic<bool> holding_{false};  // some unit is held
  AtomicBitmap held_rows_;
  AtomicBitmap held_groups_;

  mutable RowIndex row_index_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_PARTITION_H_
