// LocalCellStore through the CellStore interface the dock uses: a Put's
// columns written and read back byte for byte (rows of one Put in one
// segment when they fit a chunk, a region per row when not), columns of half
// a chunk each packed two to a chunk, a Write that
// the memory limit refuses keeps nothing (unless past the limit), and a
// step's cells outlive the store and the step while a reader holds them.
#include "server/dock/local_cell_store.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

constexpr int64_t kChunk = 4096;

// A column of `lengths.size()` rows of float32 items; item k of the column
// holds the value `first + k`.
struct Column {
  std::vector<float> items;
  PackedColumn packed;
};

Column MakeColumn(const std::vector<int64_t>& lengths, float first) {
  Column c;
  c.packed.name = "x";
  c.packed.offsets.push_back(0);
  for (int64_t len : lengths) c.packed.offsets.push_back(c.packed.offsets.back() + len);
  for (int64_t k = 0; k < c.packed.offsets.back(); ++k) c.items.push_back(first + k);
  c.packed.segments.emplace_back(reinterpret_cast<const char*>(c.items.data()),
                                 c.items.size() * sizeof(float));
  return c;
}

// Reads `cells` in order, as a batch of their rows would.
PackedColumn ReadCells(const StepCells& step, const std::vector<const CellBlock*>& cells) {
  std::unique_ptr<std::atomic<const CellBlock*>[]> column(
      new std::atomic<const CellBlock*>[cells.size()]);
  std::vector<int64_t> rows;
  for (size_t i = 0; i < cells.size(); ++i) {
    column[i].store(cells[i], std::memory_order_release);
    rows.push_back(static_cast<int64_t>(i));
  }
  PackedColumn view;
  step.Read(column.get(), rows, sizeof(float), view);
  return view;
}

std::vector<float> Floats(const PackedColumn& view) {
  std::string bytes;
  for (const ByteSpan& s : view.segments) bytes.append(s.data(), s.size());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(LocalCellStore, WritesAndReadsEveryCellWithItsLength) {
  LocalCellStore store(kChunk, 0);
  std::shared_ptr<StepCells> cells = store.OpenStep();
  Column a = MakeColumn({3, 0, 5}, 0.0f);
  Column b = MakeColumn({1, 2, 1}, 100.0f);
  std::vector<const CellBlock*> blocks;
  ASSERT_TRUE(cells->Write({a.packed, b.packed}, {4, 4}, /*past_limit=*/false, blocks));
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0][0].length, 3);
  EXPECT_EQ(blocks[0][1].length, 0);
  EXPECT_EQ(blocks[0][2].length, 5);
  EXPECT_EQ(blocks[1][1].length, 2);

  // Rows read in another order come back in that order.
  PackedColumn view = ReadCells(*cells, {&blocks[0][2], &blocks[0][0], &blocks[0][1]});
  EXPECT_EQ(view.offsets, (std::vector<int64_t>{0, 5, 8, 8}));
  EXPECT_EQ(Floats(view), (std::vector<float>{3, 4, 5, 6, 7, 0, 1, 2}));
  ByteSpan one = cells->Bytes(blocks[1][1], 4);
  ASSERT_EQ(one.size(), 8u);
  float items[2];
  std::memcpy(items, one.data(), sizeof(items));
  EXPECT_EQ(items[0], 101.0f);
  EXPECT_EQ(items[1], 102.0f);
  EXPECT_GE(cells->used_bytes(), (8 + 4) * 4);
}

TEST(LocalCellStore, RowsOfOnePutReadInOrderAreOneSegment) {
  LocalCellStore store(kChunk, 0);
  std::shared_ptr<StepCells> cells = store.OpenStep();
  Column a = MakeColumn({2, 2, 2, 2}, 0.0f);
  std::vector<const CellBlock*> blocks;
  ASSERT_TRUE(cells->Write({a.packed}, {4}, false, blocks));
  PackedColumn view =
      ReadCells(*cells, {&blocks[0][0], &blocks[0][1], &blocks[0][2], &blocks[0][3]});
  EXPECT_EQ(view.segments.size(), 1u);
  EXPECT_EQ(Floats(view), a.items);
}

TEST(LocalCellStore, AColumnLargerThanAChunkTakesARegionPerRow) {
  LocalCellStore store(kChunk, 0);
  std::shared_ptr<StepCells> cells = store.OpenStep();
  // Two rows of 768 float32 items: 6 KiB in all, past one 4 KiB chunk.
  Column a = MakeColumn({768, 768}, 0.0f);
  std::vector<const CellBlock*> blocks;
  ASSERT_TRUE(cells->Write({a.packed}, {4}, false, blocks));
  PackedColumn view = ReadCells(*cells, {&blocks[0][0], &blocks[0][1]});
  EXPECT_EQ(view.offsets, (std::vector<int64_t>{0, 768, 1536}));
  // Each row in a region of its own, in chunks of their own: two segments.
  EXPECT_EQ(view.segments.size(), 2u);
  EXPECT_EQ(Floats(view), a.items);
}

TEST(LocalCellStore, ColumnsOfHalfAChunkShareChunksTwoByTwo) {
  LocalCellStore store(kChunk, 0);
  std::shared_ptr<StepCells> cells = store.OpenStep();
  // Three columns of one 2 KiB row each: two fill the first chunk, the third
  // and the cell blocks of all three the second. (With each column's blocks
  // before its payload, every payload took a chunk of its own: three.)
  Column a = MakeColumn({512}, 0.0f), b = MakeColumn({512}, 1000.0f),
         c = MakeColumn({512}, 2000.0f);
  std::vector<const CellBlock*> blocks;
  ASSERT_TRUE(cells->Write({a.packed, b.packed, c.packed}, {4, 4, 4}, false, blocks));
  EXPECT_EQ(store.reserved_bytes(), 2 * kChunk);
  EXPECT_EQ(Floats(ReadCells(*cells, {&blocks[0][0]})), a.items);
  EXPECT_EQ(Floats(ReadCells(*cells, {&blocks[1][0]})), b.items);
  EXPECT_EQ(Floats(ReadCells(*cells, {&blocks[2][0]})), c.items);
}

TEST(LocalCellStore, AWriteTheLimitRefusesKeepsNothingUnlessPastTheLimit) {
  LocalCellStore store(kChunk, 2 * kChunk);
  std::shared_ptr<StepCells> cells = store.OpenStep();
  Column fits = MakeColumn({500}, 0.0f);  // 2,000 bytes
  std::vector<const CellBlock*> blocks;
  ASSERT_TRUE(cells->Write({fits.packed}, {4}, false, blocks));
  const int64_t used = cells->used_bytes();
  const int64_t reserved = store.reserved_bytes();
  // Three regions of 1,000 float32 items: more than the 8 KiB limit allows.
  Column big = MakeColumn({1000, 1000, 1000}, 0.0f);
  blocks.clear();
  EXPECT_FALSE(cells->Write({big.packed}, {4}, false, blocks));
  EXPECT_TRUE(blocks.empty());
  EXPECT_EQ(cells->used_bytes(), used);
  EXPECT_EQ(store.reserved_bytes(), reserved);
  EXPECT_EQ(store.limit_bytes(), 2 * kChunk);
  ASSERT_TRUE(cells->Write({big.packed}, {4}, /*past_limit=*/true, blocks));
  EXPECT_GT(store.reserved_bytes(), 2 * kChunk);
}

TEST(LocalCellStore, ReadersKeepAStepsCellsAfterTheStoreAndTheStepAreGone) {
  std::shared_ptr<StepCells> held;
  const CellBlock* block = nullptr;
  Column a = MakeColumn({4}, 7.0f);
  {
    auto store = std::make_unique<LocalCellStore>(kChunk, 0);
    std::shared_ptr<StepCells> cells = store->OpenStep();
    std::vector<const CellBlock*> blocks;
    ASSERT_TRUE(cells->Write({a.packed}, {4}, false, blocks));
    block = blocks[0];
    held = cells;  // a batch's pin
  }
  PackedColumn view = ReadCells(*held, {block});
  EXPECT_EQ(Floats(view), (std::vector<float>{7, 8, 9, 10}));
}

}  // namespace
}  // namespace tdock::internal
