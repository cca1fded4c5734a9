// TimerService: one thread that rings alarms at their times, shared by every
// dock of a server (the wait bounds of parked calls, lease deadlines, the
// retry tick of Puts waiting for memory) instead of threads per dock.
//
//   TimerService timers;
//   std::unique_ptr<TimerService::Alarm> alarm = timers.NewAlarm([] { ... });
//   alarm->RingAt(absl::Now() + absl::Seconds(1));
//
// Times are on the service's clock (common/clock.h): the real one, or a
// ManualClock whose Advance rings what came due.
//
// An alarm rings once at the earliest time asked for since it last rang;
// its callback asks again for the next time it needs.
//
// Thread safety: every method may be called from any thread, also from an
// alarm's callback. Callbacks run on the service's thread, one at a time,
// with no service lock held. Lifetimes: the thread and what it reads live
// until the service and every alarm are gone, so either may go first, on any
// thread (a callback included); once the service is destroyed nothing rings.
// Once Alarm::Stop (or its destructor) returns, its callback is not running
// and never runs again, unless Stop is called from the callback itself (then
// it does not run again once the callback returns).
#ifndef TDOCK_COMMON_TIMER_SERVICE_H_
#define TDOCK_COMMON_TIMER_SERVICE_H_

#include <map>
#include <memory>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace tdock {

class TimerService final {
 public:
  explicit TimerService(std::shared_ptr<Clock> clock = Clock::Real());
  ~TimerService();
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;

  class Alarm;
  std::unique_ptr<Alarm> NewAlarm(absl::AnyInvocable<void()> ring);

 private:
  struct Core;
  const std::shared_ptr<Core> core_;
};

class TimerService::Alarm final {
 public:
  ~Alarm() { Stop(); }
  Alarm(const Alarm&) = delete;
  Alarm& operator=(const Alarm&) = delete;

  // Rings at `when`, unless it is to ring earlier already.
  void RingAt(absl::Time when);
  // Never rings again; waits for a ring in progress on another thread.
  void Stop();

 private:
  friend class TimerService;
  struct State;
  Alarm(std::shared_ptr<Core> core, std::shared_ptr<State> state)
      : core_(std::move(core)), state_(std::move(state)) {}
  const std::shared_ptr<Core> core_;
  const std::shared_ptr<State> state_;
};

}  // namespace tdock

#endif  // TDOCK_COMMON_TIMER_SERVICE_H_
