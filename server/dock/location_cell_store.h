// LocationCellStore: a dock's cells as locations (CellForm::kLocations), for
// the controller of a sharded deployment, which holds where each cell's bytes
// are and never the bytes.
//
// A Put's columns carry, per row, an encoded CellLocation (common/
// cell_location.h) as the row's data, and item offsets as its real length;
// PutChecks has checked that each location's byte length is the row's items
// times the column's item size. Write keeps the records, a column's side by
// side in one region, and gives each cell a CellBlock whose `where` is its
// record and whose `length` is its items, so that claims, rounds, drops and
// response bounds read the real lengths. Read hands out the records (a
// batch's column is locations, adjacent records in one segment) and Bytes a
// cell's record (what the journal keeps of a Put).
//
// The records live in a StepArena over the store's own pool: it has no
// memory limit (the bytes' limits are the shards'); a steady state allocates
// nothing.
//
// Thread safety: as StepCells and CellStore.
#ifndef TDOCK_SERVER_DOCK_LOCATION_CELL_STORE_H_
#define TDOCK_SERVER_DOCK_LOCATION_CELL_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "server/dock/arena.h"
#include "server/dock/cell_store.h"

namespace tdock::internal {

class LocationStepCells final : public StepCells {
 public:
  explicit LocationStepCells(std::shared_ptr<ChunkPool> pool);

  bool Write(absl::Span<const PackedColumn> columns, absl::Span<const int64_t> item_bytes,
             bool past_limit, std::vector<const CellBlock*>& blocks) override;
  void Read(CellColumn column, absl::Span<const int64_t> rows, int64_t item_bytes,
            PackedColumn& view) const override;
  ByteSpan Bytes(const CellBlock& cell, int64_t item_bytes) const override;
  int64_t used_bytes() const override { return arena_.used_bytes(); }

 private:
  StepArena arena_;
};

class LocationCellStore final : public CellStore {
 public:
  // chunk_bytes: the size of the chunks records are kept in.
  explicit LocationCellStore(int64_t chunk_bytes = int64_t{1} << 20);

  std::shared_ptr<StepCells> OpenStep() override;
  int64_t limit_bytes() const override { return 0; }
  int64_t reserved_bytes() const override { return pool_->reserved_bytes(); }

 private:
  const std::shared_ptr<ChunkPool> pool_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_LOCATION_CELL_STORE_H_
