// RowIndex: a step's per-row state besides its cells. Each test states the
// invariant of row_index.h it checks.
#include "server/dock/row_index.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

// A claim holds its rows until released, and only its own release frees
// them; a row of another append's claim cannot be claimed again.
TEST(RowIndexTest, AnAppendClaimHoldsItsRowsUntilItIsReleased) {
  RowIndex index(8);
  tdock::MutexLock lock(&index.mu());
  const uint64_t first = index.NewAppendClaim();
  const uint64_t second = index.NewAppendClaim();
  ASSERT_NE(first, 0u);
  ASSERT_NE(first, second);
  EXPECT_FALSE(index.has_append_claims());
  index.ClaimForAppend({0, 1}, first);
  index.ClaimForAppend({2, 3}, second);
  EXPECT_EQ(index.append_claim(1), first);
  EXPECT_EQ(index.append_claim(3), second);
  EXPECT_EQ(index.append_claim(4), 0u);
  EXPECT_TRUE(index.ReleaseAppendClaim(first));
  EXPECT_FALSE(index.ReleaseAppendClaim(first)) << "given back once";
  EXPECT_EQ(index.append_claim(0), 0u);
  EXPECT_EQ(index.append_claim(2), second) << "another claim's rows stay held";
  EXPECT_TRUE(index.has_append_claims());
  EXPECT_DEATH(index.ClaimForAppend({3}, first), "row 3 assigned to two appends");
}

// Reset (the step released) forgets every claim, but a claim made before it
// never matches one made after: its late release frees nothing.
TEST(RowIndexTest, ClaimsStayUniqueAcrossAReset) {
  RowIndex index(4);
  tdock::MutexLock lock(&index.mu());
  const uint64_t before = index.NewAppendClaim();
  index.ClaimForAppend({0, 1}, before);
  index.set_append_cursor(1);
  index.Reset();
  EXPECT_FALSE(index.has_append_claims());
  EXPECT_EQ(index.append_cursor(), 0);
  const uint64_t after = index.NewAppendClaim();
  EXPECT_NE(after, before);
  index.ClaimForAppend({0, 1}, after);
  EXPECT_FALSE(index.ReleaseAppendClaim(before));
  EXPECT_EQ(index.append_claim(0), after);
}

// A row is closed only while the decision closing it is being stored, and
// says which: a Seal's count goes back to open when its record ends.
TEST(RowIndexTest, ClosedRowsSayWhatClosedThem) {
  RowIndex index(8);
  tdock::MutexLock lock(&index.mu());
  EXPECT_EQ(index.closed(0), RowIndex::Closed::kOpen);
  index.AddDropInFlight(/*seal=*/true, {0, 1}, +1);
  index.SetUnused({2}, /*closed=*/true);
  index.SetExpiring({3}, /*closed=*/true);
  EXPECT_TRUE(index.sealing());
  EXPECT_TRUE(index.drops_in_flight());
  EXPECT_EQ(index.closed(1), RowIndex::Closed::kSealing);
  EXPECT_EQ(index.closed(2), RowIndex::Closed::kUnused);
  EXPECT_EQ(index.closed(3), RowIndex::Closed::kExpiring);
  EXPECT_EQ(index.closed(4), RowIndex::Closed::kOpen);
  index.AddDropInFlight(/*seal=*/true, {0, 1}, -1);
  index.SetUnused({2}, /*closed=*/false);
  index.SetExpiring({3}, /*closed=*/false);
  EXPECT_FALSE(index.sealing());
  for (int64_t row = 0; row < 4; ++row) EXPECT_EQ(index.closed(row), RowIndex::Closed::kOpen);
  EXPECT_DEATH(index.AddDropInFlight(/*seal=*/true, {5}, -1),
               "row 5 opened by a Seal that did not close it");
}

// A row's version only goes down; the bounds cover every version a row had.
TEST(RowIndexTest, AVersionIsTheOldestWrittenAndResetForgetsIt) {
  RowIndex index(4);
  tdock::MutexLock lock(&index.mu());
  EXPECT_FALSE(index.has_versions());
  EXPECT_EQ(index.version(0), kNoVersion);
  index.LowerVersion(0, 5);
  index.LowerVersion(0, 7);
  index.LowerVersion(1, 3);
  EXPECT_EQ(index.version(0), 5);
  EXPECT_EQ(index.version(1), 3);
  EXPECT_EQ(index.min_version(), 3);
  EXPECT_EQ(index.max_version(), 5);
  index.Reset();
  EXPECT_FALSE(index.has_versions());
  EXPECT_EQ(index.version(0), kNoVersion);
  EXPECT_EQ(index.max_version(), kNoVersion);
}

// A key stays until cleared or the step is released; reservations and
// pending writes are per row and gone after a Reset.
TEST(RowIndexTest, KeysReservationsAndPendingWritesAreGoneAfterAReset) {
  RowIndex index(4);
  tdock::MutexLock lock(&index.mu());
  index.SetKey(0, "a");
  index.SetKey(1, "b");
  ASSERT_NE(index.key(0), nullptr);
  EXPECT_EQ(*index.key(0), "a");
  index.ClearKey(1);
  EXPECT_EQ(index.key(1), nullptr);
  EXPECT_TRUE(index.has_keys());
  index.SetReserved({2, 3}, 9);
  EXPECT_EQ(index.reservation(3), 9u);
  index.SetReserved({3}, 0);
  EXPECT_EQ(index.reservation(3), 0u);
  EXPECT_TRUE(index.has_reservations());
  index.AddPendingWrite(2, 1);
  EXPECT_EQ(index.pending_writes(2), 1);
  index.AddExpiredInFlight({2});
  index.Reset();
  EXPECT_EQ(index.key(0), nullptr);
  EXPECT_FALSE(index.has_keys());
  EXPECT_FALSE(index.has_reservations());
  EXPECT_EQ(index.pending_writes(2), 0);
  EXPECT_TRUE(index.expired_in_flight().empty());
}

}  // namespace
}  // namespace tdock::internal
