// What the tdock.v1 wire decoder (wire_decode.cc) and encoder
// (wire_encode.cc) share: the protobuf wire types and the field tables of the
// small submessages. Not part of the public interface; include only from
// common/wire_*.cc.
#ifndef TDOCK_COMMON_WIRE_INTERNAL_H_
#define TDOCK_COMMON_WIRE_INTERNAL_H_

#include <cstddef>
#include <cstdint>

#include "common/wire.h"

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

// tdock.v1.MicroBatch: every field an int64. kMicroBatchFields[i] is field
// number i + 1, so the table lists the fields in wire order.
struct MicroBatchField {
  uint32_t number;
  const char* name;
  int64_t MicroBatchMessage::*member;
};
inline constexpr MicroBatchField kMicroBatchFields[] = {
    {1, "begin", &MicroBatchMessage::begin},
    {2, "end", &MicroBatchMessage::end},
    {3, "padded_len", &MicroBatchMessage::padded_len},
    {4, "tokens", &MicroBatchMessage::tokens},
    {5, "padded_tokens", &MicroBatchMessage::padded_tokens},
};

// tdock.v1.BalanceStats: each field a double (`real`, wire type 1) or an
// int64 (`integer`, wire type 0); the other member pointer is null.
// kBalanceFields[i] is field number i + 1.
struct BalanceField {
  uint32_t number;
  const char* name;
  double BalanceMessage::*real;
  int64_t BalanceMessage::*integer;
};
inline constexpr BalanceField kBalanceFields[] = {
    {1, "rank_cost_min", &BalanceMessage::rank_cost_min, nullptr},
    {2, "rank_cost_max", &BalanceMessage::rank_cost_max, nullptr},
    {3, "rank_cost_mean", &BalanceMessage::rank_cost_mean, nullptr},
    {4, "rank_tokens_min", &BalanceMessage::rank_tokens_min, nullptr},
    {5, "rank_tokens_max", &BalanceMessage::rank_tokens_max, nullptr},
    {6, "rank_tokens_mean", &BalanceMessage::rank_tokens_mean, nullptr},
    {7, "micro_batch_tokens_min", &BalanceMessage::micro_batch_tokens_min,
     nullptr},
    {8, "micro_batch_tokens_max", &BalanceMessage::micro_batch_tokens_max,
     nullptr},
    {9, "micro_batch_tokens_mean", &BalanceMessage::micro_batch_tokens_mean,
     nullptr},
    {10, "micro_batches", nullptr, &BalanceMessage::micro_batches},
    {11, "tokens", nullptr, &BalanceMessage::tokens},
    {12, "padded_tokens", nullptr, &BalanceMessage::padded_tokens},
    {13, "padding_ratio", &BalanceMessage::padding_ratio, nullptr},
};

template <typename Field, size_t N>
constexpr bool NumberedInOrder(const Field (&fields)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (fields[i].number != i + 1) return false;
  }
  return true;
}
static_assert(NumberedInOrder(kMicroBatchFields));
static_assert(NumberedInOrder(kBalanceFields));
constexpr bool OneMemberEach(const BalanceField (&fields)[13]) {
  for (const BalanceField& f : fields) {
    if ((f.real == nullptr) == (f.integer == nullptr)) return false;
  }
  return true;
}
static_assert(OneMemberEach(kBalanceFields));

}  // namespace tdock::wire::internal

#endif  // TDOCK_COMMON_WIRE_INTERNAL_H_
