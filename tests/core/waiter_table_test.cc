// WaiterTable on its own: a call parks only if its last check (run under the
// table's lock) does not serve it; wake-ups take out the waiters they are
// for and leave those already being retried; an end (cancel, expiry,
// shutdown) that comes during a retry is left to the retrier, so each waiter
// ends exactly once; nothing parks after Shutdown.
#include "server/dock/waiter_table.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

std::shared_ptr<Waiter> GetWaiter(int consumer, absl::Duration wait = absl::Seconds(10)) {
  std::shared_ptr<Waiter> w = WaiterTable::New(absl::Now() + wait);
  w->consumer = consumer;
  return w;
}

std::shared_ptr<Waiter> PutWaiter(absl::Duration wait = absl::Seconds(10)) {
  std::shared_ptr<Waiter> w = WaiterTable::New(absl::Now() + wait);
  w->kind = Waiter::Kind::kPut;
  return w;
}

std::shared_ptr<Waiter> ReserveWaiter(absl::Duration wait = absl::Seconds(10)) {
  std::shared_ptr<Waiter> w = WaiterTable::New(absl::Now() + wait);
  w->kind = Waiter::Kind::kReserve;
  return w;
}

TEST(WaiterTable, ParksOnlyWhatItsLastCheckDoesNotServe) {
  WaiterTable table;
  std::shared_ptr<Waiter> served = GetWaiter(0);
  EXPECT_EQ(table.Park(served, 0, [] { return true; }), WaiterTable::Parking::kServed);
  std::shared_ptr<Waiter> parked = GetWaiter(0);
  EXPECT_EQ(table.Park(parked, 0, [] { return false; }), WaiterTable::Parking::kParked);
  EXPECT_NE(served->id, parked->id);
  const WaiterTable::Counts counts = table.Count(2);
  EXPECT_EQ(counts.puts, 0);
  EXPECT_EQ(counts.gets, std::vector<int64_t>({1, 0}));
}

TEST(WaiterTable, RefusesGetsOverTheLimitPerConsumer) {
  WaiterTable table;
  ASSERT_EQ(table.Park(GetWaiter(0), 2, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(GetWaiter(0), 2, [] { return false; }), WaiterTable::Parking::kParked);
  bool checked = false;
  EXPECT_EQ(table.Park(GetWaiter(0), 2, [&] { return checked = true; }),
            WaiterTable::Parking::kTooMany);
  EXPECT_FALSE(checked) << "a refused call must not be served";
  EXPECT_EQ(table.Park(GetWaiter(1), 2, [] { return false; }), WaiterTable::Parking::kParked);
}

TEST(WaiterTable, WakeUpsTakeTheirConsumersGetsOnce) {
  WaiterTable table;
  std::shared_ptr<Waiter> a = GetWaiter(0), b = GetWaiter(1);
  ASSERT_EQ(table.Park(a, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(b, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(PutWaiter(), 0, [] { return false; }), WaiterTable::Parking::kParked);
  std::vector<std::shared_ptr<Waiter>> woken = table.TakeGets({false, true});
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0], b);
  EXPECT_TRUE(table.TakeGets({false, true}).empty()) << "b is already being retried";
  // Not served: b is parked again and the next wake-up takes it.
  EXPECT_EQ(table.FinishRetry(b, [] { return false; }), Waiter::End::kNone);
  EXPECT_EQ(table.TakeGets({}).size(), 2u);
  EXPECT_EQ(table.FinishRetry(a, [] { return true; }), Waiter::End::kNone);
  EXPECT_EQ(table.FinishRetry(b, [] { return true; }), Waiter::End::kNone);
  const WaiterTable::Counts counts = table.Count(2);
  EXPECT_EQ(counts.puts, 1);  // the Put
  EXPECT_EQ(counts.gets, std::vector<int64_t>({0, 0}));
}

TEST(WaiterTable, AnEndDuringARetryIsLeftToTheRetrier) {
  WaiterTable table;
  std::shared_ptr<Waiter> w = GetWaiter(0);
  ASSERT_EQ(table.Park(w, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.TakeGets({}).size(), 1u);
  EXPECT_EQ(table.Cancel(w->id), nullptr) << "in retry: the retrier ends it";
  bool checked = false;
  EXPECT_EQ(table.FinishRetry(w, [&] { return checked = true; }), Waiter::End::kCancelled);
  EXPECT_FALSE(checked) << "an ended call is not served";
  EXPECT_EQ(table.Cancel(w->id), nullptr) << "gone";
}

TEST(WaiterTable, APutWokenDuringItsRetryTriesAgain) {
  WaiterTable table;
  std::shared_ptr<Waiter> w = PutWaiter();
  ASSERT_EQ(table.Park(w, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.TakePuts().size(), 1u);
  EXPECT_FALSE(table.Ended(w));
  EXPECT_TRUE(table.TakePuts().empty()) << "in retry: marked to go again instead";
  Waiter::End end = Waiter::End::kNone;
  EXPECT_EQ(table.FinishPutRetry(w, /*done=*/false, &end), WaiterTable::AfterRetry::kAgain);
  EXPECT_FALSE(table.Ended(w));
  EXPECT_EQ(table.FinishPutRetry(w, /*done=*/false, &end), WaiterTable::AfterRetry::kParked);
  EXPECT_EQ(table.TakePuts().size(), 1u);
  EXPECT_EQ(table.FinishPutRetry(w, /*done=*/true, &end), WaiterTable::AfterRetry::kRemoved);
  EXPECT_EQ(table.Count(0).puts, 0);
}

TEST(WaiterTable, ExpiresWhatIsPastItsDeadline) {
  WaiterTable table;
  std::shared_ptr<Waiter> soon = GetWaiter(0, absl::Milliseconds(1));
  std::shared_ptr<Waiter> retried = GetWaiter(0, absl::Milliseconds(1));
  std::shared_ptr<Waiter> later = PutWaiter(absl::Hours(1));
  for (const auto& w : {soon, retried, later}) {
    ASSERT_EQ(table.Park(w, 0, [] { return false; }), WaiterTable::Parking::kParked);
  }
  for (const auto& w : table.TakeGets({})) {
    if (w != retried) table.FinishRetry(w, [] { return false; });
  }
  WaiterTable::Expiry expiry = table.Expire(absl::Now() + absl::Seconds(1));
  ASSERT_EQ(expiry.expired.size(), 1u);
  EXPECT_EQ(expiry.expired[0], soon);
  EXPECT_TRUE(expiry.puts_parked);
  EXPECT_EQ(expiry.next, later->deadline);
  EXPECT_EQ(table.FinishRetry(retried, [] { return false; }), Waiter::End::kExpired);
}

TEST(WaiterTable, NothingParksAfterShutdown) {
  WaiterTable table;
  std::shared_ptr<Waiter> parked = GetWaiter(0), retried = GetWaiter(1);
  ASSERT_EQ(table.Park(parked, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(retried, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.TakeGets({false, true}).size(), 1u);
  std::vector<std::shared_ptr<Waiter>> ended = table.Shutdown();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0], parked);
  EXPECT_EQ(table.FinishRetry(retried, [] { return false; }), Waiter::End::kShutdown);
  EXPECT_EQ(table.Park(GetWaiter(0), 0, [] { return false; }),
            WaiterTable::Parking::kShuttingDown);
}

}  // namespace
}  // namespace tdock::internal

namespace tdock::internal {
namespace {

// Reserves share the table with Gets and Puts: one id space, their own cap
// (for the dock, not per consumer), taken out only by a wake-up for
// Reserves, and ended by expiry like the others.
TEST(WaiterTable, ReservesHaveTheirOwnCapAndWakeUps) {
  WaiterTable table;
  std::shared_ptr<Waiter> a = ReserveWaiter(), b = ReserveWaiter();
  ASSERT_EQ(table.Park(a, 2, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(b, 2, [] { return false; }), WaiterTable::Parking::kParked);
  bool checked = false;
  EXPECT_EQ(table.Park(ReserveWaiter(), 2, [&] { return checked = true; }),
            WaiterTable::Parking::kTooMany);
  EXPECT_FALSE(checked) << "a refused call must not be tried";
  // Gets of consumer 0 are capped on their own.
  EXPECT_EQ(table.Park(GetWaiter(0), 2, [] { return false; }), WaiterTable::Parking::kParked);
  EXPECT_EQ(table.Count(1).reserves, 2);
  EXPECT_EQ(table.Count(1).gets, std::vector<int64_t>({1}));

  EXPECT_EQ(table.TakeGets({}).size(), 1u) << "a wake-up for Gets takes no Reserve";
  EXPECT_TRUE(table.TakePuts().empty());
  std::vector<std::shared_ptr<Waiter>> woken = table.TakeReserves();
  ASSERT_EQ(woken.size(), 2u);
  EXPECT_TRUE(table.TakeReserves().empty()) << "both are being retried";
  EXPECT_EQ(table.FinishRetry(a, [] { return true; }), Waiter::End::kNone);  // granted
  EXPECT_EQ(table.FinishRetry(b, [] { return false; }), Waiter::End::kNone);  // parked again
  EXPECT_EQ(table.Count(1).reserves, 1);
  // A freed place is taken again under the cap.
  EXPECT_EQ(table.Park(ReserveWaiter(), 2, [] { return false; }), WaiterTable::Parking::kParked);
  EXPECT_EQ(table.Cancel(b->id), b);
  EXPECT_EQ(table.Count(1).reserves, 1);
}

TEST(WaiterTable, ExpiryEndsReservesWithoutRetryingThem) {
  WaiterTable table;
  std::shared_ptr<Waiter> soon = ReserveWaiter(absl::Milliseconds(1));
  std::shared_ptr<Waiter> later = ReserveWaiter(absl::Hours(1));
  ASSERT_EQ(table.Park(soon, 0, [] { return false; }), WaiterTable::Parking::kParked);
  ASSERT_EQ(table.Park(later, 0, [] { return false; }), WaiterTable::Parking::kParked);
  WaiterTable::Expiry expiry = table.Expire(absl::Now() + absl::Seconds(1));
  ASSERT_EQ(expiry.expired.size(), 1u);
  EXPECT_EQ(expiry.expired[0], soon);
  EXPECT_FALSE(expiry.puts_parked) << "no Put is parked: nothing to retry on a tick";
  EXPECT_EQ(expiry.next, later->deadline);
  EXPECT_EQ(table.Count(0).reserves, 1);
}

}  // namespace
}  // namespace tdock::internal
