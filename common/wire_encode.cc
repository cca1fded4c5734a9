// Encoding of the tdock.v1 wire format by hand (contract in wire.h): a writer
// of owned headers plus borrowed payload pieces, byte-identical to protobuf's
// serialization.
#include "common/wire.h"

#include <bit>
#include <optional>
#include <utility>

#include "common/wire_internal.h"

namespace tdock::wire {
namespace {

using internal::kFixed64;
using internal::kLen;
using internal::kVarint;

// Segments smaller than this are copied into the owned header bytes, so that
// tiny cells do not turn into thousands of pieces.
constexpr size_t kCopyBelowBytes = 1024;

// Tags (field number << 3 | wire type); every field number here is < 16, so
// each tag is one byte.
constexpr uint8_t TagByte(uint32_t field, uint32_t wire_type) {
  return static_cast<uint8_t>(field << 3 | wire_type);
}
constexpr uint8_t kColumnsTag = TagByte(15, kLen);

int64_t VarintSize(uint64_t v) {
  return (static_cast<int64_t>(std::bit_width(v | 1)) * 9 + 64) / 64;
}

size_t EncodeVarint(uint64_t v, char* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<char>(v);
  return n;
}

int64_t PackedPayload(const std::vector<int64_t>& values) {
  int64_t size = 0;
  for (int64_t v : values) size += VarintSize(static_cast<uint64_t>(v));
  return size;
}

// Bytes of a length-delimited field with a one-byte tag, or 0 when empty.
int64_t LenFieldSize(int64_t len) {
  return len == 0 ? 0 : 1 + VarintSize(static_cast<uint64_t>(len)) + len;
}
int64_t VarintFieldSize(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }
// A submessage field with a one-byte tag; written even when its body is empty.
int64_t MessageFieldSize(int64_t body) {
  return 1 + VarintSize(static_cast<uint64_t>(body)) + body;
}

// proto3 writes a double unless its bit pattern is zero (so -0.0 is written).
uint64_t DoubleBits(double v) { return std::bit_cast<uint64_t>(v); }

int64_t MicroBatchBodySize(const MicroBatchMessage& mb) {
  int64_t size = 0;
  for (const internal::MicroBatchField& f : internal::kMicroBatchFields) {
    size += VarintFieldSize(static_cast<uint64_t>(mb.*f.member));
  }
  return size;
}

int64_t BalanceBodySize(const BalanceMessage& b) {
  int64_t size = 0;
  for (const internal::BalanceField& f : internal::kBalanceFields) {
    if (f.real != nullptr) {
      size += DoubleBits(b.*f.real) == 0 ? 0 : 1 + 8;
    } else {
      size += VarintFieldSize(static_cast<uint64_t>(b.*f.integer));
    }
  }
  return size;
}

// Collects the output: owned bytes go to one buffer (adjacent owned bytes
// merge into one piece), borrowed spans become pieces of their own. Not
// thread-safe; Finish() moves the buffer into the Encoded it returns, so
// piece pointers are fixed only then.
class PieceWriter {
 public:
  explicit PieceWriter(int64_t owned_bytes) {
    buf_.reserve(static_cast<size_t>(owned_bytes));
  }
  void Byte(uint8_t b) { Copy(reinterpret_cast<const char*>(&b), 1); }
  void Varint(uint64_t v) {
    char tmp[10];
    Copy(tmp, EncodeVarint(v, tmp));
  }
  void Copy(const char* p, size_t n) {
    buf_.append(p, n);
    NoteOwned(n);
  }
  // Appends `n` owned bytes for the caller to fill.
  char* Extend(size_t n) {
    const size_t at = buf_.size();
    buf_.resize(at + n);
    NoteOwned(n);
    return buf_.data() + at;
  }
  void Borrow(ByteSpan span) {
    parts_.push_back({true, 0, span.size(), span.data()});
  }

  Encoded Finish() && {
    Encoded out;
    out.owned.push_back(std::move(buf_));
    const char* base = out.owned.front().data();
    out.pieces.reserve(parts_.size());
    for (const Part& p : parts_) {
      out.pieces.push_back(
          {ByteSpan(p.borrowed ? p.ptr : base + p.begin, p.size), p.borrowed});
    }
    return out;
  }

 private:
  struct Part {
    bool borrowed;
    size_t begin;  // owned: offset in buf_
    size_t size;
    const char* ptr;  // borrowed: the bytes
  };
  void NoteOwned(size_t n) {
    if (n == 0) return;
    if (!parts_.empty() && !parts_.back().borrowed) {
      parts_.back().size += n;
    } else {
      parts_.push_back({false, buf_.size() - n, n, nullptr});
    }
  }

  std::string buf_;
  std::vector<Part> parts_;
};

void WriteVarintField(PieceWriter& w, uint32_t field, uint64_t v) {
  if (v == 0) return;
  w.Byte(TagByte(field, kVarint));
  w.Varint(v);
}

void WriteDoubleField(PieceWriter& w, uint32_t field, double v) {
  uint64_t bits = DoubleBits(v);
  if (bits == 0) return;
  w.Byte(TagByte(field, kFixed64));
  char* out = w.Extend(8);
  for (int i = 0; i < 8; ++i, bits >>= 8) out[i] = static_cast<char>(bits);
}

void WriteStringField(PieceWriter& w, uint32_t field, const std::string& s) {
  if (s.empty()) return;
  w.Byte(TagByte(field, kLen));
  w.Varint(s.size());
  w.Copy(s.data(), s.size());
}

void WritePacked(PieceWriter& w, uint32_t field,
                 const std::vector<int64_t>& values, int64_t payload) {
  if (values.empty()) return;
  w.Byte(TagByte(field, kLen));
  w.Varint(static_cast<uint64_t>(payload));
  char* out = w.Extend(static_cast<size_t>(payload));
  for (int64_t v : values) out += EncodeVarint(static_cast<uint64_t>(v), out);
}

void WriteMicroBatches(PieceWriter& w, uint32_t field,
                       const std::vector<MicroBatchMessage>& micro_batches) {
  for (const MicroBatchMessage& mb : micro_batches) {
    w.Byte(TagByte(field, kLen));
    w.Varint(static_cast<uint64_t>(MicroBatchBodySize(mb)));
    for (const internal::MicroBatchField& f : internal::kMicroBatchFields) {
      WriteVarintField(w, f.number, static_cast<uint64_t>(mb.*f.member));
    }
  }
}

void WriteBalance(PieceWriter& w, uint32_t field,
                  const std::optional<BalanceMessage>& balance) {
  if (!balance.has_value()) return;
  w.Byte(TagByte(field, kLen));
  w.Varint(static_cast<uint64_t>(BalanceBodySize(*balance)));
  for (const internal::BalanceField& f : internal::kBalanceFields) {
    if (f.real != nullptr) {
      WriteDoubleField(w, f.number, *balance.*f.real);
    } else {
      WriteVarintField(w, f.number, static_cast<uint64_t>(*balance.*f.integer));
    }
  }
}

// Sizes of one column, computed before anything is written.
struct ColumnPlan {
  int64_t offsets_payload = 0;
  int64_t data_bytes = 0;
  int64_t body = 0;      // the PackedColumn message without its tag/length
  int64_t borrowed = 0;  // bytes of data left in the caller's segments
};

ColumnPlan PlanColumn(const PackedColumn& c) {
  ColumnPlan p;
  p.offsets_payload = PackedPayload(c.offsets);
  for (const ByteSpan& s : c.segments) {
    p.data_bytes += static_cast<int64_t>(s.size());
    if (s.size() >= kCopyBelowBytes)
      p.borrowed += static_cast<int64_t>(s.size());
  }
  p.body = LenFieldSize(static_cast<int64_t>(c.name.size())) +
           VarintFieldSize(static_cast<uint64_t>(c.dtype)) +
           LenFieldSize(p.offsets_payload) + LenFieldSize(p.data_bytes);
  return p;
}

// Plans every column; adds the owned bytes they need to `*owned_bytes`.
std::vector<ColumnPlan> PlanColumns(const std::vector<PackedColumn>& columns,
                                    int64_t* owned_bytes) {
  std::vector<ColumnPlan> plans;
  plans.reserve(columns.size());
  for (const PackedColumn& c : columns) {
    plans.push_back(PlanColumn(c));
    *owned_bytes += 1 + VarintSize(plans.back().body) + plans.back().body -
                    plans.back().borrowed;
  }
  return plans;
}

void WriteColumns(PieceWriter& w, const std::vector<PackedColumn>& columns,
                  const std::vector<ColumnPlan>& plans) {
  for (size_t i = 0; i < columns.size(); ++i) {
    const PackedColumn& c = columns[i];
    const ColumnPlan& p = plans[i];
    w.Byte(kColumnsTag);
    w.Varint(static_cast<uint64_t>(p.body));
    WriteStringField(w, 1, c.name);
    WriteVarintField(w, 2, static_cast<uint64_t>(c.dtype));
    WritePacked(w, 3, c.offsets, p.offsets_payload);
    if (p.data_bytes == 0) continue;
    w.Byte(TagByte(15, kLen));
    w.Varint(static_cast<uint64_t>(p.data_bytes));
    for (const ByteSpan& s : c.segments) {
      if (s.size() >= kCopyBelowBytes) {
        w.Borrow(s);
      } else {
        w.Copy(s.data(), s.size());
      }
    }
  }
}

}  // namespace

int64_t Encoded::size() const {
  int64_t total = 0;
  for (const Piece& p : pieces) total += static_cast<int64_t>(p.bytes.size());
  return total;
}

Encoded EncodePut(const PutMessage& m) {
  int64_t owned = 0;
  const std::vector<ColumnPlan> plans = PlanColumns(m.columns, &owned);
  const int64_t rows_payload = PackedPayload(m.rows);
  owned += LenFieldSize(static_cast<int64_t>(m.dock.size())) +
           VarintFieldSize(static_cast<uint64_t>(m.step)) +
           LenFieldSize(rows_payload) +
           VarintFieldSize(static_cast<uint64_t>(m.wait_ms)) +
           VarintFieldSize(m.ack_lease);
  PieceWriter w(owned);
  WriteStringField(w, 1, m.dock);
  WriteVarintField(w, 2, static_cast<uint64_t>(m.step));
  WritePacked(w, 3, m.rows, rows_payload);
  WriteVarintField(w, 4, static_cast<uint64_t>(m.wait_ms));
  WriteVarintField(w, 5, m.ack_lease);
  WriteColumns(w, m.columns, plans);
  return std::move(w).Finish();
}

Encoded EncodeBatch(const BatchMessage& m) {
  int64_t owned = 0;
  const std::vector<ColumnPlan> plans = PlanColumns(m.columns, &owned);
  const int64_t rows_payload = PackedPayload(m.rows);
  const int64_t tokens_payload = PackedPayload(m.token_counts);
  owned += VarintFieldSize(static_cast<uint64_t>(m.step)) +
           LenFieldSize(rows_payload) + LenFieldSize(tokens_payload) + 4 +
           VarintFieldSize(static_cast<uint64_t>(m.round)) +
           VarintFieldSize(m.lease_id) +
           VarintFieldSize(static_cast<uint64_t>(m.lease_ms));
  for (const MicroBatchMessage& mb : m.micro_batches) {
    owned += MessageFieldSize(MicroBatchBodySize(mb));
  }
  if (m.balance.has_value()) {
    owned += MessageFieldSize(BalanceBodySize(*m.balance));
  }
  PieceWriter w(owned);
  // Fields in number order, as protobuf writes them; columns (15) last.
  WriteVarintField(w, 1, static_cast<uint64_t>(m.step));
  WritePacked(w, 2, m.rows, rows_payload);
  WritePacked(w, 3, m.token_counts, tokens_payload);
  WriteVarintField(w, 4, m.end_of_step ? 1 : 0);
  WriteVarintField(w, 5, m.timed_out ? 1 : 0);
  WriteVarintField(w, 6, static_cast<uint64_t>(m.round));
  WriteMicroBatches(w, 7, m.micro_batches);
  WriteBalance(w, 8, m.balance);
  WriteVarintField(w, 9, m.lease_id);
  WriteVarintField(w, 10, static_cast<uint64_t>(m.lease_ms));
  WriteColumns(w, m.columns, plans);
  return std::move(w).Finish();
}

}  // namespace tdock::wire
