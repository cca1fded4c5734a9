#include "common/clock.h"

#include <utility>

namespace tdock {
namespace {

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  absl::Time RealDeadline(absl::Time when) const override { return when; }
  void OnAdvance(absl::AnyInvocable<void()>) override {}
};

}  // namespace

std::shared_ptr<Clock> Clock::Real() {
  static const std::shared_ptr<Clock>* real = new std::shared_ptr<Clock>(new RealClock());
  return *real;
}

void ManualClock::OnAdvance(absl::AnyInvocable<void()> moved) {
  tdock::MutexLock lock(&mu_);
  listeners_.push_back(std::make_shared<absl::AnyInvocable<void()>>(std::move(moved)));
}

void ManualClock::Advance(absl::Duration by) {
  std::vector<std::shared_ptr<absl::AnyInvocable<void()>>> listeners;
  {
    tdock::MutexLock lock(&mu_);
    now_ += by;
    listeners = listeners_;
  }
  // Outside mu_: a listener takes its own locks, under which Now is read.
  for (const auto& moved : listeners) (*moved)();
}

}  // namespace tdock
