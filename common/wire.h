// Wire codec for the bulk messages of tdock.v1 (PutRequest, GetResponse),
// written against the protobuf wire format by hand so that payload bytes are
// never copied: decoding leaves `data` fields as spans into the received
// segments, encoding emits them as borrowed pieces next to small owned header
// pieces. The .proto in proto/tdock/v1 is the contract; tests check that this
// codec and the protobuf-generated classes read each other's bytes. Unknown
// fields are skipped, as protobuf does. No protobuf or gRPC header here: the
// transport maps segments and pieces to its own slices.
#ifndef TDOCK_COMMON_WIRE_H_
#define TDOCK_COMMON_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/packed.h"

namespace tdock::wire {

// tdock.v1.PutRequest.
struct PutMessage {
  std::string dock;
  int64_t step = 0;
  std::vector<int64_t> rows;
  int64_t wait_ms = 0;
  uint64_t ack_lease = 0;
  std::vector<PackedColumn> columns;
};

// tdock.v1.MicroBatch.
struct MicroBatchMessage {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t padded_len = 0;
  int64_t tokens = 0;
  int64_t padded_tokens = 0;
};

// tdock.v1.BalanceStats.
struct BalanceMessage {
  double rank_cost_min = 0, rank_cost_max = 0, rank_cost_mean = 0;
  double rank_tokens_min = 0, rank_tokens_max = 0, rank_tokens_mean = 0;
  double micro_batch_tokens_min = 0, micro_batch_tokens_max = 0,
         micro_batch_tokens_mean = 0;
  int64_t micro_batches = 0;
  int64_t tokens = 0;
  int64_t padded_tokens = 0;
  double padding_ratio = 0;
};

// tdock.v1.GetResponse (also the response of Read).
struct BatchMessage {
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::vector<int64_t> token_counts;
  bool end_of_step = false;
  bool timed_out = false;
  int64_t round = 0;
  std::vector<MicroBatchMessage> micro_batches;
  std::optional<BalanceMessage> balance;  // field present or not
  uint64_t lease_id = 0;
  int64_t lease_ms = 0;
  std::vector<PackedColumn> columns;
};

// An encoded message: the concatenation of `pieces` in order. A piece either
// points into `owned` (headers the encoder wrote) or is borrowed from the
// input's column segments, which must outlive the pieces' use.
//
// Move-only: a copy's pieces would still point into the source's `owned`.
// Moving keeps every piece valid, because the strings of `owned` live in the
// vector's heap block, which a vector move hands over without moving the
// strings (so even a short string's inline bytes stay where they are). For
// the same reason `owned` must not be changed after encoding: growing it
// could reallocate that block and move the strings.
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

  std::vector<std::string> owned;  // storage for non-borrowed pieces
  std::vector<Piece> pieces;
  int64_t size() const;
};

// Decoding: `segments` is the received message split anywhere. Column data
// spans point into `segments`' memory. INVALID_ARGUMENT on malformed input
// (truncated, bad varint, wrong wire type, length past the end, ...), naming
// the field.
absl::StatusOr<PutMessage> DecodePut(absl::Span<const ByteSpan> segments);
absl::StatusOr<BatchMessage> DecodeBatch(absl::Span<const ByteSpan> segments);

// Encoding: segments of small payloads may be copied into owned pieces; large
// ones are borrowed.
Encoded EncodePut(const PutMessage& message);
Encoded EncodeBatch(const BatchMessage& message);

}  // namespace tdock::wire

#endif  // TDOCK_COMMON_WIRE_H_
