// A store that fails (the fake store): the requests whose records failed
// fail with UNAVAILABLE and the store's message, and undo themselves — a
// Put's cells never become ready (and can be written again), a Get's rows go
// back to be handed out again — while reads keep being served.
#include <future>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

DockSpec Spec() {
  DockSpec spec;
  spec.name = "fragile";
  spec.num_prompts = 4;
  spec.length_columns = {"ids"};
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"reader", {"ids"}, 2, 1, false, Policy::kFifo, 0},
                    {"bal", {"ids"}, 1, 2, false, Policy::kBalanced, 0}};
  return spec;
}

OwnedColumn Ids(int rows, int32_t value) {
  return OwnedColumn::Of<int32_t>("ids", DType::kInt32,
                                  std::vector<std::vector<int32_t>>(rows, {value, value}));
}

class PersistenceFailureTest : public ::testing::Test {
 protected:
  void Open(Durability durability) {
    auto fake = std::make_unique<FakeStore>();
    store_ = fake.get();
    persistence_ = std::make_unique<Persistence>(
        std::move(fake), PersistenceOptions{.data_dir = "fake", .durability = durability});
    ASSERT_OK(persistence_->Recover(registry_).status());
    ASSERT_OK_AND_ASSIGN(dock_, registry_.Create(Spec()));
  }
  void TearDown() override { registry_.Shutdown(); }

  int64_t Ready() { return dock_->Stats().steps.empty() ? 0 : dock_->Stats().steps[0].ready_rows[0]; }

  FakeStore* store_ = nullptr;
  std::unique_ptr<Persistence> persistence_;
  DockRegistry registry_;
  std::shared_ptr<Dock> dock_;
};

// A Put whose cells cannot be stored fails, its cells never become ready,
// and the same Put succeeds once the store works again; reads go on.
TEST_F(PersistenceFailureTest, FailedPutLeavesNothingReady) {
  Open(Durability::kSync);
  ASSERT_OK(PutSync(*dock_, 0, {0, 1}, {Ids(2, 7)}));
  store_->FailNext(1, absl::UnavailableError("IO error: No space left on device"));
  EXPECT_STATUS(PutSync(*dock_, 0, {2, 3}, {Ids(2, 8)}), absl::StatusCode::kUnavailable,
                "not stored (journal: IO error: No space left on device)");
  EXPECT_EQ(Ready(), 2);
  EXPECT_STATUS(dock_->Read(0, {2}, {"ids"}), absl::StatusCode::kFailedPrecondition,
                "is not written");
  ASSERT_OK_AND_ASSIGN(Batch read, dock_->Read(0, {0, 1}, {"ids"}));
  EXPECT_EQ(read.rows.size(), 2u);
  ASSERT_OK(PutSync(*dock_, 0, {2, 3}, {Ids(2, 8)}));
  EXPECT_EQ(Ready(), 4);
}

// A Get whose hand-out cannot be recorded fails, and its rows are handed
// out again by the next Get.
TEST_F(PersistenceFailureTest, FailedHandOutReturnsTheRows) {
  Open(Durability::kSync);
  ASSERT_OK(PutSync(*dock_, 0, {0, 1, 2, 3}, {Ids(4, 1)}));
  store_->FailNext(1, absl::UnavailableError("disk full"));
  EXPECT_STATUS(GetSync(*dock_, GetOf("reader")), absl::StatusCode::kUnavailable, "disk full");
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock_, GetOf("reader")));
  EXPECT_EQ(again.rows, (std::vector<int64_t>{0, 1}));
  // BALANCED: the rank's share of the round comes back to the same rank.
  store_->FailNext(1, absl::UnavailableError("disk full"));
  GetInput rank0 = GetOf("bal");
  EXPECT_STATUS(GetSync(*dock_, rank0), absl::StatusCode::kUnavailable, "disk full");
  ASSERT_OK_AND_ASSIGN(Batch share, GetSync(*dock_, rank0));
  EXPECT_EQ(share.round, 0);
  EXPECT_EQ(share.rows.size(), 1u);
}

// Async: Puts are acknowledged at once; after a failed background write the
// journal refuses later Puts with its error.
TEST_F(PersistenceFailureTest, AsyncFailureRefusesLaterWrites) {
  Open(Durability::kAsync);
  // The dock's spec, acknowledged at once, is written before the failure.
  ASSERT_OK(persistence_->journal().Flush());
  store_->FailNext(1, absl::UnavailableError("disk full"));
  ASSERT_OK(PutSync(*dock_, 0, {0}, {Ids(1, 1)}));
  EXPECT_STATUS(persistence_->journal().Flush(), absl::StatusCode::kUnavailable, "disk full");
  EXPECT_STATUS(PutSync(*dock_, 0, {1}, {Ids(1, 1)}), absl::StatusCode::kUnavailable,
                "disk full");
}

// Recovery of a store that holds a valid dock "fragile" plus `bad`.
absl::Status RecoverWithBadRecord(StoreBatch bad) {
  auto store = NewMemoryStore();
  Store* raw = store.get();
  Persistence persistence(std::move(store), {.data_dir = "mem"});
  DockRegistry registry;
  if (absl::Status s = persistence.Recover(registry).status(); !s.ok()) return s;
  if (absl::Status s = registry.Create(Spec()).status(); !s.ok()) return s;
  if (absl::Status s = raw->Write(bad, true); !s.ok()) return s;
  registry.Shutdown();
  // A server starting on this store.
  DockRegistry again;
  absl::Status recovered = persistence.Recover(again).status();
  again.Shutdown();
  return recovered;
}

// A stored record that does not decode (a cell of a column the dock lacks,
// a release of a negative step), or a spec that no longer validates, fails
// recovery with a message naming the dock; nothing is served from a partial
// load.
TEST(PersistenceRecovery, CorruptionFailsNamingTheDock) {
  {
    auto store = NewMemoryStore();
    StoreBatch batch;
    batch.Put("Sbroken", "not a DockSpec \xff\xff");
    ASSERT_OK(store->Write(batch, true));
    Persistence persistence(std::move(store), {.data_dir = "mem"});
    DockRegistry registry;
    EXPECT_STATUS(persistence.Recover(registry), absl::StatusCode::kDataLoss,
                  "recovering dock 'broken'");
    EXPECT_TRUE(registry.List().empty());
  }
  StoreBatch cell;  // a cell key naming column 7, which the dock lacks
  cell.Put(std::string("Dfragile\0", 9) + std::string(8, '\0') + "c" +
               std::string("\0\0\0\x07", 4) + std::string(8, '\0'),
           "abcd");
  EXPECT_STATUS(RecoverWithBadRecord(std::move(cell)), absl::StatusCode::kDataLoss,
                "recovering dock 'fragile' from 'mem': a cell of step 0 does not decode");
  StoreBatch release;  // a release of step -1
  release.Put(std::string("Tfragile\0", 9) + std::string(8, '\xff'), "");
  EXPECT_STATUS(RecoverWithBadRecord(std::move(release)), absl::StatusCode::kDataLoss,
                "recovering dock 'fragile' from 'mem': dock 'fragile' step -1: a release "
                "record names a negative step");
}

}  // namespace
}  // namespace tdock::persist
