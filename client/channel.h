// A gRPC channel to a tdock server as a Client opens it: plaintext or TLS
// (ClientOptions::tls), message limits, and connection attempts that outlast
// a busy host, on a connection of its own. For a process that speaks the
// wire contract with generated stubs (a shard committing to its controller).
#ifndef TDOCK_CLIENT_CHANNEL_H_
#define TDOCK_CLIENT_CHANNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "grpcpp/channel.h"

namespace tdock {

// INVALID_ARGUMENT naming the option at fault (an empty address, a timeout
// that is not positive, TLS files without TLS, a token of several lines).
// The token is not sent by the channel: set it on each call.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientOptions& options);

}  // namespace tdock

#endif  // TDOCK_CLIENT_CHANNEL_H_
