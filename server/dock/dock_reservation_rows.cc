// DockImpl's reservations once granted (dock_reservations.cc grants them):
// at the deadline, rows of one with no cell are dropped as "expired" (closed
// to Puts while that drop is recorded), so a producer that died holds no
// step; a row whose write is being stored then is left to it, and dropped
// as expired if that write is not stored (DropOrphans). A Put may name a
// reservation for its rows; a later Put naming an expired one fails saying
// so. Recovery restores them with their deadline.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/refusal.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::ExpireReservations(absl::Time now) {
  for (auto& [id, entry] : reservations_.TakeExpired(now)) {
    std::vector<int64_t> rows;
    {
      tdock::ReaderMutexLock lock(&mu_);
      if (!ring_.Holds(mu_, entry.step)) continue;
      Partition& part = ring_.Of(entry.step);
      tdock::MutexLock commit(&part.row_index().mu());
      part.row_index().SetReserved(entry.rows, 0);
      // A step being released drops nothing (its release may fail: then a
      // Seal ends the rows left).
      if (part.releasing(mu_)) continue;
      // A cell being recorded counts as written: its Put is under way. If
      // that Put is not stored, its rows are dropped as expired then
      // (DropOrphans).
      std::vector<int64_t> in_flight;
      for (int64_t row : entry.rows) {
        if (part.dropped(row)) continue;
        if (part.row_index().pending_writes(row) > 0) {
          in_flight.push_back(row);  // its cells staged, or a rewrite pending
        } else if (!part.has_cell(row)) {
          rows.push_back(row);
        }
      }
      part.row_index().AddExpiredInFlight(in_flight);
      if (rows.empty()) continue;
      part.row_index().SetExpiring(rows, /*closed=*/true);  // no Put until the drop is recorded
      part.row_index().AddDropInFlight(/*seal=*/false, {}, 1);
    }
    const int64_t step = entry.step;
    RecordAndApplyDrop(
        rows, step, DropReason::kExpired, /*seal=*/false, /*in_flight=*/true,
        [this, id = id, entry = std::move(entry), rows](absl::StatusOr<int64_t> dropped) mutable {
          {
            tdock::ReaderMutexLock lock(&mu_);
            if (!ring_.Holds(mu_, entry.step)) return;
            Partition& part = ring_.Of(entry.step);
            tdock::MutexLock commit(&part.row_index().mu());
            part.row_index().SetExpiring(rows, /*closed=*/false);
            if (dropped.ok()) return;
            // Not stored: the rows stay the reservation's, to expire again
            // a second from now.
            part.row_index().SetReserved(rows, id);
            entry.rows = rows;
            entry.deadline = limits_.clock->Now() + absl::Seconds(1);
            reservations_.Add(id, entry);
          }
          alarm_->RingAt(entry.deadline);
        });
  }
}

absl::Status DockImpl::RowsOfReservation(PutInput& in) const {
  const ReservationTable::Lookup found = reservations_.Find(in.reservation);
  if (found.kind == ReservationTable::Lookup::Kind::kExpired) {
    return RefuseDropped(
        DropReason::kExpired,
        absl::FailedPreconditionError(absl::StrCat(
            Where(found.entry.step), ": reservation ", in.reservation, " expired at ",
            absl::FormatTime(found.entry.deadline),
            ": its rows not written by then were dropped (expired); nothing was written")));
  }
  if (found.kind == ReservationTable::Lookup::Kind::kUnknown) {
    return absl::NotFoundError(absl::StrCat(
        "dock '", name_, "': reservation ", in.reservation,
        " is not known (not granted by this dock, or its step was released)"));
  }
  const ReservationTable::Entry& entry = found.entry;
  if (in.step != entry.step) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(in.step), ": reservation ", in.reservation, " is of step ", entry.step));
  }
  if (in.new_rows > 0 || !in.group_sizes.empty() || (!in.keys.empty() && in.rows.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(in.step), ": a Put naming reservation ", in.reservation,
        " writes its rows; it does not ask for new ones"));
  }
  if (in.rows.empty()) {
    in.rows = entry.rows;
    return absl::OkStatus();
  }
  for (int64_t row : in.rows) {
    if (std::find(entry.rows.begin(), entry.rows.end(), row) == entry.rows.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(in.step), ": row ", row, " is not one of reservation ", in.reservation,
          "'s rows"));
    }
  }
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverReservation(const DockJournal::ReservationRecord& record) {
  if (record.version < 0 || record.rows.empty()) {
    return absl::DataLossError(absl::StrCat(Where(record.step), ": reservation ", record.id,
                                            " does not decode"));
  }
  reservations_.NoteRecoveredId(record.id);
  {
    tdock::MutexLock lock(&mu_);
    Partition& part = ring_.Of(record.step);
    const StepState state = ring_.Classify(mu_, record.step);
    if (state == StepState::kReleased) return absl::OkStatus();
    if (state == StepState::kFree) {
      part.Activate(mu_, record.step, store_->OpenStep());
    } else if (state != StepState::kLive) {
      return absl::DataLossError(absl::StrCat(Where(record.step), ": reservation ", record.id,
                                              " of a step whose partition holds another"));
    }
    for (int64_t row : record.rows) {
      if (row < 0 || row >= rows_per_step_) {
        return absl::DataLossError(absl::StrCat(Where(record.step), ": reservation ",
                                                record.id, " names row ", row));
      }
    }
    tdock::MutexLock commit(&part.row_index().mu());
    part.row_index().SetReserved(record.rows, record.id);  // as AssignRows stages it
    // Rung for by FinishRecovery, once the journal is attached.
    const absl::Time deadline =
        limits_.clock->Now() + (absl::FromUnixMillis(record.deadline_unix_ms) - absl::Now());
    ApplyReservationLocked(part, record.id, {record.step, record.rows, record.version, deadline});
  }
  return absl::OkStatus();
}

}  // namespace tdock::internal
