#include "tests/persist/crash_workload.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace tdock::persist::crash {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

std::vector<int32_t> IdsOf(int incarnation, int64_t step, int64_t row) {
  return std::vector<int32_t>(static_cast<size_t>(row % 3 + 1),
                              static_cast<int32_t>(incarnation * 10000 + step * 100 + row));
}

float ScoreOf(int incarnation, int64_t step, int64_t row) {
  return static_cast<float>(incarnation * 10000 + step * 100 + row) / 8;
}

std::string KeyOf(int incarnation, int64_t step, int64_t row) {
  return absl::StrCat("i", incarnation, "s", step, "r", row);
}

std::vector<std::string> KeysOf(int incarnation, int64_t step, const std::vector<int64_t>& rows) {
  std::vector<std::string> keys;
  for (int64_t row : rows) keys.push_back(KeyOf(incarnation, step, row));
  return keys;
}

DockSpec CrashSpec() {
  constexpr int64_t kLeaseMs = 600000;  // never expires during a test
  DockSpec spec;
  spec.name = "crash";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"ids"};
  spec.columns = {{"ids", DType::kInt32, {}, 0, false},
                  {"score", DType::kFloat32, {1}, 0, false},
                  {"note", DType::kInt32, {1}, 0, /*rewritable=*/true}};
  ConsumerSpec reader{"reader", {"ids"}, 3, 1, false, Policy::kFifo, 0};
  ConsumerSpec scorer{"scorer", {"ids"}, 2, 1, false, Policy::kFifo, 0};
  scorer.lease_ms = kLeaseMs;
  ConsumerSpec groups{"groups", {"score"}, 2, 1, true, Policy::kFifo, 0};
  ConsumerSpec bal{"bal", {"ids", "score"}, 1, 2, false, Policy::kBalanced, 0};
  bal.lease_ms = kLeaseMs;
  spec.consumers = {reader, scorer, groups, bal};
  spec.add_columns_on_write = true;  // even incarnations add `extra` by a Put
  return spec;
}

ConsumerSpec LateConsumer() { return {"late", {"ids"}, 4, 1, false, Policy::kFifo, 0}; }

OwnedColumn ColumnOf(const std::string& name, int incarnation, int64_t step,
                     const std::vector<int64_t>& rows, int32_t note) {
  if (name == "ids") {
    std::vector<std::vector<int32_t>> values;
    for (int64_t row : rows) values.push_back(IdsOf(incarnation, step, row));
    return OwnedColumn::Of<int32_t>("ids", DType::kInt32, values);
  }
  if (name == "score") {
    std::vector<std::vector<float>> values;
    for (int64_t row : rows) values.push_back({ScoreOf(incarnation, step, row)});
    return OwnedColumn::Of<float>("score", DType::kFloat32, values);
  }
  return OwnedColumn::Of<int32_t>(name, DType::kInt32,
                                  std::vector<std::vector<int32_t>>(rows.size(), {note}));
}

CrashWorkload::CrashWorkload(uint64_t seed, RecordingStore* store, DockRegistry* registry,
                             bool may_delete)
    : seed_(seed), store_(store), registry_(registry), may_delete_(may_delete) {
  const Event created{Writes(), kNever};
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Create(CrashSpec());
  EXPECT_OK(dock.status());
  tdock::MutexLock lock(&mu_);
  histories_.push_back(History{.created = {created.issued, Writes()}});
  if (dock.ok()) dock_ = *std::move(dock);
}

void CrashWorkload::Run(int ops, int threads) {
  if (threads <= 1) {
    Actor actor(seed_, kAll);
    RunActor(actor, ops);
    return;
  }
  // The scorer and the readers go on while the producer works.
  std::atomic<bool> produced{false};
  std::vector<std::thread> actors;
  const int roles[] = {kProduce, kScore, kRead};
  for (int i = 0; i < 3; ++i) {
    actors.emplace_back([this, ops, i, role = roles[i], &produced] {
      Actor actor(seed_ * 31 + static_cast<uint64_t>(i), role);
      if (role == kProduce) {
        RunActor(actor, ops);
        produced = true;
      } else {
        RunActor(actor, ops, &produced);
      }
    });
  }
  for (std::thread& t : actors) t.join();
}

void CrashWorkload::RunActor(Actor& a, int ops, const std::atomic<bool>* until) {
  // With `until`: until it is set, then `ops` more (the rest is drained).
  int left = ops;
  for (int run = 0; left > 0 && run < 100 * ops; ++run) {
    const int op = run % ops;  // how far into the workload
    if (until == nullptr || *until) {
      --left;
    } else {
      std::this_thread::yield();
    }
    if (!Sync(a)) continue;
    if (Chance(a, 0.04)) store_->FailNext(1, absl::UnavailableError("disk full"));
    const int kind = std::uniform_int_distribution<int>(0, 99)(a.rng);
    const bool produce = (a.roles & kProduce) != 0;
    const bool score = (a.roles & kScore) != 0;
    const bool read = (a.roles & kRead) != 0;
    if (kind < 20) {
      if (produce) PutIds(a);
    } else if (kind < 27) {
      if (produce && !a.extra_added && op > ops / 4) {
        AddExtra(a);
      } else if (produce && a.extra_added && Chance(a, 0.4)) {
        WriteExtra(a);
      } else if (produce) {
        WriteNote(a);
      }
    } else if (kind < 37) {
      if (score) WriteScores(a, /*with_ack=*/true);
    } else if (kind < 46) {
      if (score) Read(a, "scorer", 0);
    } else if (kind < 54) {
      if (read) Read(a, "reader", 0);
    } else if (kind < 61) {
      if (read) Read(a, "groups", 0);
    } else if (kind < 72) {
      if (read) Read(a, "bal", std::uniform_int_distribution<int32_t>(0, 1)(a.rng));
    } else if (kind < 84) {
      EndLease(a, /*ack=*/Chance(a, 0.7));
    } else if (kind < 87) {
      if (produce) DropRows(a);
    } else if (kind < 88) {
      // With three threads the scorer seals too, racing the producer's
      // writes (first writes of the rewritable `note` among them).
      if (produce || score) SealOldest(a);
    } else if (kind < 90) {
      if (produce) ReleaseOldest(a);
    } else if (kind < 92) {
      if (produce && may_delete_ && op > ops / 2) Recreate(a);
    } else if (kind < 95) {
      if (read && !a.late_added && op > ops / 3) AddLate(a);
      if (read && a.late_added && !a.late_removed && op > 2 * ops / 3 && Chance(a, 0.3)) {
        RemoveLate(a);
      }
    } else if (read && a.late_added && !a.late_removed) {
      Read(a, "late", 0);
    }
  }
}

bool CrashWorkload::Sync(Actor& a) {
  bool create = false;
  {
    tdock::MutexLock lock(&mu_);
    create = dock_ == nullptr && (a.roles & kProduce) != 0 && !histories_.empty();
  }
  if (create) {
    // The last creation was not stored: the producer creates the dock again.
    const Event created{Writes(), kNever};
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Create(CrashSpec());
    if (dock.ok()) {
      tdock::MutexLock lock(&mu_);
      histories_.push_back(History{.created = {created.issued, Writes()}});
      dock_ = *std::move(dock);
    }
  }
  tdock::MutexLock lock(&mu_);
  if (dock_ == nullptr) return false;
  const int incarnation = static_cast<int>(histories_.size()) - 1;
  if (a.incarnation != incarnation) {
    a.incarnation = incarnation;
    a.ids_step = 0;
    a.ids.clear();
    a.scored.clear();
    a.held.clear();
    a.late_added = false;
    a.late_removed = false;
    a.extra_added = false;
    a.extra.clear();
  }
  a.dock = dock_;
  return true;
}

void CrashWorkload::WaitParked() {
  tdock::MutexLock lock(&mu_);
  while (parked_ > 0) parked_cv_.WaitWithDeadline(&mu_, absl::Now() + absl::Seconds(1));
}

std::vector<History> CrashWorkload::histories() const {
  tdock::MutexLock lock(&mu_);
  return histories_;
}

void CrashWorkload::AddPut(int incarnation, PutRecord put) {
  tdock::MutexLock lock(&mu_);
  histories_[incarnation].puts.push_back(std::move(put));
}

void CrashWorkload::PutIds(Actor& a) {
  const int inc = a.incarnation;
  {
    // Rows whose Put was not stored are written again.
    tdock::MutexLock lock(&mu_);
    auto unstored = std::remove_if(unstored_ids_.begin(), unstored_ids_.end(), [&](auto& u) {
      if (std::get<0>(u) != inc) return false;
      a.ids[std::get<1>(u)].erase(std::get<2>(u));
      return true;
    });
    unstored_ids_.erase(unstored, unstored_ids_.end());
  }
  int64_t step = a.ids_step;
  for (const auto& [s, asked] : a.ids) {
    if (static_cast<int>(asked.size()) < kRows) {
      step = std::min(step, s);
      break;
    }
  }
  std::set<int64_t>& asked = a.ids[step];
  std::vector<int64_t> rows;
  const int want = std::uniform_int_distribution<int>(1, 3)(a.rng);
  for (int64_t row = 0; row < kRows && static_cast<int>(rows.size()) < want; ++row) {
    if (asked.count(row) == 0) rows.push_back(row);
  }
  if (rows.empty()) return;
  PutInput in;
  in.step = step;
  in.rows = rows;
  in.wait = absl::Seconds(30);  // a step whose partition is busy parks
  in.keys = KeysOf(inc, step, rows);
  auto column = std::make_shared<OwnedColumn>(ColumnOf("ids", inc, step, rows));
  in.columns.push_back(column->View());
  size_t index = 0;
  {
    tdock::MutexLock lock(&mu_);
    index = histories_[inc].puts.size();
    histories_[inc].puts.push_back({step, rows, "ids", {Writes(), kNever}});
    ++parked_;
  }
  a.dock->Put(std::move(in), [this, inc, index, column](absl::StatusOr<PutResult> r) {
    tdock::MutexLock lock(&mu_);
    PutRecord& put = histories_[inc].puts[index];
    if (r.ok()) {
      put.event.acked = Writes();
    } else if (absl::IsUnavailable(r.status()) &&
               r.status().message().find("not stored") != std::string::npos) {
      for (int64_t row : put.rows) unstored_ids_.emplace_back(inc, put.step, row);
    }
    --parked_;
    parked_cv_.SignalAll();
  });
  asked.insert(rows.begin(), rows.end());
  if (step == a.ids_step && static_cast<int>(asked.size()) == kRows) ++a.ids_step;
}

void CrashWorkload::WriteNote(Actor& a) {
  const DockStats stats = a.dock->Stats();
  if (stats.steps.empty()) return;
  const int64_t step =
      stats.steps[std::uniform_int_distribution<size_t>(0, stats.steps.size() - 1)(a.rng)].step;
  const int64_t row = std::uniform_int_distribution<int64_t>(0, kRows - 1)(a.rng);
  int32_t note = 0;
  {
    tdock::MutexLock lock(&mu_);
    note = ++next_note_;
  }
  const int64_t issued = Writes();
  if (PutSync(*a.dock, step, {row}, {ColumnOf("note", a.incarnation, step, {row}, note)},
              absl::ZeroDuration(), 0, KeysOf(a.incarnation, step, {row}))
          .ok()) {
    AddPut(a.incarnation, {step, {row}, "note", {issued, Writes()}, note});
  }
}

void CrashWorkload::AddExtra(Actor& a) {
  const int64_t issued = Writes();
  const ColumnSpec extra{"extra", DType::kInt32, {1}, 0, false};
  if (a.incarnation % 2 == 1) {
    a.extra_added = a.dock->AddColumn(extra).ok();
  } else {
    // By a Put that writes it (the spec adds columns on write): the column
    // is there once its record is stored, whether the Put's is or not.
    WriteExtra(a, {extra});
    a.extra_added = a.dock->spec().ColumnIndex("extra") >= 0;
  }
  if (a.extra_added) {
    tdock::MutexLock lock(&mu_);
    histories_[a.incarnation].extra_added = {issued, Writes()};
  }
}

void CrashWorkload::WriteExtra(Actor& a, std::vector<ColumnSpec> adding) {
  const DockStats stats = a.dock->Stats();
  if (stats.steps.empty()) return;
  const int64_t step =
      stats.steps[std::uniform_int_distribution<size_t>(0, stats.steps.size() - 1)(a.rng)].step;
  const int64_t row = std::uniform_int_distribution<int64_t>(0, kRows - 1)(a.rng);
  if (a.extra[step].count(row) != 0) return;
  int32_t value = 0;
  {
    tdock::MutexLock lock(&mu_);
    value = ++next_note_;
  }
  const int64_t issued = Writes();
  const OwnedColumn column = ColumnOf("extra", a.incarnation, step, {row}, value);
  PutInput in;
  in.step = step;
  in.rows = {row};
  in.columns = {column.View()};
  in.keys = KeysOf(a.incarnation, step, {row});
  in.new_columns = std::move(adding);
  if (PutSync(*a.dock, std::move(in)).ok()) {
    a.extra[step].insert(row);
    AddPut(a.incarnation, {step, {row}, "extra", {issued, Writes()}, value});
  }
}

void CrashWorkload::WriteScores(Actor& a, bool with_ack) {
  for (size_t i = 0; i < a.held.size(); ++i) {
    Held held = a.held[i];
    if (held.consumer != "scorer") continue;
    std::vector<int64_t> rows;
    for (int64_t row : held.rows) {
      if (a.scored[held.step].count(row) == 0) rows.push_back(row);
    }
    if (rows.empty()) continue;
    const int64_t issued = Writes();
    absl::StatusOr<PutResult> put =
        PutSync(*a.dock, held.step, rows, {ColumnOf("score", a.incarnation, held.step, rows)},
                absl::ZeroDuration(), with_ack ? held.lease : 0,
                KeysOf(a.incarnation, held.step, rows));
    if (!put.ok()) return;
    const Event stored{issued, Writes()};
    AddPut(a.incarnation, {held.step, rows, "score", stored});
    a.scored[held.step].insert(rows.begin(), rows.end());
    if (with_ack) {
      Done(a.incarnation, "scorer", held.step, held.rows, stored);
      a.held.erase(a.held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return;
  }
}

void CrashWorkload::Read(Actor& a, const std::string& consumer, int32_t rank) {
  GetInput in = GetOf(consumer);
  in.rank = rank;
  const int64_t issued = Writes();
  absl::StatusOr<Batch> got = GetSync(*a.dock, in);
  if (!got.ok() || got->rows.empty()) return;
  if (got->lease_id != 0) {
    {
      tdock::MutexLock lock(&mu_);
      histories_[a.incarnation].leases[consumer].insert(got->lease_id);
    }
    a.held.push_back({consumer, got->lease_id, got->step, got->rows});
  } else {
    Done(a.incarnation, consumer, got->step, got->rows, {issued, Writes()});
  }
}

void CrashWorkload::EndLease(Actor& a, bool ack) {
  if (a.held.empty()) return;
  const size_t i = std::uniform_int_distribution<size_t>(0, a.held.size() - 1)(a.rng);
  const Held held = a.held[i];
  if (ack && held.consumer == "scorer") {
    // The scorer acknowledges with the Put of its scores when it can.
    WriteScores(a, /*with_ack=*/false);
  }
  const int64_t issued = Writes();
  absl::StatusOr<int64_t> ended =
      ack ? a.dock->Ack(held.consumer, held.lease) : a.dock->Nack(held.consumer, held.lease);
  if (!ended.ok()) {
    // Not stored: the lease is still in flight; a later op may end it.
    if (absl::IsFailedPrecondition(ended.status())) a.held.erase(a.held.begin() + i);
    return;
  }
  if (ack) Done(a.incarnation, held.consumer, held.step, held.rows, {issued, Writes()});
  a.held.erase(a.held.begin() + static_cast<std::ptrdiff_t>(i));
}

void CrashWorkload::ReleaseOldest(Actor& a) {
  const DockStats stats = a.dock->Stats();
  if (stats.steps.empty()) return;
  const int64_t step = stats.steps.front().step;
  const int64_t issued = Writes();
  if (a.dock->ReleaseStep(step).ok()) {
    tdock::MutexLock lock(&mu_);
    histories_[a.incarnation].releases.emplace(step, issued);
  }
}

void CrashWorkload::DropRows(Actor& a) {
  const DockStats stats = a.dock->Stats();
  if (stats.steps.empty()) return;
  const int64_t step =
      stats.steps[std::uniform_int_distribution<size_t>(0, stats.steps.size() - 1)(a.rng)].step;
  std::vector<int64_t> rows = {std::uniform_int_distribution<int64_t>(0, kRows - 1)(a.rng)};
  if (Chance(a, 0.5)) rows.push_back(std::uniform_int_distribution<int64_t>(0, kRows - 1)(a.rng));
  const DropReason reason = Chance(a, 0.5) ? DropReason::kFailed : DropReason::kFiltered;
  const int64_t issued = Writes();
  const bool ok = a.dock->Drop(DropInput{step, rows, {}, reason}).ok();
  tdock::MutexLock lock(&mu_);
  for (int64_t row : rows) {
    histories_[a.incarnation].drops[{step, row}].push_back({issued, ok ? Writes() : kNever});
  }
}

void CrashWorkload::SealOldest(Actor& a) {
  const DockStats stats = a.dock->Stats();
  if (stats.steps.empty()) return;
  const int64_t step = stats.steps.front().step;
  const int64_t issued = Writes();
  const bool ok = a.dock->Seal(SealInput{step, {}}).ok();
  tdock::MutexLock lock(&mu_);
  histories_[a.incarnation].seals[step].push_back({issued, ok ? Writes() : kNever});
}

void CrashWorkload::AddLate(Actor& a) {
  const int64_t issued = Writes();
  a.late_added = a.dock->AddConsumer(LateConsumer()).ok();
  if (a.late_added) {
    tdock::MutexLock lock(&mu_);
    histories_[a.incarnation].late_added = {issued, Writes()};
  }
}

void CrashWorkload::RemoveLate(Actor& a) {
  const int64_t issued = Writes();
  a.late_removed = a.dock->RemoveConsumer(LateConsumer().name).ok();
  tdock::MutexLock lock(&mu_);
  histories_[a.incarnation].late_removed = {issued, a.late_removed ? Writes() : kNever};
}

void CrashWorkload::Recreate(Actor& a) {
  int incarnation = 0;
  {
    tdock::MutexLock lock(&mu_);
    if (deleting_ || dock_ == nullptr) return;
    deleting_ = true;
    incarnation = static_cast<int>(histories_.size()) - 1;
  }
  // Other actors may be working on the dock meanwhile: their calls fail,
  // or are recorded before the deletion.
  // Now and then the deletion's record fails (or, with other actors
  // writing, a write beside it).
  if (Chance(a, 0.3)) store_->FailNext(1, absl::UnavailableError("disk full"));
  const int64_t issued = Writes();
  const absl::Status deleted = registry_->Delete("crash");
  if (!deleted.ok()) {
    // Not stored: nothing was deleted, and this incarnation goes on.
    tdock::MutexLock lock(&mu_);
    histories_[incarnation].deleted = {issued, kNever};
    ++histories_[incarnation].deletes_failed;
    return;
  }
  const Event created{Writes(), kNever};
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Create(CrashSpec());
  tdock::MutexLock lock(&mu_);
  histories_[incarnation].deleted = {issued, created.issued};
  dock_ = nullptr;
  if (dock.ok()) {
    histories_.push_back(History{.created = {created.issued, Writes()}});
    dock_ = *std::move(dock);
  }
}

void CrashWorkload::Done(int incarnation, const std::string& consumer, int64_t step,
                         const std::vector<int64_t>& rows, Event event) {
  tdock::MutexLock lock(&mu_);
  for (int64_t row : rows) histories_[incarnation].done[{consumer, step, row}].push_back(event);
}

}  // namespace tdock::persist::crash
