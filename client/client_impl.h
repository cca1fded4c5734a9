// Internal to client/: the state behind tdock::Client, shared by the control
// plane (client.cc) and the data plane (client_data.cc).
//
// Thread safety: constant after construction (the buffer pool is
// thread-safe), but for the shard listing of a controller, which has a lock
// of its own; gRPC channels and stubs may be used by many threads at once.
#ifndef TDOCK_CLIENT_CLIENT_IMPL_H_
#define TDOCK_CLIENT_CLIENT_IMPL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/buffer_pool.h"
#include "client/client.h"
#include "client/client_shm.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/tdock/v1/bulk.h"
#include "tdock/v1/dock.grpc.pb.h"

namespace tdock {
namespace internal {

// A unary call on a generic stub, driven to its end by the calling thread
// on a completion queue of its own (as a blocking stub call is: the caller's
// thread reads the response off the transport, with no hand-off to gRPC's
// callback threads).
template <typename Request, typename Response>
inline grpc::Status UnaryCall(grpc::TemplatedGenericStub<Request, Response>& stub,
                              const char* method, grpc::ClientContext* context,
                              const Request& request, Response* response) {
  grpc::CompletionQueue cq;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> call =
      stub.PrepareUnaryCall(context, method, request, &cq);
  call->StartCall();
  call->Finish(response, &status, &cq);
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);  // the one event: Finish
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// The Put that a PutRequest without its columns asks for (the Python
// client's, which the tdock._native module sends): every field but
// `columns`, which come apart. INVALID_ARGUMENT naming the field for one a
// client never sends (columns, cell_locations, prepared_extent) or a new
// column whose spec does not read.
absl::StatusOr<ClientPut> PutOfHeader(const v1::PutRequest& header);

}  // namespace internal

class Client::Impl final {
 public:
  Impl(ClientOptions options, std::shared_ptr<grpc::Channel> channel,
       internal::Transport transport);
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Sets the call's deadline (now + `wait` + options.timeout) and its
  // authorization metadata (with a token).
  void SetDeadline(grpc::ClientContext* context,
                   absl::Duration wait = absl::ZeroDuration()) const;

  // Ack (ack) or Nack a lease; the rows it covered.
  absl::StatusOr<int64_t> EndLease(const std::string& dock,
                                   const std::string& consumer, uint64_t lease_id,
                                   bool ack) const;

  // Constant after construction.
  const ClientOptions options;
  const internal::Transport transport;
  const std::string authorization = "Bearer " + options.token;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::Dock::Stub> stub;
  const std::unique_ptr<grpc::health::v1::Health::Stub> health;
  // The data-plane methods whose bodies are framed by proto/tdock/v1/bulk.h:
  // Put sends a ByteBuffer, Read receives one (gRPC's generic stubs).
  grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PutResponse> put_stub;
  // GetStream: ByteBuffers both ways (gRPC's generic streaming calls).
  grpc::GenericStub stream_stub;
  grpc::TemplatedGenericStub<v1::ReadRequest, grpc::ByteBuffer> read_stub;
  // Receive buffers of Get and Read, reused once their batches are gone.
  internal::BufferPool buffers;

  // A shard of the controller this client is connected to
  // (docs/scale-out.md), and a channel to it.
  struct Shard {
    uint64_t id = 0;
    std::string address;
    std::string node;
    bool away = false;  // its controller has not heard from it lately
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PutResponse>> put_stub;
    std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>> read_stub;
    std::unique_ptr<grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PrepareResponse>>
        prepare_stub;
    // Its shared memory, when this client uses it (the transport and the
    // shard allow); else null.
    std::shared_ptr<internal::ShmShard> shm;
    std::string shm_prefix;
    std::string shm_unusable;  // why its memory is not shared here (empty: it is)
  };
  using Shards = std::vector<std::shared_ptr<const Shard>>;
  // The controller's shards; empty for a standalone server. Listed when data
  // first moves, again with `refresh`.
  absl::StatusOr<Shards> ListShards(bool refresh = false) const;
  // The listing forgotten: the next call lists the shards again.
  void ForgetShards() const;
  // The shard a Put goes to: the one on this node (TDOCK_NODE, else the
  // host name) unless it is listed away, else one a hash of (dock, step,
  // its first row or key) picks among those not away (among all when every
  // one is). REQUIRES: `shards` is not empty.
  static const Shard& ShardForPut(const Shards& shards, const ClientPut& put);
  // The shard a Put names (ClientPut::shard_address and shard_shm_prefix),
  // from `shards` or else a new listing; null when it names none (or the
  // server is standalone). UNAVAILABLE when no listed shard is the one named.
  absl::StatusOr<std::shared_ptr<const Shard>> ShardAt(const Shards& shards,
                                                       const ClientPut& put) const;
  // FAILED_PRECONDITION when the transport is shm and the server is
  // standalone (no `shards`) or a shard does not share this host's memory.
  absl::Status CheckTransport(const Shards& shards) const;
  // A Put through `shard`'s shared memory: prepared, its bytes copied
  // there, then sent without them.
  absl::StatusOr<v1::PutResponse> ShmPut(const Shard& shard, const ClientPut& put) const;
  // One unary call of a Put's bytes (a Put, or a Prepare) to `stub`, with
  // the Put's `wait` added to its deadline.
  template <typename Response>
  absl::Status SendPut(grpc::TemplatedGenericStub<grpc::ByteBuffer, Response>& stub,
                       const char* method, const bulk::Encoded& encoded, absl::Duration wait,
                       Response* response) const;
  // A controller's batch (cell_locations) with its cells: each column's
  // locations read from the shards holding them, one call a shard, all at once, and the
  // batch's columns replaced by their cells in one buffer from the pool. A
  // shard's read failed: its error, unless `partial` and another shard
  // answered; then the batch narrowed to the rows with every cell on the
  // shards that answered (the others in its missing_rows).
  absl::Status ReadCells(const std::string& what, const std::string& dock,
                         ClientBatch& batch, bool partial = false);
  // A controller's listing (cell_locations) with its cells read from the
  // shards, each RowState's cells' bytes in place of their locations.
  absl::Status ReadListedCells(const std::string& dock, RowListing& listing);

 private:
  mutable absl::Mutex shards_mu_;
  mutable std::optional<Shards> shards_ ABSL_GUARDED_BY(shards_mu_);
};

}  // namespace tdock

#endif  // TDOCK_CLIENT_CLIENT_IMPL_H_
