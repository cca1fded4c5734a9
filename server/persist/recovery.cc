// Recovery: rebuilding a dock from its records (persistence.h).
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"
#include "server/persist/persistence.h"
#include "server/persist/records.h"
#include "server/persist/store_dock_journal.h"

namespace tdock::persist {
namespace {

using records::Reader;

// Cells come from the scan in key order: by step, column, row. They go into
// the dock as they come, one Put per run of a step's column (up to
// kPutBytes), through one buffer that is reused (its pages stay warm) and
// without a second copy of every cell in memory.
class CellWriter {
 public:
  CellWriter(DockRecovery& dock, const DockSpec& spec, RecoveryStats& stats)
      : dock_(dock), spec_(spec), form_(dock.cell_form()), stats_(stats) {}

  absl::Status Add(int64_t step, int column, int64_t row, absl::string_view value) {
    absl::StatusOr<int64_t> items =
        StoredCellItems(form_, value, spec_.columns[column].item_bytes());
    if (!items.ok()) {
      return absl::DataLossError(absl::StrCat("a cell of step ", step, " column '",
                                              spec_.columns[column].name,
                                              "': ", items.status().message()));
    }
    if (step_ != step || column_ != column || bytes_.size() + value.size() > kPutBytes) {
      TDOCK_RETURN_IF_ERROR(Flush());
      step_ = step;
      column_ = column;
    }
    rows_.push_back(row);
    offsets_.push_back(offsets_.back() + *items);
    bytes_.append(value.data(), value.size());
    ++stats_.cells;
    stats_.bytes += static_cast<int64_t>(value.size());
    return absl::OkStatus();
  }

  // Puts what was added since the last Flush.
  absl::Status Flush() {
    if (rows_.empty()) return absl::OkStatus();
    PutInput put;  // a Put that would wait fails recovery instead
    put.step = step_;
    put.rows = rows_;
    PackedColumn packed;
    packed.name = spec_.columns[column_].name;
    packed.dtype = spec_.columns[column_].dtype;
    packed.offsets = offsets_;
    if (!bytes_.empty()) packed.segments.emplace_back(bytes_.data(), bytes_.size());
    put.columns.push_back(std::move(packed));
    if (absl::Status status = dock_.Put(std::move(put)); !status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("re-writing step ", step_, " column '",
                                       spec_.columns[column_].name, "': ", status.message()));
    }
    steps_.insert(step_);
    rows_.clear();
    offsets_.assign(1, 0);
    bytes_.clear();  // keeps its memory
    return absl::OkStatus();
  }

  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }

 private:
  static constexpr size_t kPutBytes = size_t{64} << 20;

  DockRecovery& dock_;
  const DockSpec& spec_;
  const CellForm form_;
  RecoveryStats& stats_;
  int64_t step_ = -1;
  int column_ = -1;
  std::vector<int64_t> rows_;
  std::vector<int64_t> offsets_{0};
  std::string bytes_;
  std::set<int64_t> steps_;
};

// The records of one dock's live steps, decoded as the scan reaches them:
// cells go into the dock at once (CellWriter), the rest is kept and restored
// afterwards (Restore), when every cell is there.
class DockScan {
 public:
  DockScan(DockRecovery& dock, const DockSpec& spec, std::set<int64_t> released, RecoveryStats& stats)
      : dock_(dock), spec_(spec), released_(std::move(released)), stats_(stats),
        cells_(dock, spec, stats) {}

  // One record: `key` without the dock's prefix.
  absl::Status Record(absl::string_view key, absl::string_view value) {
    Reader in(key);
    int64_t step = 0;
    char kind = 0;
    if (!in.ReadI64(step) || !in.Byte(kind)) return absl::DataLossError("a key does not decode");
    if (released_.count(step) != 0) return absl::OkStatus();  // landed after the release
    switch (kind) {
      case 'b': return Key(step, in, value);
      case 'v': return Version(step, in);
      case 'c': return Cell(step, in, value);
      case 'h': return HandOut(step, in, value);
      case 'r': return Round(step, in, value);
      case 'd': return Delivery(step, in, value);
      case 'k': return Ack(step, in);
      case 'x': return Drop(step, in, value);
      case 'R': return Reservation(step, in, value);
      case 'p': return PutAnswer(step, in, value);
      case 'C': return Carry(step, in, value);
      case 'o': return CarriedDone(step, in, value);
      default:
        return absl::DataLossError(absl::StrCat("unknown record kind '", std::string(1, kind),
                                                "' in step ", step));
    }
  }

  // After the scan: the last cells, then rounds, deliveries and hand-outs
  // with the leases that were not acknowledged, then drops (a drop applies
  // to rows handed out or not, as it did when it was made).
  absl::Status Restore() {
    TDOCK_RETURN_IF_ERROR(cells_.Flush());
    stats_.steps += cells_.steps();
    for (const DockJournal::ReservationRecord& r : reservations_) {
      TDOCK_RETURN_IF_ERROR(dock_.Reserved(r));
    }
    for (const auto& [step, row, key] : keys_) TDOCK_RETURN_IF_ERROR(dock_.Key(step, row, key));
    for (const auto& [id, answer, fingerprint] : put_answers_) {
      dock_.PutAnswer(id, answer, fingerprint);
    }
    for (const auto& [step, row, version] : versions_) {
      TDOCK_RETURN_IF_ERROR(dock_.Version(step, row, version));
    }
    for (const auto& [step, done] : carried_done_) {
      TDOCK_RETURN_IF_ERROR(dock_.CarriedDone(step, done.consumer, done.units));
    }
    for (const DockJournal::RoundRecord& r : rounds_) {
      TDOCK_RETURN_IF_ERROR(dock_.Round(r));
      ++stats_.handouts;
    }
    for (const DeliveryRecord& d : deliveries_) {
      const uint64_t lease = LiveLease(d.step, d.lease);
      TDOCK_RETURN_IF_ERROR(dock_.Delivery(d.step, d.consumer, d.round, d.rank, lease));
      ++stats_.handouts;
      stats_.leases += lease != 0;
    }
    for (DockJournal::HandOut& h : handouts_) {
      h.lease_id = LiveLease(h.step, h.lease_id);
      TDOCK_RETURN_IF_ERROR(dock_.HandOut(h));
      ++stats_.handouts;
      stats_.leases += h.lease_id != 0;
    }
    for (const auto& [step, lease] : acked_) dock_.Acknowledged(lease);
    for (const DockJournal::DropRecord& d : drops_) TDOCK_RETURN_IF_ERROR(dock_.Dropped(d));
    for (DockJournal::DropRecord& c : carries_) {
      TDOCK_RETURN_IF_ERROR(dock_.Carry(c.step, std::move(c.carry), std::move(c.carry_taken)));
    }
    return absl::OkStatus();
  }

  uint64_t next_handout() const { return next_handout_; }

 private:
  struct DeliveryRecord {
    int64_t step, round;
    int consumer;
    int32_t rank;
    uint64_t lease;
  };

  absl::Status Key(int64_t step, Reader& in, absl::string_view value) {
    uint64_t row = 0;
    if (!in.Read(row, 8) || !in.done() || value.empty()) {
      return absl::DataLossError(absl::StrCat("a key of step ", step, " does not decode"));
    }
    keys_.emplace_back(step, static_cast<int64_t>(row), std::string(value));
    return absl::OkStatus();
  }

  absl::Status PutAnswer(int64_t step, Reader& in, absl::string_view value) {
    uint64_t id = 0, fingerprint = 0;
    PutResult answer;
    answer.step = step;
    if (!in.Read(id, 8) || !in.done() || !records::DecodePutAnswer(value, answer, fingerprint)) {
      return absl::DataLossError(absl::StrCat("a Put's answer in step ", step, " does not decode"));
    }
    put_answers_.push_back({id, std::move(answer), fingerprint});
    return absl::OkStatus();
  }

  absl::Status Version(int64_t step, Reader& in) {
    uint64_t row = 0, version = 0;
    if (!in.Read(row, 8) || !in.Read(version, 8) || !in.done()) {
      return absl::DataLossError(absl::StrCat("a version of step ", step, " does not decode"));
    }
    versions_.emplace_back(step, static_cast<int64_t>(row), static_cast<int64_t>(version));
    return absl::OkStatus();
  }

  absl::Status Cell(int64_t step, Reader& in, absl::string_view value) {
    uint64_t column = 0, row = 0;
    if (!in.Read(column, 4) || !in.Read(row, 8) || !in.done() ||
        column >= spec_.columns.size()) {
      return absl::DataLossError(absl::StrCat("a cell of step ", step, " does not decode"));
    }
    return cells_.Add(step, static_cast<int>(column), static_cast<int64_t>(row), value);
  }

  absl::Status HandOut(int64_t step, Reader& in, absl::string_view value) {
    uint64_t consumer = 0, id = 0;
    DockJournal::HandOut h;
    Reader v(value);
    if (!in.Read(consumer, 4) || !in.Read(id, 8) || !v.Read(h.lease_id, 8)) {
      return absl::DataLossError(absl::StrCat("a hand-out of step ", step, " does not decode"));
    }
    // Units of 8 bytes, then (rank > 0) the rank in 4.
    int64_t unit = 0;
    while (v.rest().size() >= 8 && v.ReadI64(unit)) h.units.push_back(unit);
    uint64_t rank = 0;
    if (v.rest().size() == 4 && v.Read(rank, 4)) h.rank = static_cast<int32_t>(rank);
    if (!v.done() || h.rank < 0) {
      return absl::DataLossError("a hand-out's units and rank do not decode");
    }
    // Hand-outs without a lease are numbered in the upper half of the ids.
    if (id >> 63) next_handout_ = std::max(next_handout_, (id & ~(uint64_t{1} << 63)) + 1);
    h.step = step;
    h.consumer = static_cast<int>(consumer);
    handouts_.push_back(std::move(h));
    return absl::OkStatus();
  }

  absl::Status Round(int64_t step, Reader& in, absl::string_view value) {
    DockJournal::RoundRecord r;
    uint64_t consumer = 0, round = 0;
    if (!in.Read(consumer, 4) || !in.Read(round, 8) || !records::DecodeRound(value, r)) {
      return absl::DataLossError(absl::StrCat("a round of step ", step, " does not decode"));
    }
    r.step = step;
    r.consumer = static_cast<int>(consumer);
    r.round = static_cast<int64_t>(round);
    rounds_.push_back(std::move(r));
    return absl::OkStatus();
  }

  absl::Status Delivery(int64_t step, Reader& in, absl::string_view value) {
    uint64_t consumer = 0, round = 0, rank = 0, lease = 0;
    Reader v(value);
    if (!in.Read(consumer, 4) || !in.Read(round, 8) || !in.Read(rank, 4) || !v.Read(lease, 8)) {
      return absl::DataLossError(absl::StrCat("a delivery of step ", step, " does not decode"));
    }
    deliveries_.push_back({step, static_cast<int64_t>(round), static_cast<int>(consumer),
                           static_cast<int32_t>(rank), lease});
    return absl::OkStatus();
  }

  absl::Status Drop(int64_t step, Reader& in, absl::string_view value) {
    uint64_t seq = 0;
    DockJournal::DropRecord d;
    if (!in.Read(seq, 8) || !in.done() || !records::DecodeDrop(value, d)) {
      return absl::DataLossError(absl::StrCat("a drop of step ", step, " does not decode"));
    }
    next_handout_ = std::max(next_handout_, seq + 1);
    d.step = step;
    drops_.push_back(std::move(d));  // in key order: the order they were made
    return absl::OkStatus();
  }

  absl::Status Reservation(int64_t step, Reader& in, absl::string_view value) {
    DockJournal::ReservationRecord r;
    if (!in.Read(r.id, 8) || !in.done() || !records::DecodeReservation(value, r)) {
      return absl::DataLossError(absl::StrCat("a reservation of step ", step, " does not decode"));
    }
    r.step = step;
    reservations_.push_back(std::move(r));
    return absl::OkStatus();
  }

  absl::Status Carry(int64_t step, Reader& in, absl::string_view value) {
    DockJournal::DropRecord c;
    if (!in.done() || !records::DecodeCarry(value, c.carry, c.carry_taken)) {
      return absl::DataLossError(absl::StrCat("the rows step ", step, " carries do not decode"));
    }
    c.step = step;
    carries_.push_back(std::move(c));
    return absl::OkStatus();
  }

  absl::Status CarriedDone(int64_t step, Reader& in, absl::string_view value) {
    uint64_t from = 0, consumer = 0;
    ConsumerUnits done;
    if (!in.Read(from, 8) || !in.Read(consumer, 4) || !in.done() ||
        !records::DecodeNumbers(value, done.units)) {
      return absl::DataLossError(absl::StrCat("rows carried into step ", step,
                                              " do not decode"));
    }
    done.consumer = static_cast<int>(consumer);
    carried_done_.emplace_back(step, std::move(done));
    return absl::OkStatus();
  }

  absl::Status Ack(int64_t step, Reader& in) {
    uint64_t lease = 0;
    if (!in.Read(lease, 8)) return absl::DataLossError("an acknowledgement does not decode");
    acked_.insert({step, lease});
    return absl::OkStatus();
  }

  // The lease, if it is still in flight (not acknowledged); else 0.
  uint64_t LiveLease(int64_t step, uint64_t lease) const {
    return lease != 0 && acked_.count({step, lease}) == 0 ? lease : 0;
  }

  DockRecovery& dock_;
  const DockSpec& spec_;
  const std::set<int64_t> released_;
  RecoveryStats& stats_;
  CellWriter cells_;
  std::vector<DockJournal::HandOut> handouts_;
  std::vector<DockJournal::RoundRecord> rounds_;
  std::vector<DeliveryRecord> deliveries_;
  std::vector<DockJournal::DropRecord> drops_;
  std::vector<DockJournal::ReservationRecord> reservations_;
  std::vector<DockJournal::DropRecord> carries_;  // carry and carry_taken
  std::vector<std::pair<int64_t, ConsumerUnits>> carried_done_;  // by step
  std::vector<std::tuple<int64_t, int64_t, std::string>> keys_;  // step, row, key
  std::vector<std::tuple<int64_t, int64_t, int64_t>> versions_;  // step, row, version
  std::vector<std::tuple<uint64_t, PutResult, uint64_t>> put_answers_;  // id, answer, fingerprint
  std::set<std::pair<int64_t, uint64_t>> acked_;  // (step, lease)
  uint64_t next_handout_ = 0;
};

}  // namespace

absl::StatusOr<RecoveryStats> Persistence::Recover(DockRegistry& registry) {
  const absl::Time start = absl::Now();
  RecoveryStats stats;
  // A new epoch, stored before any dock serves: this start's lease ids are
  // above every earlier start's.
  uint64_t epoch = 0;
  TDOCK_RETURN_IF_ERROR(store_->Scan(records::kEpochKey, [&](absl::string_view key,
                                                             absl::string_view value) {
    if (key.size() != 1) return absl::OkStatus();
    Reader in(value);
    if (!in.Read(epoch, 8) || !in.done()) {
      return absl::DataLossError(absl::StrCat("the epoch record in '", options_.data_dir,
                                              "' does not decode"));
    }
    return absl::OkStatus();
  }));
  // The cells' form, which the data dir's docks were written in: a journal
  // of locations read as bytes (or the reverse) would be garbage.
  std::string stored_form;
  bool has_docks = false;
  TDOCK_RETURN_IF_ERROR(store_->Scan(records::kCellFormKey, [&](absl::string_view key,
                                                                absl::string_view value) {
    if (key.size() == 1) stored_form = std::string(value);
    return absl::OkStatus();
  }));
  TDOCK_RETURN_IF_ERROR(store_->Scan("S", [&](absl::string_view, absl::string_view) {
    has_docks = true;
    return absl::OkStatus();
  }));
  bool shard_cells = false;
  TDOCK_RETURN_IF_ERROR(store_->Scan("H", [&](absl::string_view, absl::string_view) {
    shard_cells = true;
    return absl::OkStatus();
  }));
  if (shard_cells) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", options_.data_dir, "' holds a shard's cells (written by --role=shard), not "
        "docks: give this server a data dir of its own"));
  }
  const std::string form = CellFormName(registry.dock_limits().cells);
  if (stored_form.empty() && has_docks) stored_form = CellFormName(CellForm::kBytes);
  if (has_docks && !stored_form.empty() && stored_form != form) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", options_.data_dir, "' holds docks whose cells are stored as ", stored_form,
        " (written by a ", stored_form == "bytes" ? "standalone server" : "controller",
        "); this server stores them as ", form, ": start it with the --role that wrote them"));
  }
  if (epoch >= records::kMaxEpoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", options_.data_dir, "' was started ", epoch, " times, the most lease ids allow"));
  }
  ++epoch;
  StoreBatch batch;
  std::string value;
  records::PutBe(value, epoch, 8);
  batch.Put(records::kEpochKey, value);
  batch.Put(records::kCellFormKey, form);
  TDOCK_RETURN_IF_ERROR(Write(std::move(batch)));
  TDOCK_RETURN_IF_ERROR(journal_->Flush());  // async acknowledges before storing
  stats.epoch = epoch;
  registry.SetFirstLeaseId(epoch << records::kEpochShift);
  std::vector<std::pair<std::string, std::string>> specs;
  TDOCK_RETURN_IF_ERROR(store_->Scan("S", [&](absl::string_view key, absl::string_view value) {
    specs.emplace_back(std::string(key.substr(1)), std::string(value));
    return absl::OkStatus();
  }));
  for (const auto& [name, bytes] : specs) {
    absl::Status recovered = RecoverDock(registry, bytes, stats);
    if (!recovered.ok()) {
      return absl::Status(recovered.code(), absl::StrCat("recovering dock '", name, "' from '",
                                                         options_.data_dir, "': ",
                                                         recovered.message()));
    }
    ++stats.docks;
  }
  // Steps found done are released once their records are stored: before
  // serving, so the server starts without releases in flight. A record's
  // completion may submit the next (a sealed step's orphans dropped, then
  // the step it ended released): flushed until nothing new was submitted.
  for (;;) {
    const int64_t submitted = journal_->stats().batches;
    TDOCK_RETURN_IF_ERROR(journal_->Flush());
    if (journal_->stats().batches == submitted) break;
  }
  registry.SetHooks(this);
  stats.took = absl::Now() - start;
  return stats;
}

absl::Status Persistence::RecoverDock(DockRegistry& registry, const std::string& spec_bytes,
                                      RecoveryStats& stats) {
  v1::DockSpec proto;
  if (!proto.ParseFromString(spec_bytes)) {
    return absl::DataLossError("its stored spec does not parse");
  }
  TDOCK_ASSIGN_OR_RETURN(DockSpec spec, FromProto(proto));
  TDOCK_ASSIGN_OR_RETURN(DockRecovery dock, DockRecovery::Start(spec, registry.dock_limits()));
  const std::string& name = spec.name;
  const DockSpec normalized = dock.spec();

  // Releases first: later steps of a partition may start only after them.
  std::set<int64_t> released;
  const std::string tombs = records::TombPrefix(name);
  TDOCK_RETURN_IF_ERROR(store_->Scan(tombs, [&](absl::string_view key, absl::string_view) {
    Reader in(key.substr(tombs.size()));
    int64_t step = 0;
    if (!in.ReadI64(step)) return absl::DataLossError("a release record does not decode");
    released.insert(step);
    return absl::OkStatus();
  }));
  for (int64_t step : released) TDOCK_RETURN_IF_ERROR(dock.Released(step));
  const std::string versions = records::DockVersionPrefix(name);
  TDOCK_RETURN_IF_ERROR(store_->Scan(versions, [&](absl::string_view key, absl::string_view) {
    Reader in(key.substr(versions.size()));
    int64_t version = 0;
    if (!in.ReadI64(version) || !in.done()) {
      return absl::DataLossError("a version record does not decode");
    }
    dock.DockVersion(version);  // the highest counts
    return absl::OkStatus();
  }));

  DockScan scan(dock, normalized, std::move(released), stats);
  const std::string prefix = records::DockPrefix(name);
  TDOCK_RETURN_IF_ERROR(store_->Scan(prefix, [&](absl::string_view key, absl::string_view value) {
    return scan.Record(key.substr(prefix.size()), value);
  }));
  TDOCK_RETURN_IF_ERROR(scan.Restore());
  // Steps that were done are released (and their records go) from here on.
  return registry.AddRecovered(std::move(dock).Finish(NewJournal(name, scan.next_handout())));
}

}  // namespace tdock::persist
