// The bulk framing of bulk.h: protobuf's CodedInputStream walks a message's
// top-level fields and each column's fields; every byte range but the
// columns' `data` goes to the generated classes, `data` stays in place.
#include "proto/tdock/v1/bulk.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace tdock::bulk {
namespace {

using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

constexpr uint32_t kLengthDelimited = 2;  // wire type of strings, bytes, messages

constexpr uint32_t LengthDelimitedTag(int field) {
  return (static_cast<uint32_t>(field) << 3) | kLengthDelimited;
}

// A ZeroCopyInputStream over byte segments, handing out the segments' own
// memory (protobuf's CodedInputStream and parsers then read them in place).
class SegmentsInputStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SegmentsInputStream(absl::Span<const ByteSpan> segments) : segments_(segments) {}

  bool Next(const void** data, int* size) override {
    for (; index_ < segments_.size(); ++index_, offset_ = 0) {
      const ByteSpan s = segments_[index_];
      if (offset_ == s.size()) continue;
      const size_t n = std::min<size_t>(s.size() - offset_, INT_MAX);
      *data = s.data() + offset_;
      *size = static_cast<int>(n);
      offset_ += n;
      count_ += static_cast<int64_t>(n);
      return true;
    }
    return false;
  }
  // REQUIRES: count <= the size the last Next returned (the protobuf contract).
  void BackUp(int count) override {
    offset_ -= static_cast<size_t>(count);
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* data = nullptr;
    int size = 0;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) BackUp(size - count);
      count -= std::min(size, count);
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  absl::Span<const ByteSpan> segments_;
  size_t index_ = 0;   // segment being read
  size_t offset_ = 0;  // bytes of it handed out
  int64_t count_ = 0;
};

// Byte ranges of the input, as spans into its segments.
class Ranges final {
 public:
  explicit Ranges(absl::Span<const ByteSpan> segments) : segments_(segments) {}

  // Appends [begin, end) of the concatenated segments to `out`.
  // REQUIRES: ranges are added in increasing order over all Ranges' calls.
  void Add(int64_t begin, int64_t end, std::vector<ByteSpan>* out) {
    while (begin < end) {
      const ByteSpan s = segments_[index_];
      const int64_t seg_end = start_ + static_cast<int64_t>(s.size());
      if (begin >= seg_end) {
        start_ = seg_end;
        ++index_;
        continue;
      }
      const int64_t stop = std::min(end, seg_end);
      out->push_back(s.subspan(static_cast<size_t>(begin - start_),
                               static_cast<size_t>(stop - begin)));
      begin = stop;
    }
  }

 private:
  absl::Span<const ByteSpan> segments_;
  size_t index_ = 0;
  int64_t start_ = 0;  // offset of segments_[index_]
};

absl::Status Malformed(absl::string_view what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

// Whether protobuf writes `field` with wire type `wire_type` (a repeated
// scalar also packed, as wire type 2).
bool WireTypeFits(const google::protobuf::FieldDescriptor& field, uint32_t wire_type) {
  using google::protobuf::FieldDescriptor;
  switch (field.type()) {
    case FieldDescriptor::TYPE_DOUBLE:
    case FieldDescriptor::TYPE_FIXED64:
    case FieldDescriptor::TYPE_SFIXED64:
      return wire_type == 1 || (wire_type == kLengthDelimited && field.is_packable());
    case FieldDescriptor::TYPE_FLOAT:
    case FieldDescriptor::TYPE_FIXED32:
    case FieldDescriptor::TYPE_SFIXED32:
      return wire_type == 5 || (wire_type == kLengthDelimited && field.is_packable());
    case FieldDescriptor::TYPE_STRING:
    case FieldDescriptor::TYPE_BYTES:
    case FieldDescriptor::TYPE_MESSAGE:
      return wire_type == kLengthDelimited;
    case FieldDescriptor::TYPE_GROUP:
      return false;
    default:  // varints
      return wire_type == 0 || (wire_type == kLengthDelimited && field.is_packable());
  }
}

// A message being walked: its type (for field names) and how errors name it
// ("PutRequest", "PutRequest.columns[1]").
struct Walked {
  const google::protobuf::Descriptor* type;
  std::string name;

  std::string Field(uint32_t number) const {
    const google::protobuf::FieldDescriptor* f = type->FindFieldByNumber(static_cast<int>(number));
    return f != nullptr ? absl::StrCat(name, ".", f->name()) : absl::StrCat(name, " field ", number);
  }
};

// The length of a length-delimited value of `field`, which must lie within
// the current limit.
absl::Status ReadLength(CodedInputStream& in, const std::string& field, int* length) {
  uint64_t n = 0;
  if (!in.ReadVarint64(&n)) return Malformed(field, "truncated length");
  const int left = in.BytesUntilLimit();
  if (n > static_cast<uint64_t>(left)) {
    return Malformed(field, absl::StrCat("length ", n, " exceeds the ", left, " bytes left"));
  }
  *length = static_cast<int>(n);
  return absl::OkStatus();
}

// Checks field `tag` against the message's type and skips its value.
absl::Status SkipField(CodedInputStream& in, const Walked& message, uint32_t tag) {
  const uint32_t wire_type = tag & 7;
  const std::string field = message.Field(tag >> 3);
  const google::protobuf::FieldDescriptor* known =
      message.type->FindFieldByNumber(static_cast<int>(tag >> 3));
  if (wire_type == 3 || wire_type == 4) {
    return Malformed(field, absl::StrCat("group wire type ", wire_type, " (tdock.v1 has no groups)"));
  }
  if (wire_type > 5) return Malformed(field, absl::StrCat("invalid wire type ", wire_type));
  if (known != nullptr && !WireTypeFits(*known, wire_type)) {
    return Malformed(field, absl::StrCat("wire type ", wire_type, " does not fit its type ",
                                         known->type_name()));
  }
  uint64_t varint = 0;
  int length = 0;
  switch (wire_type) {
    case 0:
      return in.ReadVarint64(&varint) ? absl::OkStatus() : Malformed(field, "truncated varint");
    case 1:
    case 5:
      return in.Skip(wire_type == 1 ? 8 : 4) ? absl::OkStatus() : Malformed(field, "truncated");
    default:
      TDOCK_RETURN_IF_ERROR(ReadLength(in, field, &length));
      return in.Skip(length) ? absl::OkStatus() : Malformed(field, "truncated");
  }
}

// Reads `length` bytes as spans into the input, copying nothing.
// REQUIRES: length <= in.BytesUntilLimit() (ReadLength).
void ReadSpans(CodedInputStream& in, int length, std::vector<ByteSpan>* out) {
  while (length > 0) {
    const void* data = nullptr;
    int size = 0;
    in.GetDirectBufferPointer(&data, &size);
    const int take = std::min(size, length);
    out->emplace_back(static_cast<const char*>(data), static_cast<size_t>(take));
    in.Skip(take);
    length -= take;
  }
}

// Walks the fields up to the stream's current limit: `on_bulk` reads the
// value of each length-delimited field numbered `bulk_field` (positioned
// after its tag), every other field is checked and its bytes added to `head`.
template <typename OnBulk>
absl::Status WalkFields(CodedInputStream& in, Ranges& ranges, const Walked& message,
                        int bulk_field, std::vector<ByteSpan>* head, OnBulk on_bulk) {
  while (in.BytesUntilLimit() > 0) {
    const int64_t start = in.CurrentPosition();
    uint32_t tag = 0;
    if (!in.ReadVarint32(&tag)) return Malformed(message.name, "truncated tag");
    if (tag >> 3 == 0) return Malformed(message.name, absl::StrCat("invalid tag ", tag));
    if (static_cast<int>(tag >> 3) == bulk_field) {
      if ((tag & 7) != kLengthDelimited) {
        return Malformed(message.Field(tag >> 3),
                         absl::StrCat("wire type ", tag & 7, ", not length-delimited"));
      }
      TDOCK_RETURN_IF_ERROR(on_bulk());
      continue;
    }
    TDOCK_RETURN_IF_ERROR(SkipField(in, message, tag));
    ranges.Add(start, in.CurrentPosition(), head);
  }
  return absl::OkStatus();
}

// One PackedColumn, up to the stream's current limit.
absl::Status DecodeColumn(CodedInputStream& in, Ranges& ranges, const std::string& what,
                          PackedColumn* column) {
  const Walked message{v1::PackedColumn::descriptor(), what};
  std::vector<ByteSpan> head_bytes;
  TDOCK_RETURN_IF_ERROR(WalkFields(
      in, ranges, message, v1::PackedColumn::kDataFieldNumber, &head_bytes, [&]() -> absl::Status {
        int length = 0;
        TDOCK_RETURN_IF_ERROR(
            ReadLength(in, message.Field(v1::PackedColumn::kDataFieldNumber), &length));
        column->segments.clear();  // a singular field given twice: the last wins
        ReadSpans(in, length, &column->segments);
        return absl::OkStatus();
      }));
  v1::PackedColumn head;
  SegmentsInputStream head_stream(head_bytes);
  if (!head.ParseFromZeroCopyStream(&head_stream)) {
    return Malformed(what, "its name, dtype or offsets do not parse");
  }
  if (head.dtype() != 0 && !IsValidDType(head.dtype())) {
    return Malformed(absl::StrCat(what, ".dtype"),
                     absl::StrCat("unknown DType value ", head.dtype()));
  }
  column->name = std::move(*head.mutable_name());
  column->dtype = static_cast<DType>(head.dtype());
  column->offsets.assign(head.offsets().begin(), head.offsets().end());
  return absl::OkStatus();
}

template <typename Header>
absl::StatusOr<Decoded<Header>> Decode(absl::Span<const ByteSpan> segments,
                                       absl::string_view name) {
  int64_t total = 0;
  for (const ByteSpan& s : segments) total += static_cast<int64_t>(s.size());
  if (total > INT_MAX) return Malformed(name, absl::StrCat(total, " bytes is over 2 GiB"));
  SegmentsInputStream stream(segments);
  CodedInputStream in(&stream);
  in.PushLimit(static_cast<int>(total));
  Ranges ranges(segments);
  Decoded<Header> out;
  std::vector<ByteSpan> header_bytes;
  const Walked message{Header::descriptor(), std::string(name)};
  TDOCK_RETURN_IF_ERROR(WalkFields(
      in, ranges, message, Header::kColumnsFieldNumber, &header_bytes, [&]() -> absl::Status {
        const std::string what = absl::StrCat(name, ".columns[", out.columns.size(), "]");
        int length = 0;
        TDOCK_RETURN_IF_ERROR(ReadLength(in, what, &length));
        const CodedInputStream::Limit limit = in.PushLimit(length);
        TDOCK_RETURN_IF_ERROR(DecodeColumn(in, ranges, what, &out.columns.emplace_back()));
        in.PopLimit(limit);
        return absl::OkStatus();
      }));
  SegmentsInputStream header_stream(header_bytes);
  if (!out.header.ParseFromZeroCopyStream(&header_stream)) {
    return Malformed(name, "its fields do not parse");
  }
  return out;
}

// Builds an Encoded: runs of owned bytes share one string; pieces point into
// the strings only once every string is final (Finish).
class Builder final {
 public:
  std::string& Owned() {
    if (parts_.empty() || parts_.back().borrowed) {
      encoded_.owned.emplace_back();
      parts_.push_back({.borrowed = false, .owned = encoded_.owned.size() - 1});
    }
    return encoded_.owned.back();
  }
  void Borrow(ByteSpan bytes) {
    if (!bytes.empty()) parts_.push_back({.borrowed = true, .bytes = bytes});
  }
  void Varint(uint64_t value) {
    uint8_t buffer[10];
    const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, buffer);
    Owned().append(reinterpret_cast<const char*>(buffer), end - buffer);
  }
  Encoded Finish() && {
    for (const Part& part : parts_) {
      encoded_.pieces.push_back(
          {part.borrowed ? part.bytes : ByteSpan(encoded_.owned[part.owned]), part.borrowed});
    }
    return std::move(encoded_);
  }

 private:
  struct Part {
    bool borrowed = false;
    size_t owned = 0;  // !borrowed: index into encoded_.owned
    ByteSpan bytes;    // borrowed
  };
  Encoded encoded_;
  std::vector<Part> parts_;
};

void EncodeColumn(const PackedColumn& column, int field, Builder& out) {
  v1::PackedColumn head;
  head.set_name(column.name);
  head.set_dtype(static_cast<v1::DType>(column.dtype));
  head.mutable_offsets()->Assign(column.offsets.begin(), column.offsets.end());
  const uint64_t data = static_cast<uint64_t>(column.data_bytes());
  const uint32_t data_tag = LengthDelimitedTag(v1::PackedColumn::kDataFieldNumber);
  // proto3 writes no empty `data`, so neither does this.
  const uint64_t data_field = data == 0 ? 0
                                        : CodedOutputStream::VarintSize32(data_tag) +
                                              CodedOutputStream::VarintSize64(data) + data;
  out.Varint(LengthDelimitedTag(field));
  out.Varint(head.ByteSizeLong() + data_field);
  head.AppendToString(&out.Owned());
  if (data == 0) return;
  out.Varint(data_tag);
  out.Varint(data);
  for (const ByteSpan& s : column.segments) {
    if (s.size() < kCopyBelowBytes) {
      out.Owned().append(s.data(), s.size());
    } else {
      out.Borrow(s);
    }
  }
}

template <typename Header>
Encoded Encode(const Header& header, absl::Span<const PackedColumn> columns) {
  Builder out;
  header.AppendToString(&out.Owned());
  for (const PackedColumn& column : columns) {
    EncodeColumn(column, Header::kColumnsFieldNumber, out);
  }
  return std::move(out).Finish();
}

}  // namespace

int64_t Encoded::size() const {
  int64_t total = 0;
  for (const Piece& piece : pieces) total += static_cast<int64_t>(piece.bytes.size());
  return total;
}

absl::StatusOr<Decoded<v1::PutRequest>> DecodePut(absl::Span<const ByteSpan> segments) {
  return Decode<v1::PutRequest>(segments, "PutRequest");
}

absl::StatusOr<Decoded<v1::GetResponse>> DecodeBatch(absl::Span<const ByteSpan> segments) {
  return Decode<v1::GetResponse>(segments, "GetResponse");
}

Encoded EncodePut(const v1::PutRequest& header, absl::Span<const PackedColumn> columns) {
  return Encode(header, columns);
}

Encoded EncodeBatch(const v1::GetResponse& header, absl::Span<const PackedColumn> columns) {
  return Encode(header, columns);
}

}  // namespace tdock::bulk
