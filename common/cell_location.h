// Where a cell's bytes are, for a dock that holds locations instead of bytes.
//
// A standalone dock stores each cell's bytes (CellForm::kBytes). A dock at
// the controller of a sharded deployment stores, for each cell, a
// CellLocation: the shard holding the bytes, the extent the shard stored
// them in, their byte offset there and their length in bytes
// (CellForm::kLocations). Everything the core decides reads a cell's length
// in items, which is the same in both forms; only what a cell's stored bytes
// are differs, and this file is where that is said.
//
// On the wire, in the journal and in a batch, a location column travels as a
// packed column does: its offsets are the cells' item offsets (their real
// lengths), its data holds one encoded CellLocation (kCellLocationBytes,
// little-endian) per row instead of the items.
//
//   CellLocation where{.shard = 2, .extent = 17, .offset = 0, .bytes = 4096};
//   std::string record = EncodeCellLocation(where);
//   ASSIGN_OR_RETURN(CellLocation back, DecodeCellLocation(record));
//
// Thread safety: pure functions over values.
#ifndef TDOCK_COMMON_CELL_LOCATION_H_
#define TDOCK_COMMON_CELL_LOCATION_H_

#include <compare>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/packed.h"

namespace tdock {

// What a dock stores as a cell.
enum class CellForm {
  kBytes,      // the cell's bytes (a standalone server)
  kLocations,  // a CellLocation naming them (a controller)
};

struct CellLocation {
  uint64_t shard = 0;   // the shard's id
  uint64_t extent = 0;  // the shard's name for the stored bytes
  uint64_t offset = 0;  // the cell's first byte in the extent
  uint64_t bytes = 0;   // the cell's length in bytes

  friend bool operator==(const CellLocation& a, const CellLocation& b) {
    return a.shard == b.shard && a.extent == b.extent && a.offset == b.offset &&
           a.bytes == b.bytes;
  }
};

inline constexpr int64_t kCellLocationBytes = 32;

// One start of one shard: its id and its incarnation, random at each start
// and the high 32 bits of every extent it names (0: any incarnation).
struct ShardIncarnation {
  uint64_t shard = 0;
  uint32_t incarnation = 0;

  // `where` is a cell of this incarnation.
  bool Holds(const CellLocation& where) const {
    return where.shard == shard &&
           (incarnation == 0 || static_cast<uint32_t>(where.extent >> 32) == incarnation);
  }
  friend bool operator==(const ShardIncarnation&, const ShardIncarnation&) = default;
  friend auto operator<=>(const ShardIncarnation&, const ShardIncarnation&) = default;
};

// A Put's cells at a shard (one extent) as a controller's dock holds them:
// the step it stored them in, and whether a row not dropped has a cell there.
struct StoredExtent {
  uint64_t extent = 0;
  int64_t step = 0;
  bool live_rows = false;

  friend bool operator==(const StoredExtent&, const StoredExtent&) = default;
};

// Writes `where` as kCellLocationBytes little-endian bytes at `out`.
void EncodeCellLocation(const CellLocation& where, char* out);
std::string EncodeCellLocation(const CellLocation& where);
// INVALID_ARGUMENT unless `record` is kCellLocationBytes long.
absl::StatusOr<CellLocation> DecodeCellLocation(ByteSpan record);

// The bytes a cell of `items` items of `item_bytes` bytes is stored as.
int64_t StoredCellBytes(CellForm form, int64_t items, int64_t item_bytes);

// Checks that `column` is `rows` cells of items of `item_bytes` bytes in
// `form`: for kBytes, ValidatePacked; for kLocations, offsets as
// ValidatePacked wants them, one record per row in the data, and each
// record's byte length the row's items times item_bytes. The message names
// the column and the first row or offset at fault.
absl::Status ValidateCells(CellForm form, const PackedColumn& column, int64_t rows,
                           int64_t item_bytes);

// How many items a stored cell (`stored`, in `form`) holds. DATA_LOSS when
// the bytes cannot be such a cell (not whole items; not one record).
absl::StatusOr<int64_t> StoredCellItems(CellForm form, ByteSpan stored, int64_t item_bytes);

// "bytes", "locations".
const char* CellFormName(CellForm form);

}  // namespace tdock

#endif  // TDOCK_COMMON_CELL_LOCATION_H_
