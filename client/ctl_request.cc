#include "client/ctl_request.h"

#include <cstdlib>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/files.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

absl::StatusOr<int64_t> NonNegative(const CtlArgs& args, const std::string& flag,
                                    int64_t fallback, int64_t max) {
  TDOCK_ASSIGN_OR_RETURN(std::optional<int64_t> value, args.GetInt(flag));
  if (value.has_value() && (*value < 0 || *value > max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", flag, " must be in [0, ", max, "], got ", *value));
  }
  return value.value_or(fallback);
}

absl::Status ParseColumns(const CtlArgs& args, Request* request) {
  std::set<std::string> seen;
  for (const std::string& value : args.GetAll("column")) {
    const size_t eq = value.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == value.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--column '", value, "' is not NAME=FILE.json"));
    }
    std::string name = value.substr(0, eq);
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--column '", name, "' given more than once"));
    }
    request->columns.emplace_back(std::move(name), value.substr(eq + 1));
  }
  return absl::OkStatus();
}

constexpr int64_t kMaxRound = std::numeric_limits<int64_t>::max();

}  // namespace

absl::StatusOr<Request> MakeRequest(const CtlArgs& args) {
  constexpr int64_t kMaxMs = int64_t{1} << 40;
  Request request;
  request.command = args.command;
  const char* env_server = std::getenv("TDOCK_SERVER");
  request.server = args.Get("server", env_server ? env_server : "127.0.0.1:50051");
  request.json = args.json();
  request.tls = {.ca_file = args.Get("tls_ca", ""),
                 .cert_file = args.Get("tls_cert", ""),
                 .key_file = args.Get("tls_key", ""),
                 .server_name = args.Get("tls_server_name", "")};
  request.tls.enabled = !request.tls.ca_file.empty() || !request.tls.cert_file.empty() ||
                        !request.tls.server_name.empty();
  if (request.tls.cert_file.empty() != request.tls.key_file.empty()) {
    return absl::InvalidArgumentError("flags --tls_cert and --tls_key go together");
  }
  if (args.Has("token_file")) {
    absl::StatusOr<std::string> token = ReadFile(args.Get("token_file", ""));
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: ", token.status().message()));
    }
    request.token = std::string(absl::StripAsciiWhitespace(*token));
    if (request.token.empty()) {
      return absl::InvalidArgumentError("--token_file: the file holds no token");
    }
  }
  TDOCK_ASSIGN_OR_RETURN(int64_t timeout_ms, NonNegative(args, "timeout_ms", 30000, kMaxMs));
  if (timeout_ms == 0) return absl::InvalidArgumentError("flag --timeout_ms must be positive");
  request.timeout = absl::Milliseconds(timeout_ms);
  TDOCK_ASSIGN_OR_RETURN(int64_t wait_ms, NonNegative(args, "wait_ms", 0, kMaxMs));
  request.wait = absl::Milliseconds(wait_ms);
  TDOCK_ASSIGN_OR_RETURN(request.step, args.GetInt("step"));
  TDOCK_ASSIGN_OR_RETURN(int64_t rank,
                         NonNegative(args, "rank", 0, std::numeric_limits<int32_t>::max()));
  request.rank = static_cast<int32_t>(rank);
  TDOCK_ASSIGN_OR_RETURN(request.count,
                         NonNegative(args, "count", 0, std::numeric_limits<int64_t>::max()));
  request.spec_path = args.Get("spec", "");
  if (!args.positionals.empty()) request.dock = args.positionals[0];
  if (args.command == "get") {
    request.consumer = args.positionals[1];
    TDOCK_ASSIGN_OR_RETURN(int64_t replica, NonNegative(args, "replica", 0, 1 << 20));
    request.replica = static_cast<int32_t>(replica);
    const std::string partial = args.Get("partial", "false");
    if (partial != "true" && partial != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat("--partial is '", partial, "'; it takes no value, or true or false"));
    }
    request.partial = partial == "true";
    if (args.Has("round")) {
      TDOCK_ASSIGN_OR_RETURN(request.round, NonNegative(args, "round", 0, kMaxRound));
    }
  }
  if (args.command == "ack" || args.command == "nack") {
    request.consumer = args.positionals[1];
    if (!absl::SimpleAtoi(args.positionals[2], &request.lease) || request.lease == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LEASE must be a positive integer, got '", args.positionals[2], "'"));
    }
  }
  if (args.command == "remove-consumer" || args.command == "leases" ||
      args.command == "nack-all") {
    request.consumer = args.positionals[1];
  }
  request.rank_given = args.Has("rank");
  if (args.command == "set-version" &&
      !absl::SimpleAtoi(args.positionals[1], &request.version)) {
    return absl::InvalidArgumentError(
        absl::StrCat("VERSION must be an integer, got '", args.positionals[1], "'"));
  }
  if (args.command == "reserve") {
    if (args.Has("version")) {
      TDOCK_ASSIGN_OR_RETURN(request.version, NonNegative(args, "version", 0,
                                                          std::numeric_limits<int64_t>::max()));
      request.reserve_version = request.version;
    }
    for (absl::string_view size : absl::StrSplit(args.Get("group_sizes", ""), ',',
                                                 absl::SkipEmpty())) {
      int32_t value = 0;
      if (!absl::SimpleAtoi(size, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--group_sizes must be comma-separated integers, got '", size, "'"));
      }
      request.group_sizes.push_back(value);
    }
    if (args.Has("count") == !request.group_sizes.empty()) {
      return absl::InvalidArgumentError("reserve: give --count N or --group_sizes, not both");
    }
    TDOCK_ASSIGN_OR_RETURN(int64_t deadline_ms, NonNegative(args, "deadline_ms", 600000, kMaxMs));
    request.deadline = absl::Milliseconds(deadline_ms);
  }
  if (args.command == "put" && args.Has("reservation")) {
    TDOCK_ASSIGN_OR_RETURN(int64_t reservation,
                           NonNegative(args, "reservation", 0, std::numeric_limits<int64_t>::max()));
    request.reservation = static_cast<uint64_t>(reservation);
  }
  if (args.command == "add-column") {
    TDOCK_ASSIGN_OR_RETURN(request.column, ColumnFromArgs(args));
  }
  if (args.command == "release" || args.command == "drop" || args.command == "seal" ||
      args.command == "rows") {
    int64_t step = 0;
    if (!absl::SimpleAtoi(args.positionals[1], &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("STEP must be an integer, got '", args.positionals[1], "'"));
    }
    request.step = step;
  }
  if (args.command == "put") {
    TDOCK_ASSIGN_OR_RETURN(request.rows, ParseRows(args.Get("rows", "")));
    TDOCK_RETURN_IF_ERROR(ParseColumns(args, &request));
    request.keys = absl::StrSplit(args.Get("keys", ""), ',', absl::SkipEmpty());
    if (args.Has("keys") && request.keys.size() != request.rows.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--keys names ", request.keys.size(),
                                                     " keys for ", request.rows.size(),
                                                     " rows; give one per row"));
    }
  }
  if (args.command == "read") {
    if (args.Has("keys") == (args.Has("step") || args.Has("rows"))) {
      return absl::InvalidArgumentError("read takes --keys, or --step and --rows");
    }
    if (args.Has("keys")) {
      request.keys = absl::StrSplit(args.Get("keys", ""), ',', absl::SkipEmpty());
    } else if (!args.Has("step") || !args.Has("rows")) {
      return absl::InvalidArgumentError("read takes --step and --rows together");
    } else {
      TDOCK_ASSIGN_OR_RETURN(request.rows, ParseRows(args.Get("rows", "")));
    }
    request.names = absl::StrSplit(args.Get("columns", ""), ',', absl::SkipEmpty());
  }
  if (args.command == "drop") {
    const std::string reason = args.Get("reason", "");
    // "unused", "carried" and "lost" are the server's own reasons.
    if (!ParseDropReason(reason, &request.reason) || ServerOwnDropReason(request.reason)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--reason '", reason,
          "' is not one of filtered, failed, stale, sealed, expired, surplus, other"));
    }
    if (!args.Has("rows") && !args.Has("groups")) {
      return absl::InvalidArgumentError("drop needs --rows or --groups (or both)");
    }
    // An empty list (a script's list of failed rows that came out empty)
    // drops nothing: the client answers 0 without a call.
    if (!args.Get("rows", "").empty()) {
      TDOCK_ASSIGN_OR_RETURN(request.rows, ParseRows(args.Get("rows", "")));
    }
    if (!args.Get("groups", "").empty()) {
      TDOCK_ASSIGN_OR_RETURN(request.groups, ParseRows(args.Get("groups", "")));
    }
  }
  if (args.command == "seal" && args.Has("required")) {
    request.required = absl::StrSplit(args.Get("required", ""), ',', absl::SkipEmpty());
  }
  return request;
}

}  // namespace tdock::ctl
