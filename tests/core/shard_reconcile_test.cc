// ShardReconciler, a controller's side of a shard's inventory: a Put whose
// commit the shard never heard answered is stored (with its step) when a
// live step has its cells, else given up, after which a late commit naming
// it is refused; nothing is given up while a commit naming it is in
// flight; a live row whose committed cells the shard no longer holds is
// dropped as lost, but not one of an extent given after the inventory, nor
// for an inventory of the unresolved extents alone; a bad inventory is
// refused, naming what is wrong.
#include "server/shard/shard_reconcile.h"

#include <future>
#include <string>
#include <vector>

#include "common/cell_location.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock::shard {
namespace {

using testing::OwnedColumn;
using testing::PutSync;

constexpr uint64_t kShard = 3;
constexpr uint32_t kIncarnation = 5;

uint64_t Extent(uint64_t n) { return (uint64_t{kIncarnation} << 32) | n; }

// One int32 item a row, every cell in `extent` of shard kShard.
OwnedColumn Cells(size_t rows, uint64_t extent) {
  OwnedColumn column{"tokens", DType::kInt32, {0}, {}};
  for (size_t i = 0; i < rows; ++i) {
    column.offsets.push_back(column.offsets.back() + 1);
    column.bytes += EncodeCellLocation({kShard, extent, 4 * i, 4});
  }
  return column;
}

class ShardReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DockSpec spec;
    spec.name = "d";
    spec.num_prompts = 8;
    spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
    spec.consumers = {ConsumerSpec{"all", {"tokens"}, 8, 1, false, Policy::kFifo, 0}};
    ASSERT_OK_AND_ASSIGN(dock_, registry_.Create(spec));
  }

  absl::StatusOr<ShardReconciler::Outcome> Reconcile(ShardReconciler::Inventory inventory) {
    std::promise<absl::StatusOr<ShardReconciler::Outcome>> answered;
    reconciler_.Reconcile(std::move(inventory),
                          [&answered](absl::StatusOr<ShardReconciler::Outcome> outcome) {
                            answered.set_value(std::move(outcome));
                          });
    return answered.get_future().get();
  }

  int64_t LostRows() const {
    return dock_->Stats().steps[0].dropped_rows[static_cast<int>(DropReason::kLost)];
  }

  DockRegistry registry_{RegistryLimits{.dock = DockLimits{.cells = CellForm::kLocations}}};
  ShardReconciler reconciler_{&registry_};
  std::shared_ptr<Dock> dock_;
};

TEST_F(ShardReconcilerTest, AnUnansweredPutIsStoredOrGivenUpAndAGivenUpOneIsRefusedLater) {
  ASSERT_OK(PutSync(*dock_, 0, {0, 1}, {Cells(2, Extent(1))}));
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome outcome,
                       Reconcile({.shard = kShard,
                                  .incarnation = kIncarnation,
                                  .held = {Extent(1), Extent(2)},
                                  .unresolved = {Extent(1), Extent(2)},
                                  .next_extent = Extent(3)}));
  EXPECT_EQ(outcome.stored, (std::vector<std::pair<uint64_t, int64_t>>{{Extent(1), 0}}));
  EXPECT_EQ(outcome.given_up, (std::vector<uint64_t>{Extent(2)}));
  EXPECT_EQ(outcome.left, 0);
  EXPECT_EQ(outcome.lost_rows, 0);
  // Its commit arriving late is refused; another Put's goes through.
  EXPECT_STATUS(reconciler_.BeginCommit("d", {{kShard, {Extent(2)}}}),
                absl::StatusCode::kFailedPrecondition,
                "Put on dock 'd': its cells (shard 3 extent " + std::to_string(Extent(2)) +
                    ") were given up");
  ASSERT_OK(reconciler_.BeginCommit("d", {{kShard, {Extent(3)}}}));
  reconciler_.EndCommit({{kShard, {Extent(3)}}});
}

TEST_F(ShardReconcilerTest, NothingIsGivenUpWhileACommitNamingItIsInFlight) {
  const ShardReconciler::Inventory inventory{.shard = kShard,
                                             .incarnation = kIncarnation,
                                             .held = {Extent(2)},
                                             .unresolved = {Extent(2)},
                                             .next_extent = Extent(4)};
  ASSERT_OK(reconciler_.BeginCommit("d", {{kShard, {Extent(2)}}}));
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome busy, Reconcile(inventory));
  EXPECT_TRUE(busy.given_up.empty());
  EXPECT_EQ(busy.left, 1) << "the commit in flight may name it";
  // Commits naming other extents, of this shard or another, do not hold it up.
  const ShardReconciler::Extents others{{kShard, {Extent(3)}}, {kShard + 1, {Extent(2)}}};
  ASSERT_OK(reconciler_.BeginCommit("d", others));
  reconciler_.EndCommit({{kShard, {Extent(2)}}});
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome done, Reconcile(inventory));
  EXPECT_EQ(done.given_up, (std::vector<uint64_t>{Extent(2)}));
  EXPECT_EQ(done.left, 0);
  reconciler_.EndCommit(others);
}

TEST_F(ShardReconcilerTest, CommittedCellsMissingAtTheShardAreLost) {
  ASSERT_OK(PutSync(*dock_, 0, {0, 1}, {Cells(2, Extent(1))}));
  ASSERT_OK(PutSync(*dock_, 0, {2, 3}, {Cells(2, Extent(2))}));
  ASSERT_OK(PutSync(*dock_, 0, {4, 5}, {Cells(2, Extent(7))}));  // given after the inventory
  // Not the whole inventory: nothing is taken as missing.
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome partial,
                       Reconcile({.shard = kShard,
                                  .incarnation = kIncarnation,
                                  .held = {Extent(1)},
                                  .next_extent = Extent(5)}));
  EXPECT_EQ(partial.lost_rows, 0);
  EXPECT_EQ(LostRows(), 0);
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome outcome,
                       Reconcile({.shard = kShard,
                                  .incarnation = kIncarnation,
                                  .held = {Extent(1)},
                                  .next_extent = Extent(5),
                                  .complete = true}));
  EXPECT_EQ(outcome.lost_rows, 2) << "rows 2, 3: extent 2 is gone from the shard";
  EXPECT_FALSE(outcome.unsettled);
  EXPECT_EQ(LostRows(), 2);
  // Another incarnation's inventory says nothing of this one's cells.
  ASSERT_OK_AND_ASSIGN(ShardReconciler::Outcome other,
                       Reconcile({.shard = kShard,
                                  .incarnation = kIncarnation + 1,
                                  .next_extent = uint64_t{kIncarnation + 1} << 32 | 1,
                                  .complete = true}));
  EXPECT_EQ(other.lost_rows, 0);
  EXPECT_EQ(LostRows(), 2);
}

TEST_F(ShardReconcilerTest, ABadInventoryIsRefusedNamingWhatIsWrong) {
  const ShardReconciler::Inventory good{.shard = kShard,
                                        .incarnation = kIncarnation,
                                        .held = {Extent(1), Extent(2)},
                                        .unresolved = {Extent(2)},
                                        .next_extent = Extent(3)};
  ShardReconciler::Inventory other = good;
  other.held[0] = (uint64_t{kIncarnation + 1} << 32) | 1;
  EXPECT_STATUS(Reconcile(other).status(), absl::StatusCode::kInvalidArgument,
                "is not of incarnation 5");
  ShardReconciler::Inventory unsorted = good;
  std::swap(unsorted.held[0], unsorted.held[1]);
  EXPECT_STATUS(Reconcile(unsorted).status(), absl::StatusCode::kInvalidArgument,
                "held extents are not ascending");
  ShardReconciler::Inventory not_held = good;
  not_held.held = {Extent(1)};
  EXPECT_STATUS(Reconcile(not_held).status(), absl::StatusCode::kInvalidArgument,
                "unresolved extent " + std::to_string(Extent(2)) + " is not held");
  ShardReconciler::Inventory past = good;
  past.next_extent = Extent(2);
  EXPECT_STATUS(Reconcile(past).status(), absl::StatusCode::kInvalidArgument,
                "is not below next_extent");
  // Nothing was given up by the refusals.
  ASSERT_OK(reconciler_.BeginCommit("d", {{kShard, {Extent(2)}}}));
  reconciler_.EndCommit({{kShard, {Extent(2)}}});
}

}  // namespace
}  // namespace tdock::shard
