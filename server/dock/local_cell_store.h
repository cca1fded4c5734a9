// LocalCellStore: a dock's cell bytes in this process's memory.
//
// The dock's ChunkPool holds chunks under its memory limit; each step's
// LocalStepCells takes chunks into a StepArena and gives them back when it is
// gone (its step released and every batch and record reading it done), so a
// steady state writes into warm pages and allocates nothing. A Put's payload
// is copied once, per column into one region when it fits a chunk (its rows
// then stay adjacent, and a batch of them is one segment), else a region per
// row; the CellBlocks of a column sit in the arena beside it.
#ifndef TDOCK_SERVER_DOCK_LOCAL_CELL_STORE_H_
#define TDOCK_SERVER_DOCK_LOCAL_CELL_STORE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "server/dock/arena.h"
#include "server/dock/cell_store.h"

namespace tdock::internal {

class LocalStepCells final : public StepCells {
 public:
  explicit LocalStepCells(std::shared_ptr<ChunkPool> pool);

  bool Write(absl::Span<const PackedColumn> columns, absl::Span<const int64_t> item_bytes,
             bool past_limit, std::vector<const CellBlock*>& blocks) override;
  // As Write, without the copy: each cell's region is taken and its block
  // set, and the caller puts the bytes there (a shard's same-host writer,
  // into shared memory).
  bool Reserve(absl::Span<const PackedColumn> columns, absl::Span<const int64_t> item_bytes,
               bool past_limit, std::vector<const CellBlock*>& blocks);
  void Read(CellColumn column, absl::Span<const int64_t> rows, int64_t item_bytes,
            PackedColumn& view) const override;
  ByteSpan Bytes(const CellBlock& cell, int64_t item_bytes) const override;
  int64_t used_bytes() const override { return arena_.used_bytes(); }

 private:
  bool Place(absl::Span<const PackedColumn> columns, absl::Span<const int64_t> item_bytes,
             bool past_limit, bool copy, std::vector<const CellBlock*>& blocks);

  const int64_t chunk_bytes_;
  StepArena arena_;
};

class LocalCellStore final : public CellStore {
 public:
  // chunk_bytes: the pool's chunk size; limit_bytes 0: unlimited;
  // preallocate_bytes: chunks allocated and touched now.
  LocalCellStore(int64_t chunk_bytes, int64_t limit_bytes, int64_t preallocate_bytes = 0);

  std::shared_ptr<StepCells> OpenStep() override;
  int64_t limit_bytes() const override { return pool_->limit_bytes(); }
  int64_t reserved_bytes() const override { return pool_->reserved_bytes(); }

 private:
  const std::shared_ptr<ChunkPool> pool_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_LOCAL_CELL_STORE_H_
