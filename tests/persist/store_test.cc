// The shared store suite: the same behaviour from the RocksDB, in-memory and
// fake stores (atomic batches, ordered prefix scans, range deletes), plus
// what only RocksDB does (reopen, checkpoint) and only the fake does
// (injected failures that change nothing).
#include "server/persist/store.h"

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/persist/persist_test_util.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

std::map<std::string, std::string> Contents(const Store& store, absl::string_view prefix = "") {
  std::map<std::string, std::string> out;
  EXPECT_OK(store.Scan(prefix, [&](absl::string_view k, absl::string_view v) {
    out.emplace(k, v);
    return absl::OkStatus();
  }));
  return out;
}

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& dir)> open;
};

class StoreSuite : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    dir_ = TempDir("store");
    store_ = GetParam().open(dir_ + "/db");
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    RemoveDir(dir_);
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
};

// Puts, overwrites and deletes in one batch apply in order; values may hold
// any bytes, including NUL; a value from pieces is their concatenation.
TEST_P(StoreSuite, BatchAppliesInOrder) {
  StoreBatch batch;
  batch.Put("a", "1");
  batch.Put("b", std::string("x\0y", 3));
  batch.Put("a", "2");
  batch.PutPieces("c", {"he", "", "llo"});
  batch.Delete("b");
  ASSERT_OK(store_->Write(batch, /*sync=*/true));
  EXPECT_EQ(Contents(*store_), (std::map<std::string, std::string>{{"a", "2"}, {"c", "hello"}}));
  StoreBatch second;
  second.Put("b", std::string("\0\xff", 2));
  ASSERT_OK(store_->Write(second, /*sync=*/false));
  ASSERT_OK(store_->Sync());
  EXPECT_EQ(Contents(*store_).at("b"), std::string("\0\xff", 2));
}

// A prefix scan returns exactly the keys with the prefix, in bytewise order
// (so "d/1/" sorts before "d/10/"), and stops at the first error of `fn`.
TEST_P(StoreSuite, PrefixScanInKeyOrder) {
  StoreBatch batch;
  for (const char* key : {"d/10/x", "d/1/y", "d/1/a", "d/2", "e/1", "c/9", "d"}) {
    batch.Put(key, key);
  }
  ASSERT_OK(store_->Write(batch, true));
  std::vector<std::string> keys;
  for (const auto& [k, v] : Contents(*store_, "d/")) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"d/1/a", "d/1/y", "d/10/x", "d/2"}));
  int seen = 0;
  EXPECT_STATUS(store_->Scan("d/", [&](absl::string_view, absl::string_view) {
    return ++seen == 2 ? absl::CancelledError("enough") : absl::OkStatus();
  }), absl::StatusCode::kCancelled, "enough");
  EXPECT_EQ(seen, 2);
}

// DeleteRange removes [begin, end) only; an empty or inverted range removes
// nothing.
TEST_P(StoreSuite, DeleteRange) {
  StoreBatch batch;
  for (const char* key : {"s/1/a", "s/1/b", "s/2/a", "s/3"}) batch.Put(key, "v");
  ASSERT_OK(store_->Write(batch, true));
  StoreBatch del;
  del.DeleteRange("s/1/", "s/2/");
  del.DeleteRange("s/9", "s/3");
  ASSERT_OK(store_->Write(del, true));
  std::vector<std::string> keys;
  for (const auto& [k, v] : Contents(*store_)) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"s/2/a", "s/3"}));
}

// Large values (cells: RocksDB keeps them in its value log) and small ones
// behave alike: borrowed bytes are copied at the write, a large value
// overwritten by a small one and back reads as the last, deletes and range
// deletes remove them, and a large value under the same key in a later
// batch replaces the earlier.
TEST_P(StoreSuite, LargeValuesBehaveAsSmallOnes) {
  auto big = [](char c, size_t n) { return std::string(n, c); };
  auto pinned = std::make_shared<std::string>(big('p', 70000));
  StoreBatch batch;
  batch.PutBorrowed("cell/1", *pinned, pinned);
  batch.Put("cell/2", big('a', 4096));
  batch.Put("cell/3", big('b', 1023));  // just under RocksDB's value-log size
  batch.Put("cell/4", big('c', 1024));
  batch.Put("cell/2", "small");
  batch.Put("cell/2", big('d', 5000));
  batch.PutPieces("cell/5", {big('e', 600), big('f', 600)});
  ASSERT_OK(store_->Write(batch, true));
  *pinned = "changed after the write";
  StoreBatch later;
  later.Put("cell/4", big('g', 2000));
  later.Delete("cell/3");
  later.DeleteRange("cell/5", "cell/6");
  ASSERT_OK(store_->Write(later, false));
  ASSERT_OK(store_->Sync());
  EXPECT_EQ(Contents(*store_),
            (std::map<std::string, std::string>{{"cell/1", big('p', 70000)},
                                                {"cell/2", big('d', 5000)},
                                                {"cell/4", big('g', 2000)}}));
}

INSTANTIATE_TEST_SUITE_P(
    Stores, StoreSuite,
    ::testing::Values(
        StoreKind{"rocksdb",
                  [](const std::string& dir) { return OpenRocksStore(dir).value(); }},
        StoreKind{"memory", [](const std::string&) { return NewMemoryStore(); }},
        StoreKind{"fake",
                  [](const std::string&) -> std::unique_ptr<Store> {
                    return std::make_unique<FakeStore>();
                  }}),
    [](const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; });

// RocksDB: what was written with sync survives closing and reopening, and a
// checkpoint of a live store opens as an equal store.
TEST(RocksStore, ReopenAndCheckpoint) {
  const std::string dir = TempDir("rocks");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenRocksStore(dir + "/db"));
    StoreBatch batch;
    batch.Put("k1", "v1");
    batch.Put("k2", std::string(100000, 'z'));
    ASSERT_OK(store->Write(batch, true));
    ASSERT_OK(store->Checkpoint(dir + "/copy"));
    EXPECT_STATUS(store->Checkpoint(dir + "/copy"), absl::StatusCode::kInvalidArgument,
                  "checkpoint");
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> reopened, OpenRocksStore(dir + "/db"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> copy, OpenRocksStore(dir + "/copy"));
  EXPECT_EQ(Contents(*reopened), Contents(*copy));
  EXPECT_EQ(Contents(*copy).at("k2").size(), 100000u);
  RemoveDir(dir);
}

// RocksDB: a directory that cannot hold a store is an error naming it.
TEST(RocksStore, UnusableDirectoryIsNamed) {
  EXPECT_STATUS(OpenRocksStore("/proc/tdock-cannot-be-here"),
                absl::StatusCode::kUnavailable, "/proc/tdock-cannot-be-here");
}

// The fake: injected failures return the given status and change nothing;
// then writes succeed again.
TEST(FakeStore, InjectedFailuresChangeNothing) {
  FakeStore store;
  store.FailNext(2, absl::UnavailableError("disk full"));
  StoreBatch batch;
  batch.Put("a", "1");
  EXPECT_STATUS(store.Write(batch, true), absl::StatusCode::kUnavailable, "disk full");
  EXPECT_STATUS(store.Sync(), absl::StatusCode::kUnavailable, "disk full");
  EXPECT_TRUE(Contents(store).empty());
  EXPECT_OK(store.Write(batch, true));
  EXPECT_EQ(Contents(store).size(), 1u);
  EXPECT_EQ(store.writes(), 1);
  EXPECT_EQ(store.synced_writes(), 1);
}

}  // namespace
}  // namespace tdock::persist
