#include "server/service/byte_buffers.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/tdock/v1/convert.h"

namespace tdock::internal {
namespace {

// Destroy callback of a borrowed slice: drops that slice's reference to the
// arena pin. gRPC calls it once, from whichever thread releases the slice.
void ReleasePin(void* user_data) {
  delete static_cast<std::shared_ptr<const void>*>(user_data);
}

grpc::Slice PinnedSlice(ByteSpan bytes,
                        const std::shared_ptr<const void>& pin) {
  // gRPC never writes through a send slice; the cast only fits its signature.
  void* data = const_cast<char*>(bytes.data());
  return grpc::Slice(data, bytes.size(), &ReleasePin,
                     new std::shared_ptr<const void>(pin));
}

}  // namespace

absl::StatusOr<RequestBytes> RequestBytes::From(
    const grpc::ByteBuffer& buffer) {
  RequestBytes bytes;
  if (!buffer.Valid()) return bytes;  // an empty message
  const grpc::Status dumped = buffer.Dump(&bytes.slices_);
  if (!dumped.ok()) {
    return absl::InternalError(absl::StrCat("cannot read the request bytes: ",
                                            dumped.error_message()));
  }
  bytes.spans_.reserve(bytes.slices_.size());
  for (const grpc::Slice& slice : bytes.slices_) {
    bytes.spans_.emplace_back(reinterpret_cast<const char*>(slice.begin()),
                              slice.size());
  }
  return bytes;
}

grpc::ByteBuffer EncodedToByteBuffer(const bulk::Encoded& encoded,
                                     const std::shared_ptr<const void>& pin) {
  std::vector<grpc::Slice> slices;
  slices.reserve(encoded.pieces.size());
  for (const bulk::Encoded::Piece& piece : encoded.pieces) {
    if (piece.bytes.empty()) continue;
    if (piece.borrowed && pin != nullptr) {
      slices.push_back(PinnedSlice(piece.bytes, pin));
    } else {
      slices.emplace_back(piece.bytes.data(), piece.bytes.size());  // copies
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer BatchToByteBuffer(Batch batch) {
  v1::GetResponse header;
  ToProto(batch, &header);
  const bulk::Encoded encoded = bulk::EncodeBatch(header, batch.columns);
  return EncodedToByteBuffer(encoded, batch.pin);
}

std::vector<grpc::ByteBuffer> BatchToByteBufferParts(Batch batch, int64_t part_bytes) {
  std::vector<grpc::ByteBuffer> parts;
  v1::GetResponse header;
  ToProto(batch, &header);
  const v1::GetResponse columns_only;
  const absl::Span<const PackedColumn> columns(batch.columns);
  size_t first = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i <= columns.size(); ++i) {
    const bool last = i == columns.size();
    if (!last) bytes += columns[i].data_bytes();
    if (last ? (parts.empty() || first < i) : bytes >= part_bytes) {
      const size_t end = last ? i : i + 1;
      parts.push_back(EncodedToByteBuffer(
          bulk::EncodeBatch(parts.empty() ? header : columns_only,
                            columns.subspan(first, end - first)),
          batch.pin));
      first = end;
      bytes = 0;
    }
  }
  return parts;
}

}  // namespace tdock::internal
