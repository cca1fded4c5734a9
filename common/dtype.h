// Element types of dock columns. The numeric values match tdock.v1.DType.
#ifndef TDOCK_COMMON_DTYPE_H_
#define TDOCK_COMMON_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace tdock {

enum class DType : uint8_t {
  kUnspecified = 0,
  kInt8 = 1,
  kUint8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
  kBytes = 11,
};

// Size in bytes of one element; 0 for kUnspecified.
size_t DTypeSize(DType dtype);
// Lower-case name as used in YAML specs: "int32", "bfloat16", "bytes", ...
absl::string_view DTypeName(DType dtype);
std::optional<DType> ParseDType(absl::string_view name);
// True for 1..11.
bool IsValidDType(int value);

}  // namespace tdock

#endif  // TDOCK_COMMON_DTYPE_H_
