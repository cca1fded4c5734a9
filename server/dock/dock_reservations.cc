// DockImpl's reservations (admission before generation): a producer asks
// for rows before it generates them, for the policy version it generates
// with, and gets a step and rows once data of that version landing there can
// still be trained on within the consumers' staleness bounds; until then the
// request waits (bounded, like a Get), so rollout is paced instead of
// producing rows that will be passed over or dropped.
//
// Admission assumes the dock's version advances by one per step trained,
// and that a step is released once its update is done (a trainer that
// acknowledges its lease after setting the new version, or releases the
// step then): rows of version v in step s are trained at version
// V + (s - f), where V is the dock's version and f the oldest step not
// released. They are admitted while that minus v is within the smallest
// max_staleness of the consumers that hold steps (with none, only the ring
// of partitions paces). The step is the oldest one with room that admits
// them. A trainer that releases a step before its update (one that takes
// rows without leases) gets admission one version more eager while it
// trains; the bound itself still holds.
//
// A granted reservation's rows are taken like an append's (whole groups;
// declared sizes close a group's rest as "unused") and reserved: no append
// takes them, Puts write them by row or by naming the reservation. Its record
// (rows, version, deadline) is stored before it is answered; the rows carry
// its version. Its deadline, the Puts that name it and its recovery are in
// dock_reservation_rows.cc.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// Tries of a reservation that loses a race with a concurrent start of its step.
constexpr int kMaxRaces = 64;

// A parked Reserve that lost kMaxRaces races is tried again this much later
// (no release need come to wake it).
constexpr absl::Duration kReserveRetryInterval = absl::Milliseconds(50);

}  // namespace

absl::Status DockImpl::CheckAdmissible(const ReserveInput& in) const {
  if (!in.version.has_value()) return absl::OkStatus();
  // The oldest step not released trains at the dock's version at the
  // earliest: rows older than every bound allows are never admitted.
  const int64_t now = version_.current();
  tdock::ReaderMutexLock lock(&mu_);
  std::string consumer;
  const std::optional<int64_t> bound = consumers_.AdmissionBound(mu_, &consumer);
  if (bound.has_value() && now - *in.version > *bound) {
    return Refuse(Refusal::kStale,
                  absl::FailedPreconditionError(absl::StrCat(
                      "dock '", name_, "': reservation: version ", *in.version, " is ",
                      now - *in.version, " versions behind the dock's ", now, ", past consumer '",
                      consumer, "' max_staleness ", *bound,
                      ": no step can train it (generate with newer weights)")));
  }
  return absl::OkStatus();
}

ReserveAttempt DockImpl::TryReserve(const ReserveInput& in, uint64_t id) {
  ReserveAttempt attempt;
  int64_t front = 0;
  int64_t base = 0;     // the version step `front` trains at
  int64_t version = 0;  // the rows'
  std::optional<int64_t> bound;
  std::string bounded_by;
  {
    tdock::ReaderMutexLock lock(&mu_);
    front = ring_.FrontStep(mu_);
    bound = consumers_.AdmissionBound(mu_, &bounded_by);
    base = version_.current();
    version = in.version.value_or(base);
  }
  for (int64_t step = front; step < front + ring_.steps_in_flight(); ++step) {
    // Later steps are trained later still: the first one that does not admit
    // the rows ends the search.
    const int64_t trained_at = base + (step - front);
    if (bound.has_value() && trained_at - version > *bound) {
      attempt.reason = absl::StrCat(
          Where(step), " would train rows of version ", version, " at version ", trained_at,
          ", past consumer '", bounded_by, "' max_staleness ", *bound,
          " (waiting for the trainer to release steps)");
      return attempt;
    }
    PutInput rows;
    rows.step = step;
    rows.group_sizes = in.group_sizes;
    if (rows.group_sizes.empty()) {
      // Whole groups; a last partial one declared, so its rest is closed (no
      // append can take a row in a group the cursor has passed).
      rows.group_sizes.assign(static_cast<size_t>(in.rows / group_size_), group_size_);
      if (in.rows % group_size_ != 0) rows.group_sizes.push_back(in.rows % group_size_);
    }
    rows.new_rows = in.row_count();
    std::string blocked;
    bool activated = false;
    absl::StatusOr<std::shared_ptr<StepCells>> cells;
    absl::Status assigned = absl::AbortedError(Where(step) + " is changing");
    // A step started and undone by a concurrent Put meanwhile: try again.
    for (int race = 0; race < kMaxRaces && absl::IsAborted(assigned); ++race) {
      cells = ActivateForPut(rows, &blocked, &activated);
      if (!cells.ok() || *cells == nullptr) break;
      assigned = AssignRows(rows, id);
      if (absl::IsAborted(assigned) && activated) DeactivateIfUnused(step, *cells);
    }
    if (!cells.ok()) continue;  // released (or being released) meanwhile
    if (*cells == nullptr) {
      attempt.raced = blocked.empty();
      attempt.reason = attempt.raced ? Where(step) + " is changing" : blocked;
      return attempt;
    }
    if (assigned.ok()) {
      Reservation granted;
      granted.id = id;
      granted.step = step;
      granted.rows = std::move(rows.rows);
      granted.version = version;
      granted.deadline = limits_.clock->Now() + in.deadline;
      attempt.unused = std::move(rows.unused);
      attempt.done = std::move(granted);
      return attempt;
    }
    if (activated) DeactivateIfUnused(step, *cells);
    if (absl::IsAborted(assigned)) {
      attempt.raced = true;
      attempt.reason = std::string(assigned.message());
      return attempt;
    }
    // No room, sealed or being sealed: the next step.
  }
  attempt.reason = absl::StrCat("dock '", name_, "': steps ", front, " to ",
                                front + ring_.steps_in_flight() - 1,
                                " (steps_in_flight) have no room for ", in.row_count(),
                                " rows (waiting for a step to be released)");
  return attempt;
}

uint64_t DockImpl::Reserve(ReserveInput input, ReserveCallback done) {
  absl::Status valid = checks_.Reserve(input);
  if (valid.ok()) valid = CheckAdmissible(input);
  if (valid.ok()) valid = checks_.ReserveDeadline(input);
  if (!valid.ok()) {
    std::move(done)(valid);
    return 0;
  }
  if (input.wait > absl::ZeroDuration()) return ParkReserve(std::move(input), std::move(done));
  if (waiters_.shutting_down()) {
    std::move(done)(ShuttingDown());
    return 0;
  }
  ReserveAttempt attempt = TryReserve(input, reservations_.NewId());
  if (!attempt.done.has_value()) {
    Reservation none;
    none.timed_out = true;
    std::move(done)(std::move(none));
    return 0;
  }
  FinishReserve(std::move(attempt), std::move(done));
  return 0;
}

uint64_t DockImpl::ParkReserve(ReserveInput in, ReserveCallback done) {
  const absl::Time now = limits_.clock->Now();
  std::shared_ptr<Waiter> w = WaiterTable::New(now + in.wait);
  w->kind = Waiter::Kind::kReserve;
  w->since = now;
  w->reserve = std::move(in);
  w->reserve_done = std::move(done);
  ReserveAttempt attempt;
  // Tried and parked in one hold of the table's lock: a release between the
  // two wakes it.
  switch (waiters_.Park(w, limits_.max_parked_reserves, [&] {
    attempt = TryReserve(w->reserve, reservations_.NewId());
    return attempt.done.has_value();
  })) {
    case WaiterTable::Parking::kParked:
      alarm_->RingAt(w->deadline);
      if (!attempt.reason.empty() && attempt.raced) RetryReservesSoon();
      return w->id;
    case WaiterTable::Parking::kServed:
      FinishReserve(std::move(attempt), std::move(w->reserve_done));
      return 0;
    case WaiterTable::Parking::kShuttingDown:
      std::move(w->reserve_done)(ShuttingDown());
      return 0;
    case WaiterTable::Parking::kTooMany:
      std::move(w->reserve_done)(CapacityError(absl::StrCat(
          "dock '", name_, "': ", limits_.max_parked_reserves,
          " Reserves are already waiting for admission, the server's limit "
          "(--max_parked_reserves_per_dock); retry later or wait longer per Reserve")));
      return 0;
  }
  return 0;
}

void DockImpl::RetryReserve(std::shared_ptr<Waiter> w) {
  ReserveAttempt attempt;
  const Waiter::End end = waiters_.FinishRetry(w, [&] {
    attempt = TryReserve(w->reserve, reservations_.NewId());
    return attempt.done.has_value();
  });
  if (attempt.done.has_value()) {
    FinishReserve(std::move(attempt), std::move(w->reserve_done),
                  limits_.clock->Now() - w->since);
  } else if (end != Waiter::End::kNone) {
    EndWaiter(std::move(w), end);
  } else if (attempt.raced) {
    RetryReservesSoon();
  }
}

void DockImpl::WakeReservations() {
  for (auto& w : waiters_.TakeReserves()) RetryReserve(std::move(w));
}

void DockImpl::RetryReservesSoon() {
  const absl::Time at = limits_.clock->Now() + kReserveRetryInterval;
  retries_.Ask(RetryTimes::kReserves, at);
  alarm_->RingAt(at);
}

void DockImpl::ApplyReservationLocked(Partition& part, uint64_t id,
                                      ReservationTable::Entry entry) {
  for (int64_t row : entry.rows) part.row_index().LowerVersion(row, entry.version);
  // Under mu_: a release of the step (which forgets its reservations) comes
  // before or after, never between.
  reservations_.Add(id, std::move(entry));
}

void DockImpl::FinishReserve(ReserveAttempt attempt, ReserveCallback done,
                             std::optional<absl::Duration> waited) {
  if (!attempt.done->ok()) {
    std::move(done)(std::move(*attempt.done));
    return;
  }
  if (waited.has_value()) reservations_.CountAdmissionWait(*waited);
  Reservation granted = **std::move(attempt.done);
  alarm_->RingAt(granted.deadline);
  const int64_t step = granted.step;
  std::vector<int64_t> unused = std::move(attempt.unused);
  auto apply = [this, granted, unused, done = std::move(done)](absl::Status stored) mutable {
    {
      tdock::ReaderMutexLock lock(&mu_);
      if (ring_.Holds(mu_, granted.step)) {
        Partition& part = ring_.Of(granted.step);
        tdock::MutexLock commit(&part.row_index().mu());
        if (stored.ok()) {
          ApplyReservationLocked(
              part, granted.id, {granted.step, granted.rows, granted.version, granted.deadline});
        } else {
          // Free for appends and reservations again: the cursor goes back to
          // the first of its groups.
          part.row_index().SetReserved(granted.rows, 0);
          const int64_t first = granted.rows.front() / group_size_;
          if (first < part.row_index().append_cursor()) part.row_index().set_append_cursor(first);
        }
      }
    }
    if (!unused.empty()) CloseUnusedRows(granted.step, unused, stored.ok());
    if (!stored.ok()) {
      std::move(done)(absl::UnavailableError(absl::StrCat(
          Where(granted.step), ": reservation not stored (", stored.message(), ")")));
      WakeReservations();  // its rows are free again
      return;
    }
    std::move(done)(std::move(granted));
  };
  auto store = [&](DockJournal& journal, DockJournal::Done stored) {
    const DockJournal::ReservationRecord record{
        step, granted.id, granted.rows, granted.version,
        absl::ToUnixMillis(absl::Now() + (granted.deadline - limits_.clock->Now()))};
    std::optional<DockJournal::DropRecord> closed;
    if (!unused.empty()) closed = DockJournal::DropRecord{step, unused, DropReason::kUnused};
    journal.Reserved(record, closed.has_value() ? &*closed : nullptr, std::move(stored));
  };
  commit_.Commit(store, std::move(apply));
}

}  // namespace tdock::internal
