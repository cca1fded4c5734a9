#include <algorithm>
#include <numeric>

#include "common/balance/micro_batch_internal.h"

namespace tdock::internal {
namespace {

bool ByLength(absl::Span<const int64_t> lengths, int x, int y) {
  return lengths[x] != lengths[y] ? lengths[x] < lengths[y] : x < y;
}

void RemoveRow(absl::Span<const int64_t> lengths, int row, Bin* bin) {
  bin->rows.erase(std::find(bin->rows.begin(), bin->rows.end(), row));
  bin->tokens -= lengths[row];
  bin->max_len = 0;
  for (int r : bin->rows) bin->max_len = std::max(bin->max_len, lengths[r]);
}

// Least-loaded bin other than `skip` that can take a row of `length`; -1 if
// none. Ties go to the lower index.
int BestTarget(const std::vector<Bin>& bins, int skip, int64_t length,
               const MicroBatchOptions& options) {
  int best = -1;
  int64_t best_load = 0;
  for (int b = 0; b < static_cast<int>(bins.size()); ++b) {
    if (b == skip || !FitsWith(bins[b], length, options)) continue;
    const int64_t load = BinLoad(bins[b], options);
    if (best < 0 || load < best_load) {
      best = b;
      best_load = load;
    }
  }
  return best;
}

// Moves one row of bin `over` elsewhere, trying its longest rows first (they
// lower a padded load most). False when no row fits anywhere.
bool MoveOneOut(absl::Span<const int64_t> lengths,
                const MicroBatchOptions& options, int over,
                std::vector<Bin>* bins) {
  std::vector<int> rows = (*bins)[over].rows;
  std::sort(rows.begin(), rows.end(),
            [lengths](int x, int y) { return ByLength(lengths, y, x); });
  for (int row : rows) {
    const int target = BestTarget(*bins, over, lengths[row], options);
    if (target < 0) continue;
    RemoveRow(lengths, row, &(*bins)[over]);
    AddRow(lengths, row, &(*bins)[target]);
    return true;
  }
  return false;
}

}  // namespace

int64_t BinLoad(const Bin& bin, const MicroBatchOptions& options) {
  return options.Load(static_cast<int64_t>(bin.rows.size()), bin.max_len,
                      bin.tokens);
}

bool Fits(const Bin& bin, const MicroBatchOptions& options) {
  if (options.max_rows > 0 &&
      static_cast<int64_t>(bin.rows.size()) > options.max_rows) {
    return false;
  }
  return BinLoad(bin, options) <= options.max_tokens;
}

bool FitsWith(const Bin& bin, int64_t length,
              const MicroBatchOptions& options) {
  const int64_t rows = static_cast<int64_t>(bin.rows.size()) + 1;
  if (options.max_rows > 0 && rows > options.max_rows) return false;
  return options.Load(rows, std::max(bin.max_len, length),
                      bin.tokens + length) <= options.max_tokens;
}

void AddRow(absl::Span<const int64_t> lengths, int row, Bin* bin) {
  bin->rows.push_back(row);
  bin->tokens += lengths[row];
  bin->max_len = std::max(bin->max_len, lengths[row]);
}

Bin MakeBin(absl::Span<const int64_t> lengths, absl::Span<const int> rows) {
  Bin bin;
  bin.rows.reserve(rows.size());
  for (int row : rows) AddRow(lengths, row, &bin);
  return bin;
}

std::vector<Bin> PackFill(absl::Span<const int64_t> lengths,
                          const MicroBatchOptions& options) {
  std::vector<int> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [lengths](int x, int y) { return ByLength(lengths, x, y); });
  std::vector<Bin> bins;
  for (int row : order) {
    if (bins.empty() || !FitsWith(bins.back(), lengths[row], options)) {
      bins.emplace_back();
    }
    AddRow(lengths, row, &bins.back());
  }
  return bins;
}

void SplitToCount(absl::Span<const int64_t> lengths,
                  const MicroBatchOptions& options, int count,
                  std::vector<Bin>* bins) {
  while (static_cast<int>(bins->size()) < count) {
    int pick = -1;
    for (int b = 0; b < static_cast<int>(bins->size()); ++b) {
      if ((*bins)[b].rows.size() < 2) continue;
      if (pick < 0 || BinLoad((*bins)[b], options) >
                          BinLoad((*bins)[pick], options)) {
        pick = b;
      }
    }
    if (pick < 0) {
      bins->emplace_back();
      continue;
    }
    std::vector<int> rows = (*bins)[pick].rows;
    std::sort(rows.begin(), rows.end(),
              [lengths](int x, int y) { return ByLength(lengths, x, y); });
    const size_t half = rows.size() / 2;
    (*bins)[pick] = MakeBin(lengths, absl::MakeConstSpan(rows).subspan(0, half));
    bins->insert(bins->begin() + pick + 1,
                 MakeBin(lengths, absl::MakeConstSpan(rows).subspan(half)));
  }
}

bool RepairBins(absl::Span<const int64_t> lengths,
                const MicroBatchOptions& options, std::vector<Bin>* bins) {
  // Each move takes a row out of an over-budget bin into one that stays
  // within it, so at most lengths.size() moves happen per bin.
  for (;;) {
    int over = -1;
    for (int b = 0; b < static_cast<int>(bins->size()) && over < 0; ++b) {
      if (!Fits((*bins)[b], options)) over = b;
    }
    if (over < 0) return true;
    if (!MoveOneOut(lengths, options, over, bins)) return false;
  }
}

}  // namespace tdock::internal
