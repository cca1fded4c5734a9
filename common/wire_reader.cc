// Field readers of the tdock.v1 wire decoder (contract in wire_reader.h).
#include "common/wire_reader.h"

#include <bit>

#include "absl/strings/str_cat.h"

namespace tdock::wire::internal {
namespace {

absl::Status VarintError(const FieldRef& f, Reader::VarintResult result,
                         absl::string_view what) {
  if (result == Reader::VarintResult::kTruncated) {
    return Malformed(f, absl::StrCat("truncated ", what));
  }
  return Malformed(f,
                   absl::StrCat(what, " longer than 10 bytes or over 64 bits"));
}

absl::Status SkipFixed(Reader& r, const FieldRef& f, int64_t n) {
  if (r.left() < n) {
    return Malformed(f, absl::StrCat("truncated fixed", n * 8));
  }
  r.Skip(n);
  return absl::OkStatus();
}

}  // namespace

absl::Status Malformed(const FieldRef& f, absl::string_view what) {
  std::string name = f.message;
  if (f.index >= 0) absl::StrAppend(&name, ".", f.list, "[", f.index, "]");
  if (f.field != nullptr) {
    absl::StrAppend(&name, ".", f.field);
  } else if (f.number != 0) {
    absl::StrAppend(&name, ".<field ", f.number, ">");
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what));
}

int64_t Reader::CountVarintEnds(int64_t n) const {
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

Reader::VarintResult Reader::ReadVarintSlow(uint64_t* out) {
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

absl::Status ReadDoubleField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             double* value) {
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kFixed64));
  if (r.left() < 8) return Malformed(f, "truncated fixed64");
  unsigned char bytes[8];
  r.ReadBytes(8, reinterpret_cast<char*>(bytes));
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) bits = bits << 8 | bytes[i];
  *value = std::bit_cast<double>(bits);
  return absl::OkStatus();
}

absl::Status ReadStringField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             std::string* out) {
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kLen));
  int64_t len = 0;
  TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
  r.ReadString(len, out);
  return absl::OkStatus();
}

// The most entries a repeated int64 field may hold: rows and offsets of a
// step never need more, and a hostile request must not make the decoder
// reserve gigabytes.
constexpr int64_t kMaxRepeatedInts = (int64_t{1} << 24) + 1;

absl::Status ReadInt64s(Reader& r, const FieldRef& f, uint32_t wire_type,
                        std::vector<int64_t>* out) {
  uint64_t value = 0;
  if (wire_type == kVarint) {
    if (static_cast<int64_t>(out->size()) >= kMaxRepeatedInts) {
      return Malformed(f, absl::StrCat("more than ", kMaxRepeatedInts, " entries"));
    }
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
  const int64_t entries = r.CountVarintEnds(len);
  if (static_cast<int64_t>(out->size()) + entries > kMaxRepeatedInts) {
    return Malformed(f, absl::StrCat("more than ", kMaxRepeatedInts, " entries"));
  }
  out->reserve(out->size() + static_cast<size_t>(entries));
  const int64_t old_limit = r.PushLimit(len);
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadVarint(r, f, &value));
    out->push_back(static_cast<int64_t>(value));
  }
  r.PopLimit(old_limit);
  return absl::OkStatus();
}

}  // namespace tdock::wire::internal
