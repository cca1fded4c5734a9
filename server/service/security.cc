#include "server/service/security.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status.h"

namespace tdock {
namespace {

// Equal strings, in time that depends only on their lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", content.status().message()));
  }
  if (absl::StripAsciiWhitespace(*content).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", path, "' is empty"));
  }
  return content;
}

absl::Status SecurityOptions::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca (mutual TLS) needs --tls_cert and --tls_key");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options) {
  TDOCK_RETURN_IF_ERROR(options.Validate());
  if (options.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  TDOCK_ASSIGN_OR_RETURN(pair.cert_chain, ReadFlagFile("tls_cert", options.tls_cert));
  TDOCK_ASSIGN_OR_RETURN(pair.private_key, ReadFlagFile("tls_key", options.tls_key));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_client_ca.empty()) {
    TDOCK_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                           ReadFlagFile("tls_client_ca", options.tls_client_ca));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::unique_ptr<BearerToken>> BearerToken::FromFile(const std::string& path) {
  TDOCK_ASSIGN_OR_RETURN(std::string content, ReadFlagFile("auth_token_file", path));
  const std::string token(absl::StripAsciiWhitespace(content));
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_token_file: '", path, "' must hold one token without inner whitespace"));
  }
  return std::make_unique<BearerToken>(token);
}

absl::Status BearerToken::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  static constexpr std::string_view kScheme = "Bearer ";
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "this server needs a bearer token: send 'authorization: Bearer <token>' "
        "(tdockctl --token_file, the clients' token option, or TDOCK_TOKEN)");
  }
  const std::string_view value(it->second.data(), it->second.size());
  if (value.substr(0, kScheme.size()) != kScheme ||
      !ConstantTimeEquals(value.substr(kScheme.size()), token_)) {
    return absl::UnauthenticatedError("the bearer token is not this server's");
  }
  return absl::OkStatus();
}

}  // namespace tdock
