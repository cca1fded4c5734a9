#include "common/cell_location.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {
namespace {

void PutU64(uint64_t value, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

}  // namespace

void EncodeCellLocation(const CellLocation& where, char* out) {
  PutU64(where.shard, out);
  PutU64(where.extent, out + 8);
  PutU64(where.offset, out + 16);
  PutU64(where.bytes, out + 24);
}

std::string EncodeCellLocation(const CellLocation& where) {
  std::string record(kCellLocationBytes, '\0');
  EncodeCellLocation(where, record.data());
  return record;
}

absl::StatusOr<CellLocation> DecodeCellLocation(ByteSpan record) {
  if (static_cast<int64_t>(record.size()) != kCellLocationBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a cell location is ", kCellLocationBytes,
                                                   " bytes, not ", record.size()));
  }
  return CellLocation{GetU64(record.data()), GetU64(record.data() + 8),
                      GetU64(record.data() + 16), GetU64(record.data() + 24)};
}

int64_t StoredCellBytes(CellForm form, int64_t items, int64_t item_bytes) {
  return form == CellForm::kLocations ? kCellLocationBytes : items * item_bytes;
}

absl::Status ValidateCells(CellForm form, const PackedColumn& column, int64_t rows,
                           int64_t item_bytes) {
  if (form == CellForm::kBytes) return ValidatePacked(column, rows, item_bytes);
  if (item_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column '", column.name, "': item size ", item_bytes, " bytes is not positive"));
  }
  if (rows == 0 && column.offsets.empty() && column.data_bytes() == 0) return absl::OkStatus();
  TDOCK_RETURN_IF_ERROR(ValidateOffsets(column, rows));
  if (column.data_bytes() != rows * kCellLocationBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column '", column.name, "': ", rows, " rows want ", rows * kCellLocationBytes,
        " bytes of cell locations (", kCellLocationBytes, " a row), the data holds ",
        column.data_bytes()));
  }
  char record[kCellLocationBytes];
  for (int64_t i = 0; i < rows; ++i) {
    CopyFromSegments(column.segments, i * kCellLocationBytes, kCellLocationBytes, record);
    const CellLocation where = *DecodeCellLocation(ByteSpan(record, sizeof(record)));
    const int64_t items = column.length(i);
    if (items > std::numeric_limits<int64_t>::max() / item_bytes ||
        where.bytes != static_cast<uint64_t>(items * item_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column '", column.name, "': row ", i, " has ", items, " items of ", item_bytes,
          " bytes, but its location says ", where.bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> StoredCellItems(CellForm form, ByteSpan stored, int64_t item_bytes) {
  if (item_bytes <= 0) {
    return absl::DataLossError(absl::StrCat("item size ", item_bytes, " is not positive"));
  }
  if (form == CellForm::kBytes) {
    if (stored.size() % static_cast<size_t>(item_bytes) != 0) {
      return absl::DataLossError(absl::StrCat("a cell of ", stored.size(),
                                              " bytes is not whole items of ", item_bytes));
    }
    return static_cast<int64_t>(stored.size()) / item_bytes;
  }
  absl::StatusOr<CellLocation> where = DecodeCellLocation(stored);
  if (!where.ok()) return absl::DataLossError(where.status().message());
  if (where->bytes % static_cast<uint64_t>(item_bytes) != 0 ||
      where->bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::DataLossError(absl::StrCat("a cell location of ", where->bytes,
                                            " bytes is not whole items of ", item_bytes));
  }
  return static_cast<int64_t>(where->bytes) / item_bytes;
}

const char* CellFormName(CellForm form) {
  return form == CellForm::kLocations ? "locations" : "bytes";
}

}  // namespace tdock
