// The tdock.v1 wire format by hand (contract in wire.h): a segmented reader
// that leaves payload in place, and a writer of owned headers plus borrowed
// payload pieces, byte-identical to protobuf's serialization.
#include "common/wire.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace tdock::wire {
namespace {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLen = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// ---------------------------------------------------------------- decoding

// Names what is being decoded for error messages, e.g.
// "PutRequest.columns[1].offsets". Formatted only when an error is returned.
struct FieldRef {
  const char* message;
  int column = -1;              // index in `columns`; -1: not in a column
  const char* field = nullptr;  // nullptr: the (sub)message itself
  uint32_t number = 0;          // field number of an unknown field
};

absl::Status Malformed(const FieldRef& f, absl::string_view what) {
  std::string name = f.message;
  if (f.column >= 0) absl::StrAppend(&name, ".columns[", f.column, "]");
  if (f.field != nullptr) {
    absl::StrAppend(&name, ".", f.field);
  } else if (f.number != 0) {
    absl::StrAppend(&name, ".<field ", f.number, ">");
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

// A forward cursor over the concatenation of byte segments, bounded by a
// limit (the end of the message being read). Hands out payload as spans into
// the segments; copies only into strings it is asked to fill. Not
// thread-safe; borrows `segments`, which must outlive it and the spans it
// returns.
class Reader {
 public:
  enum class VarintResult { kOk, kTruncated, kOverlong };

  explicit Reader(absl::Span<const ByteSpan> segments) : segs_(segments) {
    for (const ByteSpan& s : segs_) limit_ += static_cast<int64_t>(s.size());
    NextSegment();
  }

  int64_t left() const { return limit_ - pos_; }
  // Narrows the limit to `n` bytes ahead and returns the old limit.
  // REQUIRES: n <= left().
  int64_t PushLimit(int64_t n) { return std::exchange(limit_, pos_ + n); }
  void PopLimit(int64_t old_limit) { limit_ = old_limit; }

  VarintResult ReadVarint(uint64_t* out) {
    if (end_ - ptr_ >= 10 && left() >= 10) return ReadVarintFast(out);
    return ReadVarintSlow(out);
  }

  // Each of these REQUIRES: n <= left().
  void Skip(int64_t n) {
    ForChunks(n, [](const char*, int64_t) {});
  }
  void ReadSpans(int64_t n, std::vector<ByteSpan>* out) {
    ForChunks(n, [out](const char* p, int64_t len) {
      out->emplace_back(p, static_cast<size_t>(len));
    });
  }
  void ReadString(int64_t n, std::string* out) {
    out->clear();
    out->reserve(static_cast<size_t>(n));
    ForChunks(n, [out](const char* p, int64_t len) {
      out->append(p, static_cast<size_t>(len));
    });
  }
  // Number of bytes without the continuation bit among the next `n` bytes,
  // i.e. the number of varints they hold; does not advance.
  int64_t CountVarintEnds(int64_t n) const {
    int64_t count = 0;
    const char* p = ptr_;
    const char* e = end_;
    size_t next = next_;
    while (n > 0) {
      const int64_t take = std::min<int64_t>(n, e - p);
      for (int64_t i = 0; i < take; ++i) count += (p[i] & 0x80) == 0;
      n -= take;
      if (n == 0 || next == segs_.size()) break;
      p = segs_[next].data();
      e = p + segs_[next].size();
      ++next;
    }
    return count;
  }

 private:
  VarintResult ReadVarintFast(uint64_t* out) {
    uint64_t value = 0;
    for (int i = 0; i < 10; ++i) {
      const uint8_t b = static_cast<uint8_t>(ptr_[i]);
      value |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
      if (b < 0x80) {
        if (i == 9 && b > 1) return VarintResult::kOverlong;  // > 64 bits
        ptr_ += i + 1;
        pos_ += i + 1;
        NextSegment();
        *out = value;
        return VarintResult::kOk;
      }
    }
    return VarintResult::kOverlong;
  }

  VarintResult ReadVarintSlow(uint64_t* out) {
    uint64_t value = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ == limit_) return VarintResult::kTruncated;
      const uint8_t b = static_cast<uint8_t>(*ptr_);
      ++ptr_;
      ++pos_;
      NextSegment();
      value |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
      if (b < 0x80) {
        if (i == 9 && b > 1) return VarintResult::kOverlong;
        *out = value;
        return VarintResult::kOk;
      }
    }
    return VarintResult::kOverlong;
  }

  template <typename F>
  void ForChunks(int64_t n, F&& f) {
    while (n > 0) {
      const int64_t take = std::min<int64_t>(n, end_ - ptr_);
      f(ptr_, take);
      ptr_ += take;
      pos_ += take;
      n -= take;
      NextSegment();
    }
  }

  // Moves past exhausted and empty segments. Invariant between calls:
  // ptr_ < end_ unless every byte has been read.
  void NextSegment() {
    while (ptr_ == end_ && next_ < segs_.size()) {
      ptr_ = segs_[next_].data();
      end_ = ptr_ + segs_[next_].size();
      ++next_;
    }
  }

  absl::Span<const ByteSpan> segs_;
  size_t next_ = 0;  // index of the segment after the current one
  const char* ptr_ = nullptr;
  const char* end_ = nullptr;
  int64_t pos_ = 0;    // offset of ptr_ in the concatenation
  int64_t limit_ = 0;  // end of the message being read
};

absl::Status VarintError(const FieldRef& f, Reader::VarintResult result,
                         absl::string_view what) {
  if (result == Reader::VarintResult::kTruncated) {
    return Malformed(f, absl::StrCat("truncated ", what));
  }
  return Malformed(f,
                   absl::StrCat(what, " longer than 10 bytes or over 64 bits"));
}

absl::Status ReadVarint(Reader& r, const FieldRef& f, uint64_t* value) {
  const Reader::VarintResult result = r.ReadVarint(value);
  if (result == Reader::VarintResult::kOk) return absl::OkStatus();
  return VarintError(f, result, "varint");
}

absl::Status ReadLength(Reader& r, const FieldRef& f, int64_t* len) {
  uint64_t value = 0;
  const Reader::VarintResult result = r.ReadVarint(&value);
  if (result != Reader::VarintResult::kOk) {
    return VarintError(f, result, "length");
  }
  if (value > static_cast<uint64_t>(r.left())) {
    return Malformed(f, absl::StrCat("length ", value, " exceeds the ",
                                     r.left(), " bytes left in the message"));
  }
  *len = static_cast<int64_t>(value);
  return absl::OkStatus();
}

absl::Status ExpectWireType(const FieldRef& f, uint32_t got, uint32_t want) {
  if (got == want) return absl::OkStatus();
  return Malformed(f, absl::StrCat("wire type ", got, ", expected ", want));
}

struct Tag {
  uint32_t field = 0;
  uint32_t wire_type = 0;
};

absl::Status ReadTag(Reader& r, const FieldRef& message, Tag* tag) {
  uint64_t value = 0;
  const Reader::VarintResult result = r.ReadVarint(&value);
  if (result != Reader::VarintResult::kOk) {
    return VarintError(message, result, "tag");
  }
  if (value > 0xFFFFFFFFu || (value >> 3) == 0) {
    return Malformed(message, absl::StrCat("invalid tag ", value));
  }
  tag->field = static_cast<uint32_t>(value >> 3);
  tag->wire_type = static_cast<uint32_t>(value & 7);
  return absl::OkStatus();
}

absl::Status SkipFixed(Reader& r, const FieldRef& f, int64_t n) {
  if (r.left() < n) {
    return Malformed(f, absl::StrCat("truncated fixed", n * 8));
  }
  r.Skip(n);
  return absl::OkStatus();
}

// Skips an unknown field of any wire type protobuf still allows.
absl::Status SkipField(Reader& r, const FieldRef& f, uint32_t wire_type) {
  uint64_t ignored = 0;
  int64_t len = 0;
  switch (wire_type) {
    case kVarint:
      return ReadVarint(r, f, &ignored);
    case kFixed64:
      return SkipFixed(r, f, 8);
    case kLen:
      TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
      r.Skip(len);
      return absl::OkStatus();
    case kFixed32:
      return SkipFixed(r, f, 4);
    case kStartGroup:
    case kEndGroup:
      return Malformed(
          f, absl::StrCat("group wire type ", wire_type, " is not supported"));
    default:
      return Malformed(f, absl::StrCat("invalid wire type ", wire_type));
  }
}

absl::Status ReadVarintField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             uint64_t* value) {
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kVarint));
  return ReadVarint(r, f, value);
}

absl::Status ReadStringField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             std::string* out) {
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kLen));
  int64_t len = 0;
  TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
  r.ReadString(len, out);
  return absl::OkStatus();
}

// `repeated int64`, packed (wire type 2) or not (wire type 0); repeated
// occurrences append, as protobuf does.
absl::Status ReadInt64s(Reader& r, const FieldRef& f, uint32_t wire_type,
                        std::vector<int64_t>* out) {
  uint64_t value = 0;
  if (wire_type == kVarint) {
    TDOCK_RETURN_IF_ERROR(ReadVarint(r, f, &value));
    out->push_back(static_cast<int64_t>(value));
    return absl::OkStatus();
  }
  if (wire_type != kLen) {
    return Malformed(
        f, absl::StrCat("wire type ", wire_type, ", expected 0 or 2"));
  }
  int64_t len = 0;
  TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
  out->reserve(out->size() + static_cast<size_t>(r.CountVarintEnds(len)));
  const int64_t old_limit = r.PushLimit(len);
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadVarint(r, f, &value));
    out->push_back(static_cast<int64_t>(value));
  }
  r.PopLimit(old_limit);
  return absl::OkStatus();
}

absl::Status ReadDType(Reader& r, const FieldRef& f, uint32_t wire_type,
                       DType* dtype) {
  uint64_t value = 0;
  TDOCK_RETURN_IF_ERROR(ReadVarintField(r, f, wire_type, &value));
  if (value != 0 && (value > 255 || !IsValidDType(static_cast<int>(value)))) {
    return Malformed(
        f, absl::StrCat("unknown DType value ", static_cast<int64_t>(value)));
  }
  *dtype = static_cast<DType>(value);
  return absl::OkStatus();
}

// Reads the fields of one PackedColumn up to the reader's limit.
absl::Status DecodeColumnBody(Reader& r, const char* message, int index,
                              PackedColumn* column) {
  const FieldRef self{message, index};
  Tag tag;
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadTag(r, self, &tag));
    const uint32_t wt = tag.wire_type;
    switch (tag.field) {
      case 1:
        TDOCK_RETURN_IF_ERROR(
            ReadStringField(r, {message, index, "name"}, wt, &column->name));
        break;
      case 2:
        TDOCK_RETURN_IF_ERROR(
            ReadDType(r, {message, index, "dtype"}, wt, &column->dtype));
        break;
      case 3:
        TDOCK_RETURN_IF_ERROR(
            ReadInt64s(r, {message, index, "offsets"}, wt, &column->offsets));
        break;
      case 15: {
        const FieldRef f{message, index, "data"};
        TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wt, kLen));
        int64_t len = 0;
        TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
        column->segments.clear();  // a repeated singular field: last wins
        r.ReadSpans(len, &column->segments);
        break;
      }
      default:
        TDOCK_RETURN_IF_ERROR(
            SkipField(r, {message, index, nullptr, tag.field}, wt));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadColumn(Reader& r, const char* message, uint32_t wire_type,
                        std::vector<PackedColumn>* columns) {
  const int index = static_cast<int>(columns->size());
  const FieldRef f{message, index};
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kLen));
  int64_t len = 0;
  TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
  const int64_t old_limit = r.PushLimit(len);
  TDOCK_RETURN_IF_ERROR(
      DecodeColumnBody(r, message, index, &columns->emplace_back()));
  r.PopLimit(old_limit);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- encoding

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

absl::StatusOr<PutMessage> DecodePut(absl::Span<const ByteSpan> segments) {
  static constexpr char kName[] = "PutRequest";
  Reader r(segments);
  PutMessage m;
  uint64_t v = 0;
  Tag tag;
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadTag(r, {kName}, &tag));
    const uint32_t wt = tag.wire_type;
    switch (tag.field) {
      case 1:
        TDOCK_RETURN_IF_ERROR(
            ReadStringField(r, {kName, -1, "dock"}, wt, &m.dock));
        break;
      case 2:
        TDOCK_RETURN_IF_ERROR(ReadVarintField(r, {kName, -1, "step"}, wt, &v));
        m.step = static_cast<int64_t>(v);
        break;
      case 3:
        TDOCK_RETURN_IF_ERROR(ReadInt64s(r, {kName, -1, "rows"}, wt, &m.rows));
        break;
      case 4:
        TDOCK_RETURN_IF_ERROR(
            ReadVarintField(r, {kName, -1, "wait_ms"}, wt, &v));
        m.wait_ms = static_cast<int64_t>(v);
        break;
      case 15:
        TDOCK_RETURN_IF_ERROR(ReadColumn(r, kName, wt, &m.columns));
        break;
      default:
        TDOCK_RETURN_IF_ERROR(
            SkipField(r, {kName, -1, nullptr, tag.field}, wt));
    }
  }
  return m;
}

absl::StatusOr<BatchMessage> DecodeBatch(absl::Span<const ByteSpan> segments) {
  static constexpr char kName[] = "GetResponse";
  Reader r(segments);
  BatchMessage m;
  uint64_t v = 0;
  Tag tag;
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadTag(r, {kName}, &tag));
    const uint32_t wt = tag.wire_type;
    switch (tag.field) {
      case 1:
        TDOCK_RETURN_IF_ERROR(ReadVarintField(r, {kName, -1, "step"}, wt, &v));
        m.step = static_cast<int64_t>(v);
        break;
      case 2:
        TDOCK_RETURN_IF_ERROR(ReadInt64s(r, {kName, -1, "rows"}, wt, &m.rows));
        break;
      case 3:
        TDOCK_RETURN_IF_ERROR(
            ReadInt64s(r, {kName, -1, "token_counts"}, wt, &m.token_counts));
        break;
      case 4:
        TDOCK_RETURN_IF_ERROR(
            ReadVarintField(r, {kName, -1, "end_of_step"}, wt, &v));
        m.end_of_step = v != 0;
        break;
      case 5:
        TDOCK_RETURN_IF_ERROR(
            ReadVarintField(r, {kName, -1, "timed_out"}, wt, &v));
        m.timed_out = v != 0;
        break;
      case 15:
        TDOCK_RETURN_IF_ERROR(ReadColumn(r, kName, wt, &m.columns));
        break;
      default:
        TDOCK_RETURN_IF_ERROR(
            SkipField(r, {kName, -1, nullptr, tag.field}, wt));
    }
  }
  return m;
}

Encoded EncodePut(const PutMessage& m) {
  int64_t owned = 0;
  const std::vector<ColumnPlan> plans = PlanColumns(m.columns, &owned);
  const int64_t rows_payload = PackedPayload(m.rows);
  owned += LenFieldSize(static_cast<int64_t>(m.dock.size())) +
           VarintFieldSize(static_cast<uint64_t>(m.step)) +
           LenFieldSize(rows_payload) +
           VarintFieldSize(static_cast<uint64_t>(m.wait_ms));
  PieceWriter w(owned);
  WriteStringField(w, 1, m.dock);
  WriteVarintField(w, 2, static_cast<uint64_t>(m.step));
  WritePacked(w, 3, m.rows, rows_payload);
  WriteVarintField(w, 4, static_cast<uint64_t>(m.wait_ms));
  WriteColumns(w, m.columns, plans);
  return std::move(w).Finish();
}

Encoded EncodeBatch(const BatchMessage& m) {
  int64_t owned = 0;
  const std::vector<ColumnPlan> plans = PlanColumns(m.columns, &owned);
  const int64_t rows_payload = PackedPayload(m.rows);
  const int64_t tokens_payload = PackedPayload(m.token_counts);
  owned += VarintFieldSize(static_cast<uint64_t>(m.step)) +
           LenFieldSize(rows_payload) + LenFieldSize(tokens_payload) + 4;
  PieceWriter w(owned);
  WriteVarintField(w, 1, static_cast<uint64_t>(m.step));
  WritePacked(w, 2, m.rows, rows_payload);
  WritePacked(w, 3, m.token_counts, tokens_payload);
  WriteVarintField(w, 4, m.end_of_step ? 1 : 0);
  WriteVarintField(w, 5, m.timed_out ? 1 : 0);
  WriteColumns(w, m.columns, plans);
  return std::move(w).Finish();
}

}  // namespace tdock::wire
