// Internal to client/: the state behind tdock::Client, shared by the control
// plane (client.cc) and the data plane (client_data.cc).
//
// Thread safety: constant after construction (the buffer pool is
// thread-safe); gRPC channels and stubs may be used by many threads at once.
#ifndef TDOCK_CLIENT_CLIENT_IMPL_H_
#define TDOCK_CLIENT_CLIENT_IMPL_H_

#include <memory>

#include "absl/time/time.h"
#include "client/buffer_pool.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "tdock/v1/dock.grpc.pb.h"

namespace tdock {

class Client::Impl final {
 public:
  Impl(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
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
};

}  // namespace tdock

#endif  // TDOCK_CLIENT_CLIENT_IMPL_H_
