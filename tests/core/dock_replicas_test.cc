// Replicas of a DP rank (its TP / PP / CP peers): each replica of rank r
// receives rank r's share of every round exactly once; one lease covers the
// share, whichever replica acknowledges it; the step is released once every
// replica has its share; bad replica indexes and specs are refused.
#include <algorithm>
#include <map>
#include <set>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::PutSync;

// 8 rows of one sample; "actor" is balanced over 2 ranks of 3 replicas,
// rounds of 2 rows per rank.
DockSpec ReplicaSpec(int64_t lease_ms = 0) {
  DockSpec spec;
  spec.name = "replicas";
  spec.num_prompts = 8;
  spec.length_columns = {"prompt"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false}};
  ConsumerSpec actor{"actor", {"prompt"}, 2, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 16};
  actor.replicas = 3;
  actor.lease_ms = lease_ms;
  spec.consumers = {actor};
  return spec;
}

GetInput Of(int32_t rank, int32_t replica) {
  GetInput in = GetOf("actor");
  in.rank = rank;
  in.replica = replica;
  return in;
}

TEST(ReplicasTest, EveryReplicaGetsItsRanksShareOnce) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec()));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  std::map<std::pair<int64_t, int32_t>, Batch> first;  // (round, rank) -> replica 0's
  std::set<int64_t> rows;
  for (int64_t round = 0; round < 2; ++round) {
    for (int32_t replica = 0; replica < 3; ++replica) {
      for (int32_t rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(dock->Stats().steps.size(), 1u) << "released before every replica took its share";
        ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, Of(rank, replica)));
        ASSERT_EQ(batch.round, round);
        ASSERT_EQ(batch.rows.size(), 2u);
        auto [it, fresh] = first.try_emplace({round, rank}, batch);
        if (fresh) {
          rows.insert(batch.rows.begin(), batch.rows.end());
          continue;
        }
        EXPECT_EQ(batch.rows, it->second.rows) << "replica " << replica << " of rank " << rank;
        EXPECT_EQ(batch.micro_batches, it->second.micro_batches);
        EXPECT_EQ(batch.end_of_step, it->second.end_of_step);
      }
    }
  }
  EXPECT_EQ(rows, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(dock->Stats().steps.empty()) << "every replica has every share: released";
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{8});
}

// The share has one lease: the replicas taking it under the lease get the
// same id; an Ack from any of them acknowledges the share, and a replica
// taking it afterwards needs no lease.
TEST(ReplicasTest, OneLeaseCoversTheShare) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec(/*lease_ms=*/60000)));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, Of(0, 0)));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, Of(0, 1)));
  ASSERT_NE(a.lease_id, 0u);
  EXPECT_EQ(b.lease_id, a.lease_id);
  EXPECT_EQ(dock->Stats().rows_in_flight, std::vector<int64_t>{2}) << "one share in flight";
  ASSERT_OK_AND_ASSIGN(int64_t acked, dock->Ack("actor", b.lease_id));
  EXPECT_EQ(acked, 2);
  ASSERT_OK_AND_ASSIGN(Batch c, GetSync(*dock, Of(0, 2)));
  EXPECT_EQ(c.rows, a.rows);
  EXPECT_EQ(c.lease_id, 0u) << "the share is acknowledged";
  EXPECT_EQ(dock->Stats().rows_in_flight, std::vector<int64_t>{0});
  EXPECT_STATUS(dock->Ack("actor", a.lease_id), absl::StatusCode::kFailedPrecondition,
                "already acknowledged");
}

// An expired share goes back to every replica that took it, under one new
// lease; a replica that had not taken it yet gets it in its turn.
TEST(ReplicasTest, AnExpiredShareGoesBackToTheReplicasThatTookIt) {
  auto clock = std::make_shared<ManualClock>();
  auto timers = std::make_shared<TimerService>(clock);
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec(/*lease_ms=*/30),
                                               DockLimits{.timers = timers, .clock = clock}));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, Of(1, 0)));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, Of(1, 1)));
  clock->Advance(absl::Milliseconds(31));
  for (int i = 0; i < 1000 && dock->Stats().lease_expiries_total[0] == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(dock->Stats().lease_expiries_total[0], 1);
  ASSERT_OK_AND_ASSIGN(Batch a2, GetSync(*dock, Of(1, 0)));
  ASSERT_OK_AND_ASSIGN(Batch b2, GetSync(*dock, Of(1, 1)));
  ASSERT_OK_AND_ASSIGN(Batch c, GetSync(*dock, Of(1, 2)));
  for (const Batch* again : {&a2, &b2, &c}) {
    EXPECT_EQ(again->round, 0);
    EXPECT_EQ(again->rows, a.rows);
  }
  EXPECT_NE(a2.lease_id, a.lease_id);
  EXPECT_EQ(b2.lease_id, a2.lease_id);
  EXPECT_EQ(c.lease_id, a2.lease_id);
  EXPECT_EQ(b.lease_id, a.lease_id);
}

// The replicas of a rank train together: a row dropped after the first
// replica took the share still reaches the others (copies of one hand-out);
// dropped before, it reaches none.
TEST(ReplicasTest, ReplicasTakeTheSameRowsWhateverIsDroppedMeanwhile) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec()));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, Of(0, 0)));  // forms round 0
  // Rank 1's share, not taken by any of its replicas yet.
  std::vector<int64_t> rank1;
  for (int64_t row : Iota(0, 4)) {
    if (std::find(a.rows.begin(), a.rows.end(), row) == a.rows.end()) rank1.push_back(row);
  }
  ASSERT_EQ(rank1.size(), 2u);
  ASSERT_OK(dock->Drop(DropInput{0, {a.rows[0], rank1[0]}, {}, DropReason::kFiltered}));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, Of(0, 1)));
  EXPECT_EQ(b.rows, a.rows) << "rank 0's share was taken before the drop";
  ASSERT_OK_AND_ASSIGN(Batch c, GetSync(*dock, Of(1, 2)));
  EXPECT_EQ(c.rows, (std::vector<int64_t>{rank1[1]})) << "taken after it: without the row";
  ASSERT_OK_AND_ASSIGN(Batch d, GetSync(*dock, Of(1, 0)));
  EXPECT_EQ(d.rows, c.rows);
}

// A share whose every row was dropped after its first replica took it
// (that replica's lease ended with the drop) still reaches the other
// replicas, but under no new lease: a lease over rows no drop can end would
// hold the step until it expired.
TEST(ReplicasTest, AReplicaTakingAShareWhoseRowsWereDroppedGetsNoLease) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec(/*lease_ms=*/60000)));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 4), {Cells("prompt", Iota(0, 4))}));
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, Of(0, 0)));
  ASSERT_NE(a.lease_id, 0u);
  ASSERT_OK(dock->Drop(DropInput{0, a.rows, {}, DropReason::kFiltered}));
  EXPECT_STATUS(dock->Ack("actor", a.lease_id), absl::StatusCode::kFailedPrecondition,
                "every row of it was dropped");
  for (int32_t replica : {1, 2}) {
    ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, Of(0, replica)));
    EXPECT_EQ(b.rows, a.rows) << "replica " << replica << " trains with replica 0";
    EXPECT_EQ(b.lease_id, 0u) << "replica " << replica;
  }
  EXPECT_EQ(dock->Stats().rows_in_flight, std::vector<int64_t>{0});
}

TEST(ReplicasTest, BadReplicasAreRefused) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(ReplicaSpec()));
  EXPECT_STATUS(GetSync(*dock, Of(0, 3)), absl::StatusCode::kInvalidArgument,
                "replica 3 is out of range [0, 3)");
  EXPECT_STATUS(GetSync(*dock, Of(0, -1)), absl::StatusCode::kInvalidArgument,
                "replica -1 is out of range");
  DockSpec fifo = ReplicaSpec();
  fifo.consumers[0].policy = Policy::kFifo;
  fifo.consumers[0].micro_batch.reset();
  EXPECT_STATUS(Dock::Create(fifo), absl::StatusCode::kInvalidArgument,
                "replicas 3 needs policy balanced");
  DockSpec many = ReplicaSpec();
  many.consumers[0].replicas = 5000;
  EXPECT_STATUS(Dock::Create(many), absl::StatusCode::kInvalidArgument,
                "replicas 5000 must be in [1, 1024]");
  DockSpec plain = ReplicaSpec();
  plain.consumers[0].replicas = 0;
  ASSERT_OK_AND_ASSIGN(auto single, Dock::Create(plain));
  EXPECT_EQ(single->spec().consumers[0].replicas, 1);
  GetInput in = Of(0, 1);
  EXPECT_STATUS(GetSync(*single, in), absl::StatusCode::kInvalidArgument,
                "(the consumer has no replicas)");
}

}  // namespace
}  // namespace tdock
