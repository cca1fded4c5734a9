// RetryTimes and PolicyVersion on their own: a retry is due from its time
// on and taken once; a later ask replaces an earlier one; Next is the
// earliest asked; concurrent takers of one due retry take it once. The
// policy version only goes up, concurrent raises keep the highest.
#include "server/dock/retry_times.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/policy_version.h"

namespace tdock::internal {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

TEST(RetryTimes, ARetryIsDueFromItsTimeAndTakenOnce) {
  RetryTimes retries;
  EXPECT_EQ(retries.Next(), absl::InfiniteFuture());
  EXPECT_FALSE(retries.TakeDue(RetryTimes::kReserves, kT0));
  retries.Ask(RetryTimes::kReserves, kT0 + absl::Seconds(1));
  EXPECT_EQ(retries.Next(), kT0 + absl::Seconds(1));
  EXPECT_FALSE(retries.TakeDue(RetryTimes::kReserves, kT0)) << "not due yet";
  EXPECT_FALSE(retries.TakeDue(RetryTimes::kOrphans, kT0 + absl::Seconds(2)))
      << "another kind's retry";
  EXPECT_TRUE(retries.TakeDue(RetryTimes::kReserves, kT0 + absl::Seconds(1)));
  EXPECT_FALSE(retries.TakeDue(RetryTimes::kReserves, kT0 + absl::Seconds(2))) << "taken";
  EXPECT_EQ(retries.Next(), absl::InfiniteFuture());
}

TEST(RetryTimes, ALaterAskReplacesAndNextIsTheEarliest) {
  RetryTimes retries;
  retries.Ask(RetryTimes::kStaleGets, kT0 + absl::Seconds(1));
  retries.Ask(RetryTimes::kStaleGets, kT0 + absl::Seconds(5));
  retries.Ask(RetryTimes::kOrphans, kT0 + absl::Seconds(3));
  EXPECT_EQ(retries.Next(), kT0 + absl::Seconds(3));
  EXPECT_FALSE(retries.TakeDue(RetryTimes::kStaleGets, kT0 + absl::Seconds(2)))
      << "asked again for later";
  EXPECT_TRUE(retries.TakeDue(RetryTimes::kOrphans, kT0 + absl::Seconds(3)));
  EXPECT_EQ(retries.Next(), kT0 + absl::Seconds(5));
}

TEST(RetryTimes, ConcurrentTakersOfOneDueRetryTakeItOnce) {
  RetryTimes retries;
  retries.Ask(RetryTimes::kReserves, kT0);
  std::atomic<int> taken{0};
  std::vector<std::thread> takers;
  for (int i = 0; i < 4; ++i) {
    takers.emplace_back([&] {
      if (retries.TakeDue(RetryTimes::kReserves, kT0 + absl::Seconds(1))) ++taken;
    });
  }
  for (std::thread& t : takers) t.join();
  EXPECT_EQ(taken.load(), 1);
}

TEST(PolicyVersion, OnlyGoesUpAndConcurrentRaisesKeepTheHighest) {
  PolicyVersion version;
  EXPECT_EQ(version.current(), 0);
  EXPECT_EQ(version.Raise(3), 3);
  EXPECT_EQ(version.Raise(2), 3) << "a lower version leaves it";
  EXPECT_EQ(version.current(), 3);
  std::vector<std::thread> raisers;
  for (int i = 0; i < 4; ++i) {
    raisers.emplace_back([&version, i] {
      for (int64_t v = 4 + i; v < 1000; v += 4) version.Raise(v);
    });
  }
  for (std::thread& t : raisers) t.join();
  EXPECT_EQ(version.current(), 999);
}

}  // namespace
}  // namespace tdock::internal
