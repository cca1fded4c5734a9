#include "common/refusal.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/cord.h"

namespace tdock {
namespace {

// The payload: two bytes, the refusal's value and the drop reason's; then,
// for a refusal of new rows, the free groups in 8 (big-endian).
constexpr absl::string_view kPayloadUrl = "type.tdock.dev/tdock.Refusal";

}  // namespace

absl::string_view RefusalName(Refusal why) {
  switch (why) {
    case Refusal::kDropped: return "dropped";
    case Refusal::kSealed: return "sealed";
    case Refusal::kExpired: return "expired";
    case Refusal::kStale: return "stale";
    case Refusal::kReleased: return "released";
    case Refusal::kCapacity: return "capacity";
    case Refusal::kLeaseEnded: return "lease_ended";
    case Refusal::kNone: break;
  }
  return "none";
}

absl::Status Refuse(Refusal why, absl::Status status, DropReason drop, int64_t free_groups) {
  if (status.ok() || why == Refusal::kNone) return status;
  std::string payload;
  payload.push_back(static_cast<char>(why));
  payload.push_back(static_cast<char>(drop));
  if (free_groups >= 0) {
    for (int shift = 56; shift >= 0; shift -= 8) {
      payload.push_back(static_cast<char>((static_cast<uint64_t>(free_groups) >> shift) & 0xff));
    }
  }
  status.SetPayload(kPayloadUrl, absl::Cord(std::move(payload)));
  return status;
}

absl::Status RefuseDropped(DropReason reason, absl::Status status) {
  Refusal why = Refusal::kDropped;
  switch (reason) {
    case DropReason::kSealed: why = Refusal::kSealed; break;
    case DropReason::kExpired: why = Refusal::kExpired; break;
    case DropReason::kStale: why = Refusal::kStale; break;
    default: break;
  }
  return Refuse(why, std::move(status), reason);
}

absl::Status CapacityError(absl::string_view message) {
  return Refuse(Refusal::kCapacity, absl::ResourceExhaustedError(message));
}

absl::Status NoRoomError(absl::string_view message, int64_t free_groups) {
  return Refuse(Refusal::kCapacity, absl::ResourceExhaustedError(message),
                DropReason::kUnspecified, free_groups);
}

absl::Status WithMessage(const absl::Status& status, absl::string_view message) {
  absl::Status out(status.code(), message);
  status.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

RefusalInfo RefusalOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value() || (payload->size() != 2 && payload->size() != 10)) return {};
  const std::string bytes(*payload);
  const auto why = static_cast<uint8_t>(bytes[0]);
  const auto drop = static_cast<uint8_t>(bytes[1]);
  if (why >= kRefusals || drop >= kDropReasons) return {};
  uint64_t free_groups = 0;
  for (size_t i = 2; i < bytes.size(); ++i) {
    free_groups = (free_groups << 8) | static_cast<uint8_t>(bytes[i]);
  }
  return {static_cast<Refusal>(why), static_cast<DropReason>(drop),
          bytes.size() == 10 ? static_cast<int64_t>(free_groups) : -1};
}

}  // namespace tdock
