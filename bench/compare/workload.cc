// Shapes, prepared buffers and chunks of the comparison benchmark.
#include "bench/compare/workload.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tdock::compare {

absl::StatusOr<Shape> ShapeByName(const std::string& name) {
  if (name == "small") return Shape{"small", 1024, 9, 8192};
  if (name == "medium") return Shape{"medium", 4096, 15, 4096};
  return absl::NotFoundError(
      absl::StrCat("unknown shape '", name, "' (known: small, medium)"));
}

Buffer::Buffer(int64_t bytes, uint64_t seed) : size_(bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 4095) / 4096 * 4096;
  data_ = static_cast<char*>(std::aligned_alloc(4096, rounded));
  if (data_ == nullptr) std::abort();
  // splitmix64: fast, and every byte differs between columns and shapes.
  uint64_t state = seed;
  int64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(data_ + i, &z, sizeof(z));
  }
  for (; i < bytes; ++i) data_[i] = static_cast<char>(i * 131 + seed);
}

Buffer::~Buffer() { std::free(data_); }

absl::StatusOr<std::unique_ptr<Workload>> Workload::Make(const Shape& shape,
                                                         int64_t chunk_rows) {
  if (chunk_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_rows must be > 0, got ", chunk_rows));
  }
  std::unique_ptr<Workload> workload(new Workload());
  workload->shape_ = shape;
  for (int64_t begin = 0; begin < shape.rows; begin += chunk_rows) {
    workload->chunks_.push_back({begin, std::min(shape.rows, begin + chunk_rows)});
  }
  const uint64_t shape_seed = std::hash<std::string>{}(shape.name);
  for (int64_t c = 0; c < shape.columns; ++c) {
    workload->columns_.push_back(std::make_unique<Buffer>(
        shape.rows * shape.row_bytes(), shape_seed * 1000003u + c));
  }
  return workload;
}

ByteSpan Workload::Rows(int64_t c, int64_t begin, int64_t end) const {
  return columns_[c]->span(begin * shape_.row_bytes(),
                           (end - begin) * shape_.row_bytes());
}

std::string Workload::ColumnName(int64_t c) { return absl::StrCat("c", c); }

}  // namespace tdock::compare
