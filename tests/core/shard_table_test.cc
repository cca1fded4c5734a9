// ShardTable, the controller's shards: a shard registers under a free id and
// again after a restart (its node may change); another address under a held
// id is refused, naming both; bad registrations are refused and change
// nothing; a shard not heard from lately is away, for long is taken out; a
// restarted controller's expected incarnations wait for their shards.
#include "server/shard/shard_table.h"

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock::shard {
namespace {

TEST(ShardTable, RegistersShardsByIdAndRefusesAHeldId) {
  ShardTable table;
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b"}));
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a"}));
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a"},
                                                    {2, "10.0.0.2:7000", "node-b"}}));
  // A restart of shard 2, on a renamed node.
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b2"}));
  EXPECT_STATUS(table.Register({2, "10.0.0.3:7000", "node-c"}),
                absl::StatusCode::kAlreadyExists,
                "shard id 2 is held by the shard at 10.0.0.2:7000; the shard at 10.0.0.3:7000 "
                "needs another id");
  EXPECT_STATUS(table.Register({0, "10.0.0.3:7000", "node-c"}),
                absl::StatusCode::kInvalidArgument, "a shard's id must be positive");
  EXPECT_STATUS(table.Register({3, "", "node-c"}), absl::StatusCode::kInvalidArgument,
                "shard 3 registers with no address");
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a"},
                                                    {2, "10.0.0.2:7000", "node-b2"}}));
}

// A shard not heard from for longer than the bound is taken out, once; one
// that registered again since is kept; a taken-out shard's id is free.
TEST(ShardTable, TakesOutTheShardsNotHeardFrom) {
  ShardTable table;
  const absl::Time start = absl::FromUnixSeconds(1000);
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a"}, start));
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b"}, start));
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a"}, start + absl::Seconds(50)));
  EXPECT_EQ(table.LastSeen(1), start + absl::Seconds(50));
  EXPECT_EQ(table.LastSeen(3), std::nullopt);
  EXPECT_TRUE(table.TakeUnseen(start + absl::Seconds(60), absl::Seconds(60)).empty());
  EXPECT_EQ(table.TakeUnseen(start + absl::Seconds(61), absl::Seconds(60)),
            (std::vector<ShardEntry>{{2, "10.0.0.2:7000", "node-b"}}));
  EXPECT_TRUE(table.TakeUnseen(start + absl::Seconds(61), absl::Seconds(60)).empty());
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a"}}));
  ASSERT_OK(table.Register({2, "10.0.0.9:7000", "node-c"}, start + absl::Seconds(62)));
}

// A shard registering again with another incarnation restarted: the entry
// it replaces is gone (its cells with it); the same incarnation is only a
// heartbeat, and may change what it says of its memory and its address.
TEST(ShardTable, TellsARestartedShardByItsIncarnation) {
  ShardTable table;
  std::vector<ShardEntry> gone;
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, ShardTable::Now(), &gone));
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7, 4096, 8192}, ShardTable::Now(),
                           &gone));
  EXPECT_TRUE(gone.empty());
  EXPECT_EQ(table.List(),
            (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a", 7, 4096, 8192}}));
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 8}, ShardTable::Now(), &gone));
  EXPECT_EQ(gone, (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a", 7, 4096, 8192}}));
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a", 8}}));
  // The same incarnation at another address: restarted with its data dir
  // elsewhere, still the same shard; another incarnation there is not.
  gone.clear();
  ASSERT_OK(table.Register({1, "10.0.0.5:7000", "node-a", 8}, ShardTable::Now(), &gone));
  EXPECT_TRUE(gone.empty());
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.5:7000", "node-a", 8}}));
  EXPECT_STATUS(table.Register({1, "10.0.0.6:7000", "node-a", 9}, ShardTable::Now(), &gone),
                absl::StatusCode::kAlreadyExists, "held by the shard at 10.0.0.5:7000");
}

// A shard not heard from for away_after is listed away and unavailable; it
// is live again once it registers.
TEST(ShardTable, AShardNotHeardFromLatelyIsAway) {
  ShardTable table;
  const absl::Time start = absl::FromUnixSeconds(1000);
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, start));
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b", 9}, start + absl::Seconds(4)));
  const absl::Time now = start + absl::Seconds(6);
  EXPECT_EQ(table.Unavailable(now, absl::Seconds(5)), (std::vector<ShardIncarnation>{{1, 7}}));
  const std::vector<ShardEntry> listed = table.List(now, absl::Seconds(5));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_TRUE(listed[0].away);
  EXPECT_FALSE(listed[1].away);
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, now));
  EXPECT_TRUE(table.Unavailable(now, absl::Seconds(5)).empty());
}

// A restarted controller expects the incarnations its live rows name: each
// is unavailable until it registers; one that registers as another
// incarnation has its expected ones gone; one that never registers is taken
// out after the bound, as an unseen shard is.
TEST(ShardTable, ExpectedIncarnationsWaitForTheirShards) {
  ShardTable table;
  const absl::Time start = absl::FromUnixSeconds(1000);
  table.Expect({1, 7}, start);
  table.Expect({2, 9}, start);
  table.Expect({3, 4}, start);
  EXPECT_EQ(table.Unavailable(start, absl::Seconds(5)),
            (std::vector<ShardIncarnation>{{1, 7}, {2, 9}, {3, 4}}));
  EXPECT_TRUE(table.List(start).empty()) << "an expected shard has no address to list";
  std::vector<ShardEntry> gone;
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, start, &gone));
  EXPECT_TRUE(gone.empty()) << "the incarnation expected is back";
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b", 10}, start, &gone));
  EXPECT_EQ(gone, (std::vector<ShardEntry>{{.id = 2, .incarnation = 9}}));
  EXPECT_EQ(table.Unavailable(start, absl::Seconds(5)), (std::vector<ShardIncarnation>{{3, 4}}));
  table.Expect({1, 7}, start);  // registered already: nothing
  EXPECT_TRUE(table.TakeUnseen(start + absl::Seconds(60), absl::Seconds(60)).empty());
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, start + absl::Seconds(61)));
  ASSERT_OK(table.Register({2, "10.0.0.2:7000", "node-b", 10}, start + absl::Seconds(61)));
  EXPECT_EQ(table.TakeUnseen(start + absl::Seconds(61), absl::Seconds(60)),
            (std::vector<ShardEntry>{{.id = 3, .incarnation = 4}}));
  EXPECT_TRUE(table.Unavailable(start + absl::Seconds(61), absl::Seconds(5)).empty());
}

}  // namespace
}  // namespace tdock::shard
