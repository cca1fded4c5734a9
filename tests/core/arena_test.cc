// ChunkPool and StepArena on their own: aligned, disjoint regions; all or
// nothing under the memory limit (and past it on request); chunks reused
// from step to step, oversized ones freed; preallocation within the limit.
#include "server/dock/arena.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

constexpr int64_t kChunk = 4096;

TEST(Arena, RegionsAreAlignedAndDisjoint) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 0);
  StepArena arena(pool);
  const std::vector<int64_t> sizes = {1, 0, 100, 64, 4000, 65, 3000};
  std::vector<char*> out;
  ASSERT_TRUE(arena.AllocateBatch(sizes, out));
  ASSERT_EQ(out.size(), sizes.size());
  std::vector<std::pair<char*, char*>> regions;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(out[i]) % 64, 0u) << i;
    regions.emplace_back(out[i], out[i] + std::max<int64_t>(sizes[i], 1));
  }
  std::sort(regions.begin(), regions.end());
  for (size_t i = 1; i < regions.size(); ++i) {
    EXPECT_LE(regions[i - 1].second, regions[i].first) << "regions overlap";
  }
  // Each size rounded up to 64 bytes (an empty one takes 64 too).
  EXPECT_EQ(arena.used_bytes(), 64 + 64 + 128 + 64 + 4032 + 128 + 3008);
}

TEST(Arena, BatchBeyondTheLimitTakesNothingUnlessAllowed) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 2 * kChunk);
  StepArena arena(pool);
  std::vector<char*> out;
  ASSERT_TRUE(arena.AllocateBatch({kChunk, kChunk}, out));
  EXPECT_EQ(pool->reserved_bytes(), 2 * kChunk);
  EXPECT_EQ(pool->available_bytes(), 0);
  EXPECT_FALSE(arena.AllocateBatch({10}, out));
  EXPECT_EQ(pool->reserved_bytes(), 2 * kChunk);  // nothing taken
  EXPECT_EQ(arena.used_bytes(), 2 * kChunk);
  ASSERT_TRUE(arena.AllocateBatch({10}, out, /*past_limit=*/true));
  EXPECT_EQ(pool->reserved_bytes(), 3 * kChunk);
}

TEST(Arena, ChunksGoBackToThePoolAndAreReused) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 0);
  std::vector<char*> first;
  {
    StepArena step(pool);
    ASSERT_TRUE(step.AllocateBatch({kChunk, kChunk, kChunk}, first));
  }
  EXPECT_EQ(pool->reserved_bytes(), 3 * kChunk);
  StepArena next(pool);
  std::vector<char*> second;
  ASSERT_TRUE(next.AllocateBatch({kChunk, kChunk, kChunk}, second));
  EXPECT_EQ(pool->reserved_bytes(), 3 * kChunk);  // no new chunk
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
}

TEST(Arena, OversizedRegionsGetChunksOfTheirOwnThatAreFreed) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 0);
  {
    StepArena step(pool);
    std::vector<char*> out;
    ASSERT_TRUE(step.AllocateBatch({100, 3 * kChunk + 1, 100}, out));
    EXPECT_EQ(out[2], out[0] + 128);  // the small ones share the bump chunk
    EXPECT_EQ(pool->reserved_bytes(), kChunk + 3 * kChunk + 64);
  }
  EXPECT_EQ(pool->reserved_bytes(), kChunk);  // the oversized chunk is freed
}

TEST(Arena, PreallocateStaysWithinTheLimitAndIsReused) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 3 * kChunk);
  pool->Preallocate(10 * kChunk);
  EXPECT_EQ(pool->reserved_bytes(), 3 * kChunk);
  EXPECT_EQ(pool->available_bytes(), 3 * kChunk);
  StepArena step(pool);
  std::vector<char*> out;
  ASSERT_TRUE(step.AllocateBatch({kChunk, kChunk, kChunk}, out));
  EXPECT_EQ(pool->reserved_bytes(), 3 * kChunk);
  EXPECT_EQ(pool->available_bytes(), 0);
}

// Idle chunks of the pool are freed to make room for an oversized region
// under the limit.
TEST(Arena, IdleChunksMakeRoomForAnOversizedRegion) {
  auto pool = std::make_shared<ChunkPool>(kChunk, 4 * kChunk);
  pool->Preallocate(4 * kChunk);
  StepArena step(pool);
  std::vector<char*> out;
  ASSERT_TRUE(step.AllocateBatch({2 * kChunk}, out));
  EXPECT_EQ(pool->reserved_bytes(), 4 * kChunk);  // two idle chunks gave way
  EXPECT_EQ(pool->available_bytes(), 2 * kChunk);
}

}  // namespace
}  // namespace tdock::internal
