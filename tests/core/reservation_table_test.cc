// ReservationTable on its own: entries leave by deadline (and are then
// remembered as expired), with their step's release, or when their record
// failed; ids are fresh and stay above recovered ones.
#include "server/dock/reservation_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

using Kind = ReservationTable::Lookup::Kind;

ReservationTable::Entry At(int64_t step, absl::Time deadline) {
  return {.step = step, .rows = {0, 1}, .version = 3, .deadline = deadline};
}

TEST(ReservationTable, ExpiresInDeadlineOrderAndRemembersWhatExpired) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  ReservationTable table(1);
  table.Add(10, At(0, t0 + absl::Seconds(3)));
  table.Add(11, At(0, t0 + absl::Seconds(1)));
  table.Add(12, At(1, t0 + absl::Seconds(9)));
  EXPECT_EQ(table.NextDeadline(), t0 + absl::Seconds(1));
  EXPECT_TRUE(table.TakeExpired(t0).empty());
  const auto expired = table.TakeExpired(t0 + absl::Seconds(3));
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(expired[0].first, 11u);
  EXPECT_EQ(expired[1].first, 10u);
  EXPECT_EQ(expired[1].second.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(table.counts().live, 1);
  EXPECT_EQ(table.NextDeadline(), t0 + absl::Seconds(9));
  const ReservationTable::Lookup gone = table.Find(10);
  EXPECT_EQ(gone.kind, Kind::kExpired);
  EXPECT_EQ(gone.entry.step, 0);
  EXPECT_EQ(gone.entry.deadline, t0 + absl::Seconds(3));
  EXPECT_EQ(table.Find(12).kind, Kind::kLive);
  EXPECT_EQ(table.Find(99).kind, Kind::kUnknown);
}

// A released step's reservations go with it, whatever their deadline: a
// table of a long-running dock does not grow with the steps it released.
TEST(ReservationTable, AReleasedStepTakesItsReservationsWithIt) {
  const absl::Time far = absl::UnixEpoch() + absl::Hours(24);
  ReservationTable table(1);
  for (uint64_t id = 1; id <= 40; ++id) table.Add(id, At(static_cast<int64_t>(id % 4), far));
  EXPECT_EQ(table.counts().live, 40);
  for (int64_t step = 0; step < 4; ++step) table.ForgetStep(step);
  EXPECT_EQ(table.counts().live, 0);
  EXPECT_EQ(table.NextDeadline(), absl::InfiniteFuture());
  EXPECT_EQ(table.Find(7).kind, Kind::kUnknown) << "released, not expired";
  table.ForgetStep(5);  // none: nothing happens
}

TEST(ReservationTable, AnEntryExpiringAgainIsLiveAgain) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  ReservationTable table(1);
  table.Add(5, At(0, t0));
  ASSERT_EQ(table.TakeExpired(t0).size(), 1u);
  // Its drop was not stored: it expires again later.
  table.Add(5, At(0, t0 + absl::Seconds(1)));
  EXPECT_EQ(table.Find(5).kind, Kind::kLive);
  table.Erase(5);
  EXPECT_EQ(table.Find(5).kind, Kind::kUnknown);
  EXPECT_EQ(table.counts().live, 0);
}

TEST(ReservationTable, IdsAreFreshAndAboveRecoveredOnes) {
  ReservationTable table(uint64_t{7} << 40);
  const uint64_t first = table.NewId();
  EXPECT_EQ(first, uint64_t{7} << 40);
  table.NoteRecoveredId(first + 100);
  EXPECT_EQ(table.NewId(), first + 101);
  table.NoteRecoveredId(first);  // older: changes nothing
  EXPECT_EQ(table.NewId(), first + 102);
}

TEST(ReservationTable, CountsAdmissionWaits) {
  ReservationTable table(1);
  table.CountAdmissionWait(absl::Milliseconds(1500));
  table.CountAdmissionWait(absl::Milliseconds(500));
  EXPECT_EQ(table.counts().admission_waits, 2);
  EXPECT_DOUBLE_EQ(table.counts().admission_wait_seconds, 2.0);
}

}  // namespace
}  // namespace tdock::internal
