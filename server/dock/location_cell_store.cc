#include "server/dock/location_cell_store.h"

#include <new>
#include <utility>

#include "common/cell_location.h"

namespace tdock::internal {

LocationStepCells::LocationStepCells(std::shared_ptr<ChunkPool> pool) : arena_(std::move(pool)) {}

bool LocationStepCells::Write(absl::Span<const PackedColumn> columns,
                              absl::Span<const int64_t> /*item_bytes*/, bool past_limit,
                              std::vector<const CellBlock*>& blocks) {
  // Per column: its blocks, then its records side by side.
  std::vector<int64_t> sizes;
  sizes.reserve(2 * columns.size());
  for (const PackedColumn& column : columns) {
    sizes.push_back(column.rows() * static_cast<int64_t>(sizeof(CellBlock)));
    sizes.push_back(column.rows() * kCellLocationBytes);
  }
  std::vector<char*> regions;
  if (!arena_.AllocateBatch(sizes, regions, past_limit)) return false;
  blocks.resize(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    const PackedColumn& column = columns[i];
    auto* column_blocks = reinterpret_cast<CellBlock*>(regions[2 * i]);
    char* records = regions[2 * i + 1];
    CopyFromSegments(column.segments, 0, column.rows() * kCellLocationBytes, records);
    for (int64_t r = 0; r < column.rows(); ++r) {
      new (&column_blocks[r]) CellBlock{records + r * kCellLocationBytes, column.length(r)};
    }
    blocks[i] = column_blocks;
  }
  return true;
}

void LocationStepCells::Read(CellColumn column, absl::Span<const int64_t> rows,
                             int64_t /*item_bytes*/, PackedColumn& view) const {
  view.offsets.reserve(view.offsets.size() + rows.size() + 1);
  if (view.offsets.empty()) view.offsets.push_back(0);
  for (int64_t row : rows) {
    // acquire: pairs with the partition's release store of the cell.
    const CellBlock* cell = column[row].load(std::memory_order_acquire);
    view.offsets.push_back(view.offsets.back() + cell->length);
    // Records of one Put's column are adjacent: one segment.
    if (!view.segments.empty() &&
        view.segments.back().data() + view.segments.back().size() == cell->where) {
      view.segments.back() = ByteSpan(view.segments.back().data(),
                                      view.segments.back().size() + kCellLocationBytes);
    } else {
      view.segments.emplace_back(cell->where, kCellLocationBytes);
    }
  }
}

ByteSpan LocationStepCells::Bytes(const CellBlock& cell, int64_t /*item_bytes*/) const {
  return ByteSpan(cell.where, kCellLocationBytes);
}

LocationCellStore::LocationCellStore(int64_t chunk_bytes)
    : pool_(std::make_shared<ChunkPool>(chunk_bytes, 0)) {}

std::shared_ptr<StepCells> LocationCellStore::OpenStep() {
  return std::make_shared<LocationStepCells>(pool_);
}

}  // namespace tdock::internal
