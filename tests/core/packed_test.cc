// Packed columns: offset validation and copies out of split segments.
#include "common/packed.h"

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

PackedColumn Column(std::vector<int64_t> offsets, const std::string& data) {
  PackedColumn c;
  c.name = "response_ids";
  c.dtype = DType::kInt32;
  c.offsets = std::move(offsets);
  if (!data.empty()) c.segments.emplace_back(data.data(), data.size());
  return c;
}

// Well-formed columns pass: rows of 2, 0 and 1 int32 items; zero rows either
// as a single 0 offset or as no offsets; data split over segments.
TEST(ValidatePacked, Accepts) {
  const std::string data(12, 'x');
  EXPECT_OK(ValidatePacked(Column({0, 2, 2, 3}, data), 3, 4));
  EXPECT_OK(ValidatePacked(Column({0}, ""), 0, 4));
  EXPECT_OK(ValidatePacked(Column({}, ""), 0, 4));
  PackedColumn split = Column({0, 1, 3}, "");
  split.segments = {ByteSpan(data.data(), 5), ByteSpan(data.data() + 5, 7)};
  EXPECT_OK(ValidatePacked(split, 2, 4));
  EXPECT_EQ(split.data_bytes(), 12);
  EXPECT_EQ(split.rows(), 2);
  EXPECT_EQ(split.length(1), 2);
}

// Each malformed column is INVALID_ARGUMENT naming the column and what is
// wrong with it.
TEST(ValidatePacked, Rejects) {
  const std::string data(12, 'x');
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_STATUS(ValidatePacked(Column({0, 3}, data), 2, 4), kInvalid,
                "column 'response_ids': 2 offsets for 2 rows, want 3");
  EXPECT_STATUS(ValidatePacked(Column({0, 1, 2, 3}, data), 2, 4), kInvalid,
                "4 offsets for 2 rows, want 3");
  EXPECT_STATUS(ValidatePacked(Column({1, 2, 3}, data), 2, 4), kInvalid,
                "column 'response_ids': offsets[0] is 1, want 0");
  EXPECT_STATUS(
      ValidatePacked(Column({0, 2, 1, 3}, data), 3, 4), kInvalid,
      "column 'response_ids': offsets[2] = 1 is less than offsets[1] = 2");
  EXPECT_STATUS(
      ValidatePacked(Column({0, 1, 2}, data), 2, 4), kInvalid,
      "column 'response_ids': offsets[2] = 2 items of 4 bytes, but the "
      "data holds 12 bytes");
  EXPECT_STATUS(ValidatePacked(Column({0, 4}, data), 1, 4), kInvalid,
                "offsets[1] = 4 items of 4 bytes, but the data holds 12 bytes");
  EXPECT_STATUS(ValidatePacked(Column({0, int64_t{1} << 62}, data), 1, 8),
                kInvalid,
                "but the data holds 12 bytes");  // items * item_bytes overflows
  EXPECT_STATUS(ValidatePacked(Column({}, data), 0, 4), kInvalid,
                "column 'response_ids': no rows but 12 bytes of data");
  EXPECT_STATUS(ValidatePacked(Column({}, ""), 1, 4), kInvalid,
                "0 offsets for 1 rows");
  EXPECT_STATUS(ValidatePacked(Column({0}, ""), -1, 4), kInvalid,
                "negative row count");
  EXPECT_STATUS(ValidatePacked(Column({0}, ""), 0, 0), kInvalid, "item size 0");
}

// Copies of every range of bytes across segments of uneven sizes (including
// empty ones) return exactly those bytes.
TEST(CopyFromSegments, EveryRangeAcrossBoundaries) {
  std::string data(40, '\0');
  std::iota(data.begin(), data.end(), 'A');
  const std::vector<ByteSpan> segments = {
      ByteSpan(data.data(), 3),      ByteSpan(data.data() + 3, 0),
      ByteSpan(data.data() + 3, 1),  ByteSpan(data.data() + 4, 20),
      ByteSpan(data.data() + 24, 0), ByteSpan(data.data() + 24, 16)};
  for (int64_t pos = 0; pos <= 40; ++pos) {
    for (int64_t len = 0; pos + len <= 40; ++len) {
      std::string out(static_cast<size_t>(len) + 1, '#');
      CopyFromSegments(segments, pos, len, out.data());
      ASSERT_EQ(out.substr(0, len), data.substr(pos, len)) << pos << "+" << len;
      ASSERT_EQ(out.back(), '#') << "wrote past the requested length";
    }
  }
}

}  // namespace
}  // namespace tdock
