// Framing of the bulk column bodies of tdock.v1's data-plane messages
// (PutRequest, GetResponse), as Arrow Flight separates a data header from its
// body: every field of a message and of its PackedColumns is read and written
// by protobuf's generated classes, except each column's `data`, which is
// framed here so that payload is never copied. Decoding leaves `data` as
// spans into the received segments; encoding emits it as borrowed pieces
// next to small owned pieces holding the serialized headers. The bytes are
// exactly protobuf's wire format (columns last, `data` last in each column),
// so protobuf, the Python client and this code read each other's messages.
//
//   ASSIGN_OR_RETURN(bulk::Decoded<v1::PutRequest> put, bulk::DecodePut(spans));
//   put.header.dock();        // every field but columns, parsed by protobuf
//   put.columns[0].segments;  // the column's data, in place
//
//   v1::GetResponse header;   // columns left empty
//   ToProto(meta, &header);
//   bulk::Encoded encoded = bulk::EncodeBatch(header, batch.columns);
//
// Thread safety: pure functions; Encoded and Decoded are values.
#ifndef TDOCK_PROTO_TDOCK_V1_BULK_H_
#define TDOCK_PROTO_TDOCK_V1_BULK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/packed.h"
#include "tdock/v1/dock.pb.h"

namespace tdock::bulk {

// A decoded data-plane message: its fields but `columns`, parsed by the
// generated class, and its columns, whose segments point into the input.
template <typename Header>
struct Decoded {
  Header header;
  std::vector<PackedColumn> columns;
};

// `segments` is the received message split anywhere; they must outlive the
// column spans. INVALID_ARGUMENT on malformed input, naming the message or
// the column at fault (truncated, wrong wire type, an unknown DType, ...).
absl::StatusOr<Decoded<v1::PutRequest>> DecodePut(absl::Span<const ByteSpan> segments);
absl::StatusOr<Decoded<v1::GetResponse>> DecodeBatch(absl::Span<const ByteSpan> segments);

// An encoded message: the concatenation of `pieces` in order. A piece either
// points into `owned` (headers the encoder wrote, and small column data
// copied next to them) or is borrowed from the columns' segments, which must
// outlive the pieces' use.
//
// Move-only: a copy's pieces would still point into the source's `owned`.
// Moving keeps every piece valid, because the strings of `owned` live in the
// vector's heap block, which a vector move hands over without moving the
// strings (so even a short string's inline bytes stay where they are). For
// the same reason `owned` is never changed after encoding.
struct Encoded {
  struct Piece {
    ByteSpan bytes;
    bool borrowed = false;
  };

  Encoded() = default;
  Encoded(const Encoded&) = delete;
  Encoded& operator=(const Encoded&) = delete;
  Encoded(Encoded&&) noexcept = default;
  Encoded& operator=(Encoded&&) noexcept = default;

  std::vector<std::string> owned;
  std::vector<Piece> pieces;
  int64_t size() const;
};

// `header` is the message's other fields (its own `columns` must be empty);
// `columns` follow it. Column data in segments below kCopyBelowBytes is
// copied into owned pieces, larger segments are borrowed.
inline constexpr size_t kCopyBelowBytes = 1024;
Encoded EncodePut(const v1::PutRequest& header, absl::Span<const PackedColumn> columns);
Encoded EncodeBatch(const v1::GetResponse& header, absl::Span<const PackedColumn> columns);

}  // namespace tdock::bulk

#endif  // TDOCK_PROTO_TDOCK_V1_BULK_H_
