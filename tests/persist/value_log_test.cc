// The value log (server/persist/value_log.h) alone: values come back byte
// for byte; a value never spans segments; each group appends to segments of
// its own; a segment is reused only once nothing live points into it and
// the deletion is durable; nothing is reused while recovering; a missing or
// short segment, or a changed byte, is DATA_LOSS naming the file.
#include "server/persist/value_log.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/persist/persist_test_util.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

constexpr int64_t kSegment = int64_t{1} << 20;

// Values of one group.
std::vector<ValueLog::Value> In(absl::string_view group,
                                std::initializer_list<absl::string_view> values) {
  std::vector<ValueLog::Value> out;
  for (absl::string_view v : values) out.push_back({group, v});
  return out;
}

class ValueLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir("vlog"); }
  void TearDown() override { RemoveDir(dir_); }
  std::unique_ptr<ValueLog> Open(int spares = 2) {
    absl::StatusOr<std::unique_ptr<ValueLog>> log =
        ValueLog::Open(dir_ + "/values", {.segment_bytes = kSegment, .spare_segments = spares});
    EXPECT_OK(log.status());
    return log.ok() ? *std::move(log) : nullptr;
  }
  std::string dir_;
};

// Appended values read back; one that does not fit the rest of a segment
// starts the next one; a value larger than a segment is refused.
TEST_F(ValueLogTest, AppendsAndReadsBackWithoutSpanningSegments) {
  std::unique_ptr<ValueLog> log = Open();
  log->FinishRecovery();
  const std::vector<std::string> values = {Value(600 << 10, 1), Value(600 << 10, 2),
                                           Value(10, 3)};
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> refs,
                       log->Append(In("g", {values[0], values[1], values[2]})));
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].offset, 0u);
  EXPECT_NE(refs[1].segment, refs[0].segment);  // 1.2 MiB do not fit one 1 MiB segment
  EXPECT_EQ(refs[1].offset, 0u);
  EXPECT_EQ(refs[2].segment, refs[1].segment);
  EXPECT_EQ(refs[2].offset, 600u << 10);
  for (size_t i = 0; i < refs.size(); ++i) {
    std::string out;
    ASSERT_OK(log->Read(refs[i], out));
    EXPECT_EQ(out, values[i]) << i;
  }
  EXPECT_EQ(SegmentFiles(dir_ + "/values").size(), 2u);
  EXPECT_STATUS(log->Append(In("g", {Value(kSegment + 1, 4)})), absl::StatusCode::kInvalidArgument,
                "larger than a segment");
}

// A segment whose values are dead is written over only after Durable();
// spare files beyond the limit are removed.
TEST_F(ValueLogTest, RecyclesOnlyDurablyDeadSegments) {
  std::unique_ptr<ValueLog> log = Open(/*spares=*/1);
  log->FinishRecovery();
  std::vector<ValueRef> all;
  for (int i = 0; i < 4; ++i) {  // four segments, each full
    ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> refs, log->Append(In("g", {Value(kSegment, i)})));
    log->Live(refs[0]);
    all.push_back(refs[0]);
  }
  EXPECT_EQ(log->stats().segments, 4);
  for (int i = 0; i < 3; ++i) log->Dead(all[i]);
  // Not yet durable: the next value goes to a new file.
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> fifth, log->Append(In("g", {Value(100, 9)})));
  log->Live(fifth[0]);
  EXPECT_EQ(fifth[0].segment, all[3].segment + 1);
  EXPECT_EQ(log->stats().recycled, 0);
  log->Durable();
  // One spare kept, two of the three dead files removed.
  EXPECT_EQ(log->stats().spare, 1);
  EXPECT_EQ(SegmentFiles(dir_ + "/values").size(), 3u);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> next, log->Append(In("g", {Value(kSegment, 10)})));
  EXPECT_EQ(log->stats().recycled, 1);
  EXPECT_LT(next[0].segment, all[3].segment);  // an old file, written over
  std::string out;
  ASSERT_OK(log->Read(next[0], out));
  EXPECT_EQ(out, Value(kSegment, 10));
  ASSERT_OK(log->Read(all[3], out));
  EXPECT_EQ(out, Value(kSegment, 3));
}

// Each group appends to a segment of its own. A group whose values are all
// dead, durably, writes its segment over from the start; a group dropped
// (its dock deleted) gives the segment up for reuse by any group, while the
// others keep appending where they were.
TEST_F(ValueLogTest, GroupsKeepSegmentsOfTheirOwn) {
  std::unique_ptr<ValueLog> log = Open();
  log->FinishRecovery();
  const std::string a1 = Value(3000, 1), b1 = Value(3000, 2), a2 = Value(3000, 3);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> first,
                       log->Append({{"a", a1}, {"b", b1}, {"a", a2}}));
  EXPECT_EQ(first[0].segment, first[2].segment);
  EXPECT_NE(first[0].segment, first[1].segment);
  EXPECT_EQ(first[2].offset, 3000u);
  for (const ValueRef& ref : first) log->Live(ref);
  log->Dead(first[1]);  // b's step released
  const std::string b2 = Value(2000, 4);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> early, log->Append({{"b", b2}}));
  EXPECT_EQ(early[0].offset, 3000u);  // not durable yet: after b1
  log->Live(early[0]);
  log->Dead(early[0]);
  log->Durable();
  const std::string b3 = Value(1000, 5);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> over, log->Append({{"b", b3}}));
  EXPECT_EQ(over[0].segment, first[1].segment);
  EXPECT_EQ(over[0].offset, 0u);  // durable: from the start
  log->Live(over[0]);
  log->Dead(over[0]);
  log->DropGroups("b", "c");  // b's dock deleted
  log->Durable();
  EXPECT_EQ(log->stats().spare, 1);
  const std::string a3 = Value(100, 6), c1 = Value(100, 7);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> next, log->Append({{"a", a3}, {"c", c1}}));
  EXPECT_EQ(next[0].segment, first[0].segment);
  EXPECT_EQ(next[0].offset, 6000u);
  EXPECT_EQ(next[1].segment, first[1].segment);  // b's file, written over
  EXPECT_EQ(log->stats().recycled, 1);
  std::string out;
  ASSERT_OK(log->Read(next[1], out));
  EXPECT_EQ(out, c1);
  ASSERT_OK(log->Read(first[2], out));
  EXPECT_EQ(out, a2);
}

// Values of several groups interleaved in one append, one group rolling to
// a new segment in the middle: every value reads back.
TEST_F(ValueLogTest, InterleavedGroupsAndARollReadBack) {
  std::unique_ptr<ValueLog> log = Open();
  log->FinishRecovery();
  std::vector<std::string> bytes;
  std::vector<ValueLog::Value> values;
  for (int i = 0; i < 12; ++i) bytes.push_back(Value(i % 3 == 0 ? 300 << 10 : 5000, i));
  for (int i = 0; i < 12; ++i) values.push_back({i % 3 == 0 ? "big" : (i % 2 ? "x" : "y"), bytes[i]});
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> refs, log->Append(values));
  EXPECT_NE(refs[0].segment, refs[9].segment);  // 4 x 300 KiB: "big" rolled
  for (size_t i = 0; i < refs.size(); ++i) {
    std::string out;
    ASSERT_OK(log->Read(refs[i], out));
    EXPECT_TRUE(out == bytes[i]) << i;
  }
}

// A pointer encodes and decodes whole; other lengths do not decode.
TEST(ValueRefTest, EncodesAndDecodes) {
  const ValueRef ref{0x0102030405060708, 0x1112131415161718, 0x2122232425262728, 0xE3069283};
  char encoded[ValueRef::kEncodedBytes];
  ref.EncodeTo(encoded);
  ValueRef back;
  ASSERT_TRUE(ValueRef::Decode(absl::string_view(encoded, sizeof encoded), back));
  EXPECT_EQ(back.segment, ref.segment);
  EXPECT_EQ(back.offset, ref.offset);
  EXPECT_EQ(back.length, ref.length);
  EXPECT_EQ(back.crc, ref.crc);
  EXPECT_FALSE(ValueRef::Decode(absl::string_view(encoded, 24), back));
}

// Nothing is recycled while recovering: until FinishRecovery every segment
// may hold a value a scan has not reached yet.
TEST_F(ValueLogTest, ReopenedLogReusesOnlyAfterRecovery) {
  ValueRef kept;
  {
    std::unique_ptr<ValueLog> log = Open();
    log->FinishRecovery();
    ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> a, log->Append(In("g", {Value(kSegment, 1)})));
    ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> b, log->Append(In("g", {Value(kSegment, 2)})));
    kept = b[0];
  }
  std::unique_ptr<ValueLog> log = Open();
  EXPECT_EQ(log->stats().segments, 2);
  log->Live(kept);
  log->Durable();
  EXPECT_EQ(log->stats().spare, 0);
  log->FinishRecovery();
  EXPECT_EQ(log->stats().spare, 1);  // the one nothing points into
  std::string out;
  ASSERT_OK(log->Read(kept, out));
  EXPECT_EQ(out, Value(kSegment, 2));
}

// A missing segment or a value past the end of its file is DATA_LOSS
// naming the file.
TEST_F(ValueLogTest, MissingOrShortSegmentIsDataLossNamingTheFile) {
  std::unique_ptr<ValueLog> log = Open();
  log->FinishRecovery();
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> refs, log->Append(In("g", {Value(5000, 1)})));
  std::string out;
  ValueRef missing = refs[0];
  missing.segment = 99;
  EXPECT_STATUS(log->Read(missing, out), absl::StatusCode::kDataLoss,
                "0000000000000063.vlog is missing");
  ValueRef past = refs[0];
  past.offset = kSegment - 10;
  EXPECT_STATUS(log->Read(past, out), absl::StatusCode::kDataLoss, "past the end of");
}

// A value whose bytes changed on disk (one flipped bit) is DATA_LOSS: the
// pointer's CRC-32C no longer matches. The checksum is the standard one.
TEST_F(ValueLogTest, FlippedBitIsDataLoss) {
  std::unique_ptr<ValueLog> log = Open();
  log->FinishRecovery();
  const std::string check = "123456789";  // CRC-32C 0xE3069283
  const std::string v = Value(5000, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<ValueRef> refs, log->Append(In("g", {check, v})));
  EXPECT_EQ(refs[0].crc, 0xE3069283u);
  log.reset();
  const std::vector<std::string> files = SegmentFiles(dir_ + "/values");
  ASSERT_EQ(files.size(), 1u);
  {
    std::FILE* f = std::fopen(files[0].c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(refs[1].offset + 4321), SEEK_SET);
    std::fputc(v[4321] ^ 0x10, f);
    std::fclose(f);
  }
  log = Open();
  std::string out;
  ASSERT_OK(log->Read(refs[0], out));
  EXPECT_STATUS(log->Read(refs[1], out), absl::StatusCode::kDataLoss,
                "does not match its checksum");
}

}  // namespace
}  // namespace tdock::persist
