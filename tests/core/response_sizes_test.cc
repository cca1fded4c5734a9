// ResponseSizes on a Partition of its own: a row's share of a response is
// 64 bytes plus, per column the consumer needs, 10 bytes and its cell's
// bytes; FittingUnits cuts a claim where one response (with its fixed 64 KiB)
// would exceed the limit; CheckPut counts the Put's cells in place of the
// rows' (and, for whole-group consumers, the rest of each group as written)
// and names the row or group and the consumer it does not fit; CheckWritten
// finds a row (group) already too large; with no limit everything passes.
#include "server/dock/response_sizes.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock::internal {
namespace {

using ::testing::HasSubstr;
using ::tdock::testing::OwnedColumn;

constexpr int64_t kFixed = 64 << 10;

ColumnSpec Column(std::string name, DType dtype) {
  ColumnSpec c;
  c.name = std::move(name);
  c.dtype = dtype;
  return c;
}

ConsumerPlan Plan(std::vector<int> columns, bool whole_groups = false) {
  ConsumerPlan plan;
  plan.name = whole_groups ? "groups" : "rows";
  plan.columns = std::move(columns);
  plan.whole_groups = whole_groups;
  return plan;
}

// 8 rows in groups of 4; "ids" (int32) and "score" (float64); row r holds
// r + 1 ids and no score.
class ResponseSizesTest : public ::testing::Test {
 protected:
  ResponseSizesTest() : part_(&mu_, 0, 8, 4, 2, {{false, 1}, {true, 1}}) {
    for (int64_t row = 0; row < 8; ++row) blocks_[row] = CellBlock{nullptr, row + 1};
    tdock::MutexLock commit(&part_.row_index().mu());
    for (int64_t row = 0; row < 8; ++row) part_.Publish(0, row, &blocks_[row]);
  }
  ResponseSizes Sizes(int64_t max_bytes) const { return ResponseSizes(columns_, 8, 4, max_bytes); }
  static int64_t RowBytes(int64_t ids) { return 64 + 10 + ids * 4; }

  ColumnTable columns_{{Column("ids", DType::kInt32), Column("score", DType::kFloat64)}, 2};
  tdock::Mutex mu_;
  Partition part_;
  CellBlock blocks_[8];
};

TEST_F(ResponseSizesTest, ARowCountsItsIndexItsOffsetsAndItsCellsBytes) {
  const ResponseSizes sizes = Sizes(0);
  EXPECT_EQ(ResponseSizes::Fixed(), kFixed);
  EXPECT_EQ(sizes.Row(part_, Plan({0}), 2), RowBytes(3));
  // A column without a cell still takes its offset.
  EXPECT_EQ(sizes.Row(part_, Plan({0, 1}), 2), RowBytes(3) + 10);
}

TEST_F(ResponseSizesTest, FittingUnitsStopsBeforeTheLimit) {
  const std::vector<int64_t> units = {0, 1, 2, 3};
  EXPECT_EQ(Sizes(0).FittingUnits(part_, Plan({0}), units), 4u);
  const int64_t two = kFixed + RowBytes(1) + RowBytes(2);
  EXPECT_EQ(Sizes(two).FittingUnits(part_, Plan({0}), units), 2u);
  EXPECT_EQ(Sizes(two - 1).FittingUnits(part_, Plan({0}), units), 1u);
  // A whole-group consumer's unit is a group: rows 0..3.
  const int64_t group0 = kFixed + RowBytes(1) + RowBytes(2) + RowBytes(3) + RowBytes(4);
  EXPECT_EQ(Sizes(group0).FittingUnits(part_, Plan({0}, true), {0, 1}), 1u);
  EXPECT_EQ(Sizes(group0 - 1).FittingUnits(part_, Plan({0}, true), {0, 1}), 0u);
}

TEST_F(ResponseSizesTest, APutIsCheckedWithItsCellsInPlaceOfTheRows) {
  // Row 1 rewritten with 100 ids.
  const OwnedColumn ids =
      OwnedColumn::Of<int32_t>("ids", DType::kInt32, {std::vector<int32_t>(100, 1)});
  PutInput in;
  in.rows = {1};
  in.columns.push_back(ids.View());
  const ConsumerPlan rows = Plan({0});
  const ConsumerPlan groups = Plan({0}, true);
  const std::vector<const ConsumerPlan*> plans = {&rows, &groups};
  const int64_t row1 = kFixed + RowBytes(100);
  const int64_t group0 = kFixed + RowBytes(1) + RowBytes(100) + RowBytes(3) + RowBytes(4);
  EXPECT_OK(Sizes(0).CheckPut(part_, in, plans));
  EXPECT_OK(Sizes(group0).CheckPut(part_, in, plans));
  absl::Status refused = Sizes(group0 - 1).CheckPut(part_, in, plans);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("the group of row 1 would take " + std::to_string(group0) +
                        " bytes in a response to consumer 'groups'"));
  refused = Sizes(row1 - 1).CheckPut(part_, in, plans);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("row 1 would take " + std::to_string(row1) +
                        " bytes in a response to consumer 'rows'"));
  // Only the plans given are checked.
  EXPECT_OK(Sizes(row1).CheckPut(part_, in, {&rows}));
}

TEST_F(ResponseSizesTest, CheckWrittenFindsTheFirstRowOrGroupTooLarge) {
  const int64_t row7 = kFixed + RowBytes(8);
  EXPECT_OK(Sizes(row7).CheckWritten(part_, Plan({0})));
  const absl::Status refused = Sizes(row7 - 1).CheckWritten(part_, Plan({0}));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("row 7 would take"));
  const int64_t group1 = kFixed + RowBytes(5) + RowBytes(6) + RowBytes(7) + RowBytes(8);
  EXPECT_OK(Sizes(group1).CheckWritten(part_, Plan({0}, true)));
  EXPECT_THAT(std::string(Sizes(group1 - 1).CheckWritten(part_, Plan({0}, true)).message()),
              HasSubstr("the group of row 4 would take"));
  EXPECT_OK(Sizes(0).CheckWritten(part_, Plan({0}, true)));
}

}  // namespace
}  // namespace tdock::internal
