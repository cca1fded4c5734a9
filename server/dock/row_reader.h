// RowReader: what a batch carries of a step's rows, read from the step's
// partition: token counts (the summed lengths of the spec's length columns),
// keys, versions and views of the cells. The dock's decisions (claims,
// rounds, micro-batch plans, budgets) read token counts only; a batch
// reaches the cells' bytes only here, through the step's StepCells (as
// ListRows and a Put's record do, beside it), so a cell that lives elsewhere
// changes the readers and no decision.
//
// Thread safety: const after construction. REQUIRES of every method taking a
// Partition: the caller holds the dock's mutex (at least shared), so the
// partition holds the step it had when the caller looked. A row's key and
// version are set before its cells are made ready (row_index.h), so a reader
// of ready rows sees them. The column table must outlive it.
#ifndef TDOCK_SERVER_DOCK_ROW_READER_H_
#define TDOCK_SERVER_DOCK_ROW_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/dock/cell_store.h"
#include "server/dock/column_table.h"
#include "server/dock/partition.h"
#include "server/dock/types.h"

namespace tdock::internal {

class RowReader final {
 public:
  // `length_columns`: the indices of the columns whose lengths make a row's
  // token count (none: every row counts 0 tokens). `form`: what the
  // dock's cells are (a batch of locations says so: Batch::cell_locations).
  RowReader(const ColumnTable& columns, std::vector<int> length_columns,
            CellForm form = CellForm::kBytes)
      : columns_(columns), length_columns_(std::move(length_columns)), form_(form) {}
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  // A written row's token count (cells not written count 0).
  int64_t Tokens(const Partition& part, int64_t row) const;
  // The token count of the Put's i-th row once written: its cells of the
  // length columns in place of the row's.
  int64_t TokensAfterPut(const Partition& part, const PutInput& in, size_t i) const;
  // The batch of `rows` (in that order) of `step`, which `part` holds:
  // their token counts, keys and versions (where any row of the step has
  // one), and with `with_payload` views of their cells of `columns`
  // (indices), pinned by batch.pin. REQUIRES: with_payload, every cell read
  // is ready.
  Batch Make(const Partition& part, int64_t step, const std::shared_ptr<StepCells>& cells,
             std::vector<int64_t> rows, const std::vector<int>& columns,
             bool with_payload) const;

 private:
  const ColumnTable& columns_;
  const std::vector<int> length_columns_;
  const CellForm form_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ROW_READER_H_
