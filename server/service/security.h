// Transport security and authentication of tdock-server: TLS or mutual TLS
// from PEM files, and an optional bearer token every Dock call must carry.
//
// The health service (grpc.health.v1) stays open: orchestrators probe it
// without the token. The token is compared in constant time and never
// appears in a log line or an error message.
#ifndef TDOCK_SERVER_SERVICE_SECURITY_H_
#define TDOCK_SERVER_SERVICE_SECURITY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/string_ref.h"

namespace tdock {

struct SecurityOptions {
  // PEM files. tls_cert + tls_key turn TLS on; tls_client_ca (needs TLS)
  // makes it mutual: clients without a certificate signed by it are refused
  // during the handshake. Default: all empty (plaintext).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // A file holding the bearer token (surrounding whitespace ignored); every
  // Dock call must send `authorization: Bearer <token>`. Default: empty (no
  // token).
  std::string auth_token_file;

  // INVALID_ARGUMENT for a key without a certificate (or the reverse) or a
  // client CA without TLS, naming the flags.
  absl::Status Validate() const;
};

// Credentials to listen with: plaintext, TLS or mutual TLS. Reads the PEM
// files; an unreadable or empty file is INVALID_ARGUMENT naming the flag and
// the path.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options);

// The server's bearer token.
class BearerToken final {
 public:
  // Reads the token from `path`; INVALID_ARGUMENT naming the path if it
  // cannot be read or holds no token.
  static absl::StatusOr<std::unique_ptr<BearerToken>> FromFile(const std::string& path);
  explicit BearerToken(std::string token) : token_(std::move(token)) {}

  // OK when `metadata` has `authorization: Bearer <the token>`;
  // UNAUTHENTICATED otherwise, without repeating what was sent.
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

 private:
  const std::string token_;
};

// Reads a whole file for a flag; INVALID_ARGUMENT naming `flag` and `path` if
// it cannot be read or is empty.
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path);

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVICE_SECURITY_H_
