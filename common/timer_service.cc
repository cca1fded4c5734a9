#include "common/timer_service.h"

#include <utility>


namespace tdock {

struct TimerService::Alarm::State {
  explicit State(absl::AnyInvocable<void()> r) : ring(std::move(r)) {}
  absl::AnyInvocable<void()> ring;  // called only on the service's thread
  // Guarded by Core::mu.
  absl::Time when = absl::InfiniteFuture();
  bool stopped = false;
  bool ringing = false;
};

// What the thread reads: shared by the service, its alarms and the thread.
struct TimerService::Core {
  explicit Core(std::shared_ptr<Clock> c) : clock(std::move(c)) {}
  void Run();

  const std::shared_ptr<Clock> clock;
  tdock::Mutex mu;
  CondVar wake;  // an earlier time, or stop
  CondVar rang;  // a callback returned
  // Times asked for; an entry whose time is no longer its alarm's is stale.
  std::multimap<absl::Time, std::shared_ptr<Alarm::State>> queue ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::thread::id thread;  // set before the thread starts reading
};

TimerService::TimerService(std::shared_ptr<Clock> clock)
    : core_(std::make_shared<Core>(std::move(clock))) {
  core_->clock->OnAdvance([weak = std::weak_ptr<Core>(core_)] {
    if (std::shared_ptr<Core> core = weak.lock()) {
      tdock::MutexLock lock(&core->mu);
      core->wake.SignalAll();
    }
  });
  std::thread thread([core = core_] { core->Run(); });
  {
    tdock::MutexLock lock(&core_->mu);
    core_->thread = thread.get_id();
  }
  thread.detach();  // it ends once stopped, holding the core till then
}

TimerService::~TimerService() {
  tdock::MutexLock lock(&core_->mu);
  core_->stop = true;
  core_->wake.SignalAll();
}

std::unique_ptr<TimerService::Alarm> TimerService::NewAlarm(absl::AnyInvocable<void()> ring) {
  return std::unique_ptr<Alarm>(
      new Alarm(core_, std::make_shared<Alarm::State>(std::move(ring))));
}

void TimerService::Alarm::RingAt(absl::Time when) {
  tdock::MutexLock lock(&core_->mu);
  if (state_->stopped || core_->stop || when >= state_->when) return;
  state_->when = when;
  const bool earliest = core_->queue.empty() || when < core_->queue.begin()->first;
  core_->queue.emplace(when, state_);
  if (earliest) core_->wake.SignalAll();
}

void TimerService::Alarm::Stop() {
  tdock::MutexLock lock(&core_->mu);
  state_->stopped = true;
  if (std::this_thread::get_id() == core_->thread) return;  // from its callback
  while (state_->ringing) core_->rang.WaitWithDeadline(&core_->mu, absl::InfiniteFuture());
}

void TimerService::Core::Run() {
  mu.Lock();
  while (!stop) {
    if (queue.empty()) {
      wake.WaitWithDeadline(&mu, absl::InfiniteFuture());
      continue;
    }
    const absl::Time when = queue.begin()->first;
    if (when > clock->Now()) {
      wake.WaitWithDeadline(&mu, clock->RealDeadline(when));
      continue;
    }
    std::shared_ptr<Alarm::State> state = std::move(queue.begin()->second);
    queue.erase(queue.begin());
    if (state->stopped || state->when != when) continue;  // stale
    state->when = absl::InfiniteFuture();
    state->ringing = true;
    mu.Unlock();
    state->ring();
    mu.Lock();
    state->ringing = false;
    rang.SignalAll();
  }
  queue.clear();  // the alarms' callbacks (and what they hold) go now
  mu.Unlock();
}

}  // namespace tdock
