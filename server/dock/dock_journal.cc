// DockImpl with a journal (persistence on): what the dock records before it
// acknowledges, how it undoes a request whose record failed, and the
// recovery calls that rebuild its state from the records at start-up.
//
// A Put stages its cells (written, not ready: consumers cannot take them,
// a second Put of a cell sees it written), records them, and only then
// makes them ready and answers. A Get records the rows it hands out (a
// BALANCED round once, then each rank's delivery) before it answers; if the
// record fails, the rows go back to be handed out again and the Get fails
// with the journal's error.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {
namespace {

absl::Status NotStored(const std::string& where, const absl::Status& status) {
  return absl::UnavailableError(
      absl::StrCat(where, ": not stored (", status.message(), ")"));
}

}  // namespace

void DockImpl::AttachJournal(std::shared_ptr<DockJournal> journal) {
  journal_ = std::move(journal);
}

void DockImpl::JournalPut(const PutInput& in, PutResult result, std::vector<WrittenCell> staged,
                          PutCallback done) {
  std::vector<DockJournal::Cell> cells;
  std::shared_ptr<StepArena> arena;
  std::vector<int> written;
  bool freed = false;
  {
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = PartitionOf(in.step);
    // A step being released still holds its cells: they are recorded, as
    // the release may fail and leave the step live.
    freed = !part.live(mu_) || part.step(mu_) != in.step;
    if (!freed) {
      arena = part.arena(mu_);  // keeps the cells' bytes while they are recorded
      for (const PackedColumn& column : in.columns) written.push_back(ColumnIndex(column.name));
      cells.reserve(staged.size());
      for (const WrittenCell& cell : staged) {
        cells.push_back({cell.column, cell.row,
                         ByteSpan(cell.block->data,
                                  cell.block->length * columns_[cell.column].item_bytes())});
      }
    }
  }
  if (freed) {
    // Released right after the commit: nothing was recorded, so nothing (an
    // acknowledgement included) may count as done. Answered without locks.
    std::move(done)(absl::FailedPreconditionError(
        absl::StrCat(Where(in.step), " was released while the Put was in progress")));
    return;
  }
  const int64_t step = in.step;
  // A Put that acknowledges a lease records the acknowledgement with its cells.
  std::optional<DockJournal::LeaseEnd> ack;
  if (in.ack_lease != 0) {
    if (std::optional<Lease> lease = leases_->Pinned(in.ack_lease)) {
      ack = DockJournal::LeaseEnd{lease->step, lease->consumer, lease->id, lease->round,
                                  lease->rank, /*acked=*/true,   lease->replicas};
    }
  }
  // Every record of a keyed row carries its key, so that a key stays
  // exactly as long as a stored write of its row does.
  std::vector<int64_t> rows = in.rows;
  std::vector<DockJournal::Key> keys;
  {
    tdock::ReaderMutexLock lock(&mu_);
    const Partition& part = PartitionOf(in.step);
    for (int64_t row : in.rows) {
      if (const std::string* key = part.key(row)) keys.push_back({row, *key});
    }
  }
  journal_->Cells(step, cells, keys, arena, ack.has_value() ? &*ack : nullptr, KeepAlive([this, step, staged = std::move(staged), arena,
                                written = std::move(written), result, rows = std::move(rows),
                                done = std::move(done)](absl::Status stored) mutable {
    {
      tdock::ReaderMutexLock lock(&mu_);
      if (PartitionOf(step).live(mu_) && PartitionOf(step).arena(mu_) == arena) {
        Partition& part = PartitionOf(step);
        tdock::MutexLock commit(&part.commit_mu());
        // Records complete in the order they were submitted, so the last
        // rewrite of a cell stored is the one left visible.
        for (const WrittenCell& cell : staged) {
          if (columns_[cell.column].rewritable) {
            if (stored.ok()) part.Publish(cell.column, cell.row, cell.block);
          } else if (stored.ok()) {
            part.MakeReady(cell.column, cell.row);
          } else {
            part.Unstage(cell.column, cell.row, cell.block);
          }
        }
        for (int64_t row : rows) part.AddPendingWrite(row, -1);
        // Not stored: rows no other write keeps lose their keys.
        if (!stored.ok()) UnsetKeysLocked(part, rows);
      }
    }
    if (!stored.ok()) {
      std::move(done)(NotStored(absl::StrCat(Where(step), ": Put"), stored));
      return;
    }
    // Answered once the seal it causes (seal_when) is applied; before the
    // Gets it wakes are served.
    MaybeAutoSeal(step, [this, result, written = std::move(written),
                         done = std::move(done)]() mutable {
      std::move(done)(result);
      WakeConsumersOf(written);
    });
  }));
}

GetCallback DockImpl::JournalingGet(const ConsumerPlan& plan, int32_t rank, int32_t replica,
                                   GetCallback done) {
  // The plan's fields are copied: AddConsumer may grow plans_ meanwhile.
  return [this, consumer = plan.index, name = plan.name, groups = plan.whole_groups, rank,
          replica, taker = TakerOf(plan, rank, replica), lease = plan.lease,
          done = std::move(done)](absl::StatusOr<Batch> got) mutable {
    if (!got.ok() || got->rows.empty()) {
      std::move(done)(std::move(got));
      return;
    }
    Batch batch = *std::move(got);
    const int64_t step = batch.step;
    const int64_t round = batch.round;
    const uint64_t lease_id = batch.lease_id;
    DockJournal::HandOut handout{step, consumer, {}, lease_id};
    if (round < 0) handout.units = UnitsOfRows(groups, batch.rows);
    auto answer = [this, consumer, name, rank, replica, lease, batch = std::move(batch),
                   done = std::move(done)](absl::Status stored) mutable {
      const int64_t step = batch.step;
      if (!stored.ok()) {
        ReturnUnrecorded(consumer, rank, replica, batch);
      } else if (batch.lease_id != 0) {
        // The lease runs from now: its hand-out is stored.
        if (batch.round >= 0) {
          UnpinLease(batch.lease_id, consumer, limits_.clock->Now() + lease);
        } else {
          leases_->Unpin(batch.lease_id, limits_.clock->Now() + lease);
        }
      }
      // release: the rows' return (or their record) happens before an
      // auto-release that sees the count drop.
      PartitionOf(step).unrecorded_handouts().fetch_sub(1, std::memory_order_acq_rel);
      if (stored.ok()) {
        std::move(done)(std::move(batch));
      } else {
        std::move(done)(
            NotStored(absl::StrCat(Where(step), " consumer '", name, "'"), stored));
      }
      MaybeAutoRelease(step);
      // The partition may hold a newer step by now (step was released
      // explicitly); its auto-release may have waited for this count.
      int64_t current = -1;
      {
        tdock::ReaderMutexLock lock(&mu_);
        const Partition& part = PartitionOf(step);
        if (part.live(mu_) && part.step(mu_) != step) current = part.step(mu_);
      }
      if (current >= 0) MaybeAutoRelease(current);
    };
    if (round < 0) {
      journal_->HandedOut(handout, KeepAlive(std::move(answer)));
      return;
    }
    // The round goes with each delivery until one of them is stored, so no
    // delivery is stored before its round.
    std::optional<DockJournal::RoundRecord> formed = RoundToRecord(step, consumer, round);
    journal_->RoundDelivered(
        step, consumer, round, taker, lease_id, formed.has_value() ? &*formed : nullptr,
        KeepAlive([this, step, consumer, round,
                   answer = std::move(answer)](absl::Status stored) mutable {
          if (stored.ok()) MarkRoundRecorded(step, consumer, round);
          std::move(answer)(std::move(stored));
        }));
  };
}

std::optional<DockJournal::RoundRecord> DockImpl::RoundToRecord(int64_t step, int consumer,
                                                                int64_t round) {
  tdock::ReaderMutexLock lock(&mu_);
  if (!HoldsLocked(step)) return std::nullopt;
  ConsumerState& state = PartitionOf(step).consumer(mu_, consumer);
  tdock::MutexLock rounds(&state.round_mu);
  if (round >= static_cast<int64_t>(state.rounds.size())) return std::nullopt;
  if (static_cast<size_t>(round) < state.rounds_recorded.size() &&
      state.rounds_recorded[round]) {
    return std::nullopt;
  }
  const Round& r = state.rounds[round];
  DockJournal::RoundRecord record;
  record.step = step;
  record.consumer = consumer;
  record.round = round;
  record.stats = r.stats;
  record.last = r.last;
  for (const RoundShare& share : r.ranks) {
    record.shares.push_back(share.rows);
    record.micro_batches.push_back(share.micro_batches);
  }
  return record;
}

void DockImpl::MarkRoundRecorded(int64_t step, int consumer, int64_t round) {
  tdock::ReaderMutexLock lock(&mu_);
  if (!HoldsLocked(step)) return;
  ConsumerState& state = PartitionOf(step).consumer(mu_, consumer);
  tdock::MutexLock rounds(&state.round_mu);
  if (state.rounds_recorded.size() <= static_cast<size_t>(round)) {
    state.rounds_recorded.resize(round + 1, false);
  }
  state.rounds_recorded[round] = true;
}

void DockImpl::ReturnUnrecorded(int consumer, int32_t rank, int32_t replica,
                                const Batch& batch) {
  {
    tdock::ReaderMutexLock lock(&mu_);
    Lease rows;
    if (batch.lease_id != 0 && leases_->Pinned(batch.lease_id).has_value()) {
      // The lease goes with the hand-out it covered (pinned until stored).
      const Lease lease = leases_->TakePinned(batch.lease_id, LeaseTable::End::kUnrecorded);
      if (lease.id != 0) ReturnLeaseLocked(lease);
    } else if (batch.round >= 0 && HoldsLocked(batch.step)) {
      // A share (under the lease another replica's hand-out holds, if any):
      // this replica takes it again.
      const ConsumerPlan& plan = plans_[consumer];
      ConsumerState& state = PartitionOf(batch.step).consumer(mu_, consumer);
      tdock::MutexLock rounds(&state.round_mu);
      state.redeliver[TakerOf(plan, rank, replica)].insert(batch.round);
      auto took = state.share_replicas.find({batch.round, rank});
      if (took != state.share_replicas.end()) took->second.erase(replica);
    } else if (batch.lease_id == 0 && HoldsLocked(batch.step)) {
      rows.consumer = consumer;
      rows.rank = rank;
      rows.step = batch.step;
      rows.round = batch.round;
      rows.rows = static_cast<int64_t>(batch.rows.size());
      rows.units = UnitsOfRows(plans_[consumer].whole_groups, batch.rows);
      // Nothing was in flight for it: count it so the return evens out.
      PartitionOf(batch.step)
          .consumer(mu_, consumer)
          .in_flight_rows.fetch_add(rows.rows, std::memory_order_acq_rel);
      ReturnLeaseLocked(rows);
    }
  }
  std::vector<bool> wanted(static_cast<size_t>(consumer) + 1, false);
  wanted[consumer] = true;
  WakeGets(wanted);
}

void DockImpl::JournalLeaseEnd(const Lease& lease, bool acked, DockJournal::Done done) {
  if (journal_ == nullptr || lease.id == 0) {
    std::move(done)(absl::OkStatus());
    return;
  }
  journal_->LeaseEnded(
      {lease.step, lease.consumer, lease.id, lease.round, lease.rank, acked, lease.replicas},
      KeepAlive(std::move(done)));
}

// ---- recovery

absl::Status DockImpl::RecoverReleased(int64_t step) {
  if (step < 0) {
    return absl::DataLossError(absl::StrCat(Where(step), ": a release record names a negative step"));
  }
  tdock::MutexLock lock(&mu_);
  Partition& part = PartitionOf(step);
  if (part.live(mu_)) {
    return absl::DataLossError(
        absl::StrCat(Where(step), ": a release record comes after the partition's cells"));
  }
  part.MarkReleased(mu_, step);
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverHandOut(const DockJournal::HandOut& handout) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ClassifyLocked(handout.step) != StepState::kLive) return absl::OkStatus();
  if (handout.consumer < 0 || handout.consumer >= static_cast<int>(plans_.size())) {
    return absl::DataLossError(absl::StrCat(Where(handout.step), ": a hand-out names consumer #",
                                            handout.consumer, ", which does not exist"));
  }
  const ConsumerPlan& plan = plans_[handout.consumer];
  Partition& part = PartitionOf(handout.step);
  ConsumerState& state = part.consumer(mu_, plan.index);
  const int32_t unit_rows = plan.whole_groups ? group_size_ : 1;
  const int64_t units = plan.whole_groups ? part.groups() : part.rows();
  int64_t rows = 0;
  std::vector<int64_t> claimed;
  for (int64_t unit : handout.units) {
    if (unit < 0 || unit >= units) {
      return absl::DataLossError(absl::StrCat(Where(handout.step), " consumer '", plan.name,
                                              "': a hand-out names unit ", unit));
    }
    if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
      claimed.push_back(unit);
      rows += unit_rows;
    }
  }
  if (handout.lease_id != 0 && plan.lease > absl::ZeroDuration()) {
    Lease lease;
    lease.id = handout.lease_id;
    lease.consumer = plan.index;
    lease.step = handout.step;
    lease.units = std::move(claimed);
    lease.rows = rows;
    lease.deadline = limits_.clock->Now() + plan.lease;
    state.in_flight_rows.fetch_add(rows, std::memory_order_acq_rel);
    leases_->AddRecovered(std::move(lease));
  }
  state.consumed_rows.fetch_add(rows, std::memory_order_acq_rel);
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverRound(const DockJournal::RoundRecord& record) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ClassifyLocked(record.step) != StepState::kLive) return absl::OkStatus();
  if (record.consumer < 0 || record.consumer >= static_cast<int>(plans_.size()) ||
      static_cast<int>(record.shares.size()) != plans_[record.consumer].dp_size) {
    return absl::DataLossError(absl::StrCat(Where(record.step), ": round ", record.round,
                                            " does not fit its consumer"));
  }
  const ConsumerPlan& plan = plans_[record.consumer];
  Partition& part = PartitionOf(record.step);
  ConsumerState& state = part.consumer(mu_, plan.index);
  tdock::MutexLock rounds(&state.round_mu);
  if (record.round < static_cast<int64_t>(state.rounds.size())) return absl::OkStatus();
  // A round never recorded: every rank's share was dropped whole before it
  // was fetched (passed over, with nothing to record), or its first
  // delivery's record failed (so no rank got its rows). It stays a round
  // with no rows, so later rounds keep their numbers; whatever rows it held
  // and that are not dropped are claimed again by a round formed later.
  while (static_cast<int64_t>(state.rounds.size()) < record.round) {
    Round empty;
    empty.ranks.resize(record.shares.size());
    state.rounds.push_back(std::move(empty));
  }
  Round round;
  round.stats = record.stats;
  round.last = record.last;
  int64_t rows = 0;
  for (size_t r = 0; r < record.shares.size(); ++r) {
    RoundShare share{record.shares[r], record.micro_batches[r]};
    for (int64_t row : share.rows) {
      if (row < 0 || row >= part.rows()) {
        return absl::DataLossError(absl::StrCat(Where(record.step), " consumer '", plan.name,
                                                "': round ", record.round, " names row ", row));
      }
      const int64_t unit = plan.whole_groups ? row / group_size_ : row;
      (void)state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63));
      ++rows;
    }
    round.ranks.push_back(std::move(share));
  }
  state.rounds.push_back(std::move(round));
  state.rounds_recorded.assign(state.rounds.size(), true);
  state.consumed_rows.fetch_add(rows, std::memory_order_acq_rel);
  return absl::OkStatus();
}

absl::Status DockImpl::RecoverDelivery(int64_t step, int consumer, int64_t round, int32_t taker,
                                       uint64_t lease_id) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ClassifyLocked(step) != StepState::kLive) return absl::OkStatus();
  if (consumer < 0 || consumer >= static_cast<int>(plans_.size()) || taker < 0 ||
      taker >= plans_[consumer].dp_size * plans_[consumer].replicas) {
    return absl::DataLossError(
        absl::StrCat(Where(step), ": a delivery names consumer #", consumer, " taker ", taker));
  }
  const ConsumerPlan& plan = plans_[consumer];
  const int32_t rank = taker / plan.replicas;
  ConsumerState& state = PartitionOf(step).consumer(mu_, consumer);
  tdock::MutexLock rounds(&state.round_mu);
  if (round >= static_cast<int64_t>(state.rounds.size())) return absl::OkStatus();
  // Deliveries come in key order, a taker's rounds ascending. A rank (a
  // replica) takes its rounds in order, so a round it skipped was handed
  // back (expired or nacked: its delivery record went) and is queued for it
  // again.
  for (int64_t skipped = state.next_round[taker]; skipped < round; ++skipped) {
    state.redeliver[taker].insert(skipped);
  }
  state.redeliver[taker].erase(round);
  state.next_round[taker] = std::max(state.next_round[taker], round + 1);
  if (plan.lease == absl::ZeroDuration()) return absl::OkStatus();
  if (lease_id == 0) {  // its lease was acknowledged
    state.shares_acked.insert({round, rank});
    return absl::OkStatus();
  }
  Lease lease;
  lease.id = lease_id;
  lease.consumer = consumer;
  lease.rank = rank;
  lease.replicas = plan.replicas;
  lease.step = step;
  lease.round = round;
  lease.rows = static_cast<int64_t>(state.rounds[round].ranks[rank].rows.size());
  lease.deadline = limits_.clock->Now() + plan.lease;
  state.share_replicas[{round, rank}].insert(taker % plan.replicas);
  // The replicas of a rank share their share's lease: counted once.
  if (leases_->AddRecovered(lease)) {
    state.in_flight_rows.fetch_add(lease.rows, std::memory_order_acq_rel);
  }
  return absl::OkStatus();
}

void DockImpl::FinishRecovery() {
  RebuildKeyIndex();
  std::vector<int64_t> live;
  {
    tdock::ReaderMutexLock lock(&mu_);
    for (const auto& part : partitions_) {
      if (part->live(mu_)) live.push_back(part->step(mu_));
    }
  }
  for (int64_t step : live) MaybeAutoRelease(step);
}

}  // namespace tdock::internal
