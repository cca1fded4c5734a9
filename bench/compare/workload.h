// Workload of the comparison benchmark: a shape (rows × columns × float32
// elements per row, as in TransferQueue's benchmark), its data prepared once
// in memory (one contiguous rows × elements buffer per column, like a 2-D
// numpy array per column), and how a pass cuts it into chunks of rows.
//
//   small:  1,024 rows ×  9 columns × 8,192 float32 (≈302 MB per pass)
//   medium: 4,096 rows × 15 columns × 4,096 float32 (≈1 GB per pass)
//
// Every contender moves the same chunks: rows [begin, end) with all columns
// per call. Buffers are written once at start-up, so their pages are resident
// before anything is timed.
//
// Thread safety: immutable after Make.
#ifndef TDOCK_BENCH_COMPARE_WORKLOAD_H_
#define TDOCK_BENCH_COMPARE_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/packed.h"

namespace tdock::compare {

struct Shape {
  std::string name;
  int64_t rows = 0;
  int64_t columns = 0;
  int64_t elements = 0;  // float32 values per row of each column

  int64_t row_bytes() const { return elements * 4; }
  int64_t pass_bytes() const { return rows * columns * row_bytes(); }
};

// "small" or "medium"; NOT_FOUND otherwise.
absl::StatusOr<Shape> ShapeByName(const std::string& name);

// Rows [begin, end) of a pass.
struct Chunk {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const { return end - begin; }
};

// A page-aligned buffer filled with pseudo-random bytes.
class Buffer final {
 public:
  Buffer(int64_t bytes, uint64_t seed);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const char* data() const { return data_; }
  int64_t size() const { return size_; }
  ByteSpan span(int64_t offset, int64_t bytes) const {
    return ByteSpan(data_ + offset, static_cast<size_t>(bytes));
  }

 private:
  char* data_ = nullptr;
  int64_t size_ = 0;
};

class Workload final {
 public:
  // Allocates and fills one buffer per column; chunks of `chunk_rows` rows
  // (the last may be shorter).
  static absl::StatusOr<std::unique_ptr<Workload>> Make(const Shape& shape,
                                                        int64_t chunk_rows);

  const Shape& shape() const { return shape_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  // Column `c`'s bytes of rows [begin, end).
  ByteSpan Rows(int64_t c, int64_t begin, int64_t end) const;
  // Column `c`'s bytes of one row.
  ByteSpan Cell(int64_t row, int64_t c) const { return Rows(c, row, row + 1); }
  // Bytes of a chunk over all columns.
  int64_t ChunkBytes(const Chunk& chunk) const {
    return chunk.rows() * shape_.columns * shape_.row_bytes();
  }
  static std::string ColumnName(int64_t c);

 private:
  Workload() = default;
  Shape shape_;
  std::vector<Chunk> chunks_;
  std::vector<std::unique_ptr<Buffer>> columns_;
};

}  // namespace tdock::compare

#endif  // TDOCK_BENCH_COMPARE_WORKLOAD_H_
