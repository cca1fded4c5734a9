// Replicas across a restart: each replica's deliveries are recorded apart,
// so after a restart each replica goes on from its own next round; the
// share's one lease, recorded with every replica's delivery, is in flight
// once.
#include <vector>

#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

// The crash dock with two replicas per rank of "bal" (balanced over two
// ranks, one row per rank and round, leased).
DockSpec ReplicaSpec() {
  DockSpec spec = CrashSpec();
  for (ConsumerSpec& c : spec.consumers) {
    if (c.name == "bal") c.replicas = 2;
  }
  return spec;
}

GetInput Of(int32_t rank, int32_t replica) {
  GetInput in = testing::GetOf("bal");
  in.rank = rank;
  in.replica = replica;
  return in;
}

TEST(ReplicaRestart, EachReplicaGoesOnFromItsOwnRound) {
  Recording recording(ReplicaSpec());
  Dock* dock = recording.dock.get();
  WriteIds(*dock, 0);
  const std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_OK(testing::PutSync(*dock, 0, rows, {ColumnOf("score", 0, 0, rows)}));
  ASSERT_OK_AND_ASSIGN(Batch r0a, testing::GetSync(*dock, Of(0, 0)));
  ASSERT_OK_AND_ASSIGN(Batch r0b, testing::GetSync(*dock, Of(0, 1)));
  ASSERT_OK_AND_ASSIGN(Batch r1a, testing::GetSync(*dock, Of(1, 0)));
  ASSERT_EQ(r0b.lease_id, r0a.lease_id);
  recording.Stop();

  Restarted restarted(*recording.store);
  const int bal = restarted.dock->spec().ConsumerIndex("bal");
  EXPECT_EQ(restarted.dock->Stats().rows_in_flight[bal], 2) << "two shares, one lease each";
  ASSERT_OK_AND_ASSIGN(Batch r1b, testing::GetSync(*restarted.dock, Of(1, 1)));
  EXPECT_EQ(r1b.round, 0);
  EXPECT_EQ(r1b.rows, r1a.rows);
  EXPECT_EQ(r1b.lease_id, r1a.lease_id) << "the share's lease, in flight again";
  ASSERT_OK_AND_ASSIGN(Batch next, testing::GetSync(*restarted.dock, Of(0, 1)));
  EXPECT_EQ(next.round, 1) << "replica 1 of rank 0 took round 0 before the restart";
  ASSERT_OK(restarted.dock->Ack("bal", r0a.lease_id));
  EXPECT_OK(restarted.dock->Ack("bal", r1a.lease_id));
}

}  // namespace
}  // namespace tdock::persist::crash
