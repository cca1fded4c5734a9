#include "client/ctl_args.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

// One command: its positional arguments and the flags it takes.
struct CommandInfo {
  const char* name;
  std::vector<std::string> positionals;
  std::vector<std::string> required_flags;
  std::vector<std::string> optional_flags;
  std::vector<std::string> repeatable_flags;
};

const std::vector<CommandInfo>& Commands() {
  static const auto* commands = new std::vector<CommandInfo>{
      {"create", {}, {"spec"}, {}, {}},
      {"list", {}, {}, {}, {}},
      {"status", {"DOCK"}, {}, {}, {}},
      {"put", {"DOCK"}, {"step", "rows", "column"}, {"wait_ms", "keys", "reservation"},
       {"column"}},
      {"reserve", {"DOCK"}, {}, {"version", "count", "group_sizes", "deadline_ms", "wait_ms"},
       {}},
      {"read", {"DOCK"}, {}, {"step", "rows", "keys", "columns"}, {}},
      {"rows", {"DOCK", "STEP"}, {}, {}, {}},
      {"get", {"DOCK", "CONSUMER"}, {},
       {"rank", "step", "count", "wait_ms", "round", "replica", "partial"},
       {}},
      {"ack", {"DOCK", "CONSUMER", "LEASE"}, {}, {}, {}},
      {"nack", {"DOCK", "CONSUMER", "LEASE"}, {}, {}, {}},
      {"leases", {"DOCK", "CONSUMER"}, {}, {}, {}},
      {"nack-all", {"DOCK", "CONSUMER"}, {}, {"rank"}, {}},
      {"release", {"DOCK", "STEP"}, {}, {}, {}},
      {"set-version", {"DOCK", "VERSION"}, {}, {}, {}},
      {"remove-consumer", {"DOCK", "CONSUMER"}, {}, {}, {}},
      {"add-column", {"DOCK", "COLUMN"}, {"dtype"}, {"max_len", "inner_shape", "rewritable"}, {}},
      {"drop", {"DOCK", "STEP"}, {"reason"}, {"rows", "groups"}, {}},
      {"seal", {"DOCK", "STEP"}, {}, {"required"}, {}},
      {"checkpoint", {"DIR"}, {}, {}, {}},
      {"health", {}, {}, {}, {}},
      {"shards", {}, {}, {}, {}},
      {"delete", {"DOCK"}, {}, {}, {}},
      {"balance", {}, {}, {}, {}},
  };
  return *commands;
}

const std::set<std::string>& GlobalFlags() {
  static const auto* flags =
      new std::set<std::string>{"server",  "json",    "timeout_ms",      "tls_ca",
                                "tls_cert", "tls_key", "tls_server_name", "token_file"};
  return *flags;
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// Splits argv into flags and positionals. --json and --partial alone need no
// value.
absl::Status SplitArgs(const std::vector<std::string>& argv, CtlArgs* args,
                       std::vector<std::string>* positionals) {
  bool flags_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool negative_number = arg.size() > 1 && arg[0] == '-' &&
                                 arg[1] >= '0' && arg[1] <= '9';
    if (flags_done || arg.size() < 2 || arg[0] != '-' || negative_number) {
      positionals->push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      args->help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", arg, "'"));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? eq : eq - 2);
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (name == "json" || name == "partial") {
      value = "true";
    } else if (i + 1 < argv.size()) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
    }
    args->flags[name].push_back(value);
  }
  return absl::OkStatus();
}

absl::Status CheckFlags(const CommandInfo& command, const CtlArgs& args) {
  for (const auto& [name, values] : args.flags) {
    const bool global = GlobalFlags().count(name) > 0;
    if (!global && !Contains(command.required_flags, name) &&
        !Contains(command.optional_flags, name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "command '", command.name, "' does not take flag --", name));
    }
    if (values.size() > 1 && !Contains(command.repeatable_flags, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " given more than once"));
    }
  }
  for (const std::string& name : command.required_flags) {
    if (!args.Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "command '", command.name, "' needs flag --", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string CtlArgs::Get(const std::string& flag,
                         const std::string& fallback) const {
  auto it = flags.find(flag);
  return it == flags.end() ? fallback : it->second.back();
}

std::vector<std::string> CtlArgs::GetAll(const std::string& flag) const {
  auto it = flags.find(flag);
  return it == flags.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::optional<int64_t>> CtlArgs::GetInt(
    const std::string& flag) const {
  if (!Has(flag)) return std::optional<int64_t>();
  int64_t value = 0;
  const std::string text = Get(flag, "");
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", flag, " needs an integer, got '", text, "'"));
  }
  return std::optional<int64_t>(value);
}

bool CtlArgs::json() const {
  const std::string value = Get("json", "false");
  return value != "false" && value != "0";
}

absl::StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& argv) {
  CtlArgs args;
  std::vector<std::string> positionals;
  if (absl::Status split = SplitArgs(argv, &args, &positionals); !split.ok()) {
    return split;
  }
  if (positionals.empty()) {
    if (args.help) return args;
    return absl::InvalidArgumentError("no command given");
  }
  args.command = positionals.front();
  args.positionals.assign(positionals.begin() + 1, positionals.end());
  const auto& commands = Commands();
  auto it = std::find_if(commands.begin(), commands.end(),
                         [&](const CommandInfo& c) { return args.command == c.name; });
  if (it == commands.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown command '", args.command, "'"));
  }
  if (args.help) return args;
  if (args.positionals.size() != it->positionals.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "command '", args.command, "' takes ", it->positionals.size(),
        " argument(s) (", absl::StrJoin(it->positionals, " "), "), got ",
        args.positionals.size()));
  }
  if (absl::Status flags = CheckFlags(*it, args); !flags.ok()) return flags;
  return args;
}

absl::StatusOr<std::vector<int64_t>> ParseRows(const std::string& text) {
  std::vector<int64_t> rows;
  const std::vector<std::string> items = absl::StrSplit(text, ',');
  for (const std::string& item : items) {
    // "7" or "0-7": front and back are the same for a single index.
    const std::vector<std::string> bounds = absl::StrSplit(item, '-');
    int64_t first = -1;
    int64_t last = -1;
    const bool ok = bounds.size() <= 2 &&
                    absl::SimpleAtoi(bounds.front(), &first) &&
                    absl::SimpleAtoi(bounds.back(), &last) && first >= 0 &&
                    first <= last && last - first < (int64_t{1} << 24);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rows: '", item, "' is not a row index or a range like 0-7"));
    }
    for (int64_t row = first; row <= last; ++row) rows.push_back(row);
  }
  return rows;
}

const char* UsageText() {
  return R"(usage: tdockctl [--server HOST:PORT] [--json] [--timeout_ms MS] [TLS and token flags] COMMAND ...

commands:
  create --spec FILE.yaml     create every dock in a YAML spec file
  list                        list docks
  status DOCK                 spec, steps, readiness and consumption of a dock
  put DOCK --step S --rows 0,1,2 --column NAME=FILE.json [--column ...] [--wait_ms MS]
      [--keys K,K] [--reservation ID]
                              write cells; each FILE.json is a JSON list with one
                              array of numbers per row (a string for bytes columns);
                              --reservation: rows of that reservation
  reserve DOCK (--count N | --group_sizes 2,1) [--version V] [--deadline_ms MS]
      [--wait_ms MS]          reserve rows before generating data of policy
                              version V (default: the dock's when granted): granted
                              once a step can train them within the consumers'
                              max_staleness (waits up to --wait_ms);
                              rows not written within --deadline_ms (default
                              600000) are dropped as expired
  read DOCK (--step S --rows 0,1 | --keys K,K) [--columns C,C]
                              print written cells without claiming them: rows of a
                              step, or the rows that have the keys
  rows DOCK STEP              list a live step's rows: key, group, columns written,
                              consumers that took it, drop reason
  get DOCK CONSUMER [--rank R] [--step S] [--count N] [--wait_ms MS] [--round K]
      [--replica Q] [--partial]
                              claim and print a batch for a consumer; --round K
                              asks a BALANCED consumer for round K again;
                              --replica Q: which replica of the rank asks;
                              --partial: through a controller, the batch without
                              the rows whose cells cannot be read (named as
                              missing rows) instead of an error
  ack DOCK CONSUMER LEASE     acknowledge a lease (consumers with lease_ms): its
                              rows are done for the consumer
  nack DOCK CONSUMER LEASE    hand a lease's rows back, to be handed out again
  leases DOCK CONSUMER        list the consumer's leases in flight, oldest first:
                              id, step, rank, round, rows, time left
  nack-all DOCK CONSUMER [--rank R]
                              hand back every lease of the consumer in flight (of
                              rank R only with --rank), each as nack does: for a
                              job resuming after its workers died
  release DOCK STEP           release a step's partition
  set-version DOCK VERSION    set the dock's policy version (it only advances; no
                              row may be put with a newer one)
  add-column DOCK COLUMN --dtype T [--max_len N] [--inner_shape 2,3] [--rewritable true]
                              add a column to a live dock (T: a dtype, string or
                              json); no cell of it is written yet
  remove-consumer DOCK CONSUMER
                              remove a consumer: its Gets and Acks fail from then
                              on and it holds no step
  drop DOCK STEP --reason R [--rows 0,3] [--groups 1-2]
                              take rows (every row of the groups) out of a live
                              step: never handed out again, done for every
                              consumer; R: filtered, failed, stale, sealed,
                              expired, surplus or other
  seal DOCK STEP [--required COL,COL]
                              close a live step to new rows: rows lacking a cell
                              of a required column (none given: rows with no
                              cell) are dropped as sealed
  checkpoint DIR              copy the server's store (--data_dir) to DIR on the
                              server's machine, atomically
  health                      check that the server is serving
  shards                      list a controller's shards: id, address, node
  delete DOCK                 delete a dock
  balance                     plan without a server: one JSON request per line on
                              stdin (op partition, micro_batches or dispatch), one
                              JSON answer per line on stdout, {"error": ...} for a
                              bad line; exit status 1 if any line failed

flags (as --flag value or --flag=value, anywhere on the line):
  --server HOST:PORT   server address (default: $TDOCK_SERVER or 127.0.0.1:50051)
  --json               print one JSON object instead of text
  --timeout_ms MS      deadline of each call, added to any wait (default: 30000)
  --rows, --groups     row (group) indices: comma-separated, ranges allowed (0-7,12)
  --wait_ms MS         how long the server may wait for rows or space (default: 0)
  --tls_ca FILE        TLS: PEM of the CA that signed the server's certificate
  --tls_cert FILE, --tls_key FILE
                       TLS with a client certificate (mutual TLS)
  --tls_server_name N  name to check in the server's certificate (default: host)
  --token_file FILE    bearer token for a server started with --auth_token_file
                       (default: $TDOCK_TOKEN)

exit status: 0 on success, 1 when a call or input file fails, 2 on usage errors.
)";
}

absl::StatusOr<ColumnSpec> ColumnFromArgs(const CtlArgs& args) {
  ColumnSpec column;
  column.name = args.positionals[1];
  const std::string type = args.Get("dtype", "");
  if (!ParseColumnType(type, &column)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype '", type, "' is not a dtype (int32, float32, bfloat16, ...), string or json"));
  }
  TDOCK_ASSIGN_OR_RETURN(std::optional<int64_t> max_len, args.GetInt("max_len"));
  column.max_len = max_len.value_or(0);  // the server names a bad one
  for (absl::string_view dim : absl::StrSplit(args.Get("inner_shape", ""), ',', absl::SkipEmpty())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(dim, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--inner_shape must be integers separated by commas, got '", dim, "'"));
    }
    column.inner_shape.push_back(d);
  }
  const std::string rewritable = args.Get("rewritable", "false");
  if (rewritable != "true" && rewritable != "false") {
    return absl::InvalidArgumentError(
        absl::StrCat("--rewritable must be true or false, got '", rewritable, "'"));
  }
  column.rewritable = rewritable == "true";
  return column;
}

}  // namespace tdock::ctl
