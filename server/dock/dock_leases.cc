// DockImpl's leases (consumers with lease_ms > 0): rows a Get hands out stay
// in flight until acknowledged; unacknowledged ones come back.
//
// Non-BALANCED consumers: rows that come back have their consumed bits
// cleared, so any Get of the consumer takes them again. BALANCED consumers:
// rows stay claimed by their round, and the rank's share of that round is
// queued for the same rank index, so a restarted worker with the same rank
// gets the same rows.
//
// Counters per consumer and step (ConsumerState): in_flight_rows is raised
// before consumed_rows when rows go out and lowered after consumed_rows when
// they come back, so a reader that sees every row consumed and nothing in
// flight knows the consumer is done with the step; auto-release waits for
// that.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

// How soon an expiry whose record failed is recorded again.
constexpr absl::Duration kExpiryRetry = absl::Seconds(1);

}  // namespace

uint64_t DockImpl::LeaseRowsLocked(Partition& part, const ConsumerPlan& plan,
                                   int32_t rank, std::vector<int64_t> units,
                                   int64_t round, int64_t rows, uint64_t recorded_id) {
  Lease lease;
  lease.id = recorded_id;
  lease.consumer = plan.index;
  lease.rank = rank;
  lease.step = part.step(mu_);
  lease.round = round;
  lease.replicas = plan.replicas;
  lease.units = std::move(units);
  lease.rows = rows;
  // The clock starts once the hand-out is stored (RecordingGet), so no
  // expiry is recorded before the hand-out it ends.
  lease.deadline = absl::InfiniteFuture();
  ConsumerState& state = part.consumer(mu_, plan.index);
  if (recorded_id != 0) {
    // The replicas of a rank share their share's lease: counted once.
    if (leases_->AddRecovered(std::move(lease), /*pinned=*/true)) {
      state.in_flight_rows.fetch_add(rows, std::memory_order_release);
    }
    return recorded_id;
  }
  if (round >= 0) {
    // The rank asked for a round it holds a lease on: one lease per share.
    std::optional<Lease> old = leases_->TakeShare(plan.index, part.step(mu_), round, rank);
    if (old.has_value()) SettleLeaseLocked(*old);
  }
  // release: ordered before the caller's consumed_rows increment.
  state.in_flight_rows.fetch_add(lease.rows, std::memory_order_release);
  return leases_->Add(std::move(lease), /*pinned=*/true);
}

void DockImpl::SettleLeaseLocked(const Lease& lease) {
  if (lease.id == 0 || !ring_.Holds(mu_, lease.step)) return;
  // acq_rel: the auto-release check that sees zero sees the rest settled.
  ring_.Of(lease.step)
      .consumer(mu_, lease.consumer)
      .in_flight_rows.fetch_sub(lease.rows, std::memory_order_acq_rel);
}

void DockImpl::NoteAckedLocked(const Lease& lease) {
  if (lease.id == 0 || lease.round < 0 || !ring_.Holds(mu_, lease.step)) return;
  ConsumerState& state = ring_.Of(lease.step).consumer(mu_, lease.consumer);
  tdock::MutexLock lock(&state.book.mu());
  state.book.Acked(lease.round, lease.rank);
}

void DockImpl::ReturnLeaseLocked(const Lease& lease) {
  if (!ring_.Holds(mu_, lease.step)) return;
  Partition& part = ring_.Of(lease.step);
  ConsumerState& state = part.consumer(mu_, lease.consumer);
  if (lease.round >= 0) {
    // Every replica of the rank that took the share takes it again.
    RoundBook& book = state.book;
    tdock::MutexLock lock(&book.mu());
    for (int32_t q = 0; q < lease.replicas; ++q) {
      book.HandAgain(lease.rank * lease.replicas + q, lease.round);
    }
    book.LeaseEnded(lease.round, lease.rank);
    // Taken again, the share leaves out the rows dropped since.
    std::vector<std::optional<RoundShare>>& taken = book.round(lease.round).taken;
    if (static_cast<size_t>(lease.rank) < taken.size()) taken[lease.rank].reset();
  } else {
    GiveBackLocked(part, consumers_.plan(mu_, lease.consumer), lease.units, /*counted=*/true);
    // Handed out again later, counted again then. relaxed: statistics only.
    state.handed_rows.fetch_sub(lease.rows, std::memory_order_relaxed);
  }
  state.in_flight_rows.fetch_sub(lease.rows, std::memory_order_acq_rel);
}

absl::StatusOr<std::vector<LeaseInfo>> DockImpl::ListLeases(const std::string& consumer) const {
  std::vector<Lease> leases;
  {
    tdock::ReaderMutexLock lock(&mu_);
    TDOCK_ASSIGN_OR_RETURN(const int index, consumers_.FindLeasing(mu_, consumer));
    leases = leases_->InFlight(index);
  }
  std::vector<LeaseInfo> out;
  out.reserve(leases.size());
  for (const Lease& lease : leases) {
    out.push_back({lease.id, lease.step, lease.rank, lease.round, lease.rows, lease.deadline});
  }
  return out;
}

void DockImpl::NackAll(const std::string& consumer, std::optional<int32_t> rank,
                       NackAllCallback done) {
  std::vector<uint64_t> ids;
  absl::StatusOr<int> index;
  {
    tdock::ReaderMutexLock lock(&mu_);
    index = consumers_.FindLeasing(mu_, consumer);
    if (index.ok() && rank.has_value() &&
        (*rank < 0 || *rank >= consumers_.plan(mu_, *index).dp_size)) {
      index = absl::InvalidArgumentError(absl::StrCat(
          "dock '", name_, "': consumer '", consumer, "': rank ", *rank, " is out of range [0, ",
          consumers_.plan(mu_, *index).dp_size, ")"));
    }
    if (index.ok()) {
      for (const Lease& lease : leases_->InFlight(*index)) {
        if (!rank.has_value() || lease.rank == *rank) ids.push_back(lease.id);
      }
    }
  }
  if (!index.ok()) {
    std::move(done)(index.status());  // no lock held
    return;
  }
  if (ids.empty()) {
    std::move(done)(NackAllResult{});
    return;
  }
  // Each lease is handed back as a Nack would (recorded first); one that
  // ended meanwhile (acknowledged, expired), or whose hand-out or end is
  // being recorded right now, is left out. Answered once every Nack is.
  struct Tally {
    tdock::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    NackAllResult result ABSL_GUARDED_BY(mu);
    absl::Status failed ABSL_GUARDED_BY(mu);
    NackAllCallback done ABSL_GUARDED_BY(mu);
  };
  auto tally = std::make_shared<Tally>();
  {
    tdock::MutexLock lock(&tally->mu);
    tally->left = ids.size();
    tally->done = std::move(done);
  }
  for (uint64_t id : ids) {
    EndLease(consumer, id, LeaseTable::End::kNacked,
             [tally, total = ids.size()](absl::StatusOr<int64_t> rows) {
               NackAllCallback answer;
               absl::StatusOr<NackAllResult> result;
               {
                 tdock::MutexLock lock(&tally->mu);
                 if (rows.ok()) {
                   ++tally->result.leases;
                   tally->result.rows += *rows;
                 } else if (!absl::IsFailedPrecondition(rows.status()) && tally->failed.ok()) {
                   tally->failed = rows.status();
                 }
                 if (--tally->left > 0) return;
                 answer = std::move(tally->done);
                 if (tally->failed.ok()) {
                   result = tally->result;
                 } else {
                   result = WithMessage(
                       tally->failed, absl::StrCat(tally->result.leases, " of ", total,
                                                   " leases handed back; ",
                                                   tally->failed.message()));
                 }
               }
               std::move(answer)(std::move(result));
             });
  }
}

void DockImpl::EndLease(const std::string& consumer, uint64_t lease_id, LeaseTable::End end,
                        RowsCallback done) {
  Lease pinned;
  absl::Status refused;
  {
    tdock::ReaderMutexLock lock(&mu_);
    absl::StatusOr<int> index = consumers_.FindLeasing(mu_, consumer);
    if (!index.ok()) {
      refused = index.status();
    } else {
      // Pinned, the lease can neither expire nor end otherwise while its end
      // is recorded; it ends only once that record is stored.
      absl::StatusOr<Lease> found = leases_->PinFor(lease_id, *index, consumer);
      if (found.ok()) {
        pinned = *std::move(found);
      } else {
        refused = found.status();
      }
    }
  }
  if (!refused.ok()) {
    std::move(done)(std::move(refused));
    return;
  }
  const bool acked = end == LeaseTable::End::kAcked;
  JournalLeaseEnd(pinned, acked, [this, lease_id, end, acked, rows = pinned.rows,
                                  consumer = pinned.consumer,
                                  done = std::move(done)](absl::Status stored) mutable {
    if (!stored.ok()) {
      UnpinLease(lease_id, consumer, std::nullopt);
      std::move(done)(absl::UnavailableError(absl::StrCat(
          "dock '", name_, "': lease ", lease_id, ": not stored (", stored.message(), ")")));
      return;
    }
    Lease ended;
    {
      tdock::ReaderMutexLock lock(&mu_);
      ended = leases_->TakePinned(lease_id, end);
      if (ended.id == 0) {
        // Its step was released while the end was recorded: nothing to settle.
      } else if (acked) {
        SettleLeaseLocked(ended);
        NoteAckedLocked(ended);
      } else {
        ReturnLeaseLocked(ended);
      }
    }
    std::move(done)(rows);  // before the Gets it wakes are served
    if (ended.id != 0) AfterLeaseEnded(ended.consumer, acked ? ended.step : -1);
  });
}

void DockImpl::UnpinLease(uint64_t id, int consumer, std::optional<absl::Time> deadline) {
  leases_->Unpin(id, deadline);
  // A balanced rank may wait to ask for the share again (ServeRoundLocked).
  std::vector<bool> wanted(static_cast<size_t>(consumer) + 1, false);
  wanted[consumer] = true;
  WakeGets(wanted);
}

void DockImpl::AfterLeaseEnded(int consumer, int64_t settled_step) {
  // Parked Gets of the consumer: rows came back, or the step may be over.
  std::vector<bool> wanted(static_cast<size_t>(consumer) + 1, false);
  wanted[consumer] = true;
  WakeGets(wanted);
  if (settled_step >= 0) MaybeAutoRelease(settled_step);
}

void DockImpl::ExpireLeases() {
  // Each expiry is recorded before its rows go back; one whose record
  // fails is tried again a second later.
  for (const Lease& expired : leases_->PinExpired(limits_.clock->Now())) {
    JournalLeaseEnd(expired, /*acked=*/false, [this, id = expired.id,
                                               consumer = expired.consumer](absl::Status stored) {
      if (!stored.ok()) {
        UnpinLease(id, consumer, limits_.clock->Now() + kExpiryRetry);
        return;
      }
      Lease ended;
      {
        tdock::ReaderMutexLock lock(&mu_);
        ended = leases_->TakePinned(id, LeaseTable::End::kExpired);
        if (ended.id != 0) ReturnLeaseLocked(ended);
      }
      if (ended.id != 0) AfterLeaseEnded(ended.consumer, -1);
    });
  }
}

void DockImpl::PutAndAck(PutInput input, PutCallback done) {
  const uint64_t id = input.ack_lease;
  if (absl::Status pinned = leases_->Pin(id); !pinned.ok()) {
    std::move(done)(WithMessage(pinned, absl::StrCat(Where(input.step), ": ack_lease: ",
                                                     pinned.message(), "; nothing was written")));
    return;
  }
  // A removed consumer's lease is acknowledged by nobody.
  if (std::optional<Lease> lease = leases_->Pinned(id)) {
    absl::Status gone;
    {
      tdock::ReaderMutexLock lock(&mu_);
      const ConsumerPlan& plan = consumers_.plan(mu_, lease->consumer);
      if (plan.removed) gone = consumers_.Gone(mu_, plan);
    }
    if (!gone.ok()) {
      UnpinLease(id, lease->consumer, std::nullopt);
      std::move(done)(absl::Status(gone.code(), absl::StrCat(Where(input.step), ": ack_lease: ",
                                                             gone.message(),
                                                             "; nothing was written")));
      return;
    }
  }
  // The Put's record carries the acknowledgement (StorePut).
  WritePut(std::move(input), [this, id, done = std::move(done)](
                                 absl::StatusOr<PutResult> result) mutable {
    if (!result.ok()) {
      if (std::optional<Lease> lease = leases_->Pinned(id)) {
        UnpinLease(id, lease->consumer, std::nullopt);
      }
      std::move(done)(std::move(result));
      return;
    }
    Lease lease;
    {
      tdock::ReaderMutexLock lock(&mu_);
      lease = leases_->TakePinned(id);
      SettleLeaseLocked(lease);
      NoteAckedLocked(lease);
    }
    // id 0: the step was released while the Put ran; nothing to settle.
    std::move(done)(std::move(result));
    if (lease.id != 0) AfterLeaseEnded(lease.consumer, lease.step);
  });
}

}  // namespace tdock::internal
