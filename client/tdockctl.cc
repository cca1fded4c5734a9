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
#include "client/ctl_request.h"
#include "client/ctl_values.h"
#include "common/files.h"
#include "common/refusal.h"
#include "common/spec_yaml.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

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
      return WithMessage(result.status(),
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
  put.keys = request.keys;
  put.reservation = request.reservation;
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
                                     .replica = request.replica,
                                     .partial = request.partial}));
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
  } else if (command == "leases") {
    TDOCK_ASSIGN_OR_RETURN(const std::vector<ClientLease> leases,
                           client.ListLeases(request.dock, request.consumer));
    Json json = Json::array();
    std::string text;
    for (const ClientLease& lease : leases) {
      const bool running = lease.expires_in != absl::InfiniteDuration();
      const int64_t left = running ? absl::ToInt64Milliseconds(lease.expires_in) : -1;
      json.push_back({{"lease", lease.lease_id}, {"step", lease.step}, {"rank", lease.rank},
                      {"round", lease.round}, {"rows", lease.rows}, {"expires_in_ms", left}});
      absl::StrAppend(&text, "lease ", lease.lease_id, ": step ", lease.step, " rank ", lease.rank,
                      lease.round >= 0 ? absl::StrCat(" round ", lease.round) : "", ", ",
                      lease.rows, " rows, ",
                      running ? absl::StrCat("expires in ", left, " ms")
                              : std::string("hand-out being recorded"),
                      "\n");
    }
    if (leases.empty()) text = absl::StrCat("no leases of ", request.consumer, " in flight\n");
    Print(request, {{"dock", request.dock}, {"consumer", request.consumer}, {"leases", json}},
          text);
  } else if (command == "nack-all") {
    std::optional<int32_t> rank;
    if (request.rank_given) rank = request.rank;
    TDOCK_ASSIGN_OR_RETURN(const ClientNackAll back,
                           client.NackAll(request.dock, request.consumer, rank));
    Print(request,
          {{"dock", request.dock}, {"consumer", request.consumer}, {"leases", back.leases},
           {"returned_rows", back.rows}},
          absl::StrCat("handed back ", back.leases, " leases of ", request.consumer,
                       " on dock ", request.dock, ": ", back.rows, " rows\n"));
  } else if (command == "release") {
    TDOCK_RETURN_IF_ERROR(client.ReleaseStep(request.dock, *request.step));
    Print(request, {{"dock", request.dock}, {"step", *request.step}, {"released", true}},
          absl::StrCat("released step ", *request.step, " of dock ", request.dock, "\n"));
  } else if (command == "set-version") {
    TDOCK_ASSIGN_OR_RETURN(const int64_t version, client.SetVersion(request.dock, request.version));
    Print(request, {{"dock", request.dock}, {"version", version}},
          absl::StrCat("dock ", request.dock, " is at version ", version, "\n"));
  } else if (command == "reserve") {
    TDOCK_ASSIGN_OR_RETURN(const ClientReservation granted,
                           client.Reserve({.dock = request.dock,
                                           .version = request.reserve_version,
                                           .rows = request.count,
                                           .group_sizes = request.group_sizes,
                                           .deadline = request.deadline,
                                           .wait = request.wait}));
    if (granted.timed_out) {
      Print(request, {{"dock", request.dock}, {"timed_out", true}},
            "not admitted within the wait (timed out): nothing reserved\n");
    } else {
      Print(request,
            {{"dock", request.dock},
             {"reservation", granted.id},
             {"step", granted.step},
             {"rows", granted.rows},
             {"version", granted.version},
             {"deadline_unix_ms", absl::ToUnixMillis(granted.deadline)},
             {"timed_out", false}},
            absl::StrCat("reservation ", granted.id, ": step ", granted.step, " rows ",
                         absl::StrJoin(granted.rows, ","), " (version ", granted.version,
                         "), until ", absl::FormatTime(granted.deadline), "\n"));
    }
  } else if (command == "read") {
    TDOCK_ASSIGN_OR_RETURN(
        const ClientBatch batch,
        request.keys.empty() ? client.Read(request.dock, *request.step, request.rows, request.names)
                             : client.ReadKeys(request.dock, request.keys, request.names));
    Print(request, BatchToJson(batch), BatchToText(batch));
  } else if (command == "rows") {
    TDOCK_ASSIGN_OR_RETURN(const RowListing listing, client.ListRows(request.dock, *request.step));
    Print(request, RowsToJson(listing), RowsToText(listing));
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
  } else if (command == "shards") {
    TDOCK_ASSIGN_OR_RETURN(std::vector<ShardInfo> shards, client.ListShards());
    Json list = Json::array();
    std::string text;
    for (const ShardInfo& shard : shards) {
      const char* state = shard.away ? "away" : "live";
      list.push_back({{"id", shard.id},
                      {"address", shard.address},
                      {"node", shard.node},
                      {"state", state},
                      {"memory_bytes", shard.memory_bytes},
                      {"memory_limit_bytes", shard.memory_limit_bytes},
                      {"incarnation", shard.incarnation}});
      absl::StrAppend(&text, shard.id, "\t", shard.address, "\t", shard.node, "\t", state,
                      "\t", shard.memory_bytes, "\t", shard.memory_limit_bytes, "\t",
                      shard.incarnation, "\n");
    }
    Print(request, {{"shards", std::move(list)}}, text);
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
              << status.message();
    // A refusal's reason, for scripts (the line's last words).
    if (const RefusalInfo refusal = RefusalOf(status); refusal.why != Refusal::kNone) {
      std::cerr << " (refused: " << RefusalName(refusal.why);
      if (refusal.drop != DropReason::kUnspecified) {
        std::cerr << ", drop reason " << DropReasonName(refusal.drop);
      }
      std::cerr << ")";
    }
    std::cerr << "\n";
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
