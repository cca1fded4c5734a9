// tdock-server: flags -> ServerOptions -> Server, until SIGTERM or SIGINT.
//
//   tdock-server --listen=0.0.0.0:50051 --config=docks.yaml
//
// Once listening it prints "tdock-server listening on HOST:PORT" to stdout
// (and the log), so scripts can wait for that line; with port 0 it shows the
// port picked. Exit codes: 0 after a graceful shutdown, 1 if the server could
// not start, 2 for bad flags or configuration.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/spec_yaml.h"
#include "common/status.h"
#include "server/metrics/server_metrics.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address to listen on, host:port; port 0 picks a free port.");
ABSL_FLAG(std::string, config, "",
          "YAML file of dock specs to create at start-up (one spec, or "
          "`docks:` and a list).");
ABSL_FLAG(int64_t, max_message_mb, 1024,
          "Largest message received or sent, in MiB (1..2047).");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "How long a shutdown lets in-flight calls finish.");
ABSL_FLAG(absl::Duration, handshake_timeout, absl::Seconds(10),
          "How long a new connection may take to finish its handshake (TLS, "
          "HTTP/2 preface and settings) before it is closed.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "host:port of the Prometheus endpoint (/metrics); port 0 picks a "
          "free port; empty disables it. Bind it where only your Prometheus "
          "reaches it.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file of the server's certificate chain; with --tls_key turns "
          "TLS on.");
ABSL_FLAG(std::string, tls_key, "", "PEM file of the server's private key.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file of the CA that must sign client certificates (mutual TLS; "
          "needs --tls_cert and --tls_key).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a bearer token every call must carry "
          "(authorization: Bearer <token>); the health service stays open.");
ABSL_FLAG(std::string, data_dir, "",
          "Directory of the RocksDB store that journals every dock (a shard: its "
          "cells); the server rebuilds them from it at start-up. Empty: in memory only.");
ABSL_FLAG(std::string, durability, "sync",
          "With --data_dir: sync (a change is acknowledged once it is in the "
          "synced WAL) or async (acknowledged at once, synced within "
          "--flush_interval_ms).");
ABSL_FLAG(int64_t, flush_interval_ms, 100,
          "With --durability=async: the longest time between WAL syncs.");
ABSL_FLAG(int64_t, value_log_segment_mb, 64,
          "With --data_dir: size of the value log's segment files (cells of 1 KiB and more), "
          "1..1024 MiB.");
ABSL_FLAG(int64_t, max_rows_per_request, 65536,
          "Rows of one Put or Read, or count of one Get, at most (0: no limit).");
ABSL_FLAG(int64_t, max_columns_per_dock, 256, "Columns of one dock at most (0: no limit).");
ABSL_FLAG(int64_t, max_docks, 64, "Docks this server holds at most (0: no limit).");
ABSL_FLAG(int64_t, max_spec_bytes, 1 << 20,
          "Bytes of a CreateDock or AddConsumer request at most (0: no limit).");
ABSL_FLAG(int64_t, max_wait_ms, 3'600'000,
          "wait_ms of a Put, Get or Sample at most (0: no limit).");
ABSL_FLAG(int64_t, max_parked_gets_per_consumer, 4096,
          "Gets of one consumer waiting at once at most (0: no limit).");
ABSL_FLAG(int64_t, max_parked_reserves_per_dock, 4096,
          "Reserves of one dock waiting for admission at once at most (0: no limit).");
ABSL_FLAG(std::string, role, "standalone",
          "standalone (the whole dock in this process), controller (the docks with where "
          "each cell is; its shards hold the cells) or shard (cells only; needs --controller "
          "and --shard_id). See docs/scale-out.md.");
ABSL_FLAG(std::string, controller, "", "--role=shard: host:port of the controller.");
ABSL_FLAG(uint64_t, shard_id, 0,
          "--role=shard: this shard's id, unique among the controller's shards; 0 (the "
          "default): one derived from --node, the same across restarts on that node.");
ABSL_FLAG(std::string, advertise, "",
          "--role=shard: host:port clients reach this shard at (default: the listen "
          "address with the port bound).");
ABSL_FLAG(std::string, node, "",
          "--role=shard: the node this shard runs on (default: the host name); clients on "
          "that node write to it.");
ABSL_FLAG(std::string, controller_ca, "",
          "--role=shard: PEM file of the CA that signed the controller's certificate: TLS to "
          "the controller (--tls_cert and --tls_key, when set, are the shard's client "
          "certificate). Empty: plaintext.");
ABSL_FLAG(std::string, controller_tls_name, "",
          "--role=shard: the name checked against the controller's certificate instead of "
          "the host of --controller.");
ABSL_FLAG(int64_t, shard_memory_limit_mb, 0,
          "--role=shard: MiB of cells the shard holds at most (0: no limit).");
ABSL_FLAG(std::string, shm_dir, "",
          "--role=shard: a tmpfs directory (e.g. /dev/shm) to keep the cells in, as shared "
          "memory that clients on this host write and read without a socket (their "
          "transport auto or shm). Empty: none; every byte goes over gRPC.");
ABSL_FLAG(int64_t, shard_read_grace_ms, 10'000,
          "--role=shard: how long a released step's cells stay readable, for consumers "
          "without leases that read a batch after its step was released (a Put that needs "
          "the memory frees them sooner).");
ABSL_FLAG(int64_t, shard_lost_after_ms, 60'000,
          "--role=controller: a shard not heard from for this long (shards register every "
          "second) is declared lost: rows with cells on it are dropped as lost.");
ABSL_FLAG(int64_t, shard_away_after_ms, 5'000,
          "--role=controller: a shard not heard from for this long is away: rows with cells "
          "on it are not handed out (they wait) until it is heard from again.");
ABSL_FLAG(std::string, log_level, "info",
          "Lowest level logged: debug, info, warning or error.");

namespace tdock {
namespace {

absl::StatusOr<LogLevel> ParseLogLevel(const std::string& text) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "debug") return LogLevel::DEBUG;
  if (name == "info") return LogLevel::INFO;
  if (name == "warning") return LogLevel::WARNING;
  if (name == "error") return LogLevel::ERROR;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level must be debug, info, warning or error, got \"", text, "\""));
}

// Reads the flags, once.
absl::StatusOr<ServerOptions> OptionsFromFlags() {
  ServerOptions options;
  const std::string role = absl::GetFlag(FLAGS_role);
  if (!ParseServerRole(role, &options.role)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--role must be standalone, controller or shard, got \"", role, "\""));
  }
  options.shard.controller = absl::GetFlag(FLAGS_controller);
  options.shard.id = absl::GetFlag(FLAGS_shard_id);
  options.shard.advertise = absl::GetFlag(FLAGS_advertise);
  options.shard.node = absl::GetFlag(FLAGS_node);
  options.shard.memory_limit_bytes = absl::GetFlag(FLAGS_shard_memory_limit_mb) << 20;
  options.shard.read_grace = absl::Milliseconds(absl::GetFlag(FLAGS_shard_read_grace_ms));
  options.shard.shm_dir = absl::GetFlag(FLAGS_shm_dir);
  options.controller.shard_lost_after =
      absl::Milliseconds(absl::GetFlag(FLAGS_shard_lost_after_ms));
  options.controller.shard_away_after =
      absl::Milliseconds(absl::GetFlag(FLAGS_shard_away_after_ms));
  options.shard.controller_ca = absl::GetFlag(FLAGS_controller_ca);
  options.shard.controller_tls_name = absl::GetFlag(FLAGS_controller_tls_name);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  options.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  options.handshake_timeout = absl::GetFlag(FLAGS_handshake_timeout);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.persistence.data_dir = absl::GetFlag(FLAGS_data_dir);
  const std::string durability = absl::GetFlag(FLAGS_durability);
  if (durability != "sync" && durability != "async") {
    return absl::InvalidArgumentError(
        absl::StrCat("--durability must be sync or async, got \"", durability, "\""));
  }
  options.persistence.durability =
      durability == "sync" ? persist::Durability::kSync : persist::Durability::kAsync;
  const int64_t flush_ms = absl::GetFlag(FLAGS_flush_interval_ms);
  if (flush_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--flush_interval_ms must be positive, got ", flush_ms));
  }
  options.persistence.flush_interval = absl::Milliseconds(flush_ms);
  const int64_t segment_mb = absl::GetFlag(FLAGS_value_log_segment_mb);
  if (segment_mb < 1 || segment_mb > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--value_log_segment_mb must be 1..1024, got ", segment_mb));
  }
  options.persistence.segment_bytes = segment_mb << 20;
  options.limits = {
      .max_rows_per_request = absl::GetFlag(FLAGS_max_rows_per_request),
      .max_columns_per_dock = absl::GetFlag(FLAGS_max_columns_per_dock),
      .max_docks = absl::GetFlag(FLAGS_max_docks),
      .max_spec_bytes = absl::GetFlag(FLAGS_max_spec_bytes),
      .max_wait_ms = absl::GetFlag(FLAGS_max_wait_ms),
      .max_parked_gets_per_consumer = absl::GetFlag(FLAGS_max_parked_gets_per_consumer),
      .max_parked_reserves_per_dock = absl::GetFlag(FLAGS_max_parked_reserves_per_dock)};
  options.security = {.tls_cert = absl::GetFlag(FLAGS_tls_cert),
                      .tls_key = absl::GetFlag(FLAGS_tls_key),
                      .tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca),
                      .auth_token_file = absl::GetFlag(FLAGS_auth_token_file)};
  const std::string config = absl::GetFlag(FLAGS_config);
  if (!config.empty()) {
    absl::StatusOr<std::vector<DockSpec>> docks = LoadSpecsYamlFile(config);
    if (!docks.ok()) {
      return absl::Status(
          docks.status().code(),
          absl::StrCat("--config ", config, ": ", docks.status().message()));
    }
    options.docks = *std::move(docks);
  }
  TDOCK_RETURN_IF_ERROR(options.Validate());
  return options;
}

// The address clients reach, with the port actually bound.
std::string BoundAddress(const std::string& listen, int port) {
  if (absl::StartsWith(listen, "unix:")) return listen;
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

sigset_t ShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

int Run() {
  absl::StatusOr<LogLevel> level =
      ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    TDOCK_LOG(ERROR) << level.status();
    return 2;
  }
  SetLogLevel(*level);
  absl::StatusOr<ServerOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    TDOCK_LOG(ERROR) << options.status();
    return 2;
  }
  const std::string listen = options->listen;
  const ServerRole role = options->role;
  const SecurityOptions security = options->security;
  Server server(*std::move(options));
  const absl::Status started = server.Start();
  if (!started.ok()) {
    TDOCK_LOG(ERROR) << "tdock-server cannot start: " << started;
    return 1;
  }
  const std::string address = BoundAddress(listen, server.port());
  // The metrics line first: scripts may stop reading at "listening on".
  if (const ServerMetrics* metrics = server.metrics();
      metrics != nullptr && !metrics->address().empty()) {
    TDOCK_LOG(INFO) << "tdock-server metrics on http://" << metrics->address()
                    << "/metrics";
  }
  TDOCK_LOG(INFO) << "tdock-server transport: "
                  << (security.tls_cert.empty()        ? "plaintext"
                      : security.tls_client_ca.empty() ? "TLS"
                                                       : "mutual TLS")
                  << (security.auth_token_file.empty() ? ", no token"
                                                       : ", bearer token required");
  TDOCK_LOG(INFO) << "tdock-server role: " << ServerRoleName(role);
  TDOCK_LOG(INFO) << "tdock-server listening on " << address;
  std::printf("tdock-server listening on %s\n", address.c_str());
  std::fflush(stdout);

  // Signals are blocked in every thread (see main); this one takes them
  // synchronously, so no work happens in an async signal handler.
  std::thread signal_waiter([&server] {
    const sigset_t signals = ShutdownSignals();
    int signal = 0;
    sigwait(&signals, &signal);
    TDOCK_LOG(INFO) << "tdock-server got signal " << signal
                    << ", shutting down";
    server.Shutdown();
  });
  server.Wait();
  signal_waiter.join();
  TDOCK_LOG(INFO) << "tdock-server stopped";
  return 0;
}

}  // namespace
}  // namespace tdock

int main(int argc, char** argv) {
  tdock::TuneMallocForLargeMessages();
  // Every value-log segment and RocksDB file holds a descriptor, and every
  // client a socket: take the hard limit (up to 2^20), not the usual soft
  // 1024.
  if (struct rlimit files; getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t want = std::min<rlim_t>(files.rlim_max, rlim_t{1} << 20);
    if (files.rlim_cur < want) {
      files.rlim_cur = want;
      if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
        TDOCK_LOG(WARNING) << "cannot raise the open-file limit to " << want << ": "
                           << std::strerror(errno);
      }
    }
  }
  // Block the shutdown signals before any thread starts, so every thread
  // (gRPC's included) inherits the mask and only sigwait receives them.
  const sigset_t signals = tdock::ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::SetProgramUsageMessage(
      "tdock-server: the transfer dock gRPC server.\n"
      "  tdock-server --listen=HOST:PORT [--config=docks.yaml] "
      "[--metrics_listen=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  return tdock::Run();
}
