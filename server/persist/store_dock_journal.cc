#include "server/persist/store_dock_journal.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/tdock/v1/convert.h"
#include "server/persist/records.h"

namespace tdock::persist {
namespace {

using records::AckKey;
using records::CarriedDoneKey;
using records::CarryKey;
using records::CellKey;
using records::DeliveryKey;
using records::DockPrefix;
using records::DockVersionKey;
using records::DockVersionPrefix;
using records::DropKey;
using records::EncodeDrop;
using records::EncodeHandOut;
using records::EncodeNumbers;
using records::EncodePutAnswer;
using records::EncodeReservation;
using records::EncodeRound;
using records::HandOutKey;
using records::KeyKey;
using records::PrefixEnd;
using records::PutBe;
using records::PutIdKey;
using records::ReservationKey;
using records::RoundKey;
using records::SpecKey;
using records::StepPrefix;
using records::TombKey;
using records::VersionKey;

}  // namespace

void StoreDockJournal::Put(const PutRecord& put, Done done) {
  StoreBatch batch;
  if (put.ack != nullptr) AddLeaseEnd(*put.ack, batch);
  for (const Key& key : put.keys) batch.Put(KeyKey(dock_, put.step, key.row), key.key);
  for (const Version& v : put.versions) {
    batch.Put(VersionKey(dock_, put.step, v.row, v.version), "");
  }
  for (const Cell& cell : put.cells) {
    // The dock's cells share value-log segments (its own steps only).
    batch.PutBorrowed(CellKey(dock_, put.step, cell.column, cell.row),
                      absl::string_view(cell.bytes.data(), cell.bytes.size()), put.pin,
                      DockPrefix(dock_).size());
  }
  if (put.carried_from >= 0) {
    // The rows are in this step once this is stored, and no longer owed.
    for (const ConsumerUnits& d : put.carried_done) {
      batch.Put(CarriedDoneKey(dock_, put.step, put.carried_from, d.consumer),
                EncodeNumbers(d.units));
    }
    batch.Delete(CarryKey(dock_, put.carried_from));
  }
  if (put.put_id != 0 && put.answer != nullptr) {
    batch.Put(PutIdKey(dock_, put.step, put.put_id), EncodePutAnswer(*put.answer, put.put_fingerprint));
  }
  Submit(std::move(batch), std::move(done), put.unused);
}

void StoreDockJournal::Reserved(const ReservationRecord& r, const DropRecord* unused,
                                Done done) {
  StoreBatch batch;
  batch.Put(ReservationKey(dock_, r.step, r.id), EncodeReservation(r));
  Submit(std::move(batch), std::move(done), unused);
}

void StoreDockJournal::HandedOut(const HandOut& h, Done done) {
  // Leased hand-outs are keyed by their lease; others by a counter in the
  // upper half of the id space.
  const uint64_t id = h.lease_id != 0 ? h.lease_id : (uint64_t{1} << 63) | next_handout_++;
  StoreBatch batch;
  batch.Put(HandOutKey(dock_, h.step, h.consumer, id), EncodeHandOut(h));
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::RoundDelivered(int64_t step, int consumer, int64_t round, int32_t taker,
                                      uint64_t lease_id, const RoundRecord* formed, Done done) {
  StoreBatch batch;
  if (formed != nullptr) {
    batch.Put(RoundKey(dock_, formed->step, formed->consumer, formed->round),
              EncodeRound(*formed));
  }
  std::string value;
  PutBe(value, lease_id, 8);
  batch.Put(DeliveryKey(dock_, step, consumer, round, taker), value);
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::LeaseEnded(const LeaseEnd& end, Done done) {
  StoreBatch batch;
  AddLeaseEnd(end, batch);
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::Dropped(const DropRecord& drop, Done done) {
  StoreBatch batch;
  // A seal that carries rows: owed to the next step until a Put writes them.
  if (!drop.carry.empty()) {
    batch.Put(CarryKey(dock_, drop.step), records::EncodeCarry(drop.carry, drop.carry_taken));
  }
  Submit(std::move(batch), std::move(done), &drop);
}

void StoreDockJournal::Released(int64_t step, Done done) {
  StoreBatch batch;
  const std::string prefix = StepPrefix(dock_, step);
  batch.DeleteRange(prefix, PrefixEnd(prefix));
  batch.Put(TombKey(dock_, step), "");
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::CarryEnded(int64_t step, Done done) {
  StoreBatch batch;
  batch.Delete(CarryKey(dock_, step));
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::VersionSet(int64_t version, Done done) {
  StoreBatch batch;
  // Lower versions go; a lower one stored later keeps this one.
  batch.DeleteRange(DockVersionPrefix(dock_), DockVersionKey(dock_, version));
  batch.Put(DockVersionKey(dock_, version), "");
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::SpecChanged(const DockSpec& spec, Done done) {
  StoreBatch batch;
  batch.Put(SpecKey(spec.name), ToProto(spec).SerializeAsString());
  Submit(std::move(batch), std::move(done));
}

void StoreDockJournal::Close(StoreBatch last, Done done) {
  absl::AnyInvocable<void() &&> now;
  {
    tdock::MutexLock lock(&mu_);
    closed_ = true;
    now = journal_->Enqueue(std::move(last), std::move(done), queue_);
  }
  if (now) std::move(now)();
}

void StoreDockJournal::Reopen() {
  tdock::MutexLock lock(&mu_);
  closed_ = false;
}

void StoreDockJournal::Submit(StoreBatch batch, Done done, const DropRecord* drop) {
  // Queued under the lock, so that none follows Close; answered (async)
  // after it, as the answer may record more.
  bool closed = false;
  absl::AnyInvocable<void() &&> now;
  if (drop != nullptr) {
    // Numbered in the hold that queues it: recovery reads drops in the order
    // they were stored (the first drop of a row gives its reason).
    tdock::MutexLock lock(&mu_);
    closed = closed_;
    if (!closed) {
      batch.Put(DropKey(dock_, drop->step, next_handout_++), EncodeDrop(*drop));
      if (!drop->carry.empty()) {
        batch.Put(DropKey(dock_, drop->step, next_handout_++),
                  EncodeDrop({drop->step, drop->carry, DropReason::kCarried}));
      }
      now = journal_->Enqueue(std::move(batch), std::move(done), queue_);
    }
  } else {
    tdock::ReaderMutexLock lock(&mu_);
    closed = closed_;
    if (!closed) now = journal_->Enqueue(std::move(batch), std::move(done), queue_);
  }
  if (!closed) {
    if (now) std::move(now)();
    return;
  }
  std::move(done)(absl::FailedPreconditionError(
      absl::StrCat("dock '", dock_, "' was deleted; its records are gone")));
}

void StoreDockJournal::AddLeaseEnd(const LeaseEnd& end, StoreBatch& batch) const {
  if (end.acked) {
    batch.Put(AckKey(dock_, end.step, end.lease_id), "");
  } else if (end.round >= 0) {
    for (int32_t q = 0; q < end.replicas; ++q) {
      batch.Delete(DeliveryKey(dock_, end.step, end.consumer, end.round,
                               end.rank * end.replicas + q));
    }
  } else {
    batch.Delete(HandOutKey(dock_, end.step, end.consumer, end.lease_id));
  }
}


}  // namespace tdock::persist
