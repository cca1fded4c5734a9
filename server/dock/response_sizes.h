// ResponseSizes: how many bytes a response to a consumer takes at most, so
// that a Get never claims more than one response can carry
// (DockLimits::max_batch_bytes) and a Put never writes a row (or, for
// whole-group consumers, a group) that no response could carry.
//
// A batch's size is bounded from above: its cells' bytes, per row its index,
// token count and offset in every column and its share of the micro-batch
// plan, plus a fixed allowance for the rest of the response. Only cell
// lengths are read (CellBlock::length), never cell bytes.
//
// Thread safety: const after construction. REQUIRES of every method taking a
// Partition: the caller holds the dock's mutex (at least shared), so the
// partition holds the step it had when the caller looked; the lengths read
// are those of cells published (or staged) by then. The column table must
// outlive it.
#ifndef TDOCK_SERVER_DOCK_RESPONSE_SIZES_H_
#define TDOCK_SERVER_DOCK_RESPONSE_SIZES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/cell_location.h"
#include "server/dock/column_table.h"
#include "server/dock/partition.h"
#include "server/dock/sampler.h"
#include "server/dock/types.h"

namespace tdock::internal {

class ResponseSizes final {
 public:
  // `max_bytes` <= 0: no limit (every unit fits, every Put passes).
  // `form`: what the dock's cells are; a response carries a location
  // dock's cells as their locations.
  ResponseSizes(const ColumnTable& columns, int64_t rows_per_step, int32_t group_size,
                int64_t max_bytes, CellForm form = CellForm::kBytes);
  ResponseSizes(const ResponseSizes&) = delete;
  ResponseSizes& operator=(const ResponseSizes&) = delete;

  // A response's bytes besides its rows, at most.
  static int64_t Fixed();
  // A row's share of a response to `plan`'s consumer, at most.
  int64_t Row(const Partition& part, const ConsumerPlan& plan, int64_t row) const;
  // How many of `units` (rows, or groups for whole-group consumers), from
  // the first, one response carries.
  size_t FittingUnits(const Partition& part, const ConsumerPlan& plan,
                      const std::vector<int64_t>& units) const;
  // INVALID_ARGUMENT if `in`'s cells, replacing
  // what its rows of `part` hold, make a row (a group, for whole-group
  // consumers) larger than one response to a consumer of `plans` carries.
  // REQUIRES: every column `in` names is in the table.
  absl::Status CheckPut(const Partition& part, const PutInput& in,
                        absl::Span<const ConsumerPlan* const> plans) const;
  // INVALID_ARGUMENT if a row (a group) of `part`
  // is already larger than one response to `plan`'s consumer carries.
  // The messages name the row and the consumer; the caller names the step.
  absl::Status CheckWritten(const Partition& part, const ConsumerPlan& plan) const;

 private:
  absl::Status TooLarge(const ConsumerPlan& plan, int64_t row, int64_t bytes) const;
  // What a cell of `items` items of column c takes in a response.
  int64_t CellBytes(int c, int64_t items) const;

  const ColumnTable& columns_;
  const int64_t rows_per_step_;
  const int32_t group_size_;
  const int64_t max_bytes_;
  const CellForm form_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_RESPONSE_SIZES_H_
