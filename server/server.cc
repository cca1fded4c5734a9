#include "server/server.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <set>
#include <vector>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics/server_metrics.h"
#include "server/service/callback_queue_keeper.h"
#include "server/service/dock_service.h"
#include "server/service/shard_service.h"
#include "server/service/step_feed.h"
#include "server/persist/store_shard_journal.h"
#include "server/shard/shard_store.h"
#include "server/shard/shard_table.h"
#include "client/channel.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {
namespace {

// gRPC takes message limits as int: 2047 MiB is the largest that fits.
constexpr int64_t kMaxMessageMb = 2047;
constexpr char kServiceName[] = "tdock.v1.Dock";
constexpr char kShardServiceName[] = "tdock.v1.Shard";

absl::Status ValidateListen(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:")) return absl::OkStatus();
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen address \"", listen,
        "\" must be host:port with a port in 0..65535 (or unix:path)"));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t ShardIdOfNode(std::string_view node) {
  // FNV-1a: the same id for the same node name, in every build and run.
  uint64_t hash = 14695981039346656037ull;
  for (const char c : node) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  hash &= (uint64_t{1} << 53) - 1;  // exact as a double, in JSON too
  return hash != 0 ? hash : 1;
}

bool ParseServerRole(const std::string& name, ServerRole* role) {
  for (ServerRole each : {ServerRole::kStandalone, ServerRole::kController, ServerRole::kShard}) {
    if (name == ServerRoleName(each)) {
      *role = each;
      return true;
    }
  }
  return false;
}

const char* ServerRoleName(ServerRole role) {
  switch (role) {
    case ServerRole::kStandalone:
      return "standalone";
    case ServerRole::kController:
      return "controller";
    case ServerRole::kShard:
      return "shard";
  }
  return "standalone";
}

absl::Status ServerOptions::Validate() const {
  TDOCK_RETURN_IF_ERROR(ValidateListen(listen));
  if (role != ServerRole::kShard &&
      (!shard.controller.empty() || shard.id != 0 || !shard.advertise.empty() ||
       !shard.node.empty() || shard.memory_limit_bytes != 0 || !shard.controller_ca.empty() ||
       !shard.shm_dir.empty() ||
       !shard.controller_tls_name.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--controller, --shard_id, --advertise, --node, --shard_memory_limit_mb, --shm_dir, "
        "--controller_ca and --controller_tls_name are for --role=shard; this server's role "
        "is ", ServerRoleName(role)));
  }
  if (controller.shard_lost_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_lost_after_ms must be positive, got ",
        absl::ToInt64Milliseconds(controller.shard_lost_after)));
  }
  if (controller.shard_away_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_away_after_ms must be positive, got ",
        absl::ToInt64Milliseconds(controller.shard_away_after)));
  }
  if (controller.shard_away_after >= controller.shard_lost_after) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_away_after_ms (", absl::ToInt64Milliseconds(controller.shard_away_after),
        ") must be less than --shard_lost_after_ms (",
        absl::ToInt64Milliseconds(controller.shard_lost_after), ")"));
  }
  if (controller.shard_check <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the controller's shard check interval must be positive, got ",
        absl::FormatDuration(controller.shard_check)));
  }
  if (role == ServerRole::kShard) {
    if (shard.controller.empty()) {
      return absl::InvalidArgumentError("--role=shard needs --controller (its host:port)");
    }
    if (!docks.empty()) {
      return absl::InvalidArgumentError(
          "--config creates docks, which a shard does not hold: give it to the controller");
    }
    if (!persistence.data_dir.empty() &&
        persistence.durability != persist::Durability::kSync) {
      return absl::InvalidArgumentError(
          "--durability=async with --role=shard: a shard records a Put's cells before their "
          "locations go to the controller, which async durability would not wait for "
          "(use --durability=sync)");
    }
    if (shard.memory_limit_bytes < 0 || shard.chunk_bytes <= 0 ||
        shard.release_sync <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a shard's memory limit must be >= 0 (got ", shard.memory_limit_bytes,
          "), its chunk size and release interval positive"));
    }
    if (shard.read_grace < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shard_read_grace_ms must be >= 0, got ", absl::ToInt64Milliseconds(shard.read_grace)));
    }
  }
  if (!metrics_listen.empty() && (absl::StartsWith(metrics_listen, "unix:") ||
                                  !ValidateListen(metrics_listen).ok())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", metrics_listen,
        "\" must be host:port with a port in 0..65535 (or empty: none)"));
  }
  if (max_message_mb < 1 || max_message_mb > kMaxMessageMb) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_mb must be in 1..", kMaxMessageMb, ", got ",
                     max_message_mb));
  }
  if (shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shutdown_grace must be >= 0, got ",
                     absl::FormatDuration(shutdown_grace)));
  }
  if (handshake_timeout <= absl::ZeroDuration() || handshake_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake_timeout must be in (0, 24h], got ",
                     absl::FormatDuration(handshake_timeout)));
  }
  TDOCK_RETURN_IF_ERROR(security.Validate());
  for (const auto& [flag, value] :
       {std::pair{"max_rows_per_request", limits.max_rows_per_request},
        {"max_columns_per_dock", limits.max_columns_per_dock},
        {"max_docks", limits.max_docks},
        {"max_spec_bytes", limits.max_spec_bytes},
        {"max_wait_ms", limits.max_wait_ms},
        {"max_parked_gets_per_consumer", limits.max_parked_gets_per_consumer},
        {"max_parked_reserves_per_dock", limits.max_parked_reserves_per_dock}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be >= 0 (0: no limit), got ", value));
    }
  }
  if (limits.max_docks > 0 && static_cast<int64_t>(docks.size()) > limits.max_docks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the configuration holds ", docks.size(), " docks, over --max_docks ",
        limits.max_docks));
  }
  std::set<std::string> names;
  for (const DockSpec& spec : docks) {
    TDOCK_RETURN_IF_ERROR(NormalizeSpec(spec).status());
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("dock '", spec.name, "' is configured twice"));
    }
  }
  return absl::OkStatus();
}

// Lifecycle: kIdle -Start-> kRunning -Shutdown-> kStopping -> kStopped.
// Shutdown from kIdle goes straight to kStopped.
//
// Thread safety: mu_ serializes Start against Shutdown; the slow part of
// Shutdown (draining calls) runs without mu_ so Wait and port() stay
// responsive, and concurrent Shutdown calls wait for the first to finish.
// Ownership: owns the registry, the service and the grpc::Server; members are
// declared so that the grpc::Server is destroyed before the service it calls.
class Server::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        step_feed_(options_.role == ServerRole::kController
                       ? std::make_unique<StepFeed>(&registry_)
                       : nullptr),
        registry_(RegistryLimits{
            .max_docks = options_.limits.max_docks,
            .max_columns_per_dock = options_.limits.max_columns_per_dock,
            .dock = {.max_batch_bytes = options_.max_message_mb << 20,
                     .max_parked_gets_per_consumer =
                         options_.limits.max_parked_gets_per_consumer,
                     .max_parked_reserves = options_.limits.max_parked_reserves_per_dock,
                     .cells = options_.role == ServerRole::kController ? CellForm::kLocations
                                                                       : CellForm::kBytes,
                     .steps_changed = StepsChanged(step_feed_.get())}}) {}

  absl::Status Start();
  int port() const;
  DockRegistry& registry() { return registry_; }
  const shard::ShardTable* shard_table() const { return shards_.get(); }
  const shard::ShardStore* shard_store() const { return shard_store_.get(); }
  std::vector<shard::ShardEntry> WatchShards(absl::Time now) {
    if (shard_watch_ == nullptr) return {};  // not started, or not a controller
    return shard_watch_->Watch(now);
  }
  const ServerMetrics* metrics() const;
  persist::Persistence* persistence() { return persistence_.get(); }
  void Shutdown();
  void Wait();

 private:
  enum class State { kIdle, kRunning, kStopping, kStopped };

  // With a data_dir: opens the store and rebuilds its docks.
  absl::Status RecoverPersisted();
  absl::Status CreateConfiguredDocks();
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds and starts the grpc::Server; nullptr if it cannot listen.
  std::unique_ptr<grpc::Server> BuildServer(
      std::shared_ptr<grpc::ServerCredentials> credentials, int* selected_port);
  // role kShard: the store, the service and the channel to the controller.
  absl::Status StartShard();
  // role kShard with a data dir: opens it and recovers the store's cells.
  absl::Status OpenShardDataDir();
  // role kShard, once listening: registers with the controller and starts
  // freeing released steps' cells.
  absl::Status JoinController(int port);
  // role kShard: announces the shard to its controller (registration_),
  // waiting up to `wait` for it.
  absl::Status Register(absl::Duration wait);
  // Register; refused because its incarnation was declared lost, the store
  // drops its cells and registers as a new incarnation.
  absl::Status RegisterOrStartAnew(absl::Duration wait);
  // Waits up to `wait` for Shutdown; true once it began.
  bool Stopping(absl::Duration wait) {
    absl::MutexLock lock(&sync_mu_);
    return sync_mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
  }

  // A dock's released step, told to `feed` (none: nothing to tell).
  static std::function<void(const std::string&)> StepsChanged(StepFeed* feed) {
    if (feed == nullptr) return nullptr;
    return [feed](const std::string& dock) { feed->Changed(dock); };
  }

  // Constant after construction.
  const ServerOptions options_;
  // role kController: the docks' step windows, fed to the shards. Declared
  // before the registry, whose docks tell it of their releases.
  const std::unique_ptr<StepFeed> step_feed_;
  // Declared before the registry: the docks' journal outlives them.
  std::unique_ptr<persist::Persistence> persistence_;
  DockRegistry registry_;

  // Set once in Start, before the grpc::Server that uses them is built;
  // declared so that they outlive it.
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<BearerToken> token_;
  std::unique_ptr<DockService> service_;
  std::unique_ptr<shard::ShardTable> shards_;      // role kController
  std::unique_ptr<shard::ShardWatch> shard_watch_;  // role kController, over shards_
  std::unique_ptr<shard::ShardReconciler> reconciler_;  // role kController
  // role kShard with a data dir: its store, the journal over it, and the
  // shard's records through that; declared before the store that uses them.
  std::unique_ptr<persist::Store> shard_disk_;
  std::unique_ptr<persist::Journal> shard_disk_journal_;
  std::unique_ptr<persist::StoreShardJournal> shard_journal_;
  std::unique_ptr<shard::ShardStore> shard_store_;  // role kShard
  std::unique_ptr<ShardService> shard_service_;     // role kShard
  // role kShard: frees released steps' cells every release_sync until
  // stopping_ is set.
  std::thread release_sync_;
  std::thread heartbeat_;  // role kShard: registers every release_sync
  // role kShard: watches the controller's step feed (ShardService::
  // WatchSteps), again release_sync after it ends, until stopping_ is set.
  std::thread step_watch_;
  // role kController: watches the shards every controller.shard_check
  // until stopping_ is set.
  std::thread watch_thread_;
  v1::ShardInfo registration_;  // what the shard registers as; set before the thread
  std::string host_name_;       // role kShard
  absl::Mutex sync_mu_;
  bool stopping_ ABSL_GUARDED_BY(sync_mu_) = false;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  // Set in Start; used without mu_ in Shutdown once state_ is kStopping,
  // which only the one thread that moved it there does.
  std::unique_ptr<grpc::Server> server_;
  // While the server runs: a callback call arriving after an idle second is
  // read at once (callback_queue_keeper.h).
  std::unique_ptr<internal::CallbackQueueKeeper> keeper_;
};

absl::Status Server::Impl::Start() {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kIdle) {
    return absl::FailedPreconditionError(
        "the server was already started or shut down");
  }
  return StartLocked();
}

absl::Status Server::Impl::RecoverPersisted() {
  // A shard's data dir holds cells, opened in StartShard.
  if (options_.persistence.data_dir.empty() || options_.role == ServerRole::kShard) {
    return absl::OkStatus();
  }
  TDOCK_ASSIGN_OR_RETURN(persistence_, persist::Persistence::Open(options_.persistence));
  TDOCK_ASSIGN_OR_RETURN(const persist::RecoveryStats stats, persistence_->Recover(registry_));
  TDOCK_LOG(INFO) << "tdock-server recovered " << stats.docks << " docks, " << stats.steps
                  << " live steps, " << stats.cells << " cells (" << stats.bytes
                  << " bytes), " << stats.handouts << " hand-outs and " << stats.leases
                  << " leases in flight from " << options_.persistence.data_dir << " in "
                  << absl::FormatDuration(stats.took) << " ("
                  << (options_.persistence.durability == persist::Durability::kSync
                          ? "sync"
                          : "async")
                  << " durability)";
  return absl::OkStatus();
}

absl::Status Server::Impl::CreateConfiguredDocks() {
  for (const DockSpec& spec : options_.docks) {
    absl::Status created = registry_.Create(spec).status();
    if (!created.ok()) {
      return absl::Status(
          created.code(),
          absl::StrCat("creating dock '", spec.name,
                       "' from the configuration: ", created.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Server::Impl::StartLocked() {
  TDOCK_RETURN_IF_ERROR(options_.Validate());
  TDOCK_RETURN_IF_ERROR(RecoverPersisted());
  TDOCK_RETURN_IF_ERROR(CreateConfiguredDocks());
  TDOCK_ASSIGN_OR_RETURN(metrics_,
                         ServerMetrics::Create(&registry_, {.listen = options_.metrics_listen}));
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         MakeServerCredentials(options_.security));
  if (!options_.security.auth_token_file.empty()) {
    TDOCK_ASSIGN_OR_RETURN(token_, BearerToken::FromFile(options_.security.auth_token_file));
  }
  service_ = std::make_unique<DockService>(
      &registry_, metrics_->observer(), token_.get(),
      ServiceLimits{.max_rows_per_request = options_.limits.max_rows_per_request,
                    .max_spec_bytes = options_.limits.max_spec_bytes,
                    .max_wait_ms = options_.limits.max_wait_ms});
  if (options_.role == ServerRole::kController) {
    shards_ = std::make_unique<shard::ShardTable>();
    ServiceObserver* observer = metrics_->observer();
    shard_watch_ = std::make_unique<shard::ShardWatch>(
        shards_.get(), &registry_,
        shard::ShardWatchOptions{.away_after = options_.controller.shard_away_after,
                                 .lost_after = options_.controller.shard_lost_after},
        [observer] { observer->OnShardLost(); });
    // The recovered docks' rows wait for their shards to register.
    shard_watch_->ExpectRecovered();
    reconciler_ = std::make_unique<shard::ShardReconciler>(&registry_);
    service_->SetController(shard_watch_.get(), reconciler_.get(), step_feed_.get());
  }
  if (options_.role == ServerRole::kShard) TDOCK_RETURN_IF_ERROR(StartShard());
  if (persistence_ != nullptr) {
    service_->SetCheckpoint(
        [this](const std::string& dir, StatusCallback done) {
          persistence_->Checkpoint(dir, std::move(done));
        });
  }
  int selected_port = 0;
  server_ = BuildServer(std::move(credentials), &selected_port);
  const bool unix_socket = absl::StartsWith(options_.listen, "unix:");
  if (server_ == nullptr || (selected_port == 0 && !unix_socket)) {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options_.listen,
                     "' (address in use, or not an address of this host)"));
  }
  if (options_.role == ServerRole::kShard) {
    if (absl::Status joined = JoinController(selected_port); !joined.ok()) {
      server_->Shutdown();
      server_.reset();
      return joined;
    }
  }
  if (options_.role == ServerRole::kController) {
    // Started once nothing can fail: a failed Start leaves no thread.
    watch_thread_ = std::thread([this] {
      while (!Stopping(options_.controller.shard_check)) {
        shard_watch_->Watch(shard::ShardTable::Now());
      }
    });
  }
  keeper_ = std::make_unique<internal::CallbackQueueKeeper>();
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(
      options_.role == ServerRole::kShard ? kShardServiceName : kServiceName, true);
  port_ = selected_port;
  state_ = State::kRunning;
  return absl::OkStatus();
}

std::unique_ptr<grpc::Server> Server::Impl::BuildServer(
    std::shared_ptr<grpc::ServerCredentials> credentials, int* selected_port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, std::move(credentials), selected_port);
  const int max_bytes = static_cast<int>(options_.max_message_mb << 20);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  // Two servers sharing a port would split a job's calls between two sets of
  // docks: make a taken port an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options_.handshake_timeout)));
  if (shard_service_ != nullptr) {
    builder.RegisterService(shard_service_.get());
  } else {
    builder.RegisterService(service_.get());
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(metrics_->NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  return builder.BuildAndStart();
}

absl::Status Server::Impl::StartShard() {
  const ServerOptions::Shard& shard = options_.shard;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  host_name_ = name;
  registration_.set_node(!shard.node.empty() ? shard.node : host_name_);
  registration_.set_id(shard.id != 0 ? shard.id : ShardIdOfNode(registration_.node()));
  std::shared_ptr<shard::ShmChunks> shm;
  if (!shard.shm_dir.empty()) {
    TDOCK_ASSIGN_OR_RETURN(shm, shard::ShmChunks::Open(shard.shm_dir, registration_.id()));
    registration_.set_shm_prefix(shm->prefix());
  }
  shard_store_ = std::make_unique<shard::ShardStore>(registration_.id(), shard.chunk_bytes,
                                                     shard.memory_limit_bytes, shard.read_grace,
                                                     nullptr, shm);
  if (!options_.persistence.data_dir.empty()) TDOCK_RETURN_IF_ERROR(OpenShardDataDir());
  registration_.set_incarnation(shard_store_->incarnation());
  ClientOptions to_controller;
  to_controller.address = shard.controller;
  if (!shard.controller_ca.empty()) {
    to_controller.tls = {.enabled = true,
                         .ca_file = shard.controller_ca,
                         .cert_file = options_.security.tls_cert,
                         .key_file = options_.security.tls_key,
                         .server_name = shard.controller_tls_name};
  }
  to_controller.max_message_bytes = options_.max_message_mb << 20;
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, OpenChannel(to_controller));
  // The deployment's token: the shard sends the controller the one it asks.
  std::string token;
  if (!options_.security.auth_token_file.empty()) {
    TDOCK_ASSIGN_OR_RETURN(token,
                           ReadFlagFile("auth_token_file", options_.security.auth_token_file));
    token = std::string(absl::StripAsciiWhitespace(token));
  }
  shard_service_ = std::make_unique<ShardService>(
      shard_store_.get(), std::move(channel), std::move(token), token_.get(),
      ServiceLimits{.max_rows_per_request = options_.limits.max_rows_per_request,
                    .max_spec_bytes = options_.limits.max_spec_bytes,
                    .max_wait_ms = options_.limits.max_wait_ms},
      metrics_->observer(), std::move(shm));
  return absl::OkStatus();
}

absl::Status Server::Impl::OpenShardDataDir() {
  const persist::PersistenceOptions& disk = options_.persistence;
  const absl::Time started = absl::Now();
  TDOCK_ASSIGN_OR_RETURN(shard_disk_,
                         persist::OpenRocksStore(disk.data_dir,
                                                 {.segment_bytes = disk.segment_bytes}));
  TDOCK_ASSIGN_OR_RETURN(shard::RecoveredShard recovered,
                         persist::RecoverShard(*shard_disk_, disk.data_dir));
  const size_t extents = recovered.extents.size();
  shard_disk_journal_ = std::make_unique<persist::Journal>(
      shard_disk_.get(), persist::Journal::Options{.durability = disk.durability,
                                                   .flush_interval = disk.flush_interval});
  shard_journal_ = std::make_unique<persist::StoreShardJournal>(shard_disk_journal_.get());
  const bool new_dir = recovered.incarnation == 0;
  TDOCK_RETURN_IF_ERROR(shard_store_->Recover(shard_journal_.get(), std::move(recovered)));
  // A new data dir's incarnation is stored before the shard registers (a
  // sync journal's Flush says nothing of a failed write: read it back).
  TDOCK_RETURN_IF_ERROR(shard_disk_journal_->Flush());
  if (new_dir) {
    TDOCK_ASSIGN_OR_RETURN(const shard::RecoveredShard stored,
                           persist::RecoverShard(*shard_disk_, disk.data_dir));
    if (stored.incarnation != shard_store_->incarnation()) {
      return absl::UnavailableError(absl::StrCat(
          "'", disk.data_dir, "': the shard's incarnation could not be stored"));
    }
  }
  const shard::ShardStore::Stats stats = shard_store_->GetStats();
  TDOCK_LOG(INFO) << "tdock-server shard recovered incarnation " << shard_store_->incarnation()
                  << " with " << extents << " Puts' cells (" << stats.cell_bytes << " bytes) from "
                  << disk.data_dir << " in " << absl::FormatDuration(absl::Now() - started)
                  << " ("
                  << (disk.durability == persist::Durability::kSync ? "sync" : "async")
                  << " durability)";
  return absl::OkStatus();
}

absl::Status Server::Impl::JoinController(int port) {
  const ServerOptions::Shard& shard = options_.shard;
  std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  // A wildcard address is no address to reach: the host's name is.
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = host_name_;
  registration_.set_address(!shard.advertise.empty() ? shard.advertise
                                                     : absl::StrCat(host, ":", port));
  // The controller may still be recovering its journal: wait for it.
  TDOCK_RETURN_IF_ERROR(RegisterOrStartAnew(/*wait=*/absl::Minutes(5)));
  TDOCK_LOG(INFO) << "tdock-server shard " << registration_.id() << " registered with controller "
                  << shard.controller << " as " << registration_.address() << " on node "
                  << registration_.node();
  // Registering is the shard's heartbeat (a controller declares a shard it
  // has not heard from lost): on a thread of its own, so a slow release
  // sync never delays it.
  heartbeat_ = std::thread([this] {
    while (!Stopping(options_.shard.release_sync)) {
      // Again each time: a controller that restarted learns of this shard.
      const absl::Status registered = RegisterOrStartAnew(absl::Seconds(10));
      if (!registered.ok()) {
        TDOCK_LOG(WARNING) << registered;
        // The step feed may be as unheard as this: it starts again, and the
        // shard asks meanwhile.
        shard_service_->EndWatch();
      }
    }
  });
  step_watch_ = std::thread([this, id = registration_.id()] {
    absl::Status last;
    while (!Stopping(absl::ZeroDuration())) {
      absl::Status ended = shard_service_->WatchSteps(id);
      // Said once until it changes: a controller down for a while is not
      // a warning a second.
      if (!ended.ok() && ended.code() != last.code()) {
        TDOCK_LOG(WARNING) << "shard " << id << " is not watching the controller's steps (it asks every "
                           << absl::FormatDuration(options_.shard.release_sync)
                           << " instead): " << ended;
      }
      last = ended;
      if (Stopping(options_.shard.release_sync)) break;
    }
  });
  release_sync_ = std::thread([this] {
    while (!Stopping(options_.shard.release_sync)) {
      if (absl::Status synced = shard_service_->SyncReleases(absl::Seconds(10)); !synced.ok()) {
        TDOCK_LOG(WARNING) << "shard " << registration_.id()
                           << " cannot learn the released steps: " << synced;
      }
      // With a controller not reconciled with yet, or unanswered Puts.
      if (absl::Status reconciled = shard_service_->Reconcile(absl::Seconds(10));
          !reconciled.ok()) {
        TDOCK_LOG(WARNING) << reconciled;
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Server::Impl::RegisterOrStartAnew(absl::Duration wait) {
  absl::Status registered = Register(wait);
  if (registered.code() == absl::StatusCode::kFailedPrecondition &&
      absl::StrContains(registered.message(), "was declared lost")) {
    // Cut off (or down, data dir and all) for longer than the controller
    // waits: its cells are counted gone there, so here too; a new
    // incarnation serves on.
    registration_.set_incarnation(shard_store_->Reincarnate());
    TDOCK_LOG(WARNING) << registered << "; the shard dropped its cells and is now "
                       << "incarnation " << registration_.incarnation();
    registered = Register(wait);
  }
  return registered;
}

absl::Status Server::Impl::Register(absl::Duration wait) {
  v1::RegisterShardRequest request;
  *request.mutable_shard() = registration_;
  const shard::ShardStore::Stats stats = shard_store_->GetStats();
  request.mutable_shard()->set_memory_bytes(static_cast<uint64_t>(stats.reserved_bytes));
  request.mutable_shard()->set_memory_limit_bytes(static_cast<uint64_t>(stats.limit_bytes));
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(absl::ToChronoTime(absl::Now() + wait));
  v1::RegisterShardResponse response;
  const grpc::Status registered =
      shard_service_->controller(context).RegisterShard(&context, request, &response);
  if (!registered.ok()) {
    return absl::Status(FromGrpcStatus(registered).code(),
                        absl::StrCat("shard ", registration_.id(),
                                     " cannot register with its controller ",
                                     options_.shard.controller, ": ",
                                     registered.error_message()));
  }
  // A controller restarted is reconciled with (off this thread: the
  // heartbeat is never held up).
  shard_service_->ControllerIs(response.controller_incarnation());
  return absl::OkStatus();
}

const ServerMetrics* Server::Impl::metrics() const {
  absl::MutexLock lock(&mu_);
  return metrics_.get();
}

int Server::Impl::port() const {
  absl::MutexLock lock(&mu_);
  return port_;
}

void Server::Impl::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    switch (state_) {
      case State::kIdle:
        registry_.Shutdown();
        state_ = State::kStopped;
        return;
      case State::kRunning:
        state_ = State::kStopping;
        break;
      case State::kStopping:
      case State::kStopped:
        mu_.Await(absl::Condition(
            +[](State* state) { return *state == State::kStopped; }, &state_));
        return;
    }
  }
  server_->GetHealthCheckService()->SetServingStatus(false);
  // Completes parked Gets and Puts so they do not hold up the drain below.
  registry_.Shutdown();
  {
    absl::MutexLock lock(&sync_mu_);
    stopping_ = true;
  }
  if (shard_service_ != nullptr) {
    shard_service_->StopWatching();
    shard_service_->EndSessions();  // their streams would hold the drain up
  }
  if (step_watch_.joinable()) step_watch_.join();
  if (release_sync_.joinable()) release_sync_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  // A shard's watch of the steps would hold the grpc::Server's shutdown up.
  if (step_feed_ != nullptr) step_feed_->Shutdown();
  if (watch_thread_.joinable()) watch_thread_.join();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.shutdown_grace));
  server_->Wait();
  keeper_.reset();
  absl::MutexLock lock(&mu_);
  state_ = State::kStopped;
}

void Server::Impl::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](State* state) { return *state == State::kStopped; }, &state_));
}

Server::Server(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { impl_->Shutdown(); }

absl::Status Server::Start() { return impl_->Start(); }
int Server::port() const { return impl_->port(); }
DockRegistry& Server::registry() { return impl_->registry(); }
const shard::ShardTable* Server::shard_table() const { return impl_->shard_table(); }
const shard::ShardStore* Server::shard_store() const { return impl_->shard_store(); }
std::vector<shard::ShardEntry> Server::WatchShards(absl::Time now) {
  return impl_->WatchShards(now);
}
const ServerMetrics* Server::metrics() const { return impl_->metrics(); }
persist::Persistence* Server::persistence() { return impl_->persistence(); }
void Server::Shutdown() { impl_->Shutdown(); }
void Server::Wait() { impl_->Wait(); }

}  // namespace tdock
