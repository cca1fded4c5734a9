// What the dock records before it acknowledges (through commit_, with or
// without a journal), and how it undoes a request whose record failed.
//
// A Put stages its cells (written, not ready: consumers cannot take them,
// a second Put of a cell sees it written), records them, and only then
// makes them ready and answers. A Get records the rows it hands out (a
// BALANCED round once, then each rank's delivery) before it answers; if the
// record fails, the rows go back to be handed out again and the Get fails
// with the journal's error.
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
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
  commit_.Attach(std::move(journal), weak_from_this());
}

void DockImpl::RecordPut(const PutInput& in, PutResult result, std::shared_ptr<StepCells> cells,
                         std::vector<WrittenColumn> columns, PutCallback done) {
  auto put = std::make_unique<StagedPut>();
  put->step = in.step;
  put->put_id = in.put_id;
  put->put_fingerprint = in.put_fingerprint;
  put->result = result;
  put->columns = std::move(columns);
  put->cells = std::move(cells);
  for (const PackedColumn& column : in.columns) {
    put->written.push_back(columns_.IndexOf(column.name));
  }
  put->rows = in.rows;
  put->unused = in.unused;
  if (!in.versions.empty()) {
    put->versions.reserve(in.rows.size());
    for (size_t i = 0; i < in.rows.size(); ++i) {
      put->versions.push_back({in.rows[i], in.version_of(i)});
    }
  }
  put->carried_from = in.carried_from;
  for (const auto& taken : in.carried_taken) {
    ConsumerUnits units{taken.first, {}};
    bool whole_groups = false;
    {
      tdock::ReaderMutexLock lock(&mu_);
      whole_groups = consumers_.plan(mu_, units.consumer).whole_groups;
    }
    for (size_t i : taken.second) {
      const int64_t unit = whole_groups ? in.rows[i] / group_size_ : in.rows[i];
      if (units.units.empty() || units.units.back() != unit) units.units.push_back(unit);
    }
    put->carried_done.push_back(std::move(units));
  }
  put->done = std::move(done);
  const StagedPut* staged = put.get();  // the record reads it before Commit returns
  commit_.Commit(
      [this, &in, staged](DockJournal& journal, DockJournal::Done stored) {
        StorePut(in, *staged, journal, std::move(stored));
      },
      [this, put = std::move(put)](absl::Status stored) { ApplyPut(*put, stored); });
}

void DockImpl::BuildPutRecordLocked(Partition& part, const StagedPut& put,
                                    DockJournal::PutRecord& record) const {
  record.cells.reserve(put.columns.size() * put.rows.size());
  for (const WrittenColumn& column : put.columns) {
    const int64_t item_bytes = columns_[column.column].item_bytes();
    for (size_t i = 0; i < put.rows.size(); ++i) {
      record.cells.push_back(
          {column.column, put.rows[i], put.cells->Bytes(column.blocks[i], item_bytes)});
    }
  }
  // Every record of a keyed row carries its key, so that a key stays
  // exactly as long as a stored write of its row does.
  if (part.row_index().has_keys()) {
    for (int64_t row : put.rows) {
      if (const std::string* key = part.row_index().key(row)) record.keys.push_back({row, *key});
    }
  }
}

void DockImpl::StorePut(const PutInput& in, const StagedPut& put, DockJournal& journal,
                        DockJournal::Done stored) {
  DockJournal::PutRecord record{put.step, {}, {}, put.versions, put.cells};
  bool released = false;
  {
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = ring_.Of(put.step);
    // A step being released still holds its cells: they are recorded, as
    // the release may fail and leave the step live.
    released = !part.live(mu_) || part.cells(mu_) != put.cells;
    if (!released) BuildPutRecordLocked(part, put, record);
  }
  if (released) {
    // Released right after the commit: nothing is recorded, so nothing (an
    // acknowledgement included) may count as done. Answered without locks.
    std::move(stored)(absl::FailedPreconditionError(
        absl::StrCat(Where(put.step), " was released while the Put was in progress")));
    return;
  }
  // A Put that acknowledges a lease records the acknowledgement with its cells.
  std::optional<DockJournal::LeaseEnd> ack;
  if (in.ack_lease != 0) {
    if (std::optional<Lease> lease = leases_->Pinned(in.ack_lease)) {
      ack = DockJournal::LeaseEnd{lease->step, lease->consumer, lease->id, lease->round,
                                  lease->rank, /*acked=*/true,   lease->replicas};
    }
  }
  std::optional<DockJournal::DropRecord> unused;
  if (!put.unused.empty()) {
    unused = DockJournal::DropRecord{put.step, put.unused, DropReason::kUnused};
  }
  record.ack = ack.has_value() ? &*ack : nullptr;
  record.unused = unused.has_value() ? &*unused : nullptr;
  record.carried_from = put.carried_from;
  record.carried_done = put.carried_done;
  record.put_id = put.put_id;
  record.put_fingerprint = put.put_fingerprint;
  record.answer = &put.result;
  journal.Put(record, std::move(stored));
}

void DockImpl::ApplyPut(StagedPut& put, const absl::Status& stored) {
  const int64_t step = put.step;
  // The group's rows past its declared size close with the Put, before
  // its cells are ready (which completes the group).
  if (!put.unused.empty()) CloseUnusedRows(step, put.unused, stored.ok());
  bool released = true;
  {
    tdock::ReaderMutexLock lock(&mu_);
    Partition& part = ring_.Of(step);
    if (part.live(mu_) && part.cells(mu_) == put.cells) {
      released = false;
      tdock::MutexLock commit(&part.row_index().mu());
      if (stored.ok()) {
        // Before any cell is ready.
        for (const DockJournal::Version& v : put.versions) {
          part.row_index().LowerVersion(v.row, v.version);
        }
        for (const ConsumerUnits& units : put.carried_done) {
          CountCarriedDoneLocked(part, consumers_.plan(mu_, units.consumer), units.units);
        }
        // While the step is live, so its release forgets the id.
        if (put.put_id != 0) put_ids_.Finish(put.put_id, {put.result, put.put_fingerprint});
      }
      // Records complete in the order they were submitted, so the last
      // rewrite of a cell stored is the one left visible.
      for (const WrittenColumn& column : put.columns) {
        for (size_t i = 0; i < put.rows.size(); ++i) {
          const int64_t row = put.rows[i];
          const CellBlock* block = &column.blocks[i];
          if (column.Staged(i)) {
            if (stored.ok()) {
              part.MakeReady(column.column, row);
            } else {
              part.Unstage(column.column, row, block);
            }
          } else if (stored.ok()) {
            part.Publish(column.column, row, block);
          }
        }
      }
      if (stored.ok()) part.NoteAvailable();
      for (int64_t row : put.rows) part.row_index().AddPendingWrite(row, -1);
      // Not stored: rows no other write keeps lose their keys.
      if (!stored.ok()) UnsetKeysLocked(part, put.rows);
    }
  }
  if (!stored.ok()) {
    std::move(put.done)(
        released ? Refuse(Refusal::kReleased,
                          absl::FailedPreconditionError(absl::StrCat(
                              Where(step), " was released while the Put was in progress")))
                 : NotStored(absl::StrCat(Where(step), ": Put"), stored));
    // A Seal that kept its rows (they were being written) left them to it.
    DropOrphans(step);
    return;
  }
  // Answered once the seal it causes (seal_when) is applied; before the
  // Gets it wakes are served (`in` may be gone once it is answered). A Put
  // that closes unused rows or carries rows changes what the consumers have
  // done of the step too: every Get of the consumers it wrote for is tried.
  const std::optional<int64_t> only_in =
      put.unused.empty() && put.carried_from < 0 ? std::optional<int64_t>(step) : std::nullopt;
  MaybeAutoSeal(step, [this, result = put.result, written = std::move(put.written), only_in,
                       done = std::move(put.done)]() mutable {
    std::move(done)(result);
    WakeConsumersOf(written, only_in);
  });
}

GetCallback DockImpl::RecordingGet(const ConsumerPlan& plan, int32_t rank, int32_t replica,
                                  GetCallback done) {
  // The plan's fields are copied: AddConsumer may grow the plans meanwhile.
  return [this, consumer = plan.index, name = plan.name, groups = plan.whole_groups, rank,
          replica, taker = TakerOf(plan, rank, replica), lease = plan.lease,
          done = std::move(done)](absl::StatusOr<Batch> got) mutable {
    // A round's delivery is recorded even when its share is empty
    // (ServeRoundLocked).
    if (!got.ok() || (got->rows.empty() && got->round < 0)) {
      std::move(done)(std::move(got));
      return;
    }
    Batch batch = *std::move(got);
    const int64_t step = batch.step;
    const int64_t round = batch.round;
    const uint64_t lease_id = batch.lease_id;
    // The rows stay where they are when the batch moves into `answer`
    // (a moved vector keeps its buffer), which owns them until it runs,
    // after the record is built.
    const absl::Span<const int64_t> rows(batch.rows);
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
          StartLeaseClock(batch.lease_id, lease);
        }
      }
      // After the rows' return (or their record); before the answer, as the
      // Get that ends a step answers once the step's release is applied
      // (with a journal: submitted).
      EndHandOut(step);
      if (stored.ok()) {
        std::move(done)(std::move(batch));
      } else {
        std::move(done)(
            NotStored(absl::StrCat(Where(step), " consumer '", name, "'"), stored));
      }
    };
    if (round < 0) {
      commit_.Commit(
          [&](DockJournal& journal, DockJournal::Done stored) {
            journal.HandedOut(
                {step, consumer, UnitsOfRows(rows, groups, group_size_), lease_id, rank},
                std::move(stored));
          },
          std::move(answer));
      return;
    }
    commit_.Commit(
        [&](DockJournal& journal, DockJournal::Done stored) {
          // The round goes with each delivery until one of them is stored,
          // so no delivery is stored before its round.
          std::optional<DockJournal::RoundRecord> formed = RoundToRecord(step, consumer, round);
          journal.RoundDelivered(step, consumer, round, taker, lease_id,
                                 formed.has_value() ? &*formed : nullptr, std::move(stored));
        },
        [this, step, consumer, round, answer = std::move(answer)](absl::Status stored) mutable {
          if (stored.ok()) MarkRoundRecorded(step, consumer, round);
          std::move(answer)(std::move(stored));
        });
  };
}

void DockImpl::EndHandOut(int64_t partition_step) {
  Partition& part = ring_.Of(partition_step);
  // seq_cst: pairs with MaybeAutoRelease, which marks release_waits before
  // it reads the count: it sees this decrement, or this sees its mark.
  // The rows' return (or their record) comes before.
  if (part.unrecorded_handouts().fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  if (!part.release_waits().exchange(false, std::memory_order_seq_cst)) return;
  MaybeAutoRelease(partition_step);
  // The partition may hold a newer step by now (the step was released
  // explicitly); its auto-release may have waited for this count.
  int64_t current = -1;
  {
    tdock::ReaderMutexLock lock(&mu_);
    if (part.live(mu_) && part.step(mu_) != partition_step) current = part.step(mu_);
  }
  if (current >= 0) MaybeAutoRelease(current);
}

std::optional<DockJournal::RoundRecord> DockImpl::RoundToRecord(int64_t step, int consumer,
                                                                int64_t round) {
  tdock::ReaderMutexLock lock(&mu_);
  if (!ring_.Holds(mu_, step)) return std::nullopt;
  ConsumerState& state = ring_.Of(step).consumer(mu_, consumer);
  tdock::MutexLock rounds(&state.book.mu());
  if (round >= state.book.formed() || state.book.Recorded(round)) return std::nullopt;
  const Round& r = state.book.round(round);
  DockJournal::RoundRecord record;
  record.step = step;
  record.consumer = consumer;
  record.round = round;
  record.stats = r.stats;
  record.last = r.last;
  for (const RoundShare& share : r.ranks) {
    record.shares.push_back(share.rows);
    record.micro_batches.push_back(share.micro_batches);
    record.repeats.push_back(share.repeats);
  }
  return record;
}

void DockImpl::MarkRoundRecorded(int64_t step, int consumer, int64_t round) {
  tdock::ReaderMutexLock lock(&mu_);
  if (!ring_.Holds(mu_, step)) return;
  ConsumerState& state = ring_.Of(step).consumer(mu_, consumer);
  tdock::MutexLock rounds(&state.book.mu());
  state.book.MarkRecorded(round);
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
    } else if (batch.round >= 0 && ring_.Holds(mu_, batch.step)) {
      // A share (under the lease another replica's hand-out holds, if any):
      // this replica takes it again.
      const ConsumerPlan& plan = consumers_.plan(mu_, consumer);
      ConsumerState& state = ring_.Of(batch.step).consumer(mu_, consumer);
      tdock::MutexLock rounds(&state.book.mu());
      state.book.HandAgain(TakerOf(plan, rank, replica), batch.round);
      state.book.ReplicaLost(batch.round, rank, replica);
    } else if (batch.lease_id == 0 && ring_.Holds(mu_, batch.step)) {
      rows.consumer = consumer;
      rows.rank = rank;
      rows.step = batch.step;
      rows.round = batch.round;
      rows.rows = static_cast<int64_t>(batch.rows.size());
      rows.units =
          UnitsOfRows(batch.rows, consumers_.plan(mu_, consumer).whole_groups, group_size_);
      // Nothing was in flight for it: count it so the return evens out.
      ring_.Of(batch.step)
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
  if (lease.id == 0) {  // rows handed out without a lease: nothing ends
    std::move(done)(absl::OkStatus());
    return;
  }
  const DockJournal::LeaseEnd end{lease.step, lease.consumer, lease.id,    lease.round,
                                  lease.rank, acked,          lease.replicas};
  commit_.Commit(
      [&end](DockJournal& journal, DockJournal::Done stored) {
        journal.LeaseEnded(end, std::move(stored));
      },
      std::move(done));
}

// ---- recovery

}  // namespace tdock::internal
