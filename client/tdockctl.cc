// tdockctl: create, inspect, feed and drain tdock docks from a shell.
//
//   tdockctl --server 127.0.0.1:50051 create --spec grpo.yaml
//   tdockctl put grpo --step 0 --rows 0-3 --column prompt_ids=prompts.json
//   tdockctl get grpo actor --wait_ms 1000 --json
//   echo '{"op":"partition","lengths":[7,6,8,5],"k":2}' | tdockctl balance
//
// Run `tdockctl --help` for every command. Exit status: 0 on success, 1 when
// a call or an input file fails (the server's code and message on stderr), 2
// on usage errors (with the usage text).
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/ctl_args.h"
#include "client/ctl_balance.h"
#include "client/ctl_output.h"
#include "client/ctl_values.h"
#include "common/files.h"
#include "common/spec_yaml.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// A command line checked and converted: what the command runs on.
struct Request {
  std::string command;
  std::string server;
  ClientTls tls;
  std::string token;
  bool json = false;
  absl::Duration timeout = absl::Seconds(30);
  std::string dock;
  std::string consumer;
  std::string spec_path;
  std::optional<int64_t> step;
  std::vector<int64_t> rows;
  std::vector<std::pair<std::string, std::string>> columns;  // name, file
  int32_t rank = 0;
  int64_t count = 0;
  absl::Duration wait = absl::ZeroDuration();
  std::optional<int64_t> round;
  int32_t replica = 0;
  uint64_t lease = 0;
  std::vector<int64_t> groups;      // drop
  DropReason reason = DropReason::kUnspecified;  // drop
  std::vector<std::string> required;  // seal
  ColumnSpec column;                  // add-column
};

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

// Usage errors only: everything a command needs, checked before any call.
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
  if (args.command == "remove-consumer") request.consumer = args.positionals[1];
  if (args.command == "add-column") {
    TDOCK_ASSIGN_OR_RETURN(request.column, ColumnFromArgs(args));
  }
  if (args.command == "release" || args.command == "drop" || args.command == "seal") {
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
  }
  if (args.command == "drop") {
    const std::string reason = args.Get("reason", "");
    if (!ParseDropReason(reason, &request.reason)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--reason '", reason,
          "' is not one of filtered, failed, stale, sealed, expired, surplus, other"));
    }
    if (!args.Has("rows") && !args.Has("groups")) {
      return absl::InvalidArgumentError("drop needs --rows or --groups (or both)");
    }
    if (args.Has("rows")) {
      TDOCK_ASSIGN_OR_RETURN(request.rows, ParseRows(args.Get("rows", "")));
    }
    if (args.Has("groups")) {
      TDOCK_ASSIGN_OR_RETURN(request.groups, ParseRows(args.Get("groups", "")));
    }
  }
  if (args.command == "seal" && args.Has("required")) {
    request.required = absl::StrSplit(args.Get("required", ""), ',', absl::SkipEmpty());
  }
  return request;
}

void Print(const Request& request, const Json& json, const std::string& text) {
  if (request.json) {
    std::cout << Dump(json) << "\n";
  } else {
    std::cout << text;
  }
}

absl::Status RunCreate(Client& client, const Request& request) {
  TDOCK_ASSIGN_OR_RETURN(std::vector<DockSpec> specs, LoadSpecsYamlFile(request.spec_path));
  if (specs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", request.spec_path, "' holds no dock"));
  }
  for (const DockSpec& spec : specs) {  // nothing is created if any spec is bad
    absl::Status valid = NormalizeSpec(spec).status();
    if (!valid.ok()) {
      return absl::Status(valid.code(), absl::StrCat(request.spec_path, ": ", valid.message()));
    }
  }
  Json created = Json::array();
  std::vector<std::string> names;
  std::string text;
  for (const DockSpec& spec : specs) {
    absl::StatusOr<DockSpec> result = client.CreateDock(spec);
    if (!result.ok()) {
      if (names.empty()) return result.status();
      return absl::Status(result.status().code(),
                          absl::StrCat(result.status().message(), " (created before it: ",
                                       absl::StrJoin(names, ", "), ")"));
    }
    names.push_back(result->name);
    created.push_back(SpecToJson(*result));
    absl::StrAppend(&text, "created ", SpecToText(*result));
  }
  Print(request, {{"created", std::move(created)}}, text);
  return absl::OkStatus();
}

absl::StatusOr<ClientColumn> LoadColumn(const DockSpec& spec, const std::string& name,
                                        const std::string& path, size_t rows) {
  const int index = spec.ColumnIndex(name);
  if (index < 0) {
    std::vector<std::string> known;
    for (const ColumnSpec& column : spec.columns) known.push_back(column.name);
    return absl::InvalidArgumentError(absl::StrCat("dock '", spec.name, "' has no column '", name,
                                                   "' (columns: ", absl::StrJoin(known, ", "),
                                                   ")"));
  }
  TDOCK_ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
  return ColumnFromJson(spec.columns[index], json, rows, path);
}

absl::Status RunPut(Client& client, const Request& request) {
  TDOCK_ASSIGN_OR_RETURN(DockStatusInfo status, client.GetDockStatus(request.dock));
  ClientPut put;
  put.dock = request.dock;
  put.step = *request.step;
  put.rows = request.rows;
  put.wait = request.wait;
  for (const auto& [name, path] : request.columns) {
    TDOCK_ASSIGN_OR_RETURN(ClientColumn column,
                           LoadColumn(status.spec, name, path, request.rows.size()));
    put.columns.push_back(std::move(column));
  }
  TDOCK_ASSIGN_OR_RETURN(PutAck ack, client.Put(put));
  Print(request,
        {{"dock", request.dock}, {"step", put.step}, {"rows", ack.rows}, {"bytes", ack.bytes}},
        absl::StrCat("put ", ack.rows, " rows (", ack.bytes, " bytes) into dock ",
                     request.dock, " step ", put.step, "\n"));
  return absl::OkStatus();
}

absl::Status RunGet(Client& client, const Request& request) {
  TDOCK_ASSIGN_OR_RETURN(ClientBatch batch,
                         client.Get({.dock = request.dock,
                                     .consumer = request.consumer,
                                     .rank = request.rank,
                                     .step = request.step,
                                     .count = request.count,
                                     .wait = request.wait,
                                     .round = request.round,
                                     .replica = request.replica}));
  Print(request, BatchToJson(batch), BatchToText(batch));
  return absl::OkStatus();
}

absl::Status RunSimple(Client& client, const Request& request) {
  const std::string& command = request.command;
  if (command == "list") {
    TDOCK_ASSIGN_OR_RETURN(std::vector<DockSummaryInfo> docks, client.ListDocks());
    Print(request, DocksToJson(docks), DocksToText(docks));
  } else if (command == "status") {
    TDOCK_ASSIGN_OR_RETURN(DockStatusInfo status, client.GetDockStatus(request.dock));
    Print(request, StatusToJson(status), StatusToText(status));
  } else if (command == "ack" || command == "nack") {
    const bool ack = command == "ack";
    TDOCK_ASSIGN_OR_RETURN(
        const int64_t rows,
        ack ? client.Ack(request.dock, request.consumer, request.lease)
            : client.Nack(request.dock, request.consumer, request.lease));
    Print(request,
          {{"dock", request.dock}, {"consumer", request.consumer},
           {"lease", request.lease}, {ack ? "acknowledged_rows" : "returned_rows", rows}},
          absl::StrCat(ack ? "acknowledged" : "handed back", " lease ", request.lease,
                       " of ", request.consumer, " on dock ", request.dock, ": ", rows,
                       " rows\n"));
  } else if (command == "release") {
    TDOCK_RETURN_IF_ERROR(client.ReleaseStep(request.dock, *request.step));
    Print(request, {{"dock", request.dock}, {"step", *request.step}, {"released", true}},
          absl::StrCat("released step ", *request.step, " of dock ", request.dock, "\n"));
  } else if (command == "add-column") {
    TDOCK_ASSIGN_OR_RETURN(const ColumnSpec added, client.AddColumn(request.dock, request.column));
    Print(request, {{"dock", request.dock}, {"column", added.name}, {"added", true}},
          absl::StrCat("added column ", added.name, " (", ColumnTypeName(added), ") to dock ",
                       request.dock, "\n"));
  } else if (command == "remove-consumer") {
    TDOCK_RETURN_IF_ERROR(client.RemoveConsumer(request.dock, request.consumer).status());
    Print(request, {{"dock", request.dock}, {"consumer", request.consumer}, {"removed", true}},
          absl::StrCat("removed consumer ", request.consumer, " of dock ", request.dock, "\n"));
  } else if (command == "drop" || command == "seal") {
    const bool drop = command == "drop";
    TDOCK_ASSIGN_OR_RETURN(
        const int64_t dropped,
        drop ? client.Drop(request.dock, *request.step, request.rows, request.groups,
                           request.reason)
             : client.Seal(request.dock, *request.step, request.required));
    Print(request,
          {{"dock", request.dock}, {"step", *request.step}, {drop ? "dropped" : "sealed", true},
           {"dropped_rows", dropped}},
          absl::StrCat(drop ? "dropped " : "sealed step ", drop ? "" : absl::StrCat(*request.step, ": "),
                       dropped, " rows", drop ? absl::StrCat(" of step ", *request.step) : " dropped",
                       " of dock ", request.dock, "\n"));
  } else if (command == "checkpoint") {
    TDOCK_RETURN_IF_ERROR(client.Checkpoint(request.dock));
    Print(request, {{"checkpoint", request.dock}},
          absl::StrCat("checkpoint of the server's store written to ", request.dock, "\n"));
  } else if (command == "delete") {
    TDOCK_RETURN_IF_ERROR(client.DeleteDock(request.dock));
    Print(request, {{"dock", request.dock}, {"deleted", true}},
          absl::StrCat("deleted dock ", request.dock, "\n"));
  } else if (command == "health") {
    TDOCK_RETURN_IF_ERROR(client.Health());
    Print(request, {{"server", request.server}, {"status", "SERVING"}},
          absl::StrCat(request.server, ": SERVING\n"));
  } else {
    return absl::InternalError(absl::StrCat("command '", command, "' has no handler"));
  }
  return absl::OkStatus();
}

absl::Status Run(const Request& request) {
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                         Client::Connect({.address = request.server,
                                          .token = request.token,
                                          .tls = request.tls,
                                          .timeout = request.timeout}));
  if (request.command == "create") return RunCreate(*client, request);
  if (request.command == "put") return RunPut(*client, request);
  if (request.command == "get") return RunGet(*client, request);
  return RunSimple(*client, request);
}

int Main(int argc, char** argv) {
  const std::vector<std::string> argv_list(argv + 1, argv + argc);
  const absl::StatusOr<CtlArgs> args = ParseCtlArgs(argv_list);
  if (args.ok() && args->help) {
    std::cout << UsageText();
    return 0;
  }
  const absl::StatusOr<Request> request =
      args.ok() ? MakeRequest(*args) : absl::StatusOr<Request>(args.status());
  if (!request.ok()) {
    std::cerr << "tdockctl: " << request.status().message() << "\n\n" << UsageText();
    return kExitUsage;
  }
  if (request->command == "balance") {  // no server
    return RunBalance(std::cin, std::cout) == 0 ? 0 : kExitError;
  }
  const absl::Status status = Run(*request);
  if (!status.ok()) {
    std::cerr << "tdockctl: " << absl::StatusCodeToString(status.code()) << ": "
              << status.message() << "\n";
    return kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace tdock::ctl

int main(int argc, char** argv) {
  try {
    return tdock::ctl::Main(argc, argv);
  } catch (const std::exception& e) {  // none expected: a last line of defence
    std::cerr << "tdockctl: INTERNAL: " << e.what() << "\n";
    return 1;
  }
}
