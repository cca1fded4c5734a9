#include "server/dock/step_ring.h"

#include <algorithm>

#include "common/logging.h"

namespace tdock::internal {

StepRing::StepRing(const tdock::Mutex* dock_mu, int32_t steps_in_flight, int64_t rows,
                   int32_t group_size, int columns, const std::vector<ConsumerShape>& consumers,
                   size_t column_capacity)
    : dock_mu_(dock_mu) {
  for (int p = 0; p < steps_in_flight; ++p) {
    partitions_.push_back(std::make_unique<Partition>(dock_mu, p, rows, group_size, columns,
                                                      consumers, column_capacity));
  }
}

StepRing::StepState StepRing::Classify(const tdock::Mutex& dock_mu, int64_t step) const {
  const Partition& part = Of(step);
  if (part.live(dock_mu)) {
    if (part.step(dock_mu) == step) {
      return part.releasing(dock_mu) ? StepState::kReleased : StepState::kLive;
    }
    return part.step(dock_mu) < step ? StepState::kBlocked : StepState::kReleased;
  }
  if (step <= part.last_released(dock_mu)) return StepState::kReleased;
  const bool first = part.last_released(dock_mu) < 0 && step == part.index();
  return first || step - steps_in_flight() == part.last_released(dock_mu) ? StepState::kFree
                                                                          : StepState::kBlocked;
}

bool StepRing::Holds(const tdock::Mutex& dock_mu, int64_t step) const {
  const Partition& part = Of(step);
  return part.live(dock_mu) && part.step(dock_mu) == step;
}

int64_t StepRing::BlockingStep(const tdock::Mutex& dock_mu, int64_t step) const {
  const Partition& part = Of(step);
  return part.live(dock_mu) ? part.step(dock_mu) : step - steps_in_flight();
}

int64_t StepRing::NextStep(const tdock::Mutex& dock_mu, const Partition& part) const {
  if (part.live(dock_mu)) return part.step(dock_mu);
  if (part.last_released(dock_mu) < 0) return part.index();
  return part.last_released(dock_mu) + steps_in_flight();
}

int64_t StepRing::FrontStep(const tdock::Mutex& dock_mu) const {
  int64_t front = NextStep(dock_mu, *partitions_.front());
  for (const auto& part : partitions_) front = std::min(front, NextStep(dock_mu, *part));
  return front;
}

std::vector<int64_t> StepRing::NextSteps(const tdock::Mutex& dock_mu) const {
  std::vector<int64_t> next;
  next.reserve(partitions_.size());
  for (const auto& part : partitions_) next.push_back(NextStep(dock_mu, *part));
  return next;
}

std::vector<int64_t> StepRing::LiveSteps(const tdock::Mutex& dock_mu) const {
  std::vector<int64_t> live;
  for (const auto& part : partitions_) {
    if (part->live(dock_mu)) live.push_back(part->step(dock_mu));
  }
  std::sort(live.begin(), live.end());
  return live;
}

void StepRing::Held(const tdock::Mutex& dock_mu) const {
  TDOCK_CHECK(&dock_mu == dock_mu_) << "step ring: not its dock's mutex";
}

void StepRing::CountReleased(const tdock::Mutex& dock_mu, const Partition& part, int columns) {
  Held(dock_mu);
  if (static_cast<int>(released_ready_.size()) < columns) released_ready_.resize(columns);
  for (int c = 0; c < columns; ++c) released_ready_[c] += part.column(c).ready.Count();
  for (int r = 0; r < kDropReasons; ++r) released_dropped_[r] += part.drops(dock_mu)[r];
}

std::vector<int64_t> StepRing::ReleasedReadyRows(const tdock::Mutex& dock_mu, int columns) const {
  Held(dock_mu);
  std::vector<int64_t> rows = released_ready_;
  rows.resize(columns);
  return rows;
}

}  // namespace tdock::internal
