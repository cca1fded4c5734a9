// One dock's DockJournal over the journal: each change the dock reports
// becomes a StoreBatch of the records in records.h, submitted to the
// journal, whose `done` the dock waits for before acknowledging. With sync
// durability the `done`s run on the dock's own queue (Journal::NewQueue), in
// the order the records were written, so a busy dock's completions (the
// Gets a Put wakes, the rounds they plan) do not hold up another dock's
// acknowledgements (while fewer docks than the journal's queue threads
// are busy at once). A deleted dock's journal is closed (Close), so its late
// records go nowhere.
//
// Thread safety: every method may be called from any thread.
#ifndef TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_
#define TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "server/dock/journal_hook.h"
#include "server/persist/journal.h"

namespace tdock::persist {

// `journal` is borrowed and must outlive the dock. Hand-outs without a lease
// and drops are numbered from `next_handout` (recovery passes one past the
// highest stored).
class StoreDockJournal final : public DockJournal {
 public:
  StoreDockJournal(Journal* journal, std::string dock, uint64_t next_handout)
      : journal_(journal),
        dock_(std::move(dock)),
        queue_(journal->NewQueue()),
        next_handout_(next_handout) {}

  void Put(const PutRecord& put, Done done) override;
  void HandedOut(const HandOut& h, Done done) override;
  void RoundDelivered(int64_t step, int consumer, int64_t round, int32_t taker, uint64_t lease_id,
                      const RoundRecord* formed, Done done) override;
  void LeaseEnded(const LeaseEnd& end, Done done) override;
  void Dropped(const DropRecord& drop, Done done) override;
  void Reserved(const ReservationRecord& reservation, const DropRecord* unused,
                Done done) override;
  void Released(int64_t step, Done done) override;
  void CarryEnded(int64_t step, Done done) override;
  void SpecChanged(const DockSpec& spec, Done done) override;
  void VersionSet(int64_t version, Done done) override;

  // The dock is deleted: `last` (the deletion of its records) is submitted
  // after every record the dock submitted before, and every record it asks
  // for later fails with FAILED_PRECONDITION naming the deleted dock. So a
  // dock created again under the same name never receives this one's
  // records, however long calls on the old one go on.
  void Close(StoreBatch last, Done done);
  // `last` was not stored: the dock is not deleted and records again.
  void Reopen();

 private:
  // `drop` (may be null): a drop record to add, numbered in queue order.
  void Submit(StoreBatch batch, Done done, const DropRecord* drop = nullptr);
  void AddLeaseEnd(const LeaseEnd& end, StoreBatch& batch) const;

  Journal* const journal_;
  const std::string dock_;
  // Where this dock's `done`s run (sync); null with async durability.
  const std::shared_ptr<SerialQueue> queue_;
  std::atomic<uint64_t> next_handout_;
  // Shared by submissions, exclusive for Close: none is submitted after it.
  tdock::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_STORE_DOCK_JOURNAL_H_
