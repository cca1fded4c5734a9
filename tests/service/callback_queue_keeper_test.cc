// CallbackQueueKeeper: it completes an event on gRPC's callback queue every
// period while it lives (each one a call on a lame channel that fails at
// once), and its destructor waits for the one in flight.
#include "server/service/callback_queue_keeper.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

TEST(CallbackQueueKeeper, CompletesEventsWhileItLives) {
  for (int round = 0; round < 3; ++round) {
    CallbackQueueKeeper keeper(absl::Milliseconds(5));
    // No timing is asserted: events come, however loaded the machine.
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (keeper.ticks() < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_GE(keeper.ticks(), 3);
  }
}

}  // namespace
}  // namespace tdock::internal
