// DockService: the tdock.v1.Dock gRPC service over a DockRegistry.
//
// Control plane calls (dock_service_control.cc) are typed unary callbacks:
// AddConsumer, RemoveConsumer, AddColumn, ReleaseStep, Drop, Seal, ListRows,
// Ack, Nack, DeleteDock and Checkpoint finish from a callback (once
// recorded), without a thread waiting; ListDocks and GetDockStatus finish
// inline, and CreateDock waits for its spec's record (creations are
// serialized, so a stored spec is the one served).
// The data plane avoids copying payload: Put decodes the raw request with
// the bulk framing (proto/tdock/v1/bulk.h: metadata through protobuf's
// generated classes, column bodies left in place) and hands the core spans
// into gRPC's receive slices (the core makes the one copy into its arena);
// Get and Read send column payload as slices that pin the arena.
// Get and Sample may park in the dock without holding a thread; a client
// cancel or deadline cancels the parked waiter. Errors from the core are
// absl::Status, converted to grpc::Status once, here.
//
// Thread safety: all handlers may run concurrently on gRPC's threads; the
// service itself holds no mutable state.
// Ownership: the registry is borrowed and must outlive the service (and the
// grpc::Server it is registered with).
#ifndef TDOCK_SERVER_SERVICE_DOCK_SERVICE_H_
#define TDOCK_SERVER_SERVICE_DOCK_SERVICE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/dock/registry.h"
#include "server/service/observer.h"
#include "server/service/security.h"
#include "server/service/step_feed.h"
#include "server/shard/shard_reconcile.h"
#include "server/shard/shard_watch.h"

// The generated raw-method mixins (WithRawCallbackMethod_*) hide the typed
// overloads of the same method by design; clang's -Woverloaded-virtual flags
// that inside the generated header when DockService instantiates them.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Woverloaded-virtual"
#endif
#include "tdock/v1/dock.grpc.pb.h"
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

namespace tdock {

// Limits on requests (flags of tdock-server); 0: no limit.
struct ServiceLimits {
  int64_t max_rows_per_request = 0;  // rows of a Put or Read, count of a Get
  int64_t max_spec_bytes = 0;        // a CreateDock or AddConsumer request
  int64_t max_wait_ms = 0;           // wait_ms of a Put, Get or Sample

  // INVALID_ARGUMENT naming `what` and the flag when `value` is over `limit`.
  static absl::Status Check(int64_t value, int64_t limit, absl::string_view what,
                            absl::string_view flag);
  // A Put's rows (rows, keys, new_rows, group sizes, versions) against
  // max_rows_per_request.
  absl::Status PutRows(const v1::PutRequest& put) const;
};

// Finishes a unary call that completed inline with `status`.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status);

class DockService final
    : public v1::Dock::WithRawCallbackMethod_Put<v1::Dock::WithRawCallbackMethod_Get<
          v1::Dock::WithRawCallbackMethod_GetStream<
              v1::Dock::WithRawCallbackMethod_Read<v1::Dock::CallbackService>>>> {
 public:
  // `observer` (may be null) hears about served Gets; `token` (may be null:
  // no authentication) is the bearer token every call must carry. All are
  // borrowed.
  explicit DockService(DockRegistry* registry,
                       ServiceObserver* observer = nullptr,
                       const BearerToken* token = nullptr, ServiceLimits limits = {})
      : registry_(registry), observer_(observer), token_(token), limits_(limits) {}
  DockService(const DockService&) = delete;
  DockService& operator=(const DockService&) = delete;

  // ---- control plane ----
  grpc::ServerUnaryReactor* CreateDock(
      grpc::CallbackServerContext* context,
      const v1::CreateDockRequest* request,
      v1::CreateDockResponse* response) override;
  grpc::ServerUnaryReactor* DeleteDock(
      grpc::CallbackServerContext* context,
      const v1::DeleteDockRequest* request,
      v1::DeleteDockResponse* response) override;
  grpc::ServerUnaryReactor* ListDocks(grpc::CallbackServerContext* context,
                                      const v1::ListDocksRequest* request,
                                      v1::ListDocksResponse* response) override;
  grpc::ServerUnaryReactor* GetDockStatus(
      grpc::CallbackServerContext* context,
      const v1::GetDockStatusRequest* request,
      v1::GetDockStatusResponse* response) override;
  grpc::ServerUnaryReactor* AddConsumer(
      grpc::CallbackServerContext* context,
      const v1::AddConsumerRequest* request,
      v1::AddConsumerResponse* response) override;
  grpc::ServerUnaryReactor* ListRows(grpc::CallbackServerContext* context,
                                     const v1::ListRowsRequest* request,
                                     v1::ListRowsResponse* response) override;
  grpc::ServerUnaryReactor* AddColumn(grpc::CallbackServerContext* context,
                                      const v1::AddColumnRequest* request,
                                      v1::AddColumnResponse* response) override;
  grpc::ServerUnaryReactor* RemoveConsumer(
      grpc::CallbackServerContext* context,
      const v1::RemoveConsumerRequest* request,
      v1::RemoveConsumerResponse* response) override;
  grpc::ServerUnaryReactor* SetVersion(grpc::CallbackServerContext* context,
                                       const v1::SetVersionRequest* request,
                                       v1::SetVersionResponse* response) override;
  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* context,
                                    const v1::ReserveRequest* request,
                                    v1::ReserveResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseStep(
      grpc::CallbackServerContext* context,
      const v1::ReleaseStepRequest* request,
      v1::ReleaseStepResponse* response) override;
  // Rows taken out of a live step; a step closed to new rows.
  grpc::ServerUnaryReactor* Drop(grpc::CallbackServerContext* context,
                                 const v1::DropRequest* request,
                                 v1::DropResponse* response) override;
  grpc::ServerUnaryReactor* Seal(grpc::CallbackServerContext* context,
                                 const v1::SealRequest* request,
                                 v1::SealResponse* response) override;
  // A copy of the store (servers with --data_dir; see SetCheckpoint).
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const v1::CheckpointRequest* request,
                                       v1::CheckpointResponse* response) override;
  // What Checkpoint does; unset: FAILED_PRECONDITION. REQUIRES: before serving.
  void SetCheckpoint(std::function<void(const std::string& dir, StatusCallback done)> checkpoint) {
    checkpoint_ = std::move(checkpoint);
  }
  // A controller's shards (UNIMPLEMENTED unless SetController).
  grpc::ServerUnaryReactor* RegisterShard(grpc::CallbackServerContext* context,
                                          const v1::RegisterShardRequest* request,
                                          v1::RegisterShardResponse* response) override;
  grpc::ServerUnaryReactor* ListShards(grpc::CallbackServerContext* context,
                                       const v1::ListShardsRequest* request,
                                       v1::ListShardsResponse* response) override;
  // A shard's feed of the docks' step windows (StepFeed).
  grpc::ServerWriteReactor<v1::StepWatermarks>* WatchSteps(
      grpc::CallbackServerContext* context, const v1::WatchStepsRequest* request) override;
  // A shard's inventory set against the docks (ShardReconciler).
  grpc::ServerUnaryReactor* ReconcileShard(grpc::CallbackServerContext* context,
                                           const v1::ReconcileShardRequest* request,
                                           v1::ReconcileShardResponse* response) override;
  // Makes this the service of a controller (tdock-server --role=controller),
  // whose docks hold cell locations: its Puts come from shards and carry
  // cell_locations, `shards` (borrowed) watches its shards, `reconciler`
  // (borrowed) checks their inventories, and `steps` (borrowed) feeds them
  // the docks' step windows.
  // REQUIRES: before serving.
  void SetController(shard::ShardWatch* shards, shard::ShardReconciler* reconciler,
                     StepFeed* steps) {
    shards_ = shards;
    reconciler_ = reconciler;
    steps_ = steps;
  }
  // Consumers with leases: complete (Ack) or hand back (Nack) a lease.
  grpc::ServerUnaryReactor* Ack(grpc::CallbackServerContext* context,
                                const v1::AckRequest* request,
                                v1::AckResponse* response) override;
  grpc::ServerUnaryReactor* Nack(grpc::CallbackServerContext* context,
                                 const v1::AckRequest* request,
                                 v1::AckResponse* response) override;
  // A consumer's leases in flight; every one of them handed back at once.
  grpc::ServerUnaryReactor* ListLeases(grpc::CallbackServerContext* context,
                                       const v1::ListLeasesRequest* request,
                                       v1::ListLeasesResponse* response) override;
  grpc::ServerUnaryReactor* NackAll(grpc::CallbackServerContext* context,
                                    const v1::NackAllRequest* request,
                                    v1::NackAllResponse* response) override;

  // ---- data plane ----
  // Raw tdock.v1.PutRequest in, tdock.v1.PutResponse out.
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override;
  // tdock.v1.GetRequest in, raw tdock.v1.GetResponse out.
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override;
  // tdock.v1.GetRequest in, the raw GetResponse out in parts.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Sample(grpc::CallbackServerContext* context,
                                   const v1::GetRequest* request,
                                   v1::SampleResponse* response) override;
  // tdock.v1.ReadRequest in, raw tdock.v1.GetResponse out.
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

 private:
  // OK, or UNAUTHENTICATED when a token is required and the call lacks it.
  absl::Status Authorize(const grpc::CallbackServerContext& context) const {
    return token_ == nullptr ? absl::OkStatus() : token_->Check(context.client_metadata());
  }
  // The spec of a CreateDock, checked against the service's limits.
  absl::StatusOr<DockSpec> CreateDockSpec(const v1::CreateDockRequest& request) const;
  absl::Status DoListDocks(v1::ListDocksResponse* response);
  absl::Status DoGetDockStatus(const v1::GetDockStatusRequest& request,
                               v1::GetDockStatusResponse* response);
  // Ack or Nack, answered once the lease's end is recorded.
  grpc::ServerUnaryReactor* EndLease(grpc::CallbackServerContext* context,
                                     const v1::AckRequest& request, bool ack,
                                     v1::AckResponse* response);
  absl::Status DoRead(const grpc::ByteBuffer& request,
                      grpc::ByteBuffer* response);
  // A controller's Put: the extents its cells are in, by shard, each once;
  // FAILED_PRECONDITION when a cell is on a shard incarnation declared lost.
  absl::StatusOr<shard::ShardReconciler::Extents> CellsOnLiveShards(
      const std::string& dock, const std::vector<PackedColumn>& columns) const;

  DockRegistry* const registry_;
  ServiceObserver* const observer_;
  const BearerToken* const token_;
  const ServiceLimits limits_;
  std::function<void(const std::string& dir, StatusCallback done)> checkpoint_;
  shard::ShardWatch* shards_ = nullptr;  // set on a controller
  shard::ShardReconciler* reconciler_ = nullptr;  // set on a controller
  StepFeed* steps_ = nullptr;            // set on a controller
};

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVICE_DOCK_SERVICE_H_
