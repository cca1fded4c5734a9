// Decoding of the tdock.v1 wire format by hand (contract in wire.h): a
// segmented reader that leaves payload in place, so that column data stays
// spans into the received segments.
#include "common/wire.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "common/wire_internal.h"

namespace tdock::wire {
namespace {

using internal::kEndGroup;
using internal::kFixed32;
using internal::kFixed64;
using internal::kLen;
using internal::kStartGroup;
using internal::kVarint;

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

}  // namespace

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

}  // namespace tdock::wire
