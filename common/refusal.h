// Why a call was refused, for callers that act on it instead of reading it.
// The dock attaches a Refusal to the status it answers (a payload of the
// absl::Status); the wire carries it in the gRPC status details
// (proto/tdock/v1/convert.cc), and both clients turn it into an exception
// class per reason, so that nobody matches message text. A closed
// vocabulary, like DropReason; a status without one is refused for no reason
// a caller would act on (a bad argument, an unknown name, a failed disk).
#ifndef TDOCK_COMMON_REFUSAL_H_
#define TDOCK_COMMON_REFUSAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/drop.h"

namespace tdock {

enum class Refusal : uint8_t {
  kNone = 0,
  kDropped = 1,     // the row was dropped (filtered, failed, surplus, other, unused)
  kSealed = 2,      // its step is sealed, or being sealed: no new row, no write to a row left out
  kExpired = 3,     // its reservation, or the lease, ran past its deadline
  kStale = 4,       // its policy version is too old for a consumer's max_staleness
  kReleased = 5,    // its step was released
  kCapacity = 6,    // a limit was reached: memory, rows of a step, parked calls, docks, sizes
  kLeaseEnded = 7,  // the lease is no longer in flight (acknowledged, returned, superseded)
};
inline constexpr int kRefusals = 8;  // values 0..7

// "dropped", "sealed", ... ("none" for kNone).
absl::string_view RefusalName(Refusal why);

// What a status says of why it was refused: `drop` is the row's drop reason
// when the refusal is about a dropped row (kUnspecified otherwise).
struct RefusalInfo {
  Refusal why = Refusal::kNone;
  DropReason drop = DropReason::kUnspecified;
  // kCapacity of new rows (an append past max_rows_per_step): the groups of
  // the step still free, so a writer can take them and put the rest in a
  // later step; -1 otherwise.
  int64_t free_groups = -1;
};

// `status` (not OK) with `why` attached; code and message unchanged.
absl::Status Refuse(Refusal why, absl::Status status,
                    DropReason drop = DropReason::kUnspecified, int64_t free_groups = -1);
// `status` for a row dropped for `reason`: refused as kSealed, kExpired or
// kStale for those reasons, as kDropped for the others; the reason goes too.
absl::Status RefuseDropped(DropReason reason, absl::Status status);
// RESOURCE_EXHAUSTED with `message`, refused as kCapacity.
absl::Status CapacityError(absl::string_view message);
// CapacityError for new rows a step has no room for, with its free groups.
absl::Status NoRoomError(absl::string_view message, int64_t free_groups);
// `status` with `message` in place of its own: code and payloads (its
// refusal) kept.
absl::Status WithMessage(const absl::Status& status, absl::string_view message);
// What `status` carries (kNone: nothing, or a payload it cannot read).
RefusalInfo RefusalOf(const absl::Status& status);

}  // namespace tdock

#endif  // TDOCK_COMMON_REFUSAL_H_
