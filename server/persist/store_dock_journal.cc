#include "server/persist/store_dock_journal.h"

#include <atomic>
#include <utility>
#include <vector>

#include "proto/tdock/v1/convert.h"
#include "server/persist/records.h"

namespace tdock::persist {
namespace {

using records::AckKey;
using records::CellKey;
using records::DeliveryKey;
using records::DockPrefix;
using records::EncodeHandOut;
using records::EncodeRound;
using records::HandOutKey;
using records::PrefixEnd;
using records::PutBe;
using records::RoundKey;
using records::SpecKey;
using records::StepPrefix;
using records::TombKey;

class StoreDockJournal final : public DockJournal {
 public:
  StoreDockJournal(Journal* journal, std::string dock, uint64_t next_handout)
      : journal_(journal), dock_(std::move(dock)), next_handout_(next_handout) {}

  void Cells(int64_t step, const std::vector<Cell>& cells, std::shared_ptr<const void> pin,
             const LeaseEnd* ack, Done done) override {
    StoreBatch batch;
    if (ack != nullptr) AddLeaseEnd(*ack, batch);
    for (const Cell& cell : cells) {
      // The dock's cells share value-log segments (its own steps only).
      batch.PutBorrowed(CellKey(dock_, step, cell.column, cell.row),
                        absl::string_view(cell.bytes.data(), cell.bytes.size()), pin,
                        DockPrefix(dock_).size());
    }
    journal_->Submit(std::move(batch), std::move(done));
  }

  void HandedOut(const HandOut& h, Done done) override {
    // Leased hand-outs are keyed by their lease; others by a counter in the
    // upper half of the id space.
    const uint64_t id = h.lease_id != 0 ? h.lease_id : (uint64_t{1} << 63) | next_handout_++;
    StoreBatch batch;
    batch.Put(HandOutKey(dock_, h.step, h.consumer, id), EncodeHandOut(h));
    journal_->Submit(std::move(batch), std::move(done));
  }

  void RoundDelivered(int64_t step, int consumer, int64_t round, int32_t rank, uint64_t lease_id,
                      const RoundRecord* formed, Done done) override {
    StoreBatch batch;
    if (formed != nullptr) {
      batch.Put(RoundKey(dock_, formed->step, formed->consumer, formed->round),
                EncodeRound(*formed));
    }
    std::string value;
    PutBe(value, lease_id, 8);
    batch.Put(DeliveryKey(dock_, step, consumer, round, rank), value);
    journal_->Submit(std::move(batch), std::move(done));
  }

  void LeaseEnded(const LeaseEnd& end, Done done) override {
    StoreBatch batch;
    AddLeaseEnd(end, batch);
    journal_->Submit(std::move(batch), std::move(done));
  }

  void Released(int64_t step, Done done) override {
    StoreBatch batch;
    const std::string prefix = StepPrefix(dock_, step);
    batch.DeleteRange(prefix, PrefixEnd(prefix));
    batch.Put(TombKey(dock_, step), "");
    journal_->Submit(std::move(batch), std::move(done));
  }

  void SpecChanged(const DockSpec& spec, Done done) override {
    StoreBatch batch;
    batch.Put(SpecKey(spec.name), ToProto(spec).SerializeAsString());
    journal_->Submit(std::move(batch), std::move(done));
  }

 private:
  void AddLeaseEnd(const LeaseEnd& end, StoreBatch& batch) const {
    if (end.acked) {
      batch.Put(AckKey(dock_, end.step, end.lease_id), "");
    } else if (end.round >= 0) {
      batch.Delete(DeliveryKey(dock_, end.step, end.consumer, end.round, end.rank));
    } else {
      batch.Delete(HandOutKey(dock_, end.step, end.consumer, end.lease_id));
    }
  }

  Journal* const journal_;
  const std::string dock_;
  std::atomic<uint64_t> next_handout_;
};

}  // namespace

std::shared_ptr<DockJournal> NewStoreDockJournal(Journal* journal, std::string dock,
                                                 uint64_t next_handout) {
  return std::make_shared<StoreDockJournal>(journal, std::move(dock), next_handout);
}

}  // namespace tdock::persist
