// tdock server: the gRPC server wiring the dock registry, the Dock service,
// the standard health service and the Prometheus metrics.
//
// Thread safety: Start, Wait and Shutdown may be called from different
// threads; Shutdown is idempotent.
#ifndef TDOCK_SERVER_SERVER_H_
#define TDOCK_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/spec.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "server/service/security.h"
#include "server/shard/shard_table.h"
#include "server/shard/shard_watch.h"

namespace tdock {
namespace shard {
class ShardStore;
}  // namespace shard

class ServerMetrics;

// What a server is (tdock-server --role): the whole dock in one process
// (standalone, the default), or one part of a sharded deployment (docs/
// scale-out.md): the controller, which holds the docks with where each cell
// is and carries no payload, or a shard, which holds cells only.
enum class ServerRole { kStandalone, kController, kShard };

// A shard id from its node's name (FNV-1a, 53 bits, never 0).
uint64_t ShardIdOfNode(std::string_view node);

// "standalone", "controller", "shard"; false for any other name.
bool ParseServerRole(const std::string& name, ServerRole* role);
const char* ServerRoleName(ServerRole role);

struct ServerOptions {
  ServerRole role = ServerRole::kStandalone;
  // role kShard: where its controller is, and who this shard is.
  struct Shard {
    std::string controller;  // host:port of the controller (required)
    // Unique among the controller's shards. 0: ShardIdOfNode(node), which
    // stays the same across restarts on that node (a DaemonSet's pods).
    uint64_t id = 0;
    // host:port clients reach this shard at. Empty: the listen address, with
    // the port bound.
    std::string advertise;
    std::string node;  // the node it runs on; empty: this host's name
    int64_t memory_limit_bytes = 0;  // the shard's cells at most (0: none)
    int64_t chunk_bytes = int64_t{4} << 20;
    // How often the shard asks the controller which steps were released,
    // to free their cells (and registers again).
    absl::Duration release_sync = absl::Seconds(1);
    // How long a released step's cells stay readable at the shard: a
    // consumer without a lease reads its batch's cells after the controller
    // released their step (its last rows handed out). Memory a Put needs
    // ends it early.
    absl::Duration read_grace = absl::Seconds(10);
    // A tmpfs directory for the cells as shared memory, which same-host
    // clients write and read directly (ShmChunks). Empty: none.
    std::string shm_dir;
    // PEM file of the CA that signed the controller's certificate: TLS to
    // the controller (the shard's own tls_cert and tls_key, when set, are
    // its client certificate). Empty: plaintext.
    std::string controller_ca;
    // The name checked against the controller's certificate instead of the
    // address's host. Empty: the host.
    std::string controller_tls_name;
  } shard;
  // role kController: watching its shards.
  struct Controller {
    // A shard not heard from for this long (it registers every
    // release_sync) is declared lost: rows with cells on it are dropped as
    // "lost" and its id is free again.
    absl::Duration shard_lost_after = absl::Seconds(60);
    // A shard not heard from for this long is away: rows with cells on it
    // are not handed out (they wait) until it is heard from again.
    absl::Duration shard_away_after = absl::Seconds(5);
    // How often the controller looks for away and lost shards.
    absl::Duration shard_check = absl::Seconds(1);
  } controller;
  // Address to listen on, host:port. Port 0 picks a free port (see port()).
  // Default: 127.0.0.1:50051.
  std::string listen = "127.0.0.1:50051";
  // Docks created at start-up (from --config). Default: none.
  std::vector<DockSpec> docks;
  // Largest message received or sent, in MiB. Default: 1024.
  int64_t max_message_mb = 1024;
  // How long Shutdown lets in-flight calls finish. Default: 10 s.
  absl::Duration shutdown_grace = absl::Seconds(10);
  // How long a new connection may take to finish its handshake (TLS, then
  // the HTTP/2 preface and settings) before the server closes it, so
  // half-open connections do not pile up. Default: 10 s.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // host:port of the Prometheus endpoint (/metrics); port 0 picks a free
  // port; empty: no endpoint (metrics are still kept; see Server::metrics).
  // Default: empty (tdock-server's --metrics_listen defaults to
  // 127.0.0.1:9464).
  std::string metrics_listen;
  // TLS, mutual TLS and the bearer token. Default: plaintext, no token.
  SecurityOptions security;
  // Persistence: with a data_dir, every dock is journaled to RocksDB there
  // and rebuilt from it at start-up. Default: none (in memory only).
  persist::PersistenceOptions persistence;
  // Limits on hostile or mistaken input; each is a flag of tdock-server with
  // the same name, and 0 turns it off.
  struct Limits {
    int64_t max_rows_per_request = 65536;
    int64_t max_columns_per_dock = 256;
    int64_t max_docks = 64;
    int64_t max_spec_bytes = int64_t{1} << 20;
    int64_t max_wait_ms = 3'600'000;
    int64_t max_parked_gets_per_consumer = 4096;
    int64_t max_parked_reserves_per_dock = 4096;
  } limits;

  absl::Status Validate() const;
};

class Server final {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // shuts down if running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Creates the configured docks and starts listening.
  absl::Status Start();
  // The bound port (after Start).
  int port() const;
  DockRegistry& registry();
  // The server's metrics (after Start; null before).
  const ServerMetrics* metrics() const;
  // The journal and store (after Start; null without a data_dir).
  persist::Persistence* persistence();
  // role kController (after Start; null otherwise): its shards.
  const shard::ShardTable* shard_table() const;
  // role kShard (after Start; null otherwise): its cells.
  const shard::ShardStore* shard_store() const;
  // role kController: what it does every controller.shard_check, as of
  // `now` (ShardWatch::Watch): the shards not heard from for
  // controller.shard_lost_after are declared lost (returned), and rows on
  // those not heard from for shard_away_after are held.
  std::vector<shard::ShardEntry> WatchShards(absl::Time now);
  // Stops accepting calls, completes parked ones, lets in-flight calls finish
  // (up to shutdown_grace), and returns.
  void Shutdown();
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVER_H_
