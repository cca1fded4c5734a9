// Packed columns: the Arrow-like layout in which column data travels and is
// handed between the transport and the core. All rows' items lie back to back
// (possibly split over several byte segments), and `offsets` (rows + 1 item
// offsets, starting at 0) say where each row starts: exactly the cu_seqlens of
// varlen attention. An item is one element times the column's inner shape.
#ifndef TDOCK_COMMON_PACKED_H_
#define TDOCK_COMMON_PACKED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/dtype.h"

namespace tdock {

// A byte range owned elsewhere.
using ByteSpan = absl::Span<const char>;

struct PackedColumn {
  std::string name;
  DType dtype = DType::kUnspecified;
  std::vector<int64_t> offsets;
  std::vector<ByteSpan> segments;

  int64_t rows() const {
    return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1;
  }
  // Total bytes over all segments.
  int64_t data_bytes() const;
  // Items of row i (offsets[i + 1] - offsets[i]); REQUIRES: valid offsets.
  int64_t length(int64_t i) const { return offsets[i + 1] - offsets[i]; }
};

// Checks that `column` holds `rows` rows of items of `item_bytes` bytes:
// offsets has rows + 1 entries, starts at 0, never decreases, and the data
// holds exactly offsets.back() items. The message names the column and the
// first offset at fault.
absl::Status ValidatePacked(const PackedColumn& column, int64_t rows,
                            int64_t item_bytes);
// The offsets part of that: rows + 1 of them, from 0, never decreasing.
absl::Status ValidateOffsets(const PackedColumn& column, int64_t rows);

// Copies `len` bytes starting at byte `pos` of the concatenated segments into
// `dest`. REQUIRES: pos + len <= total bytes.
void CopyFromSegments(absl::Span<const ByteSpan> segments, int64_t pos,
                      int64_t len, char* dest);

}  // namespace tdock

#endif  // TDOCK_COMMON_PACKED_H_
