// Building blocks of the micro-batch planners (micro_batch.cc): bins of rows
// with cached load figures, the packed fill, splitting, and budget repair.
#ifndef TDOCK_COMMON_BALANCE_MICRO_BATCH_INTERNAL_H_
#define TDOCK_COMMON_BALANCE_MICRO_BATCH_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/balance/micro_batch.h"

namespace tdock::internal {

// A micro-batch under construction. Plain value; rows are positions in the
// planned lengths, in no particular order.
struct Bin {
  std::vector<int> rows;
  int64_t tokens = 0;
  int64_t max_len = 0;
};

inline int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Budget load of `bin`, and whether it (with one more row of `length`) fits
// max_tokens and max_rows.
int64_t BinLoad(const Bin& bin, const MicroBatchOptions& options);
bool Fits(const Bin& bin, const MicroBatchOptions& options);
bool FitsWith(const Bin& bin, int64_t length, const MicroBatchOptions& options);

void AddRow(absl::Span<const int64_t> lengths, int row, Bin* bin);
Bin MakeBin(absl::Span<const int64_t> lengths, absl::Span<const int> rows);

// Rows by increasing length (ties by position), each micro-batch filled while
// the next row fits. Every bin fits. REQUIRES: every row fits alone.
std::vector<Bin> PackFill(absl::Span<const int64_t> lengths,
                          const MicroBatchOptions& options);

// Splits the bin of largest load holding two or more rows into its shorter
// and longer halves, until there are `count` bins; adds empty bins when no
// bin has two rows. Loads never grow.
void SplitToCount(absl::Span<const int64_t> lengths,
                  const MicroBatchOptions& options, int count,
                  std::vector<Bin>* bins);

// Moves rows out of bins over the budget into the least-loaded bins that can
// take them. Returns false when some bin stays over; bins that fit are never
// pushed over.
bool RepairBins(absl::Span<const int64_t> lengths,
                const MicroBatchOptions& options, std::vector<Bin>* bins);

}  // namespace tdock::internal

#endif  // TDOCK_COMMON_BALANCE_MICRO_BATCH_INTERNAL_H_
