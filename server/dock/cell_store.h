// Where a dock's cell bytes live.
//
// The dock keeps, per cell, a CellBlock: where the cell is and its length in
// items. Everything else the dock decides (claims, rounds, drops, leases,
// admission) reads lengths only; the bytes are reached through a StepCells,
// one per step, which a CellStore opens when the step starts. A StepCells is
// shared_ptr-owned by the step's partition and by every batch or record
// reading its bytes, so they stay valid after the step is released.
//
// LocalCellStore (local_cell_store.h) keeps the bytes in this process's
// memory. A store elsewhere (another process, another node) gives CellBlocks
// whose `where` means something to it alone.
//
// Thread safety: implementations are thread-safe.
#ifndef TDOCK_SERVER_DOCK_CELL_STORE_H_
#define TDOCK_SERVER_DOCK_CELL_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/packed.h"

namespace tdock::internal {

// A cell: where its bytes are (meaningful to its StepCells alone) and its
// length in items. Held by its StepCells, at a stable address.
struct CellBlock {
  const char* where = nullptr;
  int64_t length = 0;  // items
};

// A column's cells in one step, by row: what the step's partition holds.
using CellColumn = const std::atomic<const CellBlock*>*;

// One step's cells.
class StepCells {
 public:
  virtual ~StepCells() = default;

  // Stores one Put's payload: columns[i], of items of item_bytes[i] bytes.
  // All or none: false, and nothing kept, when the store's memory limit does
  // not allow it (unless `past_limit`). Else blocks[i] is the first of
  // columns[i].rows() CellBlocks, the cell of each row in order.
  virtual bool Write(absl::Span<const PackedColumn> columns,
                     absl::Span<const int64_t> item_bytes, bool past_limit,
                     std::vector<const CellBlock*>& blocks) = 0;
  // Appends the bytes of the cells `column[row]` of `rows` (in order; items
  // of item_bytes bytes; each cell set, loaded with acquire) to `view`: its
  // offsets, and its segments, adjacent cells in one segment. The segments
  // are valid while this StepCells is.
  virtual void Read(CellColumn column, absl::Span<const int64_t> rows, int64_t item_bytes,
                    PackedColumn& view) const = 0;
  // The bytes of one cell, valid while this StepCells is.
  virtual ByteSpan Bytes(const CellBlock& cell, int64_t item_bytes) const = 0;
  // Bytes held for the step's cells: exactly 0 until a Write succeeds, more
  // after one (an unused step is undone by that test).
  virtual int64_t used_bytes() const = 0;
};

// A dock's cells, under its memory limit.
class CellStore {
 public:
  virtual ~CellStore() = default;

  // Cells of a step that starts now (none written).
  virtual std::shared_ptr<StepCells> OpenStep() = 0;
  // The memory limit (0: none), and the bytes held now under it.
  virtual int64_t limit_bytes() const = 0;
  virtual int64_t reserved_bytes() const = 0;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_CELL_STORE_H_
