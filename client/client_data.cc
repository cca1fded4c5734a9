// tdock::Client's data plane. Put and Read are unary calls, Get a GetStream
// call, on gRPC's generic stubs with ByteBuffer bodies framed by
// proto/tdock/v1/bulk.h, so that payload never passes through a protobuf
// `bytes` field: a Put is sent as slices borrowed from the caller next to
// small header slices; each received message is decoded over its slices and
// its column data copied once into buffers the batch owns (a Get's parts one
// by one, each copied while the next is on its way). Sample carries no
// payload and uses the typed stub.
#include <cstdint>
#include <new>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "client/batch_decoder.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "common/status.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/async_unary_call.h"
#include "proto/tdock/v1/bulk.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {
namespace {

// Counts slices that borrow caller memory and are still referenced by gRPC.
// The transport may drop its last reference to a sent slice only after the
// call has returned, so a Put waits for the count to reach zero before the
// caller may free or reuse the memory.
//
// Thread safety: Release is called from gRPC threads; all members are
// guarded by mu_.
class BorrowTracker final {
 public:
  BorrowTracker() = default;
  BorrowTracker(const BorrowTracker&) = delete;
  BorrowTracker& operator=(const BorrowTracker&) = delete;

  // A slice over `bytes` that calls Release when gRPC drops it.
  grpc::Slice Borrow(ByteSpan bytes) {
    {
      absl::MutexLock lock(&mu_);
      ++outstanding_;
    }
    return grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(),
                       &BorrowTracker::Release, this);
  }

  // Blocks until every borrowed slice is released. Not bounded: returning
  // earlier would let gRPC read memory the caller may already have freed.
  void AwaitReleased() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* outstanding) { return *outstanding == 0; },
        &outstanding_));
  }

 private:
  static void Release(void* self) {
    auto* tracker = static_cast<BorrowTracker*>(self);
    absl::MutexLock lock(&tracker->mu_);
    --tracker->outstanding_;
  }

  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

// The encoded message as slices: runs of owned pieces are copied into one
// slice (they are small headers), borrowed pieces are referenced in place.
grpc::ByteBuffer ToByteBuffer(const bulk::Encoded& encoded, BorrowTracker* tracker) {
  std::vector<grpc::Slice> slices;
  slices.reserve(encoded.pieces.size());
  for (const bulk::Encoded::Piece& piece : encoded.pieces) {
    if (piece.borrowed) {
      slices.push_back(tracker->Borrow(piece.bytes));
    } else {
      slices.emplace_back(piece.bytes.data(), piece.bytes.size());  // copies
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The PutRequest of `put`; without `data`, its columns' offsets alone (a
// Put through a shard's shared memory), naming `prepared_extent` if given.
bulk::Encoded EncodePut(const ClientPut& put, bool data = true, uint64_t prepared_extent = 0) {
  v1::PutRequest header;
  header.set_dock(put.dock);
  header.set_step(put.step);
  header.mutable_rows()->Assign(put.rows.begin(), put.rows.end());
  header.set_wait_ms(absl::ToInt64Milliseconds(put.wait));
  header.set_ack_lease(put.ack_lease);
  header.mutable_keys()->Assign(put.keys.begin(), put.keys.end());
  header.set_new_rows(put.new_rows);
  header.mutable_group_sizes()->Assign(put.group_sizes.begin(), put.group_sizes.end());
  header.mutable_versions()->Assign(put.versions.begin(), put.versions.end());
  header.set_reservation(put.reservation);
  header.set_put_id(put.put_id);
  header.set_prepared_extent(prepared_extent);
  for (const ColumnSpec& column : put.new_columns) *header.add_new_columns() = ToProto(column);
  std::vector<PackedColumn> columns;
  columns.reserve(put.columns.size());
  for (const ClientColumn& column : put.columns) {
    columns.push_back({.name = column.name,
                       .dtype = column.dtype,
                       .offsets = column.offsets,
                       .segments = {data ? column.bytes() : ByteSpan()}});
  }
  return bulk::EncodePut(header, columns);
}

}  // namespace

namespace internal {

absl::StatusOr<ClientPut> PutOfHeader(const v1::PutRequest& header) {
  for (const auto& [set, field] : {std::pair<bool, const char*>{header.columns_size() > 0, "columns"},
                                   {header.cell_locations(), "cell_locations"},
                                   {header.prepared_extent() != 0, "prepared_extent"}}) {
    if (set) {
      return absl::InvalidArgumentError(absl::StrCat(
          "put into dock '", header.dock(), "': the header sets ", field,
          ", which a client's Put leaves to the library"));
    }
  }
  ClientPut put;
  put.dock = header.dock();
  put.step = header.step();
  put.rows.assign(header.rows().begin(), header.rows().end());
  put.wait = absl::Milliseconds(header.wait_ms());
  put.ack_lease = header.ack_lease();
  put.keys.assign(header.keys().begin(), header.keys().end());
  put.new_rows = header.new_rows();
  put.group_sizes.assign(header.group_sizes().begin(), header.group_sizes().end());
  put.versions.assign(header.versions().begin(), header.versions().end());
  put.reservation = header.reservation();
  put.put_id = header.put_id();
  for (const v1::ColumnSpec& column : header.new_columns()) {
    absl::StatusOr<ColumnSpec> spec = FromProto(column);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("put into dock '", header.dock(),
                                                     "': new column '", column.name(), "': ",
                                                     spec.status().message()));
    }
    put.new_columns.push_back(*std::move(spec));
  }
  return put;
}

}  // namespace internal

namespace {

// A server-streaming call on a generic stub, driven to its end by the
// calling thread on a completion queue of its own, as Call is: sends
// `request`, hands each message to `on_message` (asking for the next one
// first, so the transport goes on receiving), and returns the call's status,
// or the first error of `on_message` (the call is cancelled then).
grpc::Status StreamCall(grpc::GenericStub& stub, const char* method,
                        grpc::ClientContext* context, const grpc::ByteBuffer& request,
                        absl::FunctionRef<absl::Status(const grpc::ByteBuffer&)> on_message,
                        absl::Status* failed) {
  grpc::CompletionQueue cq;
  void* tag = nullptr;
  bool ok = false;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(context, method, &cq);
  call->StartCall(nullptr);
  cq.Next(&tag, &ok);
  if (ok) {
    call->WriteLast(request, grpc::WriteOptions(), nullptr);
    cq.Next(&tag, &ok);
  }
  grpc::ByteBuffer messages[2];
  int current = 0;
  if (ok) {
    call->Read(&messages[current], nullptr);
    cq.Next(&tag, &ok);
  }
  while (ok) {
    grpc::ByteBuffer& message = messages[current];
    current ^= 1;
    call->Read(&messages[current], nullptr);  // received while this one is copied
    if (failed->ok()) {
      *failed = on_message(message);
      if (!failed->ok()) context->TryCancel();
    }
    message.Clear();
    cq.Next(&tag, &ok);
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

v1::GetRequest ToGetRequest(const ClientGet& get) {
  v1::GetRequest request;
  request.set_dock(get.dock);
  request.set_consumer(get.consumer);
  request.set_rank(get.rank);
  request.set_replica(get.replica);
  request.set_has_step(get.step.has_value());
  request.set_step(get.step.value_or(0));
  request.set_count(get.count);
  request.set_wait_ms(absl::ToInt64Milliseconds(get.wait));
  if (get.round.has_value()) request.set_round(*get.round);
  return request;
}

}  // namespace

template <typename Response>
absl::Status Client::Impl::SendPut(grpc::TemplatedGenericStub<grpc::ByteBuffer, Response>& stub,
                                   const char* method, const bulk::Encoded& encoded,
                                   absl::Duration wait, Response* response) const {
  grpc::Status status;
  BorrowTracker tracker;
  {
    // The context (and with it the call) and the request go out of scope
    // before waiting, so gRPC drops the borrowed slices on this thread.
    grpc::ClientContext context;
    SetDeadline(&context, wait);
    const grpc::ByteBuffer request = ToByteBuffer(encoded, &tracker);
    status = internal::UnaryCall(stub, method, &context, request, response);
  }
  tracker.AwaitReleased();
  return FromGrpcStatus(status);
}

absl::StatusOr<PutAck> Client::Put(const ClientPut& put) {
  // To a controller's shard (through its shared memory, or its socket), or
  // to the server.
  TDOCK_ASSIGN_OR_RETURN(const Impl::Shards shards, impl_->ListShards());
  TDOCK_RETURN_IF_ERROR(impl_->CheckTransport(shards));
  auto send = [&](grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PutResponse>& stub,
                  const char* method) -> absl::StatusOr<v1::PutResponse> {
    const bulk::Encoded encoded = EncodePut(put);
    if (encoded.size() > impl_->options.max_message_bytes) {
      return CapacityError(absl::StrCat(
          "put into dock '", put.dock, "' step ", put.step, ": message of ",
          encoded.size(), " bytes exceeds max_message_bytes ",
          impl_->options.max_message_bytes, "; split the rows over several puts"));
    }
    v1::PutResponse response;
    TDOCK_RETURN_IF_ERROR(impl_->SendPut(stub, method, encoded, put.wait, &response));
    return response;
  };
  absl::StatusOr<v1::PutResponse> response;
  if (shards.empty()) {
    if (!put.shard_address.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "put into dock '", put.dock, "': it names shard ", put.shard_address, ", but ",
          impl_->options.address, " is a standalone server"));
    }
    response = send(impl_->put_stub, "/tdock.v1.Dock/Put");
  } else {
    // The shard the Put names, held while it is sent.
    TDOCK_ASSIGN_OR_RETURN(const std::shared_ptr<const Impl::Shard> chosen,
                           impl_->ShardAt(shards, put));
    const Impl::Shard& target = chosen != nullptr ? *chosen : Impl::ShardForPut(shards, put);
    response = target.shm != nullptr ? impl_->ShmPut(target, put)
                                     : send(*target.put_stub, "/tdock.v1.Shard/Put");
    // The shard may be back at another address, or with other memory.
    if (response.status().code() == absl::StatusCode::kUnavailable) impl_->ForgetShards();
  }
  if (!response.ok()) return response.status();
  return PutAck{.rows = response->rows(),
                .bytes = response->bytes(),
                .assigned = {response->assigned().begin(), response->assigned().end()},
                .replayed = response->replayed()};
}

absl::StatusOr<v1::PutResponse> Client::Impl::ShmPut(const Shard& shard,
                                                     const ClientPut& put) const {
  v1::PrepareResponse prepared;
  TDOCK_RETURN_IF_ERROR(SendPut(*shard.prepare_stub, "/tdock.v1.Shard/Prepare",
                                EncodePut(put, /*data=*/false), put.wait, &prepared));
  std::vector<ByteSpan> columns;
  for (const ClientColumn& column : put.columns) columns.push_back(column.bytes());
  TDOCK_RETURN_IF_ERROR(shard.shm->Write(prepared, columns));
  v1::PutResponse response;
  TDOCK_RETURN_IF_ERROR(SendPut(*shard.put_stub, "/tdock.v1.Shard/Put",
                                EncodePut(put, /*data=*/false, prepared.extent()), put.wait,
                                &response));
  return response;
}

absl::StatusOr<ClientBatch> Client::Get(const ClientGet& get) {
  const v1::GetRequest request = ToGetRequest(get);
  if (impl_->transport == internal::Transport::kShm) {  // before any row is handed out
    TDOCK_ASSIGN_OR_RETURN(const Impl::Shards shards, impl_->ListShards());
    TDOCK_RETURN_IF_ERROR(impl_->CheckTransport(shards));
  }
  grpc::ByteBuffer request_bytes;
  bool own_buffer = false;
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(grpc::SerializationTraits<v1::GetRequest>::Serialize(
      request, &request_bytes, &own_buffer)));
  grpc::ClientContext context;
  impl_->SetDeadline(&context, get.wait);
  internal::BatchDecoder decoder(
      absl::StrCat("Get of consumer '", get.consumer, "' on dock '", get.dock, "'"),
      impl_->buffers);
  absl::Status failed;
  const grpc::Status status = StreamCall(
      impl_->stream_stub, "/tdock.v1.Dock/GetStream", &context, request_bytes,
      [&decoder](const grpc::ByteBuffer& part) { return decoder.Add(part); }, &failed);
  TDOCK_RETURN_IF_ERROR(failed);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(status));
  TDOCK_ASSIGN_OR_RETURN(ClientBatch batch, std::move(decoder).Finish());
  if (batch.cell_locations) {
    const absl::Status read = impl_->ReadCells(
        absl::StrCat("Get of consumer '", get.consumer, "' on dock '", get.dock, "'"), get.dock,
        batch, get.partial);
    if (!read.ok()) {
      // The rows are handed out but their cells cannot be read: a lease goes
      // back at once (asking again is safe); without one they are lost to
      // this consumer.
      const std::string rows = absl::StrJoin(batch.rows, ", ");
      if (batch.lease_id != 0) {
        (void)impl_->EndLease(get.dock, get.consumer, batch.lease_id, /*ack=*/false);
        return absl::UnavailableError(absl::StrCat(
            "dock '", get.dock, "': the cells of step ", batch.step, " rows [", rows,
            "] for consumer '", get.consumer, "' could not be read (", read.message(),
            "); their lease was handed back"));
      }
      return absl::DataLossError(absl::StrCat(
          "dock '", get.dock, "': step ", batch.step, " rows [", rows,
          "] were handed to consumer '", get.consumer, "' but their cells could not be read (",
          read.message(), ")"));
    }
  }
  return batch;
}

absl::StatusOr<ClientBatch> Client::Sample(const ClientGet& get) {
  const v1::GetRequest request = ToGetRequest(get);
  grpc::ClientContext context;
  impl_->SetDeadline(&context, get.wait);
  v1::SampleResponse response;
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->Sample(&context, request, &response)));
  ClientBatch batch;
  static_cast<BatchMeta&>(batch) = FromProto(response);
  TDOCK_RETURN_IF_ERROR(internal::CheckMicroBatches(
      batch.micro_batches, batch.rows.size(),
      absl::StrCat("Sample of consumer '", get.consumer, "' on dock '", get.dock, "'")));
  return batch;
}

absl::StatusOr<ClientBatch> Client::Read(const std::string& dock, int64_t step,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<std::string>& columns) {
  v1::ReadRequest request;
  request.set_dock(dock);
  request.set_step(step);
  request.mutable_rows()->Add(rows.begin(), rows.end());
  return DoRead(request, columns, absl::StrCat("Read of step ", step, " on dock '", dock, "'"));
}

absl::StatusOr<ClientBatch> Client::ReadKeys(const std::string& dock,
                                             const std::vector<std::string>& keys,
                                             const std::vector<std::string>& columns) {
  v1::ReadRequest request;
  request.set_dock(dock);
  request.mutable_keys()->Assign(keys.begin(), keys.end());
  return DoRead(request, columns, absl::StrCat("Read by key on dock '", dock, "'"));
}

absl::StatusOr<ClientBatch> Client::DoRead(v1::ReadRequest& request,
                                           const std::vector<std::string>& columns,
                                           const std::string& what) {
  for (const std::string& column : columns) request.add_columns(column);
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  grpc::ByteBuffer response;
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(
      internal::UnaryCall(impl_->read_stub, "/tdock.v1.Dock/Read", &context, request, &response)));
  TDOCK_ASSIGN_OR_RETURN(ClientBatch batch,
                         internal::DecodeBatchResponse(response, what, impl_->buffers));
  if (batch.cell_locations) {
    TDOCK_RETURN_IF_ERROR(impl_->ReadCells(what, request.dock(), batch));
  }
  return batch;
}

}  // namespace tdock
