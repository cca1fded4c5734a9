#include "common/packed.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {
namespace {

absl::Status Invalid(const PackedColumn& column, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("column '", column.name, "': ", what));
}

}  // namespace

int64_t PackedColumn::data_bytes() const {
  int64_t total = 0;
  for (const ByteSpan& s : segments) total += static_cast<int64_t>(s.size());
  return total;
}

absl::Status ValidateOffsets(const PackedColumn& column, int64_t rows) {
  if (rows < 0)
    return Invalid(column, absl::StrCat("negative row count ", rows));
  const std::vector<int64_t>& offsets = column.offsets;
  if (static_cast<int64_t>(offsets.size()) != rows + 1) {
    return Invalid(column, absl::StrCat(offsets.size(), " offsets for ", rows,
                                        " rows, want ", rows + 1));
  }
  if (offsets[0] != 0) {
    return Invalid(column,
                   absl::StrCat("offsets[0] is ", offsets[0], ", want 0"));
  }
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return Invalid(column, absl::StrCat("offsets[", i, "] = ", offsets[i],
                                          " is less than offsets[", i - 1,
                                          "] = ", offsets[i - 1]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePacked(const PackedColumn& column, int64_t rows,
                            int64_t item_bytes) {
  if (rows < 0)
    return Invalid(column, absl::StrCat("negative row count ", rows));
  if (item_bytes <= 0) {
    return Invalid(column, absl::StrCat("item size ", item_bytes,
                                        " bytes is not positive"));
  }
  const int64_t data_bytes = column.data_bytes();
  // No rows may travel as no offsets at all (what an empty repeated field
  // decodes to); the data must then be empty too.
  if (rows == 0 && column.offsets.empty()) {
    if (data_bytes == 0) return absl::OkStatus();
    return Invalid(column,
                   absl::StrCat("no rows but ", data_bytes, " bytes of data"));
  }
  TDOCK_RETURN_IF_ERROR(ValidateOffsets(column, rows));
  const int64_t items = column.offsets.back();
  if (items > std::numeric_limits<int64_t>::max() / item_bytes ||
      items * item_bytes != data_bytes) {
    return Invalid(
        column,
        absl::StrCat("offsets[", rows, "] = ", items, " items of ", item_bytes,
                     " bytes, but the data holds ", data_bytes, " bytes"));
  }
  return absl::OkStatus();
}

void CopyFromSegments(absl::Span<const ByteSpan> segments, int64_t pos,
                      int64_t len, char* dest) {
  for (const ByteSpan& s : segments) {
    if (len == 0) return;
    const int64_t size = static_cast<int64_t>(s.size());
    if (pos >= size) {
      pos -= size;
      continue;
    }
    const int64_t take = std::min(len, size - pos);
    std::memcpy(dest, s.data() + pos, static_cast<size_t>(take));
    dest += take;
    len -= take;
    pos = 0;
  }
}

}  // namespace tdock
