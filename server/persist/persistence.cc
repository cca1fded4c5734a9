#include "server/persist/persistence.h"

#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"

namespace tdock::persist {
namespace {

// ---- key and value encoding

void PutBe(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads big-endian numbers off the front of a string view.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  bool Read(uint64_t& v, int bytes) {
    if (data_.size() < static_cast<size_t>(bytes)) return false;
    v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(data_[i]);
    data_.remove_prefix(bytes);
    return true;
  }
  bool ReadI64(int64_t& v) {
    uint64_t u = 0;
    if (!Read(u, 8)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool ReadDouble(double& d) {
    uint64_t u = 0;
    if (!Read(u, 8)) return false;
    std::memcpy(&d, &u, sizeof d);
    return true;
  }
  bool Byte(char& c) {
    if (data_.empty()) return false;
    c = data_[0];
    data_.remove_prefix(1);
    return true;
  }
  absl::string_view rest() const { return data_; }
  bool done() const { return data_.empty(); }

 private:
  absl::string_view data_;
};

void PutDouble(std::string& out, double d) {
  uint64_t u = 0;
  std::memcpy(&u, &d, sizeof d);
  PutBe(out, u, 8);
}

std::string SpecKey(absl::string_view dock) { return absl::StrCat("S", dock); }
std::string DockPrefix(absl::string_view dock) { return absl::StrCat("D", dock, std::string(1, '\0')); }
std::string StepPrefix(absl::string_view dock, int64_t step) {
  std::string key = DockPrefix(dock);
  PutBe(key, static_cast<uint64_t>(step), 8);
  return key;
}
std::string TombPrefix(absl::string_view dock) { return absl::StrCat("T", dock, std::string(1, '\0')); }

// The end of the range of keys that start with `prefix`.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

// A round's value: last, the stats, then per rank its rows and
// micro-batches.
std::string EncodeRound(const DockJournal::RoundRecord& r) {
  std::string v;
  v.push_back(r.last ? 1 : 0);
  const BalanceStats& s = r.stats;
  for (const Spread& spread :
       {s.rank_cost, s.rank_tokens, s.micro_batch_cost, s.micro_batch_tokens}) {
    for (double d : {spread.min, spread.max, spread.mean}) PutDouble(v, d);
  }
  PutDouble(v, s.padding_ratio);
  for (int64_t n : {s.micro_batches, s.tokens, s.padded_tokens}) PutBe(v, n, 8);
  PutBe(v, r.shares.size(), 8);
  for (size_t k = 0; k < r.shares.size(); ++k) {
    PutBe(v, r.shares[k].size(), 8);
    for (int64_t row : r.shares[k]) PutBe(v, row, 8);
    PutBe(v, r.micro_batches[k].size(), 8);
    for (const MicroBatchInfo& m : r.micro_batches[k]) {
      for (int64_t n : {m.begin, m.end, m.padded_len, m.tokens, m.padded_tokens}) PutBe(v, n, 8);
    }
  }
  return v;
}

bool DecodeRound(absl::string_view value, DockJournal::RoundRecord& r) {
  Reader in(value);
  char last = 0;
  if (!in.Byte(last)) return false;
  r.last = last != 0;
  BalanceStats& s = r.stats;
  for (Spread* spread :
       {&s.rank_cost, &s.rank_tokens, &s.micro_batch_cost, &s.micro_batch_tokens}) {
    for (double* d : {&spread->min, &spread->max, &spread->mean}) {
      if (!in.ReadDouble(*d)) return false;
    }
  }
  if (!in.ReadDouble(s.padding_ratio)) return false;
  for (int64_t* n : {&s.micro_batches, &s.tokens, &s.padded_tokens}) {
    if (!in.ReadI64(*n)) return false;
  }
  int64_t ranks = 0;
  if (!in.ReadI64(ranks) || ranks < 0 || ranks > 1 << 20) return false;
  r.shares.resize(ranks);
  r.micro_batches.resize(ranks);
  for (int64_t k = 0; k < ranks; ++k) {
    int64_t rows = 0;
    if (!in.ReadI64(rows) || rows < 0 || rows > 1 << 26) return false;
    r.shares[k].resize(rows);
    for (int64_t& row : r.shares[k]) {
      if (!in.ReadI64(row)) return false;
    }
    int64_t mbs = 0;
    if (!in.ReadI64(mbs) || mbs < 0 || mbs > 1 << 26) return false;
    r.micro_batches[k].resize(mbs);
    for (MicroBatchInfo& m : r.micro_batches[k]) {
      for (int64_t* n : {&m.begin, &m.end, &m.padded_len, &m.tokens, &m.padded_tokens}) {
        if (!in.ReadI64(*n)) return false;
      }
    }
  }
  return in.done();
}

// Submits through the journal and waits (control-plane calls on RPC threads).
absl::Status WriteAndWait(Journal& journal, StoreBatch batch) {
  std::promise<absl::Status> stored;
  journal.Submit(std::move(batch), [&stored](absl::Status s) { stored.set_value(std::move(s)); });
  return stored.get_future().get();
}

// One dock's records through the journal.
class StoreDockJournal final : public DockJournal {
 public:
  StoreDockJournal(Journal* journal, std::string dock, uint64_t next_handout)
      : journal_(journal), dock_(std::move(dock)), next_handout_(next_handout) {}

  void Cells(int64_t step, const std::vector<Cell>& cells, std::shared_ptr<const void> pin,
             Done done) override {
    StoreBatch batch;
    for (const Cell& cell : cells) {
      std::string key = StepPrefix(dock_, step);
      key.push_back('c');
      PutBe(key, static_cast<uint32_t>(cell.column), 4);
      PutBe(key, static_cast<uint64_t>(cell.row), 8);
      // The dock's cells share value-log segments (its own steps only).
      batch.PutBorrowed(key, absl::string_view(cell.bytes.data(), cell.bytes.size()), pin,
                        DockPrefix(dock_).size());
    }
    journal_->Submit(std::move(batch), std::move(done));
  }

  void HandedOut(const HandOut& h, Done done) override {
    // Leased hand-outs are keyed by their lease; others by a counter in the
    // upper half of the id space.
    const uint64_t id = h.lease_id != 0 ? h.lease_id : (uint64_t{1} << 63) | next_handout_++;
    std::string value;
    PutBe(value, h.lease_id, 8);
    for (int64_t unit : h.units) PutBe(value, static_cast<uint64_t>(unit), 8);
    StoreBatch batch;
    batch.Put(HandOutKey(h.step, h.consumer, id), value);
    journal_->Submit(std::move(batch), std::move(done));
  }

  void RoundDelivered(int64_t step, int consumer, int64_t round, int32_t rank, uint64_t lease_id,
                      const RoundRecord* formed, Done done) override {
    StoreBatch batch;
    if (formed != nullptr) {
      std::string key = StepPrefix(dock_, formed->step);
      key.push_back('r');
      PutBe(key, static_cast<uint32_t>(formed->consumer), 4);
      PutBe(key, static_cast<uint64_t>(formed->round), 8);
      batch.Put(key, EncodeRound(*formed));
    }
    std::string value;
    PutBe(value, lease_id, 8);
    batch.Put(DeliveryKey(step, consumer, round, rank), value);
    journal_->Submit(std::move(batch), std::move(done));
  }

  void LeaseEnded(const LeaseEnd& end, Done done) override {
    StoreBatch batch;
    if (end.acked) {
      std::string key = StepPrefix(dock_, end.step);
      key.push_back('k');
      PutBe(key, end.lease_id, 8);
      batch.Put(key, "");
    } else if (end.round >= 0) {
      batch.Delete(DeliveryKey(end.step, end.consumer, end.round, end.rank));
    } else {
      batch.Delete(HandOutKey(end.step, end.consumer, end.lease_id));
    }
    journal_->Submit(std::move(batch), std::move(done));
  }

  void Released(int64_t step, Done done) override {
    StoreBatch batch;
    const std::string prefix = StepPrefix(dock_, step);
    batch.DeleteRange(prefix, PrefixEnd(prefix));
    std::string tomb = TombPrefix(dock_);
    PutBe(tomb, static_cast<uint64_t>(step), 8);
    batch.Put(tomb, "");
    journal_->Submit(std::move(batch), std::move(done));
  }

  void SpecChanged(const DockSpec& spec, Done done) override {
    StoreBatch batch;
    batch.Put(SpecKey(spec.name), ToProto(spec).SerializeAsString());
    journal_->Submit(std::move(batch), std::move(done));
  }

 private:
  std::string HandOutKey(int64_t step, int consumer, uint64_t id) const {
    std::string key = StepPrefix(dock_, step);
    key.push_back('h');
    PutBe(key, static_cast<uint32_t>(consumer), 4);
    PutBe(key, id, 8);
    return key;
  }
  std::string DeliveryKey(int64_t step, int consumer, int64_t round, int32_t rank) const {
    std::string key = StepPrefix(dock_, step);
    key.push_back('d');
    PutBe(key, static_cast<uint32_t>(consumer), 4);
    PutBe(key, static_cast<uint64_t>(round), 8);
    PutBe(key, static_cast<uint32_t>(rank), 4);
    return key;
  }

  Journal* const journal_;
  const std::string dock_;
  std::atomic<uint64_t> next_handout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Persistence>> Persistence::Open(PersistenceOptions options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("--data_dir is empty");
  }
  if (options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flush_interval_ms must be positive, got ", absl::FormatDuration(options.flush_interval)));
  }
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                         OpenRocksStore(options.data_dir, {.segment_bytes = options.segment_bytes}));
  return std::make_unique<Persistence>(std::move(store), std::move(options));
}

Persistence::Persistence(std::unique_ptr<Store> store, PersistenceOptions options)
    : options_(std::move(options)),
      store_(std::move(store)),
      journal_(std::make_unique<Journal>(
          store_.get(), Journal::Options{.durability = options_.durability,
                                         .flush_interval = options_.flush_interval})) {}

Persistence::~Persistence() = default;

absl::Status Persistence::Write(StoreBatch batch) { return WriteAndWait(*journal_, std::move(batch)); }

absl::Status Persistence::Created(Dock& dock) {
  StoreBatch batch;
  const DockSpec spec = dock.spec();
  batch.Put(SpecKey(spec.name), ToProto(spec).SerializeAsString());
  // A dock of the same name may have been deleted: start from nothing.
  const std::string prefix = DockPrefix(spec.name);
  batch.DeleteRange(prefix, PrefixEnd(prefix));
  const std::string tombs = TombPrefix(spec.name);
  batch.DeleteRange(tombs, PrefixEnd(tombs));
  TDOCK_RETURN_IF_ERROR(Write(std::move(batch)));
  dock.AttachJournal(std::make_shared<StoreDockJournal>(journal_.get(), spec.name, 0));
  return absl::OkStatus();
}

absl::Status Persistence::Deleted(const std::string& name) {
  StoreBatch batch;
  batch.Delete(SpecKey(name));
  for (const std::string& prefix : {DockPrefix(name), TombPrefix(name)}) {
    batch.DeleteRange(prefix, PrefixEnd(prefix));
  }
  return Write(std::move(batch));
}

absl::Status Persistence::Checkpoint(const std::string& dir) {
  return journal_->RunWhenFlushed([&] { return store_->Checkpoint(dir); });
}

absl::StatusOr<RecoveryStats> Persistence::Recover(DockRegistry& registry) {
  const absl::Time start = absl::Now();
  RecoveryStats stats;
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
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<Dock> dock, registry.Create(spec));
  const std::string& name = spec.name;
  const DockSpec normalized = dock->spec();

  std::set<int64_t> released;
  TDOCK_RETURN_IF_ERROR(store_->Scan(TombPrefix(name), [&](absl::string_view key, absl::string_view) {
    Reader in(key.substr(TombPrefix(name).size()));
    int64_t step = 0;
    if (!in.ReadI64(step)) return absl::DataLossError("a release record does not decode");
    released.insert(step);
    return absl::OkStatus();
  }));

  for (int64_t step : released) TDOCK_RETURN_IF_ERROR(dock->RecoverReleased(step));

  // Cells come in key order: by step, column, row. They go into the dock as
  // they come, one Put per run of a step's column (up to kRecoveryPutBytes),
  // through one buffer that is reused; everything else is collected and
  // restored after the cells.
  constexpr size_t kRecoveryPutBytes = size_t{64} << 20;
  struct ColumnCells {
    int64_t step = -1;
    int column = -1;
    std::vector<int64_t> rows;
    std::vector<int64_t> offsets{0};
    std::string bytes;
  } pending;
  std::set<int64_t> steps_with_cells;
  auto put_pending = [&]() -> absl::Status {
    if (pending.rows.empty()) return absl::OkStatus();
    PutInput put;
    put.step = pending.step;
    put.rows = pending.rows;
    PackedColumn packed;
    packed.name = normalized.columns[pending.column].name;
    packed.dtype = normalized.columns[pending.column].dtype;
    packed.offsets = pending.offsets;
    if (!pending.bytes.empty()) packed.segments.emplace_back(pending.bytes.data(), pending.bytes.size());
    put.columns.push_back(std::move(packed));
    std::promise<absl::Status> put_done;
    dock->Put(std::move(put), [&put_done](absl::StatusOr<PutResult> r) {
      put_done.set_value(r.status());
    });
    absl::Status status = put_done.get_future().get();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("re-writing step ", pending.step,
                                                      " column '",
                                                      normalized.columns[pending.column].name,
                                                      "': ", status.message()));
    }
    steps_with_cells.insert(pending.step);
    pending.rows.clear();
    pending.offsets.assign(1, 0);
    pending.bytes.clear();  // keeps its memory: the next run writes warm pages
    return absl::OkStatus();
  };
  std::vector<DockJournal::HandOut> handouts;
  std::vector<DockJournal::RoundRecord> rounds;
  struct Delivery {
    int64_t step, round;
    int consumer;
    int32_t rank;
    uint64_t lease;
  };
  std::vector<Delivery> deliveries;
  std::set<std::pair<int64_t, uint64_t>> acked;  // (step, lease)
  uint64_t next_handout = 0;
  const std::string prefix = DockPrefix(name);
  absl::Status scanned = store_->Scan(prefix, [&](absl::string_view key, absl::string_view value)
                                                  -> absl::Status {
    Reader in(key.substr(prefix.size()));
    int64_t step = 0;
    char kind = 0;
    if (!in.ReadI64(step) || !in.Byte(kind)) return absl::DataLossError("a key does not decode");
    if (released.count(step) != 0) return absl::OkStatus();  // landed after the release
    uint64_t consumer = 0;
    switch (kind) {
      case 'c': {
        uint64_t column = 0, row = 0;
        if (!in.Read(column, 4) || !in.Read(row, 8) || !in.done() ||
            column >= normalized.columns.size()) {
          return absl::DataLossError(absl::StrCat("a cell of step ", step, " does not decode"));
        }
        const int64_t item = normalized.columns[column].item_bytes();
        if (item <= 0 || value.size() % item != 0) {
          return absl::DataLossError(absl::StrCat("a cell of step ", step, " column '",
                                                  normalized.columns[column].name,
                                                  "' is not whole items"));
        }
        if (pending.step != step || pending.column != static_cast<int>(column) ||
            pending.bytes.size() + value.size() > kRecoveryPutBytes) {
          TDOCK_RETURN_IF_ERROR(put_pending());
          pending.step = step;
          pending.column = static_cast<int>(column);
        }
        pending.rows.push_back(static_cast<int64_t>(row));
        pending.offsets.push_back(pending.offsets.back() + static_cast<int64_t>(value.size()) / item);
        pending.bytes.append(value.data(), value.size());
        ++stats.cells;
        stats.bytes += static_cast<int64_t>(value.size());
        return absl::OkStatus();
      }
      case 'h': {
        uint64_t id = 0;
        DockJournal::HandOut h;
        Reader v(value);
        if (!in.Read(consumer, 4) || !in.Read(id, 8) || !v.Read(h.lease_id, 8)) {
          return absl::DataLossError(absl::StrCat("a hand-out of step ", step, " does not decode"));
        }
        int64_t unit = 0;
        while (v.ReadI64(unit)) h.units.push_back(unit);
        if (!v.done()) return absl::DataLossError("a hand-out's units do not decode");
        if (id >> 63) next_handout = std::max(next_handout, (id & ~(uint64_t{1} << 63)) + 1);
        h.step = step;
        h.consumer = static_cast<int>(consumer);
        handouts.push_back(std::move(h));
        return absl::OkStatus();
      }
      case 'r': {
        DockJournal::RoundRecord r;
        uint64_t round = 0;
        if (!in.Read(consumer, 4) || !in.Read(round, 8) || !DecodeRound(value, r)) {
          return absl::DataLossError(absl::StrCat("a round of step ", step, " does not decode"));
        }
        r.step = step;
        r.consumer = static_cast<int>(consumer);
        r.round = static_cast<int64_t>(round);
        rounds.push_back(std::move(r));
        return absl::OkStatus();
      }
      case 'd': {
        uint64_t round = 0, rank = 0, lease = 0;
        Reader v(value);
        if (!in.Read(consumer, 4) || !in.Read(round, 8) || !in.Read(rank, 4) || !v.Read(lease, 8)) {
          return absl::DataLossError(absl::StrCat("a delivery of step ", step, " does not decode"));
        }
        deliveries.push_back({step, static_cast<int64_t>(round), static_cast<int>(consumer),
                              static_cast<int32_t>(rank), lease});
        return absl::OkStatus();
      }
      case 'k': {
        uint64_t lease = 0;
        if (!in.Read(lease, 8)) return absl::DataLossError("an acknowledgement does not decode");
        acked.insert({step, lease});
        return absl::OkStatus();
      }
      default:
        return absl::DataLossError(absl::StrCat("unknown record kind '", std::string(1, kind),
                                                "' in step ", step));
    }
  });
  TDOCK_RETURN_IF_ERROR(scanned);
  TDOCK_RETURN_IF_ERROR(put_pending());
  stats.steps += static_cast<int64_t>(steps_with_cells.size());
  auto live_lease = [&](int64_t step, uint64_t lease) {
    return lease != 0 && acked.count({step, lease}) == 0 ? lease : 0;
  };
  for (const DockJournal::RoundRecord& r : rounds) {
    TDOCK_RETURN_IF_ERROR(dock->RecoverRound(r));
    ++stats.handouts;
  }
  for (const Delivery& d : deliveries) {
    const uint64_t lease = live_lease(d.step, d.lease);
    TDOCK_RETURN_IF_ERROR(dock->RecoverDelivery(d.step, d.consumer, d.round, d.rank, lease));
    ++stats.handouts;
    stats.leases += lease != 0;
  }
  for (DockJournal::HandOut& h : handouts) {
    h.lease_id = live_lease(h.step, h.lease_id);
    TDOCK_RETURN_IF_ERROR(dock->RecoverHandOut(h));
    ++stats.handouts;
    stats.leases += h.lease_id != 0;
  }
  // Steps that were done are released (and their records go) from here on.
  dock->AttachJournal(std::make_shared<StoreDockJournal>(journal_.get(), name, next_handout));
  dock->FinishRecovery();
  return absl::OkStatus();
}

}  // namespace tdock::persist
