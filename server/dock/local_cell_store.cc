#include "server/dock/local_cell_store.h"

#include <new>
#include <utility>

namespace tdock::internal {
namespace {

int64_t PayloadBytes(const PackedColumn& column, int64_t item_bytes) {
  return column.offsets.back() * item_bytes;
}

// Where one column of a Write goes: its payload in one region or one per
// row, and its blocks' region.
struct ColumnPlan {
  size_t payload = 0;  // index of its (first) payload region
  size_t blocks = 0;   // index of its blocks' region
  bool one_region = false;
};

// Every column's payload first, then every column's blocks: the small
// blocks fill what the payloads leave of a chunk instead of pushing the
// next payload into a chunk of its own (two 2 MiB columns share a 4 MiB
// chunk, where a block region between them would take a chunk each).
std::vector<int64_t> PlanRegions(absl::Span<const PackedColumn> columns,
                                 absl::Span<const int64_t> item_bytes, int64_t chunk_bytes,
                                 std::vector<ColumnPlan>& plans) {
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < columns.size(); ++i) {
    const PackedColumn& column = columns[i];
    plans[i].payload = sizes.size();
    const int64_t total = PayloadBytes(column, item_bytes[i]);
    plans[i].one_region = total <= chunk_bytes;
    if (plans[i].one_region) {
      sizes.push_back(total);
      continue;
    }
    for (int64_t r = 0; r < column.rows(); ++r) {
      sizes.push_back(column.length(r) * item_bytes[i]);
    }
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    plans[i].blocks = sizes.size();
    sizes.push_back(columns[i].rows() * static_cast<int64_t>(sizeof(CellBlock)));
  }
  return sizes;
}

// Copies a column's payload into its regions (unless not `copy`) and fills
// its cell blocks.
const CellBlock* CopyColumn(const PackedColumn& in, int64_t item_bytes, const ColumnPlan& plan,
                            const std::vector<char*>& regions, bool copy) {
  auto* blocks = reinterpret_cast<CellBlock*>(regions[plan.blocks]);
  const int64_t total = PayloadBytes(in, item_bytes);
  if (copy && plan.one_region && total > 0) {
    CopyFromSegments(in.segments, 0, total, regions[plan.payload]);
  }
  for (int64_t r = 0; r < in.rows(); ++r) {
    const int64_t begin = in.offsets[r] * item_bytes;
    const int64_t len = in.length(r) * item_bytes;
    char* dest = plan.one_region ? regions[plan.payload] + begin : regions[plan.payload + r];
    if (copy && !plan.one_region && len > 0) CopyFromSegments(in.segments, begin, len, dest);
    new (&blocks[r]) CellBlock{dest, in.length(r)};
  }
  return blocks;
}

}  // namespace

LocalStepCells::LocalStepCells(std::shared_ptr<ChunkPool> pool)
    : chunk_bytes_(pool->chunk_bytes()), arena_(std::move(pool)) {}

bool LocalStepCells::Write(absl::Span<const PackedColumn> columns,
                           absl::Span<const int64_t> item_bytes, bool past_limit,
                           std::vector<const CellBlock*>& blocks) {
  return Place(columns, item_bytes, past_limit, /*copy=*/true, blocks);
}

bool LocalStepCells::Reserve(absl::Span<const PackedColumn> columns,
                             absl::Span<const int64_t> item_bytes, bool past_limit,
                             std::vector<const CellBlock*>& blocks) {
  return Place(columns, item_bytes, past_limit, /*copy=*/false, blocks);
}

bool LocalStepCells::Place(absl::Span<const PackedColumn> columns,
                           absl::Span<const int64_t> item_bytes, bool past_limit, bool copy,
                           std::vector<const CellBlock*>& blocks) {
  std::vector<ColumnPlan> plans(columns.size());
  const std::vector<int64_t> sizes = PlanRegions(columns, item_bytes, chunk_bytes_, plans);
  std::vector<char*> regions;
  if (!arena_.AllocateBatch(sizes, regions, past_limit)) return false;
  // The copy: outside the arena's lock; other writes to the step go on.
  blocks.resize(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    blocks[i] = CopyColumn(columns[i], item_bytes[i], plans[i], regions, copy);
  }
  return true;
}

void LocalStepCells::Read(CellColumn column, absl::Span<const int64_t> rows,
                          int64_t item_bytes, PackedColumn& view) const {
  view.offsets.reserve(view.offsets.size() + rows.size() + 1);
  if (view.offsets.empty()) view.offsets.push_back(0);
  for (int64_t row : rows) {
    // acquire: pairs with the partition's release store of the cell.
    const CellBlock* cell = column[row].load(std::memory_order_acquire);
    view.offsets.push_back(view.offsets.back() + cell->length);
    const int64_t len = cell->length * item_bytes;
    if (len == 0) continue;
    // Adjacent cells (written by one Put) merge into one segment.
    if (!view.segments.empty() &&
        view.segments.back().data() + view.segments.back().size() == cell->where) {
      view.segments.back() =
          ByteSpan(view.segments.back().data(), view.segments.back().size() + len);
    } else {
      view.segments.emplace_back(cell->where, len);
    }
  }
}

ByteSpan LocalStepCells::Bytes(const CellBlock& cell, int64_t item_bytes) const {
  return ByteSpan(cell.where, cell.length * item_bytes);
}

LocalCellStore::LocalCellStore(int64_t chunk_bytes, int64_t limit_bytes,
                               int64_t preallocate_bytes)
    : pool_(std::make_shared<ChunkPool>(chunk_bytes, limit_bytes)) {
  if (preallocate_bytes > 0) pool_->Preallocate(preallocate_bytes);
}

std::shared_ptr<StepCells> LocalCellStore::OpenStep() {
  return std::make_shared<LocalStepCells>(pool_);
}

}  // namespace tdock::internal
