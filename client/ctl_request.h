// tdockctl's command line, checked and converted into what a command runs
// on (usage errors only: nothing here calls the server).
#ifndef TDOCK_CLIENT_CTL_REQUEST_H_
#define TDOCK_CLIENT_CTL_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/ctl_args.h"
#include "common/drop.h"
#include "common/spec.h"

namespace tdock::ctl {

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
  bool rank_given = false;  // --rank was given
  int64_t count = 0;
  absl::Duration wait = absl::ZeroDuration();
  std::optional<int64_t> round;
  int32_t replica = 0;
  bool partial = false;  // get
  uint64_t lease = 0;
  int64_t version = 0;  // set-version, reserve
  std::vector<int32_t> group_sizes;  // reserve
  std::optional<int64_t> reserve_version;  // reserve (unset: the dock's when granted)
  absl::Duration deadline = absl::Minutes(10);  // reserve
  uint64_t reservation = 0;  // put
  std::vector<int64_t> groups;      // drop
  DropReason reason = DropReason::kUnspecified;  // drop
  std::vector<std::string> required;  // seal
  ColumnSpec column;                  // add-column
  std::vector<std::string> keys;      // put, read
  std::vector<std::string> names;     // read: columns
};

// Everything a command needs, checked before any call.
absl::StatusOr<Request> MakeRequest(const CtlArgs& args);

}  // namespace tdock::ctl

#endif  // TDOCK_CLIENT_CTL_REQUEST_H_
