// tdock::Client: connecting (options checked, credentials, the channel and
// its connection settings) and health.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/channel.h"
#include "common/files.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {

Client::Impl::Impl(ClientOptions options, std::shared_ptr<grpc::Channel> channel,
                   internal::Transport transport)
    : options(std::move(options)),
      transport(transport),
      channel(std::move(channel)),
      stub(v1::Dock::NewStub(this->channel)),
      health(grpc::health::v1::Health::NewStub(this->channel)),
      put_stub(this->channel),
      stream_stub(this->channel),
      read_stub(this->channel) {}

void Client::Impl::SetDeadline(grpc::ClientContext* context,
                               absl::Duration wait) const {
  context->set_deadline(
      absl::ToChronoTime(absl::Now() + std::max(wait, absl::ZeroDuration()) +
                         options.timeout));
  if (!options.token.empty()) context->AddMetadata("authorization", authorization);
}

namespace {

// Plaintext, or TLS with the given CA and (mutual TLS) client certificate.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientTls& tls) {
  if (!tls.enabled) {
    if (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty()) {
      return absl::InvalidArgumentError(
          "client: TLS files are given but TLS is not enabled");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "client: a TLS client certificate needs both cert_file and key_file");
  }
  grpc::SslCredentialsOptions ssl;
  for (auto [path, out] : {std::pair{&tls.ca_file, &ssl.pem_root_certs},
                           std::pair{&tls.cert_file, &ssl.pem_cert_chain},
                           std::pair{&tls.key_file, &ssl.pem_private_key}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadFile(*path);
    if (!pem.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("client TLS: ", pem.status().message()));
    }
    *out = *std::move(pem);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.token.empty()) {
    if (const char* env = std::getenv("TDOCK_TOKEN"); env != nullptr) options.token = env;
  }
  TDOCK_ASSIGN_OR_RETURN(const internal::Transport transport,
                         internal::ParseTransport(options.transport));
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, OpenChannel(options));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(channel), transport);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const ClientOptions& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("client: address is empty");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client: timeout must be positive, got ",
        absl::FormatDuration(options.timeout)));
  }
  for (const auto& [name, value] : {std::pair<const char*, absl::Duration>{
                                        "connect_timeout", options.connect_timeout},
                                    {"max_reconnect_backoff", options.max_reconnect_backoff}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("client: ", name, " must be positive, got ",
                                                     absl::FormatDuration(value)));
    }
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("client: max_message_bytes must be positive, got ",
                     options.max_message_bytes));
  }
  if (options.token.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("client: the token must be one line");
  }
  grpc::ChannelArguments args;
  const int max_bytes =
      static_cast<int>(std::min<int64_t>(options.max_message_bytes, INT_MAX));
  args.SetMaxReceiveMessageSize(max_bytes);
  args.SetMaxSendMessageSize(max_bytes);
  // Connection attempts outlast a busy host; a server that went away is
  // tried again at least every max_reconnect_backoff; and the channel keeps
  // its own connection, so a new Client never inherits another's backoff
  // (gRPC shares connections between channels to one target by default).
  const auto ms = [](absl::Duration d) {
    return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT_MAX));
  };
  const int backoff_ms = ms(options.max_reconnect_backoff);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, backoff_ms));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, ms(options.connect_timeout));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options.tls.server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name);
  }
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                         ChannelCredentialsFor(options.tls));
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, std::move(credentials), args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("client: cannot create a channel to '", options.address, "'"));
  }
  return channel;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::Status Client::Health() {
  grpc::health::v1::HealthCheckRequest request;  // "": the whole server
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->health->Check(&context, request, &response)));
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat(
        "server at ", impl_->options.address, " is ",
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
            response.status())));
  }
  return absl::OkStatus();
}

}  // namespace tdock
