// Mapping between grpc::ByteBuffer and tdock's byte spans, without copying
// payload: request bytes are viewed in place through refcounted slices, and
// response payload is handed to gRPC as slices that keep the dock's arena
// pinned until gRPC has sent them.
#ifndef TDOCK_SERVER_SERVICE_BYTE_BUFFERS_H_
#define TDOCK_SERVER_SERVICE_BYTE_BUFFERS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/packed.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/tdock/v1/bulk.h"
#include "server/dock/types.h"

namespace tdock::internal {

// The bytes of a received message, held by reference to gRPC's slices.
//
// Thread safety: immutable after construction; safe to read from any thread.
// Ownership: holds one reference per slice, so spans() stay valid as long as
// this object lives, independently of the ByteBuffer it came from. Moving it
// keeps the spans valid (the slice vector's storage moves as a whole).
class RequestBytes final {
 public:
  // INTERNAL if gRPC cannot expose the buffer's slices.
  static absl::StatusOr<RequestBytes> From(const grpc::ByteBuffer& buffer);

  RequestBytes(RequestBytes&&) = default;
  RequestBytes& operator=(RequestBytes&&) = default;
  RequestBytes(const RequestBytes&) = delete;
  RequestBytes& operator=(const RequestBytes&) = delete;

  // The message as consecutive byte ranges.
  absl::Span<const ByteSpan> spans() const { return spans_; }

 private:
  RequestBytes() = default;
  std::vector<grpc::Slice> slices_;
  std::vector<ByteSpan> spans_;
};

// Turns an encoded message into a ByteBuffer. Owned pieces (small headers)
// are copied into slices; borrowed pieces become slices over the original
// memory that each hold a reference to `pin` until gRPC releases them. With a
// null `pin` borrowed pieces are copied too, since nothing keeps them alive.
grpc::ByteBuffer EncodedToByteBuffer(const bulk::Encoded& encoded,
                                     const std::shared_ptr<const void>& pin);

// Encodes `batch` as a tdock.v1.GetResponse without copying column payload;
// the round, micro-batch plan and balance statistics go along.
grpc::ByteBuffer BatchToByteBuffer(Batch batch);

// The parts of `batch` for GetStream: GetResponses of whole columns, in
// order, each closed once it holds `part_bytes` of column data or more; the
// first also holds the batch's other fields (an empty batch is that part
// alone). Column payload is not copied.
inline constexpr int64_t kStreamPartBytes = 1 << 20;
std::vector<grpc::ByteBuffer> BatchToByteBufferParts(Batch batch,
                                                     int64_t part_bytes = kStreamPartBytes);

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_SERVICE_BYTE_BUFFERS_H_
