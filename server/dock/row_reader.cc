#include "server/dock/row_reader.h"

#include <algorithm>
#include <string>
#include <utility>

namespace tdock::internal {

int64_t RowReader::Tokens(const Partition& part, int64_t row) const {
  int64_t tokens = 0;
  for (int c : length_columns_) {
    if (const CellBlock* cell = part.cell(c, row); cell != nullptr) tokens += cell->length;
  }
  return tokens;
}

int64_t RowReader::TokensAfterPut(const Partition& part, const PutInput& in, size_t i) const {
  int64_t tokens = 0;
  for (int c : length_columns_) {
    const std::string& name = columns_[c].name;
    const auto given = std::find_if(in.columns.begin(), in.columns.end(),
                                    [&](const PackedColumn& p) { return p.name == name; });
    if (given != in.columns.end()) {
      tokens += given->length(static_cast<int64_t>(i));
    } else if (const CellBlock* cell = part.cell(c, in.rows[i]); cell != nullptr) {
      tokens += cell->length;
    }
  }
  return tokens;
}

Batch RowReader::Make(const Partition& part, int64_t step,
                      const std::shared_ptr<StepCells>& cells, std::vector<int64_t> rows,
                      const std::vector<int>& columns, bool with_payload) const {
  Batch batch;
  batch.step = step;
  const RowIndex& index = part.row_index();
  if (index.has_keys()) {
    batch.keys.reserve(rows.size());
    for (int64_t row : rows) {
      const std::string* key = index.key(row);
      batch.keys.push_back(key != nullptr ? *key : std::string());
    }
  }
  if (index.has_versions()) {
    batch.versions.reserve(rows.size());
    for (int64_t row : rows) batch.versions.push_back(index.version(row));
  }
  batch.token_counts.reserve(rows.size());
  for (int64_t row : rows) batch.token_counts.push_back(Tokens(part, row));
  if (with_payload) {
    batch.cell_locations = form_ == CellForm::kLocations;
    batch.pin = cells;
    for (int c : columns) {
      PackedColumn view;
      view.name = columns_[c].name;
      view.dtype = columns_[c].dtype;
      cells->Read(part.column(c).cells.get(), rows, columns_[c].item_bytes(), view);
      batch.columns.push_back(std::move(view));
    }
  }
  batch.rows = std::move(rows);
  return batch;
}

}  // namespace tdock::internal
