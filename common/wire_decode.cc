// Decoding of the tdock.v1 wire format by hand (contract in wire.h), on the
// segmented reader of wire_reader.h, so that column data stays spans into the
// received segments.
#include "common/wire.h"

#include <cstdint>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/wire_internal.h"
#include "common/wire_reader.h"

namespace tdock::wire {
namespace {

using internal::ExpectWireType;
using internal::FieldRef;
using internal::kLen;
using internal::Malformed;
using internal::Reader;
using internal::ReadInt64s;
using internal::ReadLength;
using internal::ReadStringField;
using internal::ReadSubmessage;
using internal::ReadTag;
using internal::ReadVarintField;
using internal::SkipField;
using internal::Tag;

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

absl::Status ReadInt64Field(Reader& r, const FieldRef& f, uint32_t wire_type,
                            int64_t* out) {
  uint64_t value = 0;
  TDOCK_RETURN_IF_ERROR(ReadVarintField(r, f, wire_type, &value));
  *out = static_cast<int64_t>(value);
  return absl::OkStatus();
}

absl::Status ReadBoolField(Reader& r, const FieldRef& f, uint32_t wire_type,
                           bool* out) {
  uint64_t value = 0;
  TDOCK_RETURN_IF_ERROR(ReadVarintField(r, f, wire_type, &value));
  *out = value != 0;
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
  PackedColumn* column = &columns->emplace_back();
  return ReadSubmessage(r, {message, index}, wire_type, [&] {
    return DecodeColumnBody(r, message, index, column);
  });
}

// One element of GetResponse.micro_batches, appended to `out`.
absl::Status ReadMicroBatch(Reader& r, const char* message, uint32_t wire_type,
                            std::vector<MicroBatchMessage>* out) {
  static constexpr char kList[] = "micro_batches";
  const int index = static_cast<int>(out->size());
  MicroBatchMessage* mb = &out->emplace_back();
  return ReadSubmessage(
      r, {message, index, nullptr, 0, kList}, wire_type, [&]() -> absl::Status {
        Tag tag;
        while (r.left() > 0) {
          TDOCK_RETURN_IF_ERROR(
              ReadTag(r, {message, index, nullptr, 0, kList}, &tag));
          if (tag.field < 1 ||
              tag.field > std::size(internal::kMicroBatchFields)) {
            TDOCK_RETURN_IF_ERROR(SkipField(
                r, {message, index, nullptr, tag.field, kList}, tag.wire_type));
            continue;
          }
          const internal::MicroBatchField& field =
              internal::kMicroBatchFields[tag.field - 1];
          TDOCK_RETURN_IF_ERROR(
              ReadInt64Field(r, {message, index, field.name, 0, kList},
                             tag.wire_type, &(mb->*field.member)));
        }
        return absl::OkStatus();
      });
}

// GetResponse.balance. A second occurrence merges into the first (fields it
// carries overwrite), as protobuf merges a repeated singular message field.
absl::Status ReadBalance(Reader& r, uint32_t wire_type,
                         std::optional<BalanceMessage>* out) {
  static constexpr char kName[] = "GetResponse.balance";
  if (!out->has_value()) out->emplace();
  BalanceMessage* b = &**out;
  return ReadSubmessage(r, {kName}, wire_type, [&]() -> absl::Status {
    Tag tag;
    while (r.left() > 0) {
      TDOCK_RETURN_IF_ERROR(ReadTag(r, {kName}, &tag));
      if (tag.field < 1 || tag.field > std::size(internal::kBalanceFields)) {
        TDOCK_RETURN_IF_ERROR(
            SkipField(r, {kName, -1, nullptr, tag.field}, tag.wire_type));
        continue;
      }
      const internal::BalanceField& field =
          internal::kBalanceFields[tag.field - 1];
      const FieldRef f{kName, -1, field.name};
      TDOCK_RETURN_IF_ERROR(
          field.real != nullptr
              ? internal::ReadDoubleField(r, f, tag.wire_type,
                                          &(b->*field.real))
              : ReadInt64Field(r, f, tag.wire_type, &(b->*field.integer)));
    }
    return absl::OkStatus();
  });
}

absl::Status DecodeBatchField(Reader& r, const Tag& tag, BatchMessage* m) {
  static constexpr char kName[] = "GetResponse";
  const uint32_t wt = tag.wire_type;
  switch (tag.field) {
    case 1:
      return ReadInt64Field(r, {kName, -1, "step"}, wt, &m->step);
    case 2:
      return ReadInt64s(r, {kName, -1, "rows"}, wt, &m->rows);
    case 3:
      return ReadInt64s(r, {kName, -1, "token_counts"}, wt, &m->token_counts);
    case 4:
      return ReadBoolField(r, {kName, -1, "end_of_step"}, wt, &m->end_of_step);
    case 5:
      return ReadBoolField(r, {kName, -1, "timed_out"}, wt, &m->timed_out);
    case 6:
      return ReadInt64Field(r, {kName, -1, "round"}, wt, &m->round);
    case 7:
      return ReadMicroBatch(r, kName, wt, &m->micro_batches);
    case 8:
      return ReadBalance(r, wt, &m->balance);
    case 9:
      return ReadVarintField(r, {kName, -1, "lease_id"}, wt, &m->lease_id);
    case 10:
      return ReadInt64Field(r, {kName, -1, "lease_ms"}, wt, &m->lease_ms);
    case 15:
      return ReadColumn(r, kName, wt, &m->columns);
    default:
      return SkipField(r, {kName, -1, nullptr, tag.field}, wt);
  }
}

absl::Status DecodePutField(Reader& r, const Tag& tag, PutMessage* m) {
  static constexpr char kName[] = "PutRequest";
  const uint32_t wt = tag.wire_type;
  switch (tag.field) {
    case 1:
      return ReadStringField(r, {kName, -1, "dock"}, wt, &m->dock);
    case 2:
      return ReadInt64Field(r, {kName, -1, "step"}, wt, &m->step);
    case 3:
      return ReadInt64s(r, {kName, -1, "rows"}, wt, &m->rows);
    case 4:
      return ReadInt64Field(r, {kName, -1, "wait_ms"}, wt, &m->wait_ms);
    case 5:
      return ReadVarintField(r, {kName, -1, "ack_lease"}, wt, &m->ack_lease);
    case 15:
      return ReadColumn(r, kName, wt, &m->columns);
    default:
      return SkipField(r, {kName, -1, nullptr, tag.field}, wt);
  }
}

// Reads the top-level fields of `segments` into a `Message`, one field at a
// time through `decode_field`.
template <typename Message, typename DecodeField>
absl::StatusOr<Message> DecodeMessage(absl::Span<const ByteSpan> segments,
                                      const char* name,
                                      DecodeField decode_field) {
  Reader r(segments);
  Message m;
  Tag tag;
  while (r.left() > 0) {
    TDOCK_RETURN_IF_ERROR(ReadTag(r, {name}, &tag));
    TDOCK_RETURN_IF_ERROR(decode_field(r, tag, &m));
  }
  return m;
}

}  // namespace

absl::StatusOr<PutMessage> DecodePut(absl::Span<const ByteSpan> segments) {
  return DecodeMessage<PutMessage>(segments, "PutRequest", DecodePutField);
}

absl::StatusOr<BatchMessage> DecodeBatch(absl::Span<const ByteSpan> segments) {
  return DecodeMessage<BatchMessage>(segments, "GetResponse", DecodeBatchField);
}

}  // namespace tdock::wire
