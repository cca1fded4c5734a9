#include "server/service/byte_buffers.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

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

wire::BalanceMessage ToBalanceMessage(const BalanceStats& stats) {
  wire::BalanceMessage out;
  out.rank_cost_min = stats.rank_cost.min;
  out.rank_cost_max = stats.rank_cost.max;
  out.rank_cost_mean = stats.rank_cost.mean;
  out.rank_tokens_min = stats.rank_tokens.min;
  out.rank_tokens_max = stats.rank_tokens.max;
  out.rank_tokens_mean = stats.rank_tokens.mean;
  out.micro_batch_tokens_min = stats.micro_batch_tokens.min;
  out.micro_batch_tokens_max = stats.micro_batch_tokens.max;
  out.micro_batch_tokens_mean = stats.micro_batch_tokens.mean;
  out.micro_batches = stats.micro_batches;
  out.tokens = stats.tokens;
  out.padded_tokens = stats.padded_tokens;
  out.padding_ratio = stats.padding_ratio;
  return out;
}

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

grpc::ByteBuffer EncodedToByteBuffer(const wire::Encoded& encoded,
                                     const std::shared_ptr<const void>& pin) {
  std::vector<grpc::Slice> slices;
  slices.reserve(encoded.pieces.size());
  for (const wire::Encoded::Piece& piece : encoded.pieces) {
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
  wire::BatchMessage message;
  message.step = batch.step;
  message.rows = std::move(batch.rows);
  message.token_counts = std::move(batch.token_counts);
  message.end_of_step = batch.end_of_step;
  message.timed_out = batch.timed_out;
  message.round = batch.round;
  message.lease_id = batch.lease_id;
  message.lease_ms = absl::ToInt64Milliseconds(batch.lease);
  message.micro_batches.reserve(batch.micro_batches.size());
  for (const MicroBatchInfo& mb : batch.micro_batches) {
    message.micro_batches.push_back({.begin = mb.begin,
                                     .end = mb.end,
                                     .padded_len = mb.padded_len,
                                     .tokens = mb.tokens,
                                     .padded_tokens = mb.padded_tokens});
  }
  if (batch.balance.has_value()) message.balance = ToBalanceMessage(*batch.balance);
  message.columns = std::move(batch.columns);
  const wire::Encoded encoded = wire::EncodeBatch(message);
  return EncodedToByteBuffer(encoded, batch.pin);
}

}  // namespace tdock::internal
