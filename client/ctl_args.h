// Command-line parsing for tdockctl:
//
//   tdockctl [--server HOST:PORT] [--json] [--timeout_ms MS] COMMAND ARGS...
//
// Flags take `--flag value` or `--flag=value` and may appear anywhere, before
// or after the command; `--` ends flags. Each command declares its
// positional arguments and the flags it accepts, and ParseCtlArgs checks the
// command line against that table, so a command sees only valid input.
#ifndef TDOCK_CLIENT_CTL_ARGS_H_
#define TDOCK_CLIENT_CTL_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec.h"

namespace tdock::ctl {

struct CtlArgs {
  std::string command;
  std::vector<std::string> positionals;  // after the command
  std::map<std::string, std::vector<std::string>> flags;
  bool help = false;  // --help or -h: print the usage and succeed

  bool Has(const std::string& flag) const { return flags.count(flag) > 0; }
  // The flag's (last) value, or `fallback`.
  std::string Get(const std::string& flag, const std::string& fallback) const;
  // All values of a repeatable flag.
  std::vector<std::string> GetAll(const std::string& flag) const;
  // The flag as an integer (INVALID_ARGUMENT naming the flag when it is not
  // one), or nullopt when absent.
  absl::StatusOr<std::optional<int64_t>> GetInt(const std::string& flag) const;
  // --json given (and not --json=false).
  bool json() const;
};

// INVALID_ARGUMENT (a usage error) for an unknown command or flag, a flag the
// command does not take, a missing or repeated flag, or the wrong number of
// positional arguments; the message says which.
absl::StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& argv);

// The usage text printed for --help and on usage errors.
const char* UsageText();

// add-column's column: its name (the second positional) and --dtype,
// --max_len, --inner_shape, --rewritable; INVALID_ARGUMENT naming a bad flag.
absl::StatusOr<ColumnSpec> ColumnFromArgs(const CtlArgs& args);

// Parses "0,1,2" or ranges "0-3,8" into row indices.
absl::StatusOr<std::vector<int64_t>> ParseRows(const std::string& text);

}  // namespace tdock::ctl

#endif  // TDOCK_CLIENT_CTL_ARGS_H_
