// ShardTable, the controller's shards: a shard registers under a free id and
// again after a restart (its node may change); another address under a held
// id is refused, naming both; bad registrations are refused and change
// nothing.
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

}  // namespace
}  // namespace tdock::shard
