// Same-host shared memory at a shard: ShmChunks makes each chunk a file a
// client can map, names where a byte is, unlinks a freed chunk and never
// gives a number twice, and removes the files of a shard that died without
// letting go of them. A ShardStore over it prepares a Put (the memory
// taken, nothing readable), fills it from the writer's bytes in place
// (checked against what was prepared), and then stores it as any Put; a
// prepared Put's memory is not taken back for another Put while its writer
// may still be copying into it.
#include "server/shard/shm_chunks.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/shard/shard_store.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock::shard {
namespace {

using testing::OwnedColumn;

std::string NewDir() {
  std::string pattern = ::testing::TempDir() + "/tdock_shm_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// The bytes of `path` at `offset`, as a client that maps the file sees them.
std::string MappedBytes(const std::string& path, uint64_t offset, size_t n) {
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  struct stat info;
  fstat(fd, &info);
  void* data = mmap(nullptr, info.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  std::string out(static_cast<const char*>(data) + offset, n);
  munmap(data, info.st_size);
  return out;
}

TEST(ShmChunks, AChunkIsAFileNamedByItsNumberAndFreedChunksAreUnlinked) {
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ShmChunks> shm, ShmChunks::Open(dir, 3));
  EXPECT_EQ(shm->prefix().rfind(absl::StrCat(dir, "/tdock-shard3-"), 0), 0u) << shm->prefix();
  EXPECT_TRUE(Exists(shm->prefix() + ".lock"));
  char* first = shm->Allocate(4096);
  char* second = shm->Allocate(8192);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::memcpy(second + 100, "cells", 5);
  ASSERT_TRUE(shm->Locate(second + 100).has_value());
  const ShmChunks::Place place = *shm->Locate(second + 100);
  EXPECT_EQ(place.chunk, 2u);
  EXPECT_EQ(place.offset, 100u);
  EXPECT_EQ(place.chunk_bytes, 8192u);
  // Another process maps the same bytes.
  EXPECT_EQ(MappedBytes(absl::StrCat(shm->prefix(), ".2"), 100, 5), "cells");
  // The byte past a chunk is not in it (it may be in a chunk mapped next).
  const std::optional<ShmChunks::Place> past = shm->Locate(second + 8192);
  EXPECT_TRUE(!past.has_value() || past->chunk != 2u);
  char heap[16];
  EXPECT_FALSE(shm->Locate(heap).has_value());

  shm->Free(first, 4096);
  EXPECT_FALSE(Exists(absl::StrCat(shm->prefix(), ".1")));
  char* third = shm->Allocate(4096);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(shm->Locate(third)->chunk, 3u);  // 1 is never given again
  shm->Free(second, 8192);
  shm->Free(third, 4096);
  const std::string prefix = shm->prefix();
  shm.reset();
  EXPECT_FALSE(Exists(prefix + ".lock"));
}

TEST(ShmChunks, OpeningRemovesTheFilesOfShardsThatDiedAndKeepsALiveOnes) {
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ShmChunks> live, ShmChunks::Open(dir, 1));
  ASSERT_NE(live->Allocate(4096), nullptr);
  // A shard killed with two chunks: its lock file is held by no one; and one
  // killed before it named its lock file.
  const std::string dead = absl::StrCat(dir, "/tdock-shard2-00000000000000ab");
  for (const std::string& name : {dead + ".lock", dead + ".1", dead + ".7",
                                  absl::StrCat(dir, "/tdock-shard4-00000000000000cd.new")}) {
    const int fd = open(name.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ShmChunks> next, ShmChunks::Open(dir, 2));
  EXPECT_EQ(next->removed_at_open(), 4);
  EXPECT_FALSE(Exists(dead + ".1"));
  EXPECT_FALSE(Exists(dead + ".lock"));
  EXPECT_TRUE(Exists(live->prefix() + ".lock"));
  EXPECT_TRUE(Exists(live->prefix() + ".1"));
}

TEST(ShmChunks, ADirectoryThatCannotBeWrittenIsRefusedNamingIt) {
  EXPECT_STATUS(ShmChunks::Open("/nonexistent/tdock", 1), absl::StatusCode::kFailedPrecondition,
                "--shm_dir '/nonexistent/tdock'");
}

OwnedColumn Floats(const std::string& name, const std::vector<int64_t>& lengths, float first) {
  return OwnedColumn::Floats(name, lengths, first);
}

// The columns' offsets alone: what a writer sends to prepare its Put.
PackedColumn OffsetsOf(const PackedColumn& column) {
  PackedColumn out;
  out.name = column.name;
  out.dtype = column.dtype;
  out.offsets = column.offsets;
  return out;
}

TEST(ShardStoreShm, APreparedPutIsFilledInPlaceThenStoredAsAnyPut) {
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ShmChunks> shm, ShmChunks::Open(dir, 7));
  ShardStore store(7, 4096, 0, absl::ZeroDuration(), nullptr, shm);
  const OwnedColumn a = Floats("a", {2, 0, 3}, 0);
  const OwnedColumn b = Floats("b", {1, 1, 1}, 100);
  const std::vector<PackedColumn> put = {OffsetsOf(a.View()), OffsetsOf(b.View())};
  const std::vector<int64_t> items = {4, 4};
  ASSERT_OK_AND_ASSIGN(ShardStore::Prepared prepared, store.Prepare("d", 0, put, items));
  ASSERT_EQ(prepared.regions.size(), 2u);
  EXPECT_EQ(store.GetStats().prepared_puts, 1);
  // Each column's items back to back in its regions, in shared memory.
  const std::vector<const OwnedColumn*> sources = {&a, &b};
  for (size_t i = 0; i < 2; ++i) {
    size_t pos = 0;
    for (absl::Span<char> region : prepared.regions[i]) {
      ASSERT_TRUE(shm->Locate(region.data()).has_value());
      std::memcpy(region.data(), sources[i]->bytes.data() + pos, region.size());
      pos += region.size();
    }
    EXPECT_EQ(pos, sources[i]->bytes.size());
  }
  const CellLocation early{7, prepared.extent, 0, 8};
  EXPECT_STATUS(store.Read("d", {early}), absl::StatusCode::kNotFound,
                "prepared, not written yet");
  EXPECT_STATUS(store.Commit(prepared.extent, 0), absl::StatusCode::kNotFound,
                "no staged Put");

  // A Put of other cells than were prepared is refused.
  const OwnedColumn other = Floats("a", {2, 1, 3}, 0);
  const std::vector<PackedColumn> wrong = {OffsetsOf(other.View()), OffsetsOf(b.View())};
  EXPECT_STATUS(store.Fill(prepared.extent, "d", 0, wrong, items),
                absl::StatusCode::kInvalidArgument, "column 'a' row 1: 4 bytes");
  EXPECT_STATUS(store.Fill(prepared.extent, "e", 0, put, items), absl::StatusCode::kNotFound,
                "for dock 'e'");
  EXPECT_STATUS(store.Fill(prepared.extent, "d", 1, put, items),
                absl::StatusCode::kInvalidArgument, "prepared for step 0 (-1: a reservation's), not 1");

  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged,
                       store.Fill(prepared.extent, "d", 0, put, items));
  EXPECT_EQ(staged.locations[0],
            (std::vector<CellLocation>{{7, prepared.extent, 0, 8},
                                       {7, prepared.extent, 8, 0},
                                       {7, prepared.extent, 8, 12}}));
  EXPECT_EQ(staged.locations[1][2], (CellLocation{7, prepared.extent, 28, 4}));
  EXPECT_STATUS(store.Fill(prepared.extent, "d", 0, put, items), absl::StatusCode::kNotFound,
                "filled already");
  ASSERT_OK(store.Commit(staged.extent, 0));
  ASSERT_OK_AND_ASSIGN(ShardStore::Cells cells,
                       store.Read("d", {staged.locations[0][2], staged.locations[1][0]}));
  const std::vector<float> want = {2, 3, 4};
  ASSERT_EQ(cells.cells[0].size(), 12u);
  EXPECT_EQ(std::memcmp(cells.cells[0].data(), want.data(), 12), 0);
  float first_b = 0;
  std::memcpy(&first_b, cells.cells[1].data(), 4);
  EXPECT_EQ(first_b, 100);
  // A client reads the same bytes by where the shard says they are.
  const ShmChunks::Place place = *shm->Locate(cells.cells[0].data());
  EXPECT_EQ(MappedBytes(absl::StrCat(shm->prefix(), ".", place.chunk), place.offset, 12),
            std::string(reinterpret_cast<const char*>(want.data()), 12));
}

TEST(ShardStoreShm, APreparedPutTakesTheMemoryLimitAndIsFreedWithItsStep) {
  const std::string dir = NewDir();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<ShmChunks> shm, ShmChunks::Open(dir, 7));
  auto clock = std::make_shared<ManualClock>();
  ShardStore store(7, 4096, 4096, absl::ZeroDuration(), clock, shm);
  std::vector<int64_t> lengths(3, 512);  // 6 KiB: over the limit of one chunk
  const OwnedColumn big = Floats("a", lengths, 0);
  EXPECT_STATUS(store.Prepare("d", 0, {OffsetsOf(big.View())}, {int64_t{4}}),
                absl::StatusCode::kResourceExhausted, "under its memory limit of 4096 bytes");
  const OwnedColumn small = Floats("a", {16}, 0);
  ASSERT_OK_AND_ASSIGN(ShardStore::Prepared prepared,
                       store.Prepare("d", 0, {OffsetsOf(small.View())}, {int64_t{4}}));
  // Its step released: no longer filled, but its memory is kept from
  // other Puts while its writer may still copy into it.
  store.Release("d", 0);
  EXPECT_STATUS(store.Fill(prepared.extent, "d", 0, {OffsetsOf(small.View())}, {int64_t{4}}),
                absl::StatusCode::kFailedPrecondition, "step 0 was released");
  store.SetFrontStep("d", 1);
  std::vector<int64_t> most(3, 300);  // over what is left of the chunk
  const OwnedColumn next = Floats("a", most, 0);
  ASSERT_OK(store.Prepare("d", 1, {OffsetsOf(next.View())}, {int64_t{4}}).status());
  EXPECT_GT(store.GetStats().reserved_bytes, store.GetStats().limit_bytes);
  // Freed once its hold is over (a sweep with the clock past it).
  clock->Advance(ShardStore::kPreparedHold);
  store.Sweep();
  EXPECT_STATUS(store.Fill(prepared.extent, "d", 0, {OffsetsOf(small.View())}, {int64_t{4}}),
                absl::StatusCode::kNotFound, "holds no Put prepared");
  EXPECT_STATUS(store.Prepare("d", 0, {OffsetsOf(small.View())}, {int64_t{4}}),
                absl::StatusCode::kFailedPrecondition, "step 0 was released");
}

}  // namespace
}  // namespace tdock::shard
