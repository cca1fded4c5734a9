#include "client/batch_decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cell_location.h"
#include "common/status.h"
#include "grpcpp/support/slice.h"
#include "proto/tdock/v1/bulk.h"
#include "proto/tdock/v1/convert.h"

namespace tdock::internal {
namespace {

constexpr size_t kAlignment = 64;

// Checks what the batch's accessors rely on: offsets start at 0, never
// decrease, one more than the rows, and the data divides into the items (a
// controller's batch: holds one cell location a row).
absl::Status CheckReceivedColumn(const PackedColumn& column, size_t rows, bool locations) {
  const std::vector<int64_t>& offsets = column.offsets;
  bool ok = offsets.size() == rows + 1 && offsets.front() == 0;
  for (size_t i = 1; ok && i < offsets.size(); ++i) {
    ok = offsets[i] >= offsets[i - 1];
  }
  const int64_t items = ok ? offsets.back() : 0;
  const int64_t bytes = column.data_bytes();
  if (ok && locations) {
    ok = bytes == static_cast<int64_t>(rows) * kCellLocationBytes;
  } else if (ok) {
    ok = items > 0 ? bytes % items == 0 : bytes == 0;
  }
  if (ok) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      "malformed response: column '", column.name, "' has ", offsets.size(),
      " offsets and ", bytes, " data bytes for ", rows, " rows"));
}

// The buffers a batch's columns were copied into, kept alive together.
using Buffers = std::vector<std::shared_ptr<char>>;

// Copies every column's segments (pointing into received slices) into one
// aligned buffer from `pool`, one contiguous region per column, and appends
// the columns to `out` and the buffer to `buffers`.
void CopyColumnsOut(std::vector<PackedColumn> columns, BufferPool& pool,
                    std::vector<PackedColumn>* out, Buffers* buffers) {
  size_t total = 0;
  for (const PackedColumn& column : columns) {
    total += (column.data_bytes() + kAlignment - 1) / kAlignment * kAlignment;
  }
  std::shared_ptr<char> buffer = total > 0 ? pool.Acquire(total) : nullptr;
  char* at = buffer.get();
  for (PackedColumn& column : columns) {
    const int64_t bytes = column.data_bytes();
    if (bytes > 0) CopyFromSegments(column.segments, 0, bytes, at);
    column.segments = {ByteSpan(at, static_cast<size_t>(bytes))};
    if (at != nullptr) {
      at += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    }
    out->push_back(std::move(column));
  }
  if (buffer != nullptr) buffers->push_back(std::move(buffer));
}

// What batch->buffer holds: the one buffer, or all of them (aliasing the
// first).
void KeepBuffers(Buffers buffers, ClientBatch* batch) {
  if (buffers.empty()) return;
  if (buffers.size() == 1) {
    batch->buffer = std::move(buffers.front());
    return;
  }
  auto all = std::make_shared<Buffers>(std::move(buffers));
  batch->buffer = std::shared_ptr<const char>(all, all->front().get());
}

}  // namespace

absl::Status CheckMicroBatches(const std::vector<MicroBatchInfo>& micro_batches,
                               size_t rows, const std::string& what) {
  int64_t next = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const MicroBatchInfo& mb = micro_batches[i];
    if (mb.begin != next || mb.end < mb.begin) {
      return absl::InternalError(absl::StrCat(
          "malformed response to ", what, ": micro-batch ", i, " covers rows [", mb.begin,
          ", ", mb.end, ") where row ", next, " comes next"));
    }
    next = mb.end;
  }
  if (!micro_batches.empty() && next != static_cast<int64_t>(rows)) {
    return absl::InternalError(absl::StrCat("malformed response to ", what,
                                            ": micro-batches end at row ", next, " of ",
                                            rows));
  }
  return absl::OkStatus();
}

BatchDecoder::BatchDecoder(std::string what, BufferPool& pool)
    : what_(std::move(what)), pool_(pool) {}

absl::Status BatchDecoder::Add(const grpc::ByteBuffer& message) {
  std::vector<grpc::Slice> slices;  // references, not copies
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(message.Dump(&slices)));
  std::vector<ByteSpan> segments;
  segments.reserve(slices.size());
  for (const grpc::Slice& slice : slices) {
    segments.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  absl::StatusOr<bulk::Decoded<v1::GetResponse>> decoded = bulk::DecodeBatch(segments);
  if (!decoded.ok()) {
    return absl::InternalError(absl::StrCat("malformed response to ", what_, ": ",
                                            decoded.status().message()));
  }
  if (parts_++ == 0) {
    static_cast<BatchMeta&>(batch_) = FromProto(decoded->header);
    TDOCK_RETURN_IF_ERROR(
        CheckMicroBatches(batch_.micro_batches, batch_.rows.size(), what_));
  }
  for (const PackedColumn& column : decoded->columns) {
    absl::Status checked =
        CheckReceivedColumn(column, batch_.rows.size(), batch_.cell_locations);
    if (!checked.ok()) {
      return absl::InternalError(absl::StrCat(what_, ": ", checked.message()));
    }
  }
  CopyColumnsOut(std::move(decoded->columns), pool_, &batch_.columns, &buffers_);
  return absl::OkStatus();
}

absl::StatusOr<ClientBatch> BatchDecoder::Finish() && {
  if (parts_ == 0) {
    return absl::InternalError(absl::StrCat("empty response to ", what_));
  }
  KeepBuffers(std::move(buffers_), &batch_);
  return std::move(batch_);
}

absl::StatusOr<ClientBatch> DecodeBatchResponse(const grpc::ByteBuffer& response,
                                                std::string what,
                                                BufferPool& pool) {
  BatchDecoder decoder(std::move(what), pool);
  TDOCK_RETURN_IF_ERROR(decoder.Add(response));
  return std::move(decoder).Finish();
}

}  // namespace tdock::internal
