// Clock: where a dock and its timer service read the time. The real clock is
// absl::Now; a ManualClock only moves when a test advances it, so lease
// expiries and wait bounds are tested without sleeping.
//
//   auto clock = std::make_shared<ManualClock>();
//   TimerService timers(clock);                  // rings when Advance passes
//   DockLimits limits{.timers = ..., .clock = clock};
//   clock->Advance(absl::Milliseconds(31));      // a 30 ms lease has expired
//
// Thread safety: every method may be called from any thread.
#ifndef TDOCK_COMMON_CLOCK_H_
#define TDOCK_COMMON_CLOCK_H_

#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tdock {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The real time at which `when` on this clock comes, for a thread that
  // waits for it: `when` on the real clock; never on a manual clock, whose
  // waiters are woken by OnAdvance instead.
  virtual absl::Time RealDeadline(absl::Time when) const = 0;
  // Calls `moved` after each advance of a manual clock (the real one never
  // calls it), with no lock of the clock held.
  virtual void OnAdvance(absl::AnyInvocable<void()> moved) = 0;

  // The process's real clock (shared, never destroyed).
  static std::shared_ptr<Clock> Real();
};

class ManualClock final : public Clock {
 public:
  // Starts at `start` (default: the real time now).
  explicit ManualClock(absl::Time start = absl::Now()) : now_(start) {}

  absl::Time Now() const override {
    tdock::MutexLock lock(&mu_);
    return now_;
  }
  absl::Time RealDeadline(absl::Time) const override { return absl::InfiniteFuture(); }
  void OnAdvance(absl::AnyInvocable<void()> moved) override;
  // Moves the time forward by `by` (>= 0) and wakes whoever waits on it.
  void Advance(absl::Duration by);

 private:
  mutable tdock::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<absl::AnyInvocable<void()>>> listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock

#endif  // TDOCK_COMMON_CLOCK_H_
