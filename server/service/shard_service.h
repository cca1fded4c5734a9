// ShardService: the tdock.v1.Shard gRPC service of a shard
// (tdock-server --role=shard) over its ShardStore.
//
// Put: a producer's Put (the Dock.Put message). The shard stages the cells
// (ShardStore::Stage, the one copy of the payload), sends their locations to
// the controller as a Dock.Put with cell_locations (the same fields, the
// cells' data replaced by their locations), and, once the controller has
// stored it, commits the cells and answers with the controller's answer. A
// refusal from the controller aborts the staged cells and is passed on as it
// came (code, message, details). An answer that never came (the controller
// unreachable, the deadline past) leaves the cells staged, unreadable, until
// their step is released: whether the controller stored them is not known.
//
// ReadCells: cells by location, answered as a GetResponse whose columns
// hold the cells' bytes (borrowed from the store, pinned until sent).
//
// Item sizes come from the dock's spec, asked of the controller once per
// dock (again for a column it lacked); a column the spec lacks is sized from
// the Put's new_columns, else its dtype (add_columns_on_write), and the
// controller checks every location's size against its spec.
//
// WatchSteps follows the controller's step feed (Dock.WatchSteps, a
// StepFeed there): each dock's window as it moves. The cells of steps the
// controller released retire as soon as it says so, those of a deleted dock
// too, and a Put of a step the controller would not admit yet waits here,
// up to its wait_ms, until the window admits it; only then are its cells
// staged and committed (what is left of its wait goes with it). The feed
// only spares the round trip: a Put whose wait ran out goes to the
// controller, which decides as always, and while the feed is down every Put
// goes there at once.
//
// Reconcile sets the store's inventory against the controller's locations
// (Dock.ReconcileShard, a ShardReconciler there): the whole inventory once
// per controller incarnation (a restarted controller, or a shard that
// restarted), and the unresolved Puts alone while a staged Put's commit was
// never answered. Such a Put is committed if the controller stored it in a
// live step, else retired (freed after the read grace); the controller drops
// as lost the rows whose committed cells are not here.
//
// SyncReleases frees retired cells whose read grace has passed. While the
// feed is down, and once after it (re)starts, it also asks the controller
// for each dock the shard holds cells of and retires the steps below its
// front step (GetDockStatusResponse.front_step; every step of a dock
// deleted).
//
// Memory: a Put short of room under the shard's memory limit waits at the
// shard, up to its wait_ms (the server's max_wait_ms at most), and is tried
// again every 50 ms and whenever the feed moves a window (cells are freed as
// the controller releases steps); the wait it used is taken off what it may
// wait at the controller. A Put of the dock's oldest live step goes in past
// the limit (ShardStore::SetFrontStep), so the step that must end first
// always can.
//
// Thread safety: handlers run concurrently on gRPC's threads; the item-size
// cache and the waiting Puts have their own locks. Ownership: the store and token are borrowed and
// outlive the service.
#ifndef TDOCK_SERVER_SERVICE_SHARD_SERVICE_H_
#define TDOCK_SERVER_SERVICE_SHARD_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "common/timer_service.h"
#include "grpcpp/channel.h"
#include "server/service/dock_service.h"
#include "server/service/security.h"
#include "server/shard/shard_store.h"
#include "server/shard/shm_chunks.h"

namespace tdock {

class ShardService final
    : public v1::Shard::WithRawCallbackMethod_Put<v1::Shard::WithRawCallbackMethod_ReadCells<
          v1::Shard::WithRawCallbackMethod_Prepare<v1::Shard::CallbackService>>> {
 public:
  // `controller`: the channel to the controller; `controller_token`: the
  // bearer token sent to it (empty: none); `token`: the one this service's
  // callers must send (null: none).
  // `observer` (may be null) hears of the payload taken in and sent out.
  // `shm` (may be null): the store's chunks in shared memory, offered to
  // same-host clients (Prepare, ReadCells with a session).
  ShardService(shard::ShardStore* store, std::shared_ptr<grpc::Channel> controller,
               std::string controller_token, const BearerToken* token, ServiceLimits limits,
               ServiceObserver* observer = nullptr,
               std::shared_ptr<shard::ShmChunks> shm = nullptr);
  ~ShardService() override;
  ShardService(const ShardService&) = delete;
  ShardService& operator=(const ShardService&) = delete;

  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReadCells(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Prepare(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<v1::AttachEvent>* Attach(grpc::CallbackServerContext* context,
                                                     const v1::AttachRequest* request) override;
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* context,
                                  const v1::UnpinRequest* request,
                                  v1::UnpinResponse* response) override;
  // Ends every session (their pins let go), and refuses new ones (at
  // shutdown: a session's stream would otherwise hold the server open).
  void EndSessions();

  // Frees the cells of released steps (see above); blocks on the controller
  // for up to `timeout` a dock. Returns the first error met.
  absl::Status SyncReleases(absl::Duration timeout);
  // The controller's incarnation, as its last RegisterShard answer says.
  void ControllerIs(uint64_t incarnation) { controller_incarnation_.store(incarnation); }
  // Reconciles the store with the controller (see above) if it has not with
  // this incarnation yet or holds unresolved Puts; blocks for up to
  // `timeout`.
  absl::Status Reconcile(absl::Duration timeout);
  // Follows the controller's step feed as shard `shard` until it ends (the
  // controller gone or refusing, StopWatching); returns why it ended.
  absl::Status WatchSteps(uint64_t shard);
  // Ends the watch and refuses new ones (at shutdown).
  void StopWatching();
  // Ends the watch in progress, if any (the controller did not answer
  // otherwise: a stream on a connection gone silent would wait forever);
  // the next WatchSteps starts anew.
  void EndWatch();

  // The controller's stub, with the token set on `context`.
  v1::Dock::Stub& controller(grpc::ClientContext& context) const;

 private:
  class PutCall;
  class Session;
  // `put` with `prepare`: a Put, or (Shard.Prepare) the Put to prepare.
  grpc::ServerUnaryReactor* StartPut(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
                                     bool prepare);
  // The pins `unpin` of `session` let go.
  void LetGo(uint64_t session, absl::Span<const uint64_t> unpin);
  // A session's stream ended: its pins go.
  void SessionEnded(uint64_t session);

  absl::Status Authorize(const grpc::CallbackServerContext& context) const {
    return token_ == nullptr ? absl::OkStatus() : token_->Check(context.client_metadata());
  }
  // The item size of `dock`'s `column`, if the cached spec has it.
  std::optional<int64_t> CachedItemBytes(const std::string& dock,
                                         const std::string& column) const;
  void CacheSpec(const v1::DockSpec& spec);
  void ForgetSpec(const std::string& dock);
  absl::Status DoReadCells(const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  // One column of a ReadCells: its cells, by the locations it carries.
  absl::StatusOr<shard::ShardStore::Cells> ReadColumn(const std::string& dock,
                                                      const v1::PackedColumn& column) const;
  // A ReadCells over shared memory: where the cells are, pinned in `session`.
  absl::Status ShmReadCells(const v1::ReadCellsRequest& read, grpc::ByteBuffer* response);

  // A Put waiting at the shard (for admission or memory); tried again by
  // the retry alarm, and when the feed moves a window.
  void WaitAtShard(PutCall* call);
  // One message of the step feed, applied.
  void ApplySteps(const v1::StepWatermarks& message);
  // The alarm rang: every waiting Put is tried again.
  void RetryWaiting();
  // `call` was cancelled: true if it was waiting (it is no more).
  bool StopWaiting(PutCall* call);

  shard::ShardStore* const store_;
  const std::unique_ptr<v1::Dock::Stub> controller_;
  const std::string controller_token_;
  const BearerToken* const token_;
  const ServiceLimits limits_;
  ServiceObserver* const observer_;
  const std::shared_ptr<shard::ShmChunks> shm_;

  // Readers' sessions over shared memory, and the cells each pins.
  struct SessionPins {
    Session* stream = nullptr;
    absl::flat_hash_map<uint64_t, std::vector<std::shared_ptr<const void>>> pins;
  };
  tdock::Mutex sessions_mu_;
  // Sessions and pins are numbered from a random start, pins across
  // sessions: a pin of a session gone (of this process or one before),
  // given back in another, names none of its pins.
  uint64_t next_session_ ABSL_GUARDED_BY(sessions_mu_);
  uint64_t next_pin_ ABSL_GUARDED_BY(sessions_mu_);
  bool sessions_ended_ ABSL_GUARDED_BY(sessions_mu_) = false;
  absl::flat_hash_map<uint64_t, SessionPins> sessions_ ABSL_GUARDED_BY(sessions_mu_);

  TimerService timers_;
  std::unique_ptr<TimerService::Alarm> retry_;  // rings while Puts wait
  tdock::Mutex waiting_mu_;
  std::vector<PutCall*> waiting_ ABSL_GUARDED_BY(waiting_mu_);

  tdock::Mutex watch_mu_;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(watch_mu_) = nullptr;
  bool watch_stopped_ ABSL_GUARDED_BY(watch_mu_) = false;
  // The feed's snapshot came and it runs: SyncReleases need not ask.
  std::atomic<bool> feed_live_{false};
  // The controller's incarnation (0: not registered yet), and the one the
  // whole inventory was last reconciled with (0: none yet).
  std::atomic<uint64_t> controller_incarnation_{0};
  std::atomic<uint64_t> reconciled_with_{0};
  // SyncReleases asks once more (the feed just started: a dock deleted
  // while it was down is not in its snapshot).
  std::atomic<bool> ask_once_{false};

  mutable tdock::Mutex mu_;
  // Per dock, per column: its item size, from the controller's spec.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, int64_t>> item_bytes_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVICE_SHARD_SERVICE_H_
