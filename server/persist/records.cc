#include "server/persist/records.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tdock::persist::records {
namespace {

void PutDouble(std::string& out, double d) {
  uint64_t u = 0;
  std::memcpy(&u, &d, sizeof d);
  PutBe(out, u, 8);
}

// `prefix` followed by the step.
std::string WithStep(std::string prefix, int64_t step) {
  PutBe(prefix, static_cast<uint64_t>(step), 8);
  return prefix;
}

}  // namespace

void PutBe(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string SpecKey(absl::string_view dock) { return absl::StrCat("S", dock); }

std::string DockPrefix(absl::string_view dock) {
  return absl::StrCat("D", dock, std::string(1, '\0'));
}

std::string StepPrefix(absl::string_view dock, int64_t step) {
  return WithStep(DockPrefix(dock), step);
}

std::string TombPrefix(absl::string_view dock) {
  return absl::StrCat("T", dock, std::string(1, '\0'));
}

std::string DockVersionPrefix(absl::string_view dock) {
  return absl::StrCat("V", dock, std::string(1, '\0'));
}

std::string DockVersionKey(absl::string_view dock, int64_t version) {
  return WithStep(DockVersionPrefix(dock), version);
}

std::string TombKey(absl::string_view dock, int64_t step) {
  return WithStep(TombPrefix(dock), step);
}

std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

std::string CellKey(absl::string_view dock, int64_t step, int column, int64_t row) {
  std::string key = StepPrefix(dock, step);
  key.push_back('c');
  PutBe(key, static_cast<uint32_t>(column), 4);
  PutBe(key, static_cast<uint64_t>(row), 8);
  return key;
}

// A record of one row of a step: its kind, then the row.
std::string RowRecordKey(absl::string_view dock, int64_t step, char kind, int64_t row) {
  std::string key = StepPrefix(dock, step);
  key.push_back(kind);
  PutBe(key, static_cast<uint64_t>(row), 8);
  return key;
}

std::string KeyKey(absl::string_view dock, int64_t step, int64_t row) {
  return RowRecordKey(dock, step, 'b', row);
}

std::string VersionKey(absl::string_view dock, int64_t step, int64_t row, int64_t version) {
  std::string key = RowRecordKey(dock, step, 'v', row);
  PutBe(key, static_cast<uint64_t>(version), 8);
  return key;
}

std::string HandOutKey(absl::string_view dock, int64_t step, int consumer, uint64_t id) {
  std::string key = StepPrefix(dock, step);
  key.push_back('h');
  PutBe(key, static_cast<uint32_t>(consumer), 4);
  PutBe(key, id, 8);
  return key;
}

std::string RoundKey(absl::string_view dock, int64_t step, int consumer, int64_t round) {
  std::string key = StepPrefix(dock, step);
  key.push_back('r');
  PutBe(key, static_cast<uint32_t>(consumer), 4);
  PutBe(key, static_cast<uint64_t>(round), 8);
  return key;
}

std::string DeliveryKey(absl::string_view dock, int64_t step, int consumer, int64_t round,
                        int32_t rank) {
  std::string key = StepPrefix(dock, step);
  key.push_back('d');
  PutBe(key, static_cast<uint32_t>(consumer), 4);
  PutBe(key, static_cast<uint64_t>(round), 8);
  PutBe(key, static_cast<uint32_t>(rank), 4);
  return key;
}

std::string AckKey(absl::string_view dock, int64_t step, uint64_t lease) {
  std::string key = StepPrefix(dock, step);
  key.push_back('k');
  PutBe(key, lease, 8);
  return key;
}

std::string DropKey(absl::string_view dock, int64_t step, uint64_t seq) {
  std::string key = StepPrefix(dock, step);
  key.push_back('x');
  PutBe(key, seq, 8);
  return key;
}

std::string ReservationKey(absl::string_view dock, int64_t step, uint64_t id) {
  std::string key = StepPrefix(dock, step);
  key.push_back('R');
  PutBe(key, id, 8);
  return key;
}

std::string PutIdKey(absl::string_view dock, int64_t step, uint64_t put_id) {
  std::string key = StepPrefix(dock, step);
  key.push_back('p');
  PutBe(key, put_id, 8);
  return key;
}

std::string CarryKey(absl::string_view dock, int64_t step) {
  std::string key = StepPrefix(dock, step);
  key.push_back('C');
  return key;
}

std::string CarriedDoneKey(absl::string_view dock, int64_t step, int64_t from, int consumer) {
  std::string key = StepPrefix(dock, step);
  key.push_back('o');
  PutBe(key, static_cast<uint64_t>(from), 8);
  PutBe(key, static_cast<uint32_t>(consumer), 4);
  return key;
}

namespace {

void PutNumbers(std::string& out, const std::vector<int64_t>& numbers) {
  PutBe(out, numbers.size(), 8);
  for (int64_t n : numbers) PutBe(out, static_cast<uint64_t>(n), 8);
}

bool ReadNumbers(Reader& in, std::vector<int64_t>& out) {
  uint64_t count = 0;
  if (!in.Read(count, 8) || count > in.rest().size() / 8) return false;
  out.resize(count);
  for (int64_t& n : out) in.ReadI64(n);
  return true;
}

}  // namespace

std::string EncodeCarry(const std::vector<int64_t>& rows, const std::vector<ConsumerUnits>& taken) {
  std::string value;
  PutNumbers(value, rows);
  for (const ConsumerUnits& t : taken) {
    PutBe(value, static_cast<uint32_t>(t.consumer), 4);
    PutNumbers(value, t.units);
  }
  return value;
}

bool DecodeCarry(absl::string_view value, std::vector<int64_t>& rows,
                 std::vector<ConsumerUnits>& taken) {
  Reader in(value);
  if (!ReadNumbers(in, rows)) return false;
  while (!in.done()) {
    uint64_t consumer = 0;
    ConsumerUnits t;
    if (!in.Read(consumer, 4) || !ReadNumbers(in, t.units)) return false;
    t.consumer = static_cast<int>(consumer);
    taken.push_back(std::move(t));
  }
  return true;
}

std::string EncodeNumbers(const std::vector<int64_t>& numbers) {
  std::string value;
  for (int64_t n : numbers) PutBe(value, static_cast<uint64_t>(n), 8);
  return value;
}

bool DecodeNumbers(absl::string_view value, std::vector<int64_t>& out) {
  Reader in(value);
  int64_t n = 0;
  while (in.ReadI64(n)) out.push_back(n);
  return in.done();
}

std::string EncodeReservation(const DockJournal::ReservationRecord& r) {
  std::string value;
  PutBe(value, static_cast<uint64_t>(r.version), 8);
  PutBe(value, static_cast<uint64_t>(r.deadline_unix_ms), 8);
  for (int64_t row : r.rows) PutBe(value, static_cast<uint64_t>(row), 8);
  return value;
}

bool DecodeReservation(absl::string_view value, DockJournal::ReservationRecord& r) {
  Reader in(value);
  if (!in.ReadI64(r.version) || !in.ReadI64(r.deadline_unix_ms)) return false;
  int64_t row = 0;
  while (in.ReadI64(row)) r.rows.push_back(row);
  return in.done();
}

std::string EncodePutAnswer(const PutResult& answer, uint64_t fingerprint) {
  std::string value;
  PutBe(value, fingerprint, 8);
  PutBe(value, static_cast<uint64_t>(answer.rows), 8);
  PutBe(value, static_cast<uint64_t>(answer.bytes), 8);
  return value + EncodeNumbers(answer.assigned);
}

bool DecodePutAnswer(absl::string_view value, PutResult& answer, uint64_t& fingerprint) {
  Reader in(value);
  if (!in.Read(fingerprint, 8) || !in.ReadI64(answer.rows) || !in.ReadI64(answer.bytes)) return false;
  int64_t row = 0;
  while (in.ReadI64(row)) answer.assigned.push_back(row);
  return in.done();
}

std::string EncodeDrop(const DockJournal::DropRecord& d) {
  std::string value;
  value.push_back(static_cast<char>(d.reason));
  value.push_back(d.seal ? 1 : 0);
  return value + EncodeNumbers(d.rows);
}

bool DecodeDrop(absl::string_view value, DockJournal::DropRecord& d) {
  Reader in(value);
  char reason = 0, seal = 0;
  if (!in.Byte(reason) || !in.Byte(seal) || static_cast<unsigned char>(reason) >= kDropReasons) {
    return false;
  }
  d.reason = static_cast<DropReason>(reason);
  d.seal = seal != 0;
  return DecodeNumbers(in.rest(), d.rows);
}

std::string EncodeHandOut(const DockJournal::HandOut& h) {
  std::string value;
  PutBe(value, h.lease_id, 8);
  for (int64_t unit : h.units) PutBe(value, static_cast<uint64_t>(unit), 8);
  // Rank 0 adds nothing: the value is as servers before the rank wrote it.
  if (h.rank != 0) PutBe(value, static_cast<uint32_t>(h.rank), 4);
  return value;
}

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
  // pad: repeat: per rank, its repeat positions; a round without repeats
  // ends above, as records written before repeats existed do.
  const bool any = std::any_of(r.repeats.begin(), r.repeats.end(),
                               [](const std::vector<int64_t>& p) { return !p.empty(); });
  if (any) {
    for (const std::vector<int64_t>& positions : r.repeats) {
      PutBe(v, positions.size(), 8);
      for (int64_t p : positions) PutBe(v, p, 8);
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
  if (in.done()) return true;
  r.repeats.resize(ranks);
  for (int64_t k = 0; k < ranks; ++k) {
    int64_t count = 0;
    if (!in.ReadI64(count) || count < 0 || count > static_cast<int64_t>(r.shares[k].size())) {
      return false;
    }
    r.repeats[k].resize(count);
    for (int64_t& p : r.repeats[k]) {
      if (!in.ReadI64(p)) return false;
    }
  }
  return in.done();
}

}  // namespace tdock::persist::records
