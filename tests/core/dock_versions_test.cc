// Row versions: a Put may carry the policy version its rows were generated
// with (one for all rows, or one per row); a row keeps the oldest a write of
// it carried; Get, Read and the row listing return it. The dock's
// version, set by the trainer, only advances and no row may be newer. Bad
// versions change nothing.
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::Reader;

absl::StatusOr<PutResult> PutVersions(Dock& dock, std::vector<int64_t> rows,
                                      const std::string& column, std::vector<int64_t> versions) {
  PutInput in;
  in.step = 0;
  in.rows = rows;
  in.versions = std::move(versions);
  testing::OwnedColumn cells = Cells(column, rows);
  in.columns.push_back(cells.View());
  return testing::PutSync(dock, std::move(in));
}

TEST(VersionsTest, ARowKeepsTheOldestVersionItsWritesCarried) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec(
                                      {Reader("actor", {"prompt", "response"}, 8)})));
  ASSERT_OK(dock->SetVersion(9));
  ASSERT_OK(PutVersions(*dock, Iota(0, 6), "prompt", {7}));  // one for every row
  ASSERT_OK(PutVersions(*dock, {0, 1, 2}, "response", {5, 9, 7}));
  ASSERT_OK(PutVersions(*dock, {3, 4, 5, 6, 7}, "response", {}));  // none given
  ASSERT_OK(PutVersions(*dock, {6, 7}, "prompt", {}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {1, 6}, {"prompt"}));
  EXPECT_EQ(read.versions, (std::vector<int64_t>{7, kNoVersion}));
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0));
  EXPECT_EQ(listing.rows[0].version, 5);
  EXPECT_EQ(listing.rows[7].version, kNoVersion);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  EXPECT_EQ(batch.versions, (std::vector<int64_t>{5, 7, 7, 7, 7, 7, kNoVersion, kNoVersion}))
      << "row 0 went back to 5, row 1 kept 7; rows 6 and 7 have none";
}

TEST(VersionsTest, ABatchOfRowsWithoutVersionsCarriesNone) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Reader("a", {"prompt"}, 2)})));
  ASSERT_OK(PutVersions(*dock, {0, 1}, "prompt", {}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("a")));
  EXPECT_TRUE(batch.versions.empty());
}

TEST(VersionsTest, TheDocksVersionOnlyAdvances) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Reader("a", {"prompt"}, 2)})));
  EXPECT_EQ(dock->version(), 0);
  ASSERT_OK(dock->SetVersion(4));
  ASSERT_OK(dock->SetVersion(4));  // the same one changes nothing
  EXPECT_STATUS(dock->SetVersion(3), absl::StatusCode::kFailedPrecondition,
                "dock 'drops' is at version 4; a version only advances (3 was asked for)");
  EXPECT_STATUS(dock->SetVersion(-1), absl::StatusCode::kInvalidArgument,
                "version -1 is negative");
  EXPECT_EQ(dock->version(), 4);
  EXPECT_EQ(dock->Stats().version, 4);
  EXPECT_STATUS(PutVersions(*dock, {0, 1}, "prompt", {4, 5}),
                absl::StatusCode::kFailedPrecondition,
                "version 5 of row 1 is newer than the dock's version 4: no weights of "
                "that version exist yet");
  EXPECT_TRUE(dock->Stats().steps.empty()) << "nothing was written";
  ASSERT_OK(dock->SetVersion(5));
  ASSERT_OK(PutVersions(*dock, {0, 1}, "prompt", {4, 5}));
}

TEST(VersionsTest, BadVersionsChangeNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(testing::DropSpec({Reader("a", {"prompt"}, 2)})));
  ASSERT_OK(dock->SetVersion(10));
  EXPECT_STATUS(PutVersions(*dock, {0, 1, 2}, "prompt", {1, 2}),
                absl::StatusCode::kInvalidArgument,
                "2 versions for 3 rows; give one for all, or one per row");
  EXPECT_STATUS(PutVersions(*dock, {0, 1}, "prompt", {3, -1}), absl::StatusCode::kInvalidArgument,
                "version -1 of row 1 is negative");
  EXPECT_STATUS(PutVersions(*dock, {0, 1}, "prompt", {-2}), absl::StatusCode::kInvalidArgument,
                "version -2 is negative");
  EXPECT_TRUE(dock->Stats().steps.empty()) << "nothing was written";
}

}  // namespace
}  // namespace tdock
