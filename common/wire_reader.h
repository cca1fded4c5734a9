// The reading half of the tdock.v1 wire codec (wire_decode.cc): a segmented
// cursor that leaves payload in place, and the field readers built on it,
// whose errors name the field at fault. Not part of the public interface;
// include only from common/wire_*.cc.
#ifndef TDOCK_COMMON_WIRE_READER_H_
#define TDOCK_COMMON_WIRE_READER_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/packed.h"
#include "common/status.h"
#include "common/wire_internal.h"

namespace tdock::wire::internal {

// Names what is being decoded for error messages, e.g.
// "PutRequest.columns[1].offsets" or "GetResponse.balance.tokens". Formatted
// only when an error is returned.
struct FieldRef {
  const char* message;           // the (sub)message, e.g. "GetResponse.balance"
  int index = -1;                // index in `list`; -1: not in a repeated field
  const char* field = nullptr;   // nullptr: the (sub)message itself
  uint32_t number = 0;           // field number of an unknown field
  const char* list = "columns";  // the repeated message field `index` is in
};

// INVALID_ARGUMENT "<field>: <what>".
absl::Status Malformed(const FieldRef& f, absl::string_view what);

// A forward cursor over the concatenation of byte segments, bounded by a
// limit (the end of the message being read). Hands out payload as spans into
// the segments; copies only into buffers it is asked to fill. Not
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
  void ReadBytes(int64_t n, char* out) {
    ForChunks(n, [&out](const char* p, int64_t len) {
      out = std::copy(p, p + len, out);
    });
  }
  // Number of bytes without the continuation bit among the next `n` bytes,
  // i.e. the number of varints they hold; does not advance.
  int64_t CountVarintEnds(int64_t n) const;

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

  VarintResult ReadVarintSlow(uint64_t* out);

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

struct Tag {
  uint32_t field = 0;
  uint32_t wire_type = 0;
};

// Each reader below returns INVALID_ARGUMENT naming `f` on malformed input:
// truncation, an overlong varint, a length past the end, the wrong wire type.
absl::Status ReadVarint(Reader& r, const FieldRef& f, uint64_t* value);
// A length prefix, checked against the bytes left in the message.
absl::Status ReadLength(Reader& r, const FieldRef& f, int64_t* len);
absl::Status ReadTag(Reader& r, const FieldRef& message, Tag* tag);
absl::Status ExpectWireType(const FieldRef& f, uint32_t got, uint32_t want);
// Skips an unknown field of any wire type protobuf still allows.
absl::Status SkipField(Reader& r, const FieldRef& f, uint32_t wire_type);
absl::Status ReadVarintField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             uint64_t* value);
// A `double` field: wire type 1, fixed64 little-endian.
absl::Status ReadDoubleField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             double* value);
absl::Status ReadStringField(Reader& r, const FieldRef& f, uint32_t wire_type,
                             std::string* out);
// `repeated int64`, packed (wire type 2) or not (wire type 0); repeated
// occurrences append, as protobuf does.
absl::Status ReadInt64s(Reader& r, const FieldRef& f, uint32_t wire_type,
                        std::vector<int64_t>* out);

// A length-delimited submessage: reads its length, then calls `body()`
// (which reads fields until r.left() == 0) with the reader's limit narrowed
// to the submessage.
template <typename Body>
absl::Status ReadSubmessage(Reader& r, const FieldRef& f, uint32_t wire_type,
                            Body&& body) {
  TDOCK_RETURN_IF_ERROR(ExpectWireType(f, wire_type, kLen));
  int64_t len = 0;
  TDOCK_RETURN_IF_ERROR(ReadLength(r, f, &len));
  const int64_t old_limit = r.PushLimit(len);
  TDOCK_RETURN_IF_ERROR(body());
  r.PopLimit(old_limit);
  return absl::OkStatus();
}

}  // namespace tdock::wire::internal

#endif  // TDOCK_COMMON_WIRE_READER_H_
