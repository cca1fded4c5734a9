// PutChecks on their own, without a dock: each bad Put or Reserve is refused
// with INVALID_ARGUMENT (a version newer than the dock's: FAILED_PRECONDITION)
// and a message that names the dock, the step and what was wrong; columns
// are checked against the table as it is at the call (one appended later is
// known to later checks); ColumnsToAdd returns the columns a Put writes that
// the table lacks, from their definitions or else name and dtype.
#include "server/dock/put_checks.h"

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

ColumnSpec Column(std::string name, DType dtype, int64_t max_len = 0) {
  ColumnSpec c;
  c.name = std::move(name);
  c.dtype = dtype;
  c.max_len = max_len;
  return c;
}

// A dock "d" of 8 rows per step in groups of 4, with columns "ids" (int32,
// max_len 4) and "score" (float32), at version 3.
class PutChecksTest : public ::testing::Test {
 protected:
  PutChecksTest() { version_.Raise(3); }

  PutChecks Checks(bool add_columns_on_write = false) const {
    return PutChecks("d", 8, 4, add_columns_on_write, columns_, version_);
  }
  // A Put of rows `rows` of step 1 writing "ids" with `items` items per row.
  PutInput PutOf(std::vector<int64_t> rows, int items = 2) {
    std::vector<std::vector<int32_t>> cells(rows.size(), std::vector<int32_t>(items, 7));
    owned_.push_back(OwnedColumn::Of<int32_t>("ids", DType::kInt32, cells));
    PutInput in;
    in.step = 1;
    in.rows = std::move(rows);
    in.columns.push_back(owned_.back().View());
    return in;
  }
  static void ExpectRefused(const absl::Status& status, absl::StatusCode code,
                            const std::string& says) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(says));
  }

  ColumnTable columns_{{Column("ids", DType::kInt32, 4), Column("score", DType::kFloat32)}, 8};
  PolicyVersion version_;
  std::vector<OwnedColumn> owned_;
};

TEST_F(PutChecksTest, AGoodPutPasses) {
  PutInput in = PutOf({0, 5});
  in.keys = {"a", "b"};
  in.versions = {3, 2};
  EXPECT_OK(Checks().Put(in));
}

TEST_F(PutChecksTest, StepAndRowsAreChecked) {
  const PutChecks checks = Checks();
  PutInput in = PutOf({0});
  in.step = -1;
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "dock 'd' step -1: step is negative");
  ExpectRefused(checks.Put(PutOf({8})), absl::StatusCode::kInvalidArgument,
                "dock 'd' step 1: row 8 is out of range [0, 8)");
  ExpectRefused(checks.Put(PutOf({2, 2})), absl::StatusCode::kInvalidArgument,
                "dock 'd' step 1: row 2 appears twice");
  in = PutOf({});
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "no rows");
  in.new_rows = 9;
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "new_rows 9 (ask for new rows in [1, 8]");
  in = PutOf({0});
  in.new_rows = 1;
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "with rows named");
}

TEST_F(PutChecksTest, KeysAreOnePerRowValidAndDistinct) {
  const PutChecks checks = Checks();
  PutInput in = PutOf({0, 1});
  in.keys = {"a"};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "dock 'd' step 1: 1 keys for 2 rows");
  in.keys = {"a", ""};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "a key is empty");
  in.keys = {"a", std::string(PutChecks::kMaxKeyBytes + 1, 'k')};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "a key of 1025 bytes is over the limit of 1024");
  in.keys = {"a", "a"};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "key 'a' appears twice");
}

TEST_F(PutChecksTest, GroupSizesOnlyForNewRowsInRangeAndAddingUp) {
  const PutChecks checks = Checks();
  PutInput named = PutOf({0});
  named.group_sizes = {1};
  ExpectRefused(checks.Put(named), absl::StatusCode::kInvalidArgument, "this Put names its rows");
  PutInput in = PutOf({}, 1);
  owned_.push_back(OwnedColumn::Of<int32_t>("ids", DType::kInt32, {{1}, {2}, {3}}));
  in.columns[0] = owned_.back().View();
  in.new_rows = 3;
  in.group_sizes = {2, 1};
  EXPECT_OK(checks.Put(in));
  in.group_sizes = {5};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "group 0 of the Put is declared with 5 rows; a group has 1 to 4");
  in.group_sizes = {1, 1};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "group_sizes add up to 2 rows; the Put writes 3");
  in.group_sizes = {1, 1, 1};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "the Put declares 3 groups; a step holds 2");
}

TEST_F(PutChecksTest, VersionsAreNoneOneOrPerRowAndNotNewerThanTheDocks) {
  const PutChecks checks = Checks();
  PutInput in = PutOf({0, 1, 2});
  in.versions = {1, 2};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "dock 'd' step 1: 2 versions for 3 rows");
  in.versions = {1, -1, 0};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "version -1 of row 1 is negative");
  in.versions = {4};
  ExpectRefused(checks.Put(in), absl::StatusCode::kFailedPrecondition,
                "version 4 is newer than the dock's version 3");
  version_.Raise(4);  // read as it is at each call
  EXPECT_OK(checks.Put(in));
}

TEST_F(PutChecksTest, ColumnsAreKnownOnceWithTheirDtypeAndPackingAndMaxLen) {
  const PutChecks checks = Checks();
  PutInput in = PutOf({0});
  in.columns.push_back(in.columns[0]);
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "column 'ids' appears twice");
  in = PutOf({0});
  in.columns[0].name = "mask";
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "column 'mask' is unknown (the dock's spec does not set add_columns_on_write)");
  in = PutOf({0});
  in.columns[0].name = "score";
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument,
                "column 'score' has dtype float32, the request sent int32");
  in = PutOf({0});
  in.columns[0].offsets = {0, 3};  // three items, bytes for two
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "dock 'd' step 1: ");
  EXPECT_THAT(std::string(checks.Put(in).message()), HasSubstr("'ids'"));
  ExpectRefused(checks.Put(PutOf({6}, 5)), absl::StatusCode::kInvalidArgument,
                "row 6 of column 'ids' has 5 items, more than max_len 4");
  in = PutOf({});
  in.columns.clear();
  in.rows = {0};
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "no columns");
}

TEST_F(PutChecksTest, AColumnAppendedLaterIsKnownAndOneBeingAddedIsCheckedAsIfThere) {
  const PutChecks checks = Checks(/*add_columns_on_write=*/true);
  PutInput in = PutOf({0});
  in.columns[0].name = "mask";
  ExpectRefused(checks.Put(in), absl::StatusCode::kInvalidArgument, "column 'mask' is unknown");
  const ColumnSpec mask = Column("mask", DType::kInt32, 1);
  ExpectRefused(checks.Put(in, {mask}), absl::StatusCode::kInvalidArgument,
                "more than max_len 1");
  columns_.Append(Column("mask", DType::kInt32));
  EXPECT_OK(checks.Put(in));
}

TEST_F(PutChecksTest, ColumnsToAddTakesDefinitionsOrNameAndDtype) {
  PutInput in = PutOf({0});
  in.columns[0].name = "mask";
  owned_.push_back(OwnedColumn::Of<float>("reward", DType::kFloat32, {{1.0f}}));
  in.columns.push_back(owned_.back().View());
  in.columns.push_back(PutOf({0}).columns[0]);  // "ids": the table has it
  in.new_columns = {Column("reward", DType::kFloat32, 1)};
  ASSERT_OK_AND_ASSIGN(std::vector<ColumnSpec> adding, Checks(true).ColumnsToAdd(in));
  ASSERT_EQ(adding.size(), 2u);
  EXPECT_EQ(adding[0].name, "mask");
  EXPECT_EQ(adding[0].dtype, DType::kInt32);
  EXPECT_EQ(adding[1].name, "reward");
  EXPECT_EQ(adding[1].max_len, 1);

  ExpectRefused(Checks(false).ColumnsToAdd(in).status(), absl::StatusCode::kInvalidArgument,
                "the dock adds no columns on write");
  in.new_columns = {Column("other", DType::kFloat32)};
  ExpectRefused(Checks(true).ColumnsToAdd(in).status(), absl::StatusCode::kInvalidArgument,
                "new_columns[0] defines column 'other', which the Put does not write");
  in.new_columns = {Column("reward", DType::kFloat32), Column("reward", DType::kFloat32)};
  ExpectRefused(Checks(true).ColumnsToAdd(in).status(), absl::StatusCode::kInvalidArgument,
                "new_columns defines column 'reward' twice");
  in.new_columns = {Column("reward", DType::kInt32)};
  ExpectRefused(Checks(true).ColumnsToAdd(in).status(), absl::StatusCode::kInvalidArgument,
                "defines column 'reward' as int32; the Put writes it as float32");
  in.new_columns.clear();
  ASSERT_OK_AND_ASSIGN(adding, Checks(false).ColumnsToAdd(in));
  EXPECT_TRUE(adding.empty());
}

TEST_F(PutChecksTest, ReservesAreChecked) {
  const PutChecks checks = Checks();
  ReserveInput in;
  in.rows = 4;
  in.deadline = absl::Seconds(10);
  in.version = 3;
  EXPECT_OK(checks.Reserve(in));
  in.version = -1;
  ExpectRefused(checks.Reserve(in), absl::StatusCode::kInvalidArgument,
                "dock 'd': reservation: version -1 is negative");
  in.version = 3;
  in.deadline = absl::ZeroDuration();
  ExpectRefused(checks.ReserveDeadline(in), absl::StatusCode::kInvalidArgument,
                "dock 'd': reservation: deadline 0 is out of range (0, 24h]");
  in.deadline = absl::Seconds(10);
  in.version = 4;
  ExpectRefused(checks.Reserve(in), absl::StatusCode::kFailedPrecondition,
                "version 4 is newer than the dock's version 3");
  in.version.reset();
  in.group_sizes = {2};
  ExpectRefused(checks.Reserve(in), absl::StatusCode::kInvalidArgument,
                "asks for 4 rows and 1 group sizes");
  in.rows = 0;
  in.group_sizes = {5};
  ExpectRefused(checks.Reserve(in), absl::StatusCode::kInvalidArgument,
                "group size 5 is out of range [1, 4]");
  in.group_sizes = {1, 1, 1};
  ExpectRefused(checks.Reserve(in), absl::StatusCode::kInvalidArgument,
                "of 3 rows (3 groups) is over a step's capacity of 8 rows");
  in.group_sizes = {4};
  EXPECT_OK(checks.Reserve(in));
  in.deadline = absl::Hours(25);
  ExpectRefused(checks.ReserveDeadline(in), absl::StatusCode::kInvalidArgument,
                "deadline 25h is out of range (0, 24h]");
  in.deadline = PutChecks::kMaxReservationDeadline;
  EXPECT_OK(checks.ReserveDeadline(in));
}

}  // namespace
}  // namespace tdock::internal
