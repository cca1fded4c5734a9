// The value log under the RocksDB store (server/persist/rocks_store.cc):
// the files stay bounded under a pipeline of writes and releases, under
// overwrites, with a slow dock beside a fast one and with docks deleted; a
// reopened store knows which segments are free; a checkpoint keeps its
// values after the live store writes over its segments; a lost segment, a
// pointer that does not decode and a store from before the value log are
// refused by name.
#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "server/persist/store.h"
#include "tests/persist/persist_test_util.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

constexpr int64_t kSegment = int64_t{1} << 20;

class RocksValueLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir("rocksvlog"); }
  void TearDown() override {
    store_.reset();
    RemoveDir(dir_);
  }
  void Open(const std::string& dir) {
    store_.reset();
    absl::StatusOr<std::unique_ptr<Store>> store =
        OpenRocksStore(dir, {.segment_bytes = kSegment, .spare_segments = 2});
    ASSERT_OK(store.status());
    store_ = *std::move(store);
  }
  std::map<std::string, std::string> Contents() {
    std::map<std::string, std::string> out;
    EXPECT_OK(store_->Scan("", [&](absl::string_view k, absl::string_view v) {
      out.emplace(k, v);
      return absl::OkStatus();
    }));
    return out;
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
};

// A pipeline: 60 steps of 8 cells of 64 KiB (30 MiB in all), each step
// range-deleted 4 steps later. The value log never holds more than what is
// live plus the segment being written and the spares.
TEST_F(RocksValueLogTest, PipelineOfReleasesKeepsTheFilesBounded) {
  Open(dir_ + "/db");
  size_t most_files = 0;
  for (int step = 0; step < 60; ++step) {
    StoreBatch batch;
    for (int cell = 0; cell < 8; ++cell) {
      batch.Put(absl::StrCat("D", step / 10, step % 10, "c", cell), Value(64 << 10, step + cell));
    }
    if (step >= 4) {
      const int old = step - 4;
      batch.DeleteRange(absl::StrCat("D", old / 10, old % 10),
                        absl::StrCat("D", old / 10, old % 10, "\xff"));
    }
    ASSERT_OK(store_->Write(batch, /*sync=*/true));
    most_files = std::max(most_files, SegmentFiles(dir_ + "/db/values").size());
  }
  // Live: 4 steps x 512 KiB = 2 MiB, up to 3 segments; 1 active; 2 spares.
  EXPECT_LE(most_files, 6u);
  const std::map<std::string, std::string> contents = Contents();
  ASSERT_EQ(contents.size(), 32u);
  EXPECT_EQ(contents.at("D59c7"), Value(64 << 10, 59 + 7));
  // Reopened, the same values come back and the free files are spare again.
  Open(dir_ + "/db");
  EXPECT_EQ(Contents(), contents);
}

// Two docks on one store: a slow one adds a cell now and then and releases
// nothing, a fast one writes steps of 512 KiB and releases each two steps
// later (30 MiB in all). The slow dock's cells keep segments of their own,
// so the fast dock's files are reused instead of each being pinned by one
// slow cell.
TEST_F(RocksValueLogTest, SlowDockDoesNotPinAFastDocksSegments) {
  Open(dir_ + "/db");
  const std::string slow("Dslow\0", 6), fast("Dfast\0", 6);  // keys' dock parts
  auto keep = std::make_shared<std::deque<std::string>>();  // the borrowed bytes
  auto borrow = [&](StoreBatch& batch, const std::string& key, std::string value) {
    keep->push_back(std::move(value));
    batch.PutBorrowed(key, keep->back(), keep, 6);
  };
  for (int step = 0; step < 60; ++step) {
    StoreBatch batch;
    borrow(batch, absl::StrCat(slow, step), Value(4096, step));
    const std::string fast_step = absl::StrCat(fast, step / 10, step % 10);
    for (int cell = 0; cell < 8; ++cell) {
      borrow(batch, absl::StrCat(fast_step, "c", cell), Value(64 << 10, step + cell));
    }
    if (step >= 2) {
      const int old = step - 2;
      const std::string old_step = absl::StrCat(fast, old / 10, old % 10);
      batch.DeleteRange(old_step, old_step + "\xff");
    }
    ASSERT_OK(store_->Write(batch, /*sync=*/true));
  }
  // slow: 1 file; fast: 1.5 MiB live in up to 3, 2 spares.
  EXPECT_LE(SegmentFiles(dir_ + "/db/values").size(), 6u);
  const std::map<std::string, std::string> contents = Contents();
  EXPECT_TRUE(contents.at(absl::StrCat(slow, 0)) == Value(4096, 0));
  EXPECT_TRUE(contents.at(absl::StrCat(fast, 5, 9, "c", 7)) == Value(64 << 10, 59 + 7));
}

// Restarts go on in the dock's segment: 20 openings of the store, each
// adding one live 1.2 KB cell of one dock, leave one segment file (not one
// per start), and every cell reads back whole.
TEST_F(RocksValueLogTest, RestartsAppendAfterTheDocksLastValue) {
  const std::string dock("Dd\0", 3);
  auto keep = std::make_shared<std::deque<std::string>>();
  for (int start = 0; start < 20; ++start) {
    Open(dir_ + "/db");
    keep->push_back(Value(1200, start));
    StoreBatch batch;
    batch.PutBorrowed(absl::StrCat(dock, start / 10, start % 10), keep->back(), keep, 3);
    ASSERT_OK(store_->Write(batch, /*sync=*/true));
  }
  EXPECT_EQ(SegmentFiles(dir_ + "/db/values").size(), 1u);
  Open(dir_ + "/db");
  const std::map<std::string, std::string> contents = Contents();
  ASSERT_EQ(contents.size(), 20u);
  for (int start = 0; start < 20; ++start) {
    EXPECT_TRUE(contents.at(absl::StrCat(dock, start / 10, start % 10)) == Value(1200, start))
        << start;
  }
}

// Overwriting a key (a rewritable column) or replacing a large value with a
// small one frees the old value: 200 overwrites of 256 KiB (50 MiB) leave a
// handful of 1 MiB files.
TEST_F(RocksValueLogTest, OverwritesFreeTheOldValue) {
  Open(dir_ + "/db");
  for (int i = 0; i < 200; ++i) {
    StoreBatch batch;
    batch.Put("cell", Value(256 << 10, i));
    ASSERT_OK(store_->Write(batch, /*sync=*/i % 2 == 0));
    if (i % 2 == 1) ASSERT_OK(store_->Sync());
  }
  EXPECT_LE(SegmentFiles(dir_ + "/db/values").size(), 4u);
  EXPECT_EQ(Contents().at("cell"), Value(256 << 10, 199));
  StoreBatch small;
  small.Put("cell", "tiny");
  ASSERT_OK(store_->Write(small, true));
  EXPECT_EQ(Contents().at("cell"), "tiny");
  Open(dir_ + "/db");
  EXPECT_EQ(Contents().at("cell"), "tiny");
}

// A checkpoint copies the segments it points into: the copy keeps its values
// after the live store released them and wrote over their files.
TEST_F(RocksValueLogTest, CheckpointKeepsItsValuesWhenTheStoreMovesOn) {
  Open(dir_ + "/db");
  StoreBatch first;
  first.Put("a", Value(512 << 10, 1));
  first.Put("b", "small");
  ASSERT_OK(store_->Write(first, true));
  ASSERT_OK(store_->Checkpoint(dir_ + "/copy"));
  for (int i = 0; i < 20; ++i) {
    StoreBatch batch;
    batch.Put("a", Value(512 << 10, 100 + i));
    ASSERT_OK(store_->Write(batch, true));
  }
  Open(dir_ + "/copy");
  const std::map<std::string, std::string> copy = Contents();
  EXPECT_EQ(copy.at("a"), Value(512 << 10, 1));
  EXPECT_EQ(copy.at("b"), "small");
}

// Twenty docks, one after another, each writing 512 KiB of cells and then
// deleted (one range delete of its keys): a deleted dock gives its segment
// up, so the files do not pile up one per dock.
TEST_F(RocksValueLogTest, DeletedDocksGiveTheirSegmentsUp) {
  Open(dir_ + "/db");
  auto keep = std::make_shared<std::deque<std::string>>();
  for (int dock = 0; dock < 20; ++dock) {
    const std::string prefix = absl::StrCat("Dd", dock, std::string(1, '\0'));
    StoreBatch batch;
    for (int cell = 0; cell < 8; ++cell) {
      keep->push_back(Value(64 << 10, dock + cell));
      batch.PutBorrowed(absl::StrCat(prefix, "c", cell), keep->back(), keep, prefix.size());
    }
    ASSERT_OK(store_->Write(batch, true));
    std::string end = prefix;
    end.back() = '\1';
    StoreBatch deleted;
    deleted.DeleteRange(prefix, end);
    ASSERT_OK(store_->Write(deleted, true));
  }
  EXPECT_LE(SegmentFiles(dir_ + "/db/values").size(), 3u);
  EXPECT_TRUE(Contents().empty());
}

// A pointer that does not decode (here one of 24 bytes, as an earlier
// format wrote) fails the store's opening: not knowing where it points, no
// segment could be reused safely.
TEST_F(RocksValueLogTest, UndecodablePointerFailsOpening) {
  Open(dir_ + "/db");
  store_.reset();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_ + "/db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "k", std::string(1, '\1') + std::string(24, 'p')).ok());
  }
  EXPECT_STATUS(OpenRocksStore(dir_ + "/db"), absl::StatusCode::kDataLoss,
                "a pointer into the value log does not decode (24 bytes)");
}

// A store written before the value log (RocksDB alone, untagged values) is
// refused with a message saying so, not misread.
TEST_F(RocksValueLogTest, StoreWithoutValueLogIsRefused) {
  Open(dir_ + "/db");
  StoreBatch batch;
  batch.Put("k", "v");
  ASSERT_OK(store_->Write(batch, true));
  store_.reset();
  RemoveDir(dir_ + "/db/values");
  EXPECT_STATUS(OpenRocksStore(dir_ + "/db"), absl::StatusCode::kFailedPrecondition,
                "was written by an earlier tdock");
}

// A store whose value log lost a file fails its scan with DATA_LOSS naming
// the store and the file.
TEST_F(RocksValueLogTest, LostSegmentIsDataLoss) {
  Open(dir_ + "/db");
  StoreBatch batch;
  batch.Put("a", Value(4096, 1));
  ASSERT_OK(store_->Write(batch, true));
  store_.reset();
  for (const std::string& file : SegmentFiles(dir_ + "/db/values")) unlink(file.c_str());
  Open(dir_ + "/db");
  EXPECT_STATUS(store_->Scan("", [](absl::string_view, absl::string_view) {
                  return absl::OkStatus();
                }),
                absl::StatusCode::kDataLoss, "/db/values/0000000000000001.vlog is missing");
}

}  // namespace
}  // namespace tdock::persist
