// What the tdock.v1 wire decoder (wire_decode.cc) and encoder
// (wire_encode.cc) share: the protobuf wire types. Not part of the public
// interface; include only from common/wire_*.cc.
#ifndef TDOCK_COMMON_WIRE_INTERNAL_H_
#define TDOCK_COMMON_WIRE_INTERNAL_H_

#include <cstdint>

namespace tdock::wire::internal {

// The low three bits of a protobuf tag.
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLen = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

}  // namespace tdock::wire::internal

#endif  // TDOCK_COMMON_WIRE_INTERNAL_H_
