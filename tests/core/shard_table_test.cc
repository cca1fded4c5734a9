// ShardTable, the controller's shards: a shard registers under a free id and
// again after a restart (its node may change); another address under a held
// id is refused, naming both; bad registrations are refused and change
// nothing; a shard not heard from for long is taken out.
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
// it replaces is given back (its cells are gone); the same incarnation is
// only a heartbeat.
TEST(ShardTable, TellsARestartedShardByItsIncarnation) {
  ShardTable table;
  std::optional<ShardEntry> restarted;
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, ShardTable::Now(), &restarted));
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 7}, ShardTable::Now(), &restarted));
  EXPECT_EQ(restarted, std::nullopt);
  ASSERT_OK(table.Register({1, "10.0.0.1:7000", "node-a", 8}, ShardTable::Now(), &restarted));
  EXPECT_EQ(restarted, (ShardEntry{1, "10.0.0.1:7000", "node-a", 7}));
  EXPECT_EQ(table.List(), (std::vector<ShardEntry>{{1, "10.0.0.1:7000", "node-a", 8}}));
}

}  // namespace
}  // namespace tdock::shard
