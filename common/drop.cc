#include "common/drop.h"

namespace tdock {

absl::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kFiltered: return "filtered";
    case DropReason::kFailed: return "failed";
    case DropReason::kStale: return "stale";
    case DropReason::kSealed: return "sealed";
    case DropReason::kExpired: return "expired";
    case DropReason::kSurplus: return "surplus";
    case DropReason::kOther: return "other";
    case DropReason::kUnused: return "unused";
    case DropReason::kCarried: return "carried";
    case DropReason::kLost: return "lost";
    case DropReason::kUnspecified: break;
  }
  return "unspecified";
}

const std::array<DropReason, kDropReasons - 1>& AllDropReasons() {
  static constexpr std::array<DropReason, kDropReasons - 1> kAll = {
      DropReason::kFiltered, DropReason::kFailed,  DropReason::kStale, DropReason::kSealed,
      DropReason::kExpired,  DropReason::kSurplus, DropReason::kOther,
      DropReason::kUnused,   DropReason::kCarried, DropReason::kLost};
  return kAll;
}

bool ParseDropReason(absl::string_view name, DropReason* reason) {
  for (DropReason r : AllDropReasons()) {
    if (DropReasonName(r) == name) {
      *reason = r;
      return true;
    }
  }
  return false;
}

}  // namespace tdock
