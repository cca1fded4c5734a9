#include "tests/persist/crash_workload.h"

#include <algorithm>
#include <utility>

#include "tests/test_util.h"

namespace tdock::persist::crash {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

std::vector<int32_t> IdsOf(int64_t step, int64_t row) {
  return std::vector<int32_t>(static_cast<size_t>(row % 3 + 1),
                              static_cast<int32_t>(step * 100 + row));
}

float ScoreOf(int64_t step, int64_t row) { return static_cast<float>(step * 100 + row) / 8; }

DockSpec CrashSpec() {
  constexpr int64_t kLeaseMs = 600000;  // never expires during a test
  DockSpec spec;
  spec.name = "crash";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"ids"};
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}, {"score", DType::kFloat32, {1}, 0, false}};
  ConsumerSpec reader{"reader", {"ids"}, 3, 1, false, Policy::kFifo, 0};
  ConsumerSpec scorer{"scorer", {"ids"}, 2, 1, false, Policy::kFifo, 0};
  scorer.lease_ms = kLeaseMs;
  ConsumerSpec groups{"groups", {"score"}, 2, 1, true, Policy::kFifo, 0};
  ConsumerSpec bal{"bal", {"ids", "score"}, 1, 2, false, Policy::kBalanced, 0};
  bal.lease_ms = kLeaseMs;
  spec.consumers = {reader, scorer, groups, bal};
  return spec;
}

ConsumerSpec LateConsumer() { return {"late", {"ids"}, 4, 1, false, Policy::kFifo, 0}; }

namespace {

OwnedColumn IdsColumn(int64_t step, const std::vector<int64_t>& rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t row : rows) values.push_back(IdsOf(step, row));
  return OwnedColumn::Of<int32_t>("ids", DType::kInt32, values);
}

OwnedColumn ScoreColumn(int64_t step, const std::vector<int64_t>& rows) {
  std::vector<std::vector<float>> values;
  for (int64_t row : rows) values.push_back({ScoreOf(step, row)});
  return OwnedColumn::Of<float>("score", DType::kFloat32, values);
}

}  // namespace

OwnedColumn ColumnOf(const std::string& name, int64_t step, const std::vector<int64_t>& rows) {
  return name == "ids" ? IdsColumn(step, rows) : ScoreColumn(step, rows);
}

void CrashWorkload::Run(int ops) {
  for (int op = 0; op < ops; ++op) {
    if (Chance(0.04)) store_->FailNext(1, absl::UnavailableError("disk full"));
    const int kind = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (kind < 22) {
      PutIds();
    } else if (kind < 34) {
      WriteScores(/*with_ack=*/true);
    } else if (kind < 44) {
      Read("scorer", 0);
    } else if (kind < 54) {
      Read("reader", 0);
    } else if (kind < 62) {
      Read("groups", 0);
    } else if (kind < 74) {
      Read("bal", std::uniform_int_distribution<int32_t>(0, 1)(rng_));
    } else if (kind < 90) {
      EndLease(/*ack=*/Chance(0.7));
    } else if (kind < 93) {
      ReleaseOldest();
    } else if (kind < 96 && !late_added_ && op > ops / 3) {
      late_added_ = dock_->AddConsumer(LateConsumer()).ok();
    } else if (late_added_) {
      Read("late", 0);
    }
  }
}

void CrashWorkload::WaitParked() {
  tdock::MutexLock lock(&mu_);
  while (parked_ > 0) parked_cv_.WaitWithDeadline(&mu_, absl::Now() + absl::Seconds(1));
}

std::vector<PutRecord> CrashWorkload::puts() const {
  tdock::MutexLock lock(&mu_);
  return puts_;
}

void CrashWorkload::PutIds() {
  {
    // Rows whose Put was not stored are written again.
    tdock::MutexLock lock(&mu_);
    for (const auto& [step, row] : unstored_ids_) ids_[step].erase(row);
    unstored_ids_.clear();
  }
  int64_t step = ids_step_;
  for (const auto& [s, asked] : ids_) {
    if (static_cast<int>(asked.size()) < kRows) {
      step = std::min(step, s);
      break;
    }
  }
  std::set<int64_t>& asked = ids_[step];
  std::vector<int64_t> rows;
  const int want = std::uniform_int_distribution<int>(1, 3)(rng_);
  for (int64_t row = 0; row < kRows && static_cast<int>(rows.size()) < want; ++row) {
    if (asked.count(row) == 0) rows.push_back(row);
  }
  if (rows.empty()) return;
  PutInput in;
  in.step = step;
  in.rows = rows;
  in.wait = absl::Seconds(30);  // a step whose partition is busy parks
  auto column = std::make_shared<OwnedColumn>(IdsColumn(step, rows));
  in.columns.push_back(column->View());
  size_t index = 0;
  {
    tdock::MutexLock lock(&mu_);
    index = puts_.size();
    puts_.push_back({step, rows, "ids", {Writes(), kNever}});
    ++parked_;
  }
  dock_->Put(std::move(in), [this, index, column](absl::StatusOr<PutResult> r) {
    tdock::MutexLock lock(&mu_);
    if (r.ok()) {
      puts_[index].event.acked = Writes();
    } else if (absl::IsUnavailable(r.status()) &&
               r.status().message().find("not stored") != std::string::npos) {
      for (int64_t row : puts_[index].rows) unstored_ids_.emplace_back(puts_[index].step, row);
    }
    --parked_;
    parked_cv_.SignalAll();
  });
  asked.insert(rows.begin(), rows.end());
  if (step == ids_step_ && static_cast<int>(asked.size()) == kRows) ++ids_step_;
}

void CrashWorkload::WriteScores(bool with_ack) {
  for (size_t i = 0; i < held_.size(); ++i) {
    Held held = held_[i];
    if (held.consumer != "scorer") continue;
    std::vector<int64_t> rows;
    for (int64_t row : held.rows) {
      if (scored_[held.step].count(row) == 0) rows.push_back(row);
    }
    if (rows.empty()) continue;
    const Event event{Writes(), kNever};
    absl::StatusOr<PutResult> put = PutSync(*dock_, held.step, rows, {ScoreColumn(held.step, rows)},
                                            absl::ZeroDuration(), with_ack ? held.lease : 0);
    if (!put.ok()) return;
    const Event stored{event.issued, Writes()};
    {
      tdock::MutexLock lock(&mu_);
      puts_.push_back({held.step, rows, "score", stored});
    }
    scored_[held.step].insert(rows.begin(), rows.end());
    if (with_ack) {
      Done("scorer", held.step, held.rows, stored);
      held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

void CrashWorkload::Read(const std::string& consumer, int32_t rank) {
  GetInput in = GetOf(consumer);
  in.rank = rank;
  const int64_t issued = Writes();
  absl::StatusOr<Batch> got = GetSync(*dock_, in);
  if (!got.ok() || got->rows.empty()) return;
  if (got->lease_id != 0) {
    leases_[consumer].insert(got->lease_id);
    held_.push_back({consumer, got->lease_id, got->step, got->rows});
  } else {
    Done(consumer, got->step, got->rows, {issued, Writes()});
  }
}

void CrashWorkload::EndLease(bool ack) {
  if (held_.empty()) return;
  const size_t i = std::uniform_int_distribution<size_t>(0, held_.size() - 1)(rng_);
  const Held held = held_[i];
  if (ack && held.consumer == "scorer") {
    // The scorer acknowledges with the Put of its scores when it can.
    WriteScores(/*with_ack=*/false);
  }
  const int64_t issued = Writes();
  absl::StatusOr<int64_t> ended =
      ack ? dock_->Ack(held.consumer, held.lease) : dock_->Nack(held.consumer, held.lease);
  if (!ended.ok()) {
    // Not stored: the lease is still in flight; a later op may end it.
    if (absl::IsFailedPrecondition(ended.status())) held_.erase(held_.begin() + i);
    return;
  }
  if (ack) Done(held.consumer, held.step, held.rows, {issued, Writes()});
  held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
}

void CrashWorkload::ReleaseOldest() {
  const DockStats stats = dock_->Stats();
  if (stats.steps.empty()) return;
  const int64_t step = stats.steps.front().step;
  const int64_t issued = Writes();
  if (dock_->ReleaseStep(step).ok()) release_issued_.emplace(step, issued);
}

void CrashWorkload::Done(const std::string& consumer, int64_t step,
                         const std::vector<int64_t>& rows, Event event) {
  for (int64_t row : rows) done_[{consumer, step, row}].push_back(event);
}

}  // namespace tdock::persist::crash
