// RowReader over a Partition and cells of its own: a row's token count is the
// sum of its length columns' cell lengths (a cell not written counts 0); a
// Put's cells count in place of the row's; a batch carries its rows in the
// order asked, their token counts, keys and versions (only where a row of the
// step has one: "" and kNoVersion for the others), and with payload views of
// the cells' bytes pinned by the batch; without payload no column and no pin.
#include "server/dock/row_reader.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/local_cell_store.h"
#include "tests/core/dock_test_util.h"

namespace tdock::internal {
namespace {

using ::tdock::testing::OwnedColumn;

ColumnSpec Column(std::string name, DType dtype) {
  ColumnSpec c;
  c.name = std::move(name);
  c.dtype = dtype;
  return c;
}

// 4 rows; "prompt" and "response" (int32) are the length columns, "reward"
// (float32) is not. Rows 0..2 are written: row r has r + 1 prompt items and
// 2 response items; row 3 has nothing.
class RowReaderTest : public ::testing::Test {
 protected:
  RowReaderTest() : part_(&mu_, 0, 4, 1, 3, {{false, 1}}) {
    const OwnedColumn prompt =
        OwnedColumn::Of<int32_t>("prompt", DType::kInt32, {{10}, {20, 21}, {30, 31, 32}});
    const OwnedColumn response =
        OwnedColumn::Of<int32_t>("response", DType::kInt32, {{1, 1}, {2, 2}, {3, 3}});
    const OwnedColumn reward =
        OwnedColumn::Of<float>("reward", DType::kFloat32, {{0.5f}, {1.5f}, {2.5f}});
    const std::vector<PackedColumn> views = {prompt.View(), response.View(), reward.View()};
    std::vector<const CellBlock*> blocks;
    EXPECT_TRUE(cells_->Write(views, {4, 4, 4}, false, blocks));
    tdock::MutexLock commit(&part_.row_index().mu());
    for (int c = 0; c < 3; ++c) {
      for (int64_t row = 0; row < 3; ++row) part_.Publish(c, row, &blocks[c][row]);
    }
  }

  ColumnTable columns_{{Column("prompt", DType::kInt32), Column("response", DType::kInt32),
                        Column("reward", DType::kFloat32)},
                       3};
  tdock::Mutex mu_;
  Partition part_;
  std::shared_ptr<StepCells> cells_ = LocalCellStore(4096, 0).OpenStep();
};

TEST_F(RowReaderTest, TokensAreTheLengthColumnsLengths) {
  const RowReader reader(columns_, {0, 1});
  EXPECT_EQ(reader.Tokens(part_, 0), 3);
  EXPECT_EQ(reader.Tokens(part_, 2), 5);
  EXPECT_EQ(reader.Tokens(part_, 3), 0);  // not written
  EXPECT_EQ(RowReader(columns_, {}).Tokens(part_, 2), 0);
}

TEST_F(RowReaderTest, APutsCellsCountInPlaceOfTheRows) {
  const RowReader reader(columns_, {0, 1});
  const OwnedColumn response =
      OwnedColumn::Of<int32_t>("response", DType::kInt32, {std::vector<int32_t>(7, 0), {}});
  PutInput in;
  in.rows = {1, 3};
  in.columns.push_back(response.View());
  EXPECT_EQ(reader.TokensAfterPut(part_, in, 0), 2 + 7);  // prompt stays, response replaced
  EXPECT_EQ(reader.TokensAfterPut(part_, in, 1), 0);
}

TEST_F(RowReaderTest, ABatchCarriesItsRowsInOrderWithTheirCells) {
  const RowReader reader(columns_, {0, 1});
  Batch meta = reader.Make(part_, 5, cells_, {2, 0}, {0, 2}, /*with_payload=*/false);
  EXPECT_EQ(meta.step, 5);
  EXPECT_EQ(meta.rows, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(meta.token_counts, (std::vector<int64_t>{5, 3}));
  EXPECT_TRUE(meta.keys.empty());
  EXPECT_TRUE(meta.versions.empty());
  EXPECT_TRUE(meta.columns.empty());
  EXPECT_EQ(meta.pin, nullptr);

  Batch batch = reader.Make(part_, 5, cells_, {2, 0}, {0, 2}, /*with_payload=*/true);
  EXPECT_EQ(batch.pin, cells_);
  ASSERT_EQ(batch.columns.size(), 2u);
  const PackedColumn& prompt = batch.columns[0];
  EXPECT_EQ(prompt.name, "prompt");
  EXPECT_EQ(prompt.offsets, (std::vector<int64_t>{0, 3, 4}));
  std::vector<int32_t> items(4);
  CopyFromSegments(prompt.segments, 0, 16, reinterpret_cast<char*>(items.data()));
  EXPECT_EQ(items, (std::vector<int32_t>{30, 31, 32, 10}));
  EXPECT_EQ(batch.columns[1].name, "reward");
  EXPECT_EQ(batch.columns[1].dtype, DType::kFloat32);
}

TEST_F(RowReaderTest, KeysAndVersionsOnlyWhereTheStepHasThem) {
  const RowReader reader(columns_, {0, 1});
  {
    tdock::MutexLock commit(&part_.row_index().mu());
    part_.row_index().SetKey(0, "uid-0");
    part_.row_index().LowerVersion(2, 7);
  }
  const Batch batch = reader.Make(part_, 5, cells_, {2, 0}, {}, /*with_payload=*/false);
  EXPECT_EQ(batch.keys, (std::vector<std::string>{"", "uid-0"}));
  ASSERT_EQ(batch.versions.size(), 2u);
  EXPECT_EQ(batch.versions[0], 7);
  EXPECT_EQ(batch.versions[1], kNoVersion);
}

}  // namespace
}  // namespace tdock::internal
