// Decoding of received GetResponses into a ClientBatch: a Read's answer, or
// a Get's parts (GetStream) one by one. Each message is decoded over its
// slices (proto/tdock/v1/bulk.h), checked (offsets, data sizes, the
// micro-batch plan; a malformed response is INTERNAL naming the call) and
// its column data copied once into a buffer from the client's pool; the
// batch keeps every buffer alive.
//
// Thread safety: a BatchDecoder is used by one thread; the pool is shared.
#ifndef TDOCK_CLIENT_BATCH_DECODER_H_
#define TDOCK_CLIENT_BATCH_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/buffer_pool.h"
#include "client/client.h"
#include "grpcpp/support/byte_buffer.h"

namespace tdock::internal {

class BatchDecoder final {
 public:
  // `what` names the call in messages ("Get of consumer 'actor' on dock
  // 'grpo'"); `pool` must outlive the decoder.
  BatchDecoder(std::string what, BufferPool& pool);
  BatchDecoder(const BatchDecoder&) = delete;
  BatchDecoder& operator=(const BatchDecoder&) = delete;

  // One message: the first gives the batch's fields, every one its columns.
  absl::Status Add(const grpc::ByteBuffer& message);
  // The batch; INTERNAL when no message was added.
  absl::StatusOr<ClientBatch> Finish() &&;

 private:
  const std::string what_;
  BufferPool& pool_;
  int parts_ = 0;
  ClientBatch batch_;
  std::vector<std::shared_ptr<char>> buffers_;
};

// Checks that the micro-batches tile the batch's rows in order: each starts
// where the one before ended, none is reversed, the last ends at the rows
// (INTERNAL naming `what` otherwise).
absl::Status CheckMicroBatches(const std::vector<MicroBatchInfo>& micro_batches,
                               size_t rows, const std::string& what);

// The batch of one whole GetResponse.
absl::StatusOr<ClientBatch> DecodeBatchResponse(const grpc::ByteBuffer& response,
                                                std::string what, BufferPool& pool);

}  // namespace tdock::internal

#endif  // TDOCK_CLIENT_BATCH_DECODER_H_
