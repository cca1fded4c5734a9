// TimerService: alarms ring at the earliest time asked for, in time order,
// on one thread; Stop waits for a ring in progress and nothing rings after
// it; an alarm may stop itself (and drop what owns it) from its callback.
// And the docks of a registry share it: many docks with parked Gets and
// leases add no threads.
#include "common/timer_service.h"

#include <dirent.h>

#include <atomic>
#include <future>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// On a manual clock an alarm rings when an advance passes its time, however
// long the real wait, and not before.
TEST(TimerService, ManualClockRingsOnlyWhenAdvancedPastTheTime) {
  auto clock = std::make_shared<ManualClock>();
  TimerService timers(clock);
  std::atomic<int> rings{0};
  std::promise<void> rang;
  auto alarm = timers.NewAlarm([&] {
    if (++rings == 1) rang.set_value();
  });
  alarm->RingAt(clock->Now() + absl::Hours(1));
  std::future<void> done = rang.get_future();
  clock->Advance(absl::Minutes(59));
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  clock->Advance(absl::Minutes(1));
  done.get();
  EXPECT_EQ(rings, 1);
}

TEST(TimerService, RingsAtTheEarliestTimeAskedInOrder) {
  TimerService timers;
  tdock::Mutex mu;
  std::vector<int> order;
  std::promise<void> both;
  auto ring = [&](int which) {
    tdock::MutexLock lock(&mu);
    order.push_back(which);
    if (order.size() == 2) both.set_value();
  };
  auto late = timers.NewAlarm([&] { ring(2); });
  auto early = timers.NewAlarm([&] { ring(1); });
  const absl::Time now = absl::Now();
  late->RingAt(now + absl::Milliseconds(40));
  early->RingAt(now + absl::Hours(1));
  early->RingAt(now + absl::Milliseconds(20));  // earlier: replaces the hour
  early->RingAt(now + absl::Hours(2));           // later: ignored
  both.get_future().get();
  tdock::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(TimerService, StopWaitsForARingAndNothingRingsAfter) {
  TimerService timers;
  std::atomic<int> rings{0};
  std::promise<void> started;
  std::atomic<bool> finished{false};
  auto alarm = timers.NewAlarm([&] {
    if (rings++ == 0) started.set_value();
    absl::SleepFor(absl::Milliseconds(50));
    finished = true;
  });
  alarm->RingAt(absl::Now());
  started.get_future().get();
  alarm->Stop();
  EXPECT_TRUE(finished) << "Stop returned while the alarm was ringing";
  alarm->RingAt(absl::Now());
  absl::SleepFor(absl::Milliseconds(50));  // a stopped alarm rings no more
  EXPECT_EQ(rings, 1);
}

TEST(TimerService, AnAlarmMayEndItselfAndItsServiceFromItsCallback) {
  auto timers = std::make_unique<TimerService>();
  std::unique_ptr<TimerService::Alarm> alarm;
  std::promise<void> done;
  alarm = timers->NewAlarm([&] {
    alarm.reset();   // Stop from its own callback: no wait, no deadlock
    timers.reset();  // and the service, on its own thread
    done.set_value();
  });
  alarm->RingAt(absl::Now());
  done.get_future().get();
  EXPECT_EQ(alarm, nullptr);
  EXPECT_EQ(timers, nullptr);
}

int ThreadsOfThisProcess() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

// Every dock of a registry runs its wait bounds and leases on the
// registry's one timer thread: 32 docks, each with a parked Get and a lease
// in flight, start no thread; the parked Gets still end at their bound.
TEST(TimerService, DocksOfARegistryShareOneThread) {
  DockRegistry registry;
  const int before = ThreadsOfThisProcess();
  std::vector<std::future<absl::StatusOr<Batch>>> parked;
  std::vector<std::shared_ptr<std::promise<absl::StatusOr<Batch>>>> promises;
  for (int d = 0; d < 32; ++d) {
    DockSpec spec;
    spec.name = absl::StrCat("d", d);
    spec.num_prompts = 2;
    spec.columns = {{"x", DType::kInt32, {}, 0, false}};
    ConsumerSpec leased{"leased", {"x"}, 1, 1, false, Policy::kFifo, 0};
    leased.lease_ms = 60'000;
    spec.consumers = {leased, {"waiting", {"x"}, 2, 1, false, Policy::kFifo, 0}};
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, registry.Create(spec));
    ASSERT_OK(testing::PutSync(*dock, 0, {0},
                               {testing::OwnedColumn::Of<int32_t>("x", DType::kInt32, {{1}})}));
    ASSERT_OK_AND_ASSIGN(Batch leased_rows, testing::GetSync(*dock, testing::GetOf("leased")));
    EXPECT_NE(leased_rows.lease_id, 0u);
    auto promise = std::make_shared<std::promise<absl::StatusOr<Batch>>>();
    parked.push_back(promise->get_future());
    dock->Get(testing::GetOf("waiting", 2, absl::Milliseconds(200)),
              [promise](absl::StatusOr<Batch> b) { promise->set_value(std::move(b)); });
  }
  // At most as many: a thread an earlier test ended may still be leaving
  // the process's task list (on a busy machine) when `before` is counted.
  EXPECT_LE(ThreadsOfThisProcess(), before);
  for (auto& got : parked) {
    ASSERT_OK_AND_ASSIGN(Batch batch, got.get());
    EXPECT_TRUE(batch.timed_out);
  }
  registry.Shutdown();
}

}  // namespace
}  // namespace tdock
