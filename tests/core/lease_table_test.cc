// LeaseTable on its own, with explicit times: ids, deadlines and wake-ups,
// expiry pinning and ending, pins that stop the clock, the errors of Acks
// that come late, to the wrong consumer or for ids never handed out, and
// the ends a released step and a recovery bring.
#include "server/dock/leases.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock::internal {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

Lease LeaseOf(int consumer, int64_t step, int64_t rows, absl::Time deadline) {
  Lease lease;
  lease.consumer = consumer;
  lease.step = step;
  lease.rows = rows;
  lease.units = {0, 1};
  lease.deadline = deadline;
  return lease;
}

struct Table {
  std::vector<absl::Time> wakes;
  LeaseTable leases{"dock 'd'", [this](absl::Time t) { wakes.push_back(t); }, 100};
};

TEST(LeaseTable, IdsAscendFromTheFirstAndDeadlinesWakeTheDock) {
  Table t;
  EXPECT_EQ(t.leases.NextDeadline(), absl::InfiniteFuture());
  EXPECT_EQ(t.leases.Add(LeaseOf(0, 0, 2, kT0 + absl::Seconds(5))), 100u);
  EXPECT_EQ(t.leases.Add(LeaseOf(0, 0, 2, kT0 + absl::Seconds(3))), 101u);
  EXPECT_EQ(t.wakes, (std::vector<absl::Time>{kT0 + absl::Seconds(5), kT0 + absl::Seconds(3)}));
  EXPECT_EQ(t.leases.NextDeadline(), kT0 + absl::Seconds(3));
  EXPECT_EQ(t.leases.Counts(0).in_flight, 2);
  // A recovered lease keeps its id; later ids are higher.
  Lease recovered = LeaseOf(0, 0, 2, kT0);
  recovered.id = 500;
  t.leases.AddRecovered(recovered);
  EXPECT_EQ(t.leases.Add(LeaseOf(0, 0, 2, kT0)), 501u);
}

TEST(LeaseTable, ExpiryPinsThenEndsOnlyLeasesPastTheirDeadline) {
  Table t;
  const uint64_t early = t.leases.Add(LeaseOf(0, 0, 3, kT0 + absl::Seconds(1)));
  const uint64_t late = t.leases.Add(LeaseOf(0, 0, 4, kT0 + absl::Seconds(9)));
  EXPECT_TRUE(t.leases.PinExpired(kT0).empty());
  std::vector<Lease> expired = t.leases.PinExpired(kT0 + absl::Seconds(1));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, early);
  // Pinned while its end is recorded: an Ack now is told so.
  EXPECT_STATUS(t.leases.PinFor(early, 0, "c").status(), absl::StatusCode::kFailedPrecondition,
                "is being acknowledged or returned");
  EXPECT_EQ(t.leases.TakePinned(early, LeaseTable::End::kExpired).id, early);
  EXPECT_STATUS(t.leases.PinFor(early, 0, "c").status(), absl::StatusCode::kFailedPrecondition,
                "it expired at");
  const LeaseCounts counts = t.leases.Counts(0);
  EXPECT_EQ(counts.in_flight, 1);
  EXPECT_EQ(counts.expired, 1);
  EXPECT_EQ(counts.rows_returned, 3);
  EXPECT_EQ(t.leases.NextDeadline(), kT0 + absl::Seconds(9));
  ASSERT_OK(t.leases.PinFor(late, 0, "c").status());
}

TEST(LeaseTable, APinnedLeaseDoesNotExpireUntilUnpinned) {
  Table t;
  const uint64_t id = t.leases.Add(LeaseOf(0, 0, 2, kT0 + absl::Seconds(1)));
  ASSERT_OK(t.leases.Pin(id));  // a Put carrying the lease is being written
  EXPECT_STATUS(t.leases.Pin(id), absl::StatusCode::kFailedPrecondition, "being acknowledged");
  EXPECT_TRUE(t.leases.PinExpired(kT0 + absl::Hours(1)).empty());
  t.leases.Unpin(id, kT0 + absl::Hours(2));  // the Put failed: the clock runs again
  EXPECT_TRUE(t.leases.PinExpired(kT0 + absl::Hours(1)).empty());
  EXPECT_EQ(t.leases.PinExpired(kT0 + absl::Hours(2)).size(), 1u);
}

TEST(LeaseTable, ALeaseAddedPinnedRunsFromItsUnpin) {
  Table t;
  const uint64_t id = t.leases.Add(LeaseOf(0, 0, 2, absl::InfiniteFuture()), /*pinned=*/true);
  EXPECT_TRUE(t.wakes.empty());
  EXPECT_EQ(t.leases.NextDeadline(), absl::InfiniteFuture());
  t.leases.Unpin(id, kT0 + absl::Seconds(30));  // its hand-out is stored
  EXPECT_EQ(t.leases.NextDeadline(), kT0 + absl::Seconds(30));
}

TEST(LeaseTable, AcksNameWhatIsWrong) {
  Table t;
  const uint64_t id = t.leases.Add(LeaseOf(1, 0, 2, kT0));
  EXPECT_STATUS(t.leases.PinFor(id, 0, "other").status(), absl::StatusCode::kInvalidArgument,
                "dock 'd': lease 100 was not handed to consumer 'other'");
  EXPECT_STATUS(t.leases.PinFor(0, 1, "c").status(), absl::StatusCode::kNotFound,
                "lease 0 was never handed out");
  // Below the first id: a lease of an earlier start of the server.
  EXPECT_STATUS(t.leases.PinFor(7, 1, "c").status(), absl::StatusCode::kFailedPrecondition,
                "lease 7 is not in flight: it ended long ago");
  EXPECT_STATUS(t.leases.PinFor(999, 1, "c").status(), absl::StatusCode::kNotFound,
                "lease 999 was never handed out");
  ASSERT_OK_AND_ASSIGN(Lease pinned, t.leases.PinFor(id, 1, "c"));
  EXPECT_EQ(pinned.rows, 2);
  t.leases.TakePinned(id, LeaseTable::End::kAcked);
  EXPECT_STATUS(t.leases.PinFor(id, 1, "c").status(), absl::StatusCode::kFailedPrecondition,
                "it was already acknowledged");
  EXPECT_EQ(t.leases.Counts(1).in_flight, 0);
  EXPECT_EQ(t.leases.Counts(1).rows_returned, 0);
}

TEST(LeaseTable, ReleasedStepsAndRecoveredAcksEndLeases) {
  Table t;
  const uint64_t step0 = t.leases.Add(LeaseOf(0, 0, 2, kT0));
  const uint64_t step1 = t.leases.Add(LeaseOf(0, 1, 2, kT0));
  t.leases.DropStep(0);
  EXPECT_STATUS(t.leases.PinFor(step0, 0, "c").status(), absl::StatusCode::kFailedPrecondition,
                "its step 0 was released");
  ASSERT_OK(t.leases.PinFor(step1, 0, "c").status());
  t.leases.RecoverAcknowledged(42);
  EXPECT_STATUS(t.leases.PinFor(42, 0, "c").status(), absl::StatusCode::kFailedPrecondition,
                "already acknowledged");
}

}  // namespace
}  // namespace tdock::internal
