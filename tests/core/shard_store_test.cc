// ShardStore, a shard's cells: a staged Put gets locations naming its cells
// (offsets in the Put's payload, its columns one after the other), readable
// as soon as staged; reads return exactly the cells' bytes and refuse
// a location the shard does not hold readable, naming it; an aborted or
// released Put is gone once its read grace has passed, or sooner when a Put
// needs its memory; the memory limit refuses a Put whole, but for the
// dock's oldest live step; a reader's pin
// keeps released cells' memory; a staged Put whose commit was never
// answered is in the inventory as unresolved until the controller's answer
// commits or retires it (freed once its read grace has passed), and an
// extent still being placed is not spoken of.
#include "server/shard/shard_store.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock::shard {
namespace {

using testing::OwnedColumn;

OwnedColumn Floats(const std::string& name, const std::vector<int64_t>& lengths, float first) {
  return OwnedColumn::Floats(name, lengths, first);
}

std::vector<float> AsFloats(ByteSpan bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

struct Put {
  OwnedColumn a = Floats("a", {2, 0, 3}, 0);
  OwnedColumn b = Floats("b", {1, 1, 1}, 100);
  std::vector<PackedColumn> views = {a.View(), b.View()};
  std::vector<int64_t> item_bytes = {4, 4};
};

TEST(ShardStore, AStagedPutGetsLocationsAndIsReadByThem) {
  ShardStore store(7, 4096, 0);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged,
                       store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_EQ(staged.locations.size(), 2u);
  // Offsets run over the Put's payload: a's 20 bytes, then b's 12.
  EXPECT_EQ(staged.locations[0],
            (std::vector<CellLocation>{{7, staged.extent, 0, 8},
                                       {7, staged.extent, 8, 0},
                                       {7, staged.extent, 8, 12}}));
  EXPECT_EQ(staged.locations[1],
            (std::vector<CellLocation>{{7, staged.extent, 20, 4},
                                       {7, staged.extent, 24, 4},
                                       {7, staged.extent, 28, 4}}));
  // Readable while staged: the controller may hand the rows out before the
  // shard hears its answer.
  ASSERT_OK_AND_ASSIGN(ShardStore::Cells early, store.Read("d", staged.locations[0]));
  EXPECT_EQ(AsFloats(early.cells[0]), (std::vector<float>{0, 1}));
  EXPECT_EQ(store.GetStats().staged_puts, 1);

  ASSERT_OK(store.Commit(staged.extent, 0));
  const std::vector<CellLocation> wanted = {staged.locations[1][2], staged.locations[0][0],
                                            staged.locations[0][1], staged.locations[0][2]};
  ASSERT_OK_AND_ASSIGN(ShardStore::Cells cells, store.Read("d", wanted));
  ASSERT_EQ(cells.cells.size(), 4u);
  EXPECT_EQ(AsFloats(cells.cells[0]), (std::vector<float>{102}));
  EXPECT_EQ(AsFloats(cells.cells[1]), (std::vector<float>{0, 1}));
  EXPECT_TRUE(cells.cells[2].empty());
  EXPECT_EQ(AsFloats(cells.cells[3]), (std::vector<float>{2, 3, 4}));
  const ShardStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.committed_puts, 1);
  EXPECT_EQ(stats.staged_puts, 0);
  EXPECT_EQ(stats.cell_bytes, 32);
}

TEST(ShardStore, AnUnansweredPutIsUnresolvedUntilTheControllerSays) {
  ShardStore store(7, 4096, 0);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged committed, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(committed.extent, 0));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged stored, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged never, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged pending, store.Stage("d", 0, put.views, put.item_bytes));
  EXPECT_FALSE(store.HasUnresolved()) << "a commit in flight is not unresolved";
  store.Unresolved(stored.extent);
  store.Unresolved(never.extent);
  store.Unresolved(committed.extent);  // answered already: stays committed
  EXPECT_TRUE(store.HasUnresolved());
  const ShardStore::Inventory inventory = store.GetInventory();
  EXPECT_EQ(inventory.incarnation, store.incarnation());
  EXPECT_EQ(inventory.held, (std::vector<uint64_t>{committed.extent, stored.extent,
                                                   never.extent, pending.extent}));
  EXPECT_EQ(inventory.unresolved, (std::vector<uint64_t>{stored.extent, never.extent}));
  EXPECT_EQ(inventory.next_extent, pending.extent + 1);
  // Stored in step 0: committed and kept; in no live step: retired, freed
  // once its grace (none here) has passed.
  store.Resolve(stored.extent, 0);
  store.Resolve(never.extent, std::nullopt);
  store.Resolve(pending.extent, std::nullopt);  // not unresolved: left alone
  EXPECT_FALSE(store.HasUnresolved());
  EXPECT_EQ(store.GetStats().committed_puts, 2);
  EXPECT_EQ(store.GetStats().staged_puts, 1) << "the Put whose commit is in flight";
  EXPECT_OK(store.Read("d", stored.locations[0]).status());
  EXPECT_STATUS(store.Read("d", never.locations[0]).status(), absl::StatusCode::kNotFound,
                "read grace has passed");
  store.Sweep();
  EXPECT_EQ(store.GetInventory().held,
            (std::vector<uint64_t>{committed.extent, stored.extent, pending.extent}));
}

TEST(ShardStore, ReadsRefuseLocationsNotHeldHereNamingThem) {
  ShardStore store(7, 4096, 0);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged,
                       store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(staged.extent, 0));
  CellLocation other_shard = staged.locations[0][0];
  other_shard.shard = 8;
  EXPECT_STATUS(store.Read("d", {other_shard}), absl::StatusCode::kNotFound,
                absl::StrCat("shard 8 extent ", staged.extent,
                             " offset 0 (8 bytes): this is shard 7"));
  CellLocation unknown = staged.locations[0][0];
  unknown.extent = 99;
  EXPECT_STATUS(store.Read("d", {unknown}), absl::StatusCode::kNotFound,
                "shard 7 holds no such extent of dock 'd'");
  EXPECT_STATUS(store.Read("e", {staged.locations[0][0]}), absl::StatusCode::kNotFound,
                "no such extent of dock 'e'");
  CellLocation inside = staged.locations[0][0];
  inside.offset = 4;
  inside.bytes = 4;
  EXPECT_STATUS(store.Read("d", {inside}), absl::StatusCode::kNotFound,
                "no cell starts there with that length");
  CellLocation longer = staged.locations[0][0];
  longer.bytes = 12;
  EXPECT_STATUS(store.Read("d", {longer}), absl::StatusCode::kNotFound,
                "no cell starts there with that length");
}

TEST(ShardStore, AbortedAndReleasedPutsAreGone) {
  ShardStore store(7, 4096, 0);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged aborted,
                       store.Stage("d", 0, put.views, put.item_bytes));
  store.Abort(aborted.extent);
  EXPECT_STATUS(store.Read("d", aborted.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
  EXPECT_STATUS(store.Commit(aborted.extent, 0), absl::StatusCode::kNotFound,
                absl::StrCat("shard 7 holds no staged Put ", aborted.extent));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged kept, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(kept.extent, 0));
  ASSERT_OK_AND_ASSIGN(ShardStore::Cells held, store.Read("d", kept.locations[0]));

  store.Release("d", 0);
  EXPECT_STATUS(store.Read("d", kept.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
  EXPECT_STATUS(store.Stage("d", 0, put.views, put.item_bytes),
                absl::StatusCode::kFailedPrecondition,
                "dock 'd' step 0 was released: shard 7 takes no Put of it");
  EXPECT_EQ(store.GetStats().cell_bytes, 0);
  // The reader's pin keeps the released cells' bytes.
  EXPECT_EQ(AsFloats(held.cells[2]), (std::vector<float>{2, 3, 4}));
  // Another step and another dock are untouched by the release.
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged next, store.Stage("d", 1, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(next.extent, 1));
  EXPECT_EQ(store.HeldSteps(), (std::map<std::string, std::vector<int64_t>>{{"d", {1}}}));
  store.ForgetDock("d");
  EXPECT_TRUE(store.HeldSteps().empty());
  EXPECT_STATUS(store.Read("d", next.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
}

// The controller's step feed: a window releases the held steps below it
// (below the front, and a partition's steps below the one it admits, out of
// order too), and says which Puts would wait; a forgotten window says
// nothing, so Puts go to the controller.
TEST(ShardStore, AWindowReleasesTheStepsBelowItAndSaysWhichPutsWait) {
  ShardStore store(7, 4096, 0);
  Put put;
  for (int64_t step : {0, 1, 2}) {
    ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged,
                         store.Stage("d", step, put.views, put.item_bytes));
    ASSERT_OK(store.Commit(staged.extent, step));
  }
  EXPECT_FALSE(store.Waits("d", 9));  // no window yet
  // Two partitions: 0 holds step 0; 1 released step 1 and admits 3.
  store.SetWindow("d", 0, {0, 3});
  EXPECT_EQ(store.HeldSteps(), (std::map<std::string, std::vector<int64_t>>{{"d", {0, 2}}}));
  EXPECT_FALSE(store.Waits("d", 0));
  EXPECT_FALSE(store.Waits("d", 3));
  EXPECT_TRUE(store.Waits("d", 2));  // after step 0, in its partition
  EXPECT_TRUE(store.Waits("d", 5));
  EXPECT_FALSE(store.Waits("other", 5));
  store.SetWindow("d", 2, {2, 3});
  EXPECT_EQ(store.HeldSteps(), (std::map<std::string, std::vector<int64_t>>{{"d", {2}}}));
  EXPECT_FALSE(store.Waits("d", 2));
  EXPECT_STATUS(store.Stage("d", 1, put.views, put.item_bytes),
                absl::StatusCode::kFailedPrecondition, "dock 'd' step 1 was released");
  store.ForgetWindows();
  EXPECT_FALSE(store.Waits("d", 5));
}

// The controller releases a step when it hands out its last rows; a
// consumer without a lease reads their cells after that. A released step's
// cells stay readable for the grace (later Puts of it are refused at once),
// then are freed; a deleted dock's cells alike.
TEST(ShardStore, ReleasedCellsStayReadableForTheGrace) {
  auto clock = std::make_shared<ManualClock>();
  ShardStore store(7, 4096, 0, absl::Seconds(10), clock);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged released, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(released.extent, 0));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged deleted, store.Stage("e", 0, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(deleted.extent, 0));
  const int64_t bytes = store.GetStats().cell_bytes / 2;

  store.Release("d", 0);
  store.ForgetDock("e");
  EXPECT_STATUS(store.Stage("d", 0, put.views, put.item_bytes),
                absl::StatusCode::kFailedPrecondition, "dock 'd' step 0 was released");
  EXPECT_TRUE(store.HeldSteps().empty());
  EXPECT_EQ(store.GetStats().cell_bytes, 0);
  EXPECT_EQ(store.GetStats().retired_bytes, 2 * bytes);
  clock->Advance(absl::Seconds(10) - absl::Milliseconds(1));
  store.Sweep();
  ASSERT_OK_AND_ASSIGN(ShardStore::Cells cells, store.Read("d", released.locations[0]));
  EXPECT_EQ(AsFloats(cells.cells[2]), (std::vector<float>{2, 3, 4}));
  ASSERT_OK(store.Read("e", deleted.locations[1]).status());

  clock->Advance(absl::Milliseconds(1));
  store.Sweep();
  EXPECT_STATUS(store.Read("d", released.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
  EXPECT_STATUS(store.Read("e", deleted.locations[1]), absl::StatusCode::kNotFound,
                "holds no such extent");
  EXPECT_EQ(store.GetStats().retired_bytes, 0);
}

// A Put staged before its step was released and committed after (the
// controller stored it, the release came meanwhile) is kept readable for
// the grace, as the step's other cells are; so is a reservation's Put
// committed into a step released here before.
TEST(ShardStore, APutCommittedAfterItsStepsReleaseRetires) {
  auto clock = std::make_shared<ManualClock>();
  ShardStore store(7, 4096, 0, absl::Seconds(10), clock);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged, store.Stage("d", 0, put.views, put.item_bytes));
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged reserved,
                       store.Stage("d", std::nullopt, put.views, put.item_bytes));
  store.Release("d", 0);
  store.Release("d", 3);
  ASSERT_OK(store.Commit(staged.extent, 0));
  ASSERT_OK(store.Commit(reserved.extent, 3));
  EXPECT_TRUE(store.HeldSteps().empty());
  ASSERT_OK(store.Read("d", staged.locations[0]).status());
  ASSERT_OK(store.Read("d", reserved.locations[0]).status());
  clock->Advance(absl::Seconds(10));
  // Past the grace a read is refused even before the sweep frees them.
  EXPECT_STATUS(store.Read("d", staged.locations[0]), absl::StatusCode::kNotFound,
                "its step was released and its read grace has passed");
  store.Sweep();
  EXPECT_STATUS(store.Read("d", reserved.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
}

// Retired cells give way to a Put that needs their memory.
TEST(ShardStore, APutThatNeedsTheMemoryEndsTheGrace) {
  auto clock = std::make_shared<ManualClock>();
  ShardStore store(7, 4096, 8192, absl::Hours(1), clock);
  std::vector<int64_t> lengths(3, 512);  // 6 KiB: two of the two 4 KiB chunks
  const OwnedColumn big = Floats("a", lengths, 0);
  const std::vector<PackedColumn> views = {big.View()};
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged first, store.Stage("d", 0, views, {int64_t{4}}));
  ASSERT_OK(store.Commit(first.extent, 0));
  EXPECT_STATUS(store.Stage("d", 1, views, {int64_t{4}}), absl::StatusCode::kResourceExhausted,
                "under its memory limit of 8192 bytes");
  store.Release("d", 0);
  ASSERT_OK(store.Read("d", first.locations[0]).status());
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged second, store.Stage("d", 1, views, {int64_t{4}}));
  EXPECT_STATUS(store.Read("d", first.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
  ASSERT_OK(store.Read("d", second.locations[0]).status());
}

// A Put whose step is not known yet (it names a reservation) is staged on
// its own and freed with the step the controller stored it in.
TEST(ShardStore, APutOfAnUnknownStepTakesTheStepItIsCommittedIn) {
  ShardStore store(7, 4096, 0);
  Put put;
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged,
                       store.Stage("d", std::nullopt, put.views, put.item_bytes));
  ASSERT_OK(store.Commit(staged.extent, 3));
  EXPECT_EQ(store.HeldSteps(), (std::map<std::string, std::vector<int64_t>>{{"d", {3}}}));
  ASSERT_OK(store.Read("d", staged.locations[1]).status());
  store.Release("d", 3);
  EXPECT_STATUS(store.Read("d", staged.locations[1]), absl::StatusCode::kNotFound,
                "holds no such extent");
}

// A shard that restarts (a new store, the same id) does not take a location
// from before for one of its own: it is refused, not read as another Put's.
TEST(ShardStore, ALocationFromBeforeARestartIsRefused) {
  Put put;
  ShardStore before(7, 4096, 0);
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged old, before.Stage("d", 0, put.views, put.item_bytes));
  ShardStore after(7, 4096, 0);
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged fresh, after.Stage("d", 0, put.views, put.item_bytes));
  EXPECT_NE(old.extent, fresh.extent);
  EXPECT_STATUS(after.Read("d", {old.locations[0][0]}), absl::StatusCode::kNotFound,
                "holds no such extent");
}

TEST(ShardStore, TheMemoryLimitRefusesAPutWhole) {
  ShardStore store(7, 4096, 4096);
  std::vector<int64_t> lengths(3, 512);  // 3 rows of 2 KiB: over one 4 KiB chunk
  const OwnedColumn big = Floats("a", lengths, 0);
  const std::vector<PackedColumn> views = {big.View()};
  EXPECT_STATUS(store.Stage("d", 0, views, {int64_t{4}}), absl::StatusCode::kResourceExhausted,
                "shard 7 has no room for 1 columns of dock 'd' step 0 under its memory limit "
                "of 4096 bytes");
  EXPECT_EQ(store.GetStats().staged_puts, 0);
  EXPECT_EQ(store.GetStats().cell_bytes, 0);
  // Bytes that are not whole items are refused before anything is stored.
  OwnedColumn ragged = Floats("a", {1}, 0);
  ragged.bytes.push_back('x');
  const std::vector<PackedColumn> ragged_views = {ragged.View()};
  EXPECT_STATUS(store.Stage("d", 0, ragged_views, {int64_t{4}}),
                absl::StatusCode::kInvalidArgument, "column 'a'");
}

// The dock's oldest live step (the front step the controller says) goes in
// past the memory limit, so the step that must end first always can; a
// later step's Put is refused, and so is the front's once it moved on.
TEST(ShardStore, ThePutOfTheOldestLiveStepGoesInPastTheLimit) {
  ShardStore store(7, 4096, 4096);
  std::vector<int64_t> lengths(3, 512);  // 3 rows of 2 KiB: over one 4 KiB chunk
  const OwnedColumn big = Floats("a", lengths, 0);
  const std::vector<PackedColumn> views = {big.View()};
  store.SetFrontStep("d", 2);
  EXPECT_STATUS(store.Stage("d", 3, views, {int64_t{4}}).status(),
                absl::StatusCode::kResourceExhausted, "step 3 under its memory limit");
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged, store.Stage("d", 2, views, {int64_t{4}}));
  EXPECT_GT(store.GetStats().reserved_bytes, store.GetStats().limit_bytes);
  store.SetFrontStep("d", 1);  // an older answer: the front never goes back
  store.SetFrontStep("d", 3);
  EXPECT_OK(store.Stage("d", 3, views, {int64_t{4}}).status());
  // Another dock's front is not known here.
  EXPECT_STATUS(store.Stage("e", 0, views, {int64_t{4}}).status(),
                absl::StatusCode::kResourceExhausted, "dock 'e' step 0");
}

// The oldest live step's Put takes the memory of retired cells (their grace
// ends early) before it goes past the limit: a producer of the front step
// does not grow the shard by a read grace's worth of released steps.
TEST(ShardStore, TheOldestStepsPutTakesRetiredMemoryBeforeGoingPastTheLimit) {
  ShardStore store(7, 4096, 4096, absl::Hours(1));
  std::vector<int64_t> lengths(3, 256);  // 3 KiB: most of the one chunk allowed
  const OwnedColumn big = Floats("a", lengths, 0);
  const std::vector<PackedColumn> views = {big.View()};
  store.SetFrontStep("d", 0);
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged first, store.Stage("d", 0, views, {int64_t{4}}));
  ASSERT_OK(store.Commit(first.extent, 0));
  store.Release("d", 0);  // readable for an hour, unless a Put needs the memory
  store.SetFrontStep("d", 1);
  ASSERT_OK(store.Stage("d", 1, views, {int64_t{4}}).status());
  EXPECT_LE(store.GetStats().reserved_bytes, store.GetStats().limit_bytes);
  EXPECT_STATUS(store.Read("d", first.locations[0]), absl::StatusCode::kNotFound,
                "holds no such extent");
  // With nothing retired to take, it goes past the limit.
  ASSERT_OK(store.Stage("d", 1, views, {int64_t{4}}).status());
  EXPECT_GT(store.GetStats().reserved_bytes, store.GetStats().limit_bytes);
}

}  // namespace
}  // namespace tdock::shard
