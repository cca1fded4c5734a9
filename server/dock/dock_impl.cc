#include "server/dock/dock_impl.h"

#include <algorithm>
#include <future>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/local_cell_store.h"
#include "server/dock/location_cell_store.h"

namespace tdock::internal {
namespace {

// Each consumer's shape in a partition: units (rows or groups), takers.
std::vector<ConsumerShape> ShapesOf(const DockSpec& spec) {
  std::vector<ConsumerShape> shapes;
  for (const ConsumerSpec& c : spec.consumers) {
    shapes.push_back({c.whole_groups, c.dp_size * c.replicas});
  }
  return shapes;
}

// Takes the consumers `removed` out of the per-consumer fields of `stats`
// (built over every consumer, in spec order).
void OmitRemoved(const std::vector<bool>& removed, DockStats& stats) {
  auto omit = [&](auto& per_consumer) {
    size_t kept = 0;
    for (size_t k = 0; k < per_consumer.size(); ++k) {
      if (k < removed.size() && removed[k]) continue;
      if (kept != k) per_consumer[kept] = std::move(per_consumer[k]);
      ++kept;
    }
    per_consumer.resize(kept);
  };
  omit(stats.consumers);
  omit(stats.waiters);
  omit(stats.rows_handed_out_total);
  omit(stats.lease_ms);
  omit(stats.leases_in_flight);
  omit(stats.rows_in_flight);
  omit(stats.lease_expiries_total);
  omit(stats.lease_nacks_total);
  omit(stats.rows_returned_total);
  omit(stats.staleness);
  for (StepStats& step : stats.steps) {
    omit(step.consumed_rows);
    omit(step.available_rows);
  }
}

std::unique_ptr<CellStore> OpenCellStore(const DockSpec& spec, CellForm form) {
  if (form == CellForm::kLocations) return std::make_unique<LocationCellStore>();
  return std::make_unique<LocalCellStore>(spec.chunk_bytes, spec.memory_limit_bytes,
                                          spec.preallocate_bytes);
}

}  // namespace

absl::StatusOr<std::shared_ptr<DockImpl>> DockImpl::Create(DockSpec spec,
                                                          DockLimits limits) {
  TDOCK_ASSIGN_OR_RETURN(spec, NormalizeSpec(std::move(spec)));
  if (limits.cells == CellForm::kLocations && spec.seal_when.has_value() &&
      spec.seal_when->carry) {
    // A carried row's cells would stay in the sealed step's extents, which
    // its shard frees with that step.
    return absl::InvalidArgumentError(absl::StrCat(
        "dock '", spec.name, "': seal_when.carry needs the cells in the dock; a controller's "
        "docks hold their locations (use a standalone server, or seal without carry)"));
  }
  std::shared_ptr<DockImpl> dock(new DockImpl(std::move(spec), limits));
  if (dock->limits_.timers == nullptr) {
    dock->own_timers_ = std::make_unique<TimerService>(dock->limits_.clock);
  }
  TimerService& timers =
      dock->limits_.timers != nullptr ? *dock->limits_.timers : *dock->own_timers_;
  dock->alarm_ = timers.NewAlarm([weak = std::weak_ptr<DockImpl>(dock)] {
    if (std::shared_ptr<DockImpl> self = weak.lock()) self->OnAlarm();
  });
  return dock;
}

DockImpl::DockImpl(DockSpec spec, DockLimits limits)
    : name_(spec.name),
      limits_(limits),
      rows_per_step_(spec.rows_per_step()),
      group_size_(spec.n_samples_per_prompt),
      columns_(spec.columns, ColumnTable::Capacity(spec.columns.size(), limits.max_columns)),
      checks_(name_, rows_per_step_, group_size_, spec.add_columns_on_write, columns_, version_,
              limits.cells),
      sizes_(columns_, rows_per_step_, group_size_, limits.max_batch_bytes, limits.cells),
      reader_(columns_, ResolveColumns(spec, spec.length_columns), limits.cells),
      seal_when_(spec.seal_when),
      store_(OpenCellStore(spec, limits.cells)),
      ring_(&mu_, spec.steps_in_flight, rows_per_step_, group_size_,
            static_cast<int>(columns_.size()), ShapesOf(spec), columns_.capacity()),
      consumers_(&mu_, std::move(spec)),
      // Reservation ids come from the same epoch's space as lease ids: a
      // Put naming one from before a restart never finds another.
      reservations_(limits.first_lease_id) {
  // Leases are added once Create has set the alarm.
  leases_ = std::make_unique<LeaseTable>(
      absl::StrCat("dock '", name_, "'"), [this](absl::Time when) { alarm_->RingAt(when); },
      limits.first_lease_id);
}

DockImpl::~DockImpl() { Stop(); }

void DockImpl::Stop() {
  alarm_->Stop();  // waits for a ring in progress (unless this is it)
  Shutdown();
}

DockSpec DockImpl::spec() const {
  tdock::ReaderMutexLock lock(&mu_);
  return consumers_.spec(mu_);
}

std::string DockImpl::Where(int64_t step) const { return checks_.Where(step); }

std::vector<int64_t> DockImpl::LiveSteps() const {
  tdock::ReaderMutexLock lock(&mu_);
  return ring_.LiveSteps(mu_);
}

std::shared_ptr<StepCells> DockImpl::ApplyReleaseLocked(Partition& part, int64_t step) {
  if (!part.live(mu_) || part.step(mu_) != step) {
    part.MarkReleased(mu_, step);
    return nullptr;
  }
  ring_.CountReleased(mu_, part, static_cast<int>(columns_.size()));
  consumers_.AddReleased(mu_, part);
  leases_->DropStep(part.step(mu_));
  reservations_.ForgetStep(part.step(mu_));
  keys_.ForgetStep(mu_, step, part.row_index(), rows_per_step_);
  put_ids_.ForgetStep(step);
  return part.Release(mu_);
}

void DockImpl::RecoverPutAnswer(uint64_t put_id, const PutResult& answer,
                                uint64_t fingerprint) {
  tdock::ReaderMutexLock lock(&mu_);
  // Under the lock, as Finish is: a release forgets it.
  if (put_id != 0 && ring_.Holds(mu_, answer.step)) put_ids_.Restore(put_id, {answer, fingerprint});
}

absl::Status DockImpl::NotLiveLocked(int64_t step) const {
  if (step >= 0 && ring_.Classify(mu_, step) == StepState::kReleased) {
    return Refuse(Refusal::kReleased, absl::FailedPreconditionError(
                                          absl::StrCat(Where(step), " is already released")));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(Where(step), " is not live (not started or already released)"));
}

void DockImpl::ReleaseStep(int64_t step, StatusCallback done) {
  {
    tdock::MutexLock lock(&mu_);
    if (step < 0 || ring_.Classify(mu_, step) != StepState::kLive) {
      std::move(done)(NotLiveLocked(step));
      return;
    }
    if (ring_.Of(step).carry_pending(mu_)) {
      // Released now, a crash before the carry is written would lose it.
      std::move(done)(absl::FailedPreconditionError(absl::StrCat(
          Where(step), " owes the groups its seal carried to step ", step + 1,
          ": it can be released once they are written there (when step ", step + 1,
          " can start)")));
      return;
    }
    ring_.Of(step).set_releasing(mu_, true);  // released once recorded
  }
  commit_.Commit(
      [step](DockJournal& journal, DockJournal::Done stored) {
        journal.Released(step, std::move(stored));
      },
      [this, step, done = std::move(done)](absl::Status stored) mutable {
        if (!stored.ok()) {
          stored = absl::UnavailableError(
              absl::StrCat(Where(step), ": release not stored (", stored.message(), ")"));
        }
        FinishRelease(step, stored, std::move(done));
      });
}

void DockImpl::MaybeAutoRelease(int64_t step) {
  {
    tdock::MutexLock lock(&mu_);
    // retain_steps: a done step stays readable until ReleaseStep.
    // A step nobody holds (no consumer, or none that counts) stays until
    // ReleaseStep, as does every step with retain_steps.
    if (consumers_.spec(mu_).retain_steps || ring_.Classify(mu_, step) != StepState::kLive ||
        std::none_of(consumers_.plans(mu_).begin(), consumers_.plans(mu_).end(),
                     [](const ConsumerPlan& plan) { return plan.holds_steps() || plan.joining; })) {
      return;
    }
    Partition& part = ring_.Of(step);
    // Rows it carries are owed to the next step until they are written there.
    if (part.carry_pending(mu_)) return;
    // A hand-out not yet recorded may still fail and bring its rows back:
    // the last of them to end asks again (EndHandOut). seq_cst: the mark is
    // set before the count is read, and EndHandOut reads the mark after its
    // decrement, so one of the two sees the other. No hand-out starts while
    // mu_ is held exclusively, so a count of 0 stays 0 and the mark can go.
    part.release_waits().store(true, std::memory_order_seq_cst);
    if (part.unrecorded_handouts().load(std::memory_order_seq_cst) > 0) return;
    part.release_waits().store(false, std::memory_order_relaxed);
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
      // An optional consumer whose join is being recorded holds the steps
      // its first Get may ask for.
      if (!plan.holds_steps() && !plan.joining) continue;
      // acquire: pairs with the claimers' increments and the leases'
      // settlements.
      if (part.consumer(mu_, plan.index).consumed_rows.load(std::memory_order_acquire) <
              rows_per_step_ ||
          part.consumer(mu_, plan.index).in_flight_rows.load(std::memory_order_acquire) > 0) {
        return;
      }
      // A balanced round is claimed at once but handed out rank by rank.
      if (plan.policy == Policy::kBalanced &&
          !part.consumer(mu_, plan.index).RoundsDelivered(mu_)) {
        return;
      }
    }
    part.set_releasing(mu_, true);  // released once recorded
  }
  commit_.Commit(
      [step](DockJournal& journal, DockJournal::Done stored) {
        journal.Released(step, std::move(stored));
      },
      [this, step](absl::Status stored) { FinishRelease(step, stored); });
}

void DockImpl::FinishRelease(int64_t step, const absl::Status& stored, StatusCallback answer) {
  std::shared_ptr<StepCells> cells;
  bool released = false;
  bool kept = false;
  {
    tdock::MutexLock lock(&mu_);
    Partition& part = ring_.Of(step);
    if (part.live(mu_) && part.step(mu_) == step && part.releasing(mu_)) {
      if (stored.ok()) {
        cells = ApplyReleaseLocked(part, step);
        released = true;
      } else {
        // Not recorded: the step stays live; a Put waiting for its
        // partition asks for the release again.
        part.set_releasing(mu_, false);
        kept = true;
      }
    }
  }
  if (answer) std::move(answer)(stored);  // before the calls it wakes are served
  if (released) AfterRelease(std::move(cells));
  // Gets that waited for the record (those naming the step, and those that
  // passed over it as released) are served from the live step. A Seal
  // applied while the release was recorded may have kept rows whose writes
  // failed meanwhile (their drop waited for the release): they end now.
  if (kept) {
    WakeGets({});
    DropOrphans(step);
  }
}

void DockImpl::AfterRelease(std::shared_ptr<StepCells> cells) {
  // Dropping the cells here (not under mu_) returns its chunks to the pool
  // unless a batch still pins them; parked Puts retry now and on the timer
  // tick, which covers memory that comes back when such a batch goes away.
  cells.reset();
  WakePuts();
  WakeReservations();  // a step is free: admission may grant more
  WakeGets({});  // Gets for the released step must now fail
  if (limits_.steps_changed) limits_.steps_changed(name_);
}

StepWindow DockImpl::Window() const {
  tdock::ReaderMutexLock lock(&mu_);
  StepWindow window;
  window.admitted = ring_.NextSteps(mu_);
  window.front_step = *std::min_element(window.admitted.begin(), window.admitted.end());
  return window;
}

DockStats DockImpl::Stats() const {
  DockStats stats;
  std::vector<bool> removed;  // per consumer
  stats.name = name_;
  stats.rows_per_step = rows_per_step_;
  {
    tdock::ReaderMutexLock lock(&mu_);
    for (const ColumnSpec& c : columns_) stats.columns.push_back(c.name);
    for (const ConsumerSpec& c : consumers_.spec(mu_).consumers) stats.consumers.push_back(c.name);
    stats.front_step = ring_.FrontStep(mu_);
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      StepStats step;
      step.step = part->step(mu_);
      step.partition = part->index();
      step.sealed = part->sealed(mu_);
      step.dropped_rows = part->drops(mu_);
      for (size_t c = 0; c < columns_.size(); ++c) {
        step.ready_rows.push_back(part->column(static_cast<int>(c)).ready.Count());
      }
      for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
        // relaxed: statistics only.
        const ConsumerState& state = part->consumer(mu_, plan.index);
        step.consumed_rows.push_back(state.handed_rows.load(std::memory_order_relaxed));
        const int64_t unit_rows = plan.whole_groups ? group_size_ : 1;
        step.available_rows.push_back(
            CountAvailable(*part, part->consumer(mu_, plan.index), plan,
                           std::numeric_limits<int64_t>::max(), plan.min_version(version_.current())) *
            unit_rows);
      }
      stats.arena_bytes_used += part->cells(mu_)->used_bytes();
      stats.steps.push_back(std::move(step));
    }
    // Totals since creation: released steps plus the live ones.
    stats.rows_written_total = ring_.ReleasedReadyRows(mu_, static_cast<int>(columns_.size()));
    stats.rows_handed_out_total = consumers_.released_handed_total(mu_);
    stats.rows_handed_out_total.resize(consumers_.plans(mu_).size());
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
        // relaxed: statistics only.
        stats.rows_handed_out_total[plan.index] +=
            part->consumer(mu_, plan.index).handed_total.load(std::memory_order_relaxed);
      }
    }
    stats.rows_dropped_total = ring_.released_dropped_rows(mu_);
    for (const StepStats& step : stats.steps) {
      for (int r = 0; r < kDropReasons; ++r) stats.rows_dropped_total[r] += step.dropped_rows[r];
      for (size_t c = 0; c < step.ready_rows.size(); ++c) {
        stats.rows_written_total[c] += step.ready_rows[c];
      }
    }
    stats.rows_in_flight.assign(consumers_.plans(mu_).size(), 0);
    for (const auto& part : ring_.partitions()) {
      if (!part->live(mu_)) continue;
      for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
        // relaxed: statistics only.
        stats.rows_in_flight[plan.index] +=
            part->consumer(mu_, plan.index).in_flight_rows.load(std::memory_order_relaxed);
      }
    }
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
      stats.lease_ms.push_back(absl::ToInt64Milliseconds(plan.lease));
      const LeaseCounts counts = leases_->Counts(plan.index);
      stats.leases_in_flight.push_back(counts.in_flight);
      stats.lease_expiries_total.push_back(counts.expired);
      stats.lease_nacks_total.push_back(counts.nacked);
      stats.rows_returned_total.push_back(counts.rows_returned);
      stats.staleness.push_back(consumers_.staleness(mu_, plan.index).Snapshot());
    }
    for (const ConsumerPlan& plan : consumers_.plans(mu_)) removed.push_back(plan.removed);
  }
  std::sort(stats.steps.begin(), stats.steps.end(),
            [](const StepStats& a, const StepStats& b) { return a.step < b.step; });
  WaiterTable::Counts parked = waiters_.Count(stats.consumers.size());
  stats.waiters = std::move(parked.gets);
  stats.parked_puts = parked.puts;
  stats.version = version_.current();
  const ReservationTable::Counts reservations = reservations_.counts();
  stats.reservations_live = reservations.live;
  stats.reservations_parked = parked.reserves;
  stats.admission_waits_total = reservations.admission_waits;
  stats.admission_wait_seconds_total = reservations.admission_wait_seconds;
  OmitRemoved(removed, stats);
  stats.arena_bytes_reserved = store_->reserved_bytes();
  stats.memory_limit_bytes = store_->limit_bytes();
  return stats;
}

absl::StatusOr<Batch> DockImpl::Read(int64_t step,
                                     const std::vector<int64_t>& rows,
                                     const std::vector<std::string>& names) {
  std::vector<int> columns;
  for (const std::string& name : names) {
    const int c = columns_.IndexOf(name);
    if (c < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(step), ": column '", name, "' is unknown"));
    }
    columns.push_back(c);
  }
  if (names.empty()) {
    for (size_t c = 0; c < columns_.size(); ++c) columns.push_back(static_cast<int>(c));
  }
  tdock::ReaderMutexLock lock(&mu_);
  if (step < 0 || ring_.Classify(mu_, step) != StepState::kLive) return NotLiveLocked(step);
  const Partition& part = ring_.Of(step);
  for (int64_t row : rows) {
    if (row < 0 || row >= rows_per_step_) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(step), ": row ", row, " is out of range [0, ", rows_per_step_, ")"));
    }
    if (part.dropped(row)) {
      return RefuseDropped(part.drop_reason(mu_, row),
                           absl::FailedPreconditionError(absl::StrCat(
                               Where(step), ": row ", row, " was dropped (",
                               DropReasonName(part.drop_reason(mu_, row)), ")")));
    }
    for (int c : columns) {
      if (part.cell(c, row) == nullptr || !part.ready(c, row)) {
        return absl::FailedPreconditionError(absl::StrCat(
            Where(step), ": cell (row ", row, ", column '", columns_[c].name,
            "') is not written"));
      }
    }
  }
  return reader_.Make(part, part.step(mu_), part.cells(mu_), rows, columns, /*with_payload=*/true);
}

void DockImpl::Shutdown() {
  for (auto& w : waiters_.Shutdown()) EndWaiter(std::move(w), Waiter::End::kShutdown);
}

}  // namespace tdock::internal
