// DockService's control plane: docks, consumers, steps (release, drop,
// seal), leases' ends and checkpoints; typed unary callbacks.
#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"
#include "server/service/dock_service.h"

namespace tdock {
namespace {

void FillDropCounts(const std::array<int64_t, kDropReasons>& counts,
                    google::protobuf::RepeatedPtrField<v1::DropCount>* out) {
  for (DropReason reason : AllDropReasons()) {
    const int64_t rows = counts[static_cast<int>(reason)];
    if (rows == 0) continue;
    v1::DropCount* count = out->Add();
    count->set_reason(ToProto(reason));
    count->set_rows(rows);
  }
}

void FillStepStatus(const DockStats& stats, const StepStats& step,
                    v1::StepStatus* out) {
  out->set_step(step.step);
  out->set_partition(step.partition);
  for (size_t i = 0; i < step.ready_rows.size() && i < stats.columns.size();
       ++i) {
    v1::ColumnCount* count = out->add_ready();
    count->set_name(stats.columns[i]);
    count->set_rows(step.ready_rows[i]);
  }
  for (size_t i = 0;
       i < step.consumed_rows.size() && i < stats.consumers.size(); ++i) {
    v1::ColumnCount* count = out->add_consumed();
    count->set_name(stats.consumers[i]);
    count->set_rows(step.consumed_rows[i]);
  }
  out->set_sealed(step.sealed);
  FillDropCounts(step.dropped_rows, out->mutable_dropped());
}

// Finishes a Drop or Seal with the rows it dropped.
template <typename Response>
RowsCallback AnswerDropped(grpc::ServerUnaryReactor* reactor, Response* response) {
  return [reactor, response](absl::StatusOr<int64_t> dropped) {
    if (dropped.ok()) response->set_dropped(*dropped);
    reactor->Finish(ToGrpcStatus(dropped.status()));
  };
}

}  // namespace

grpc::ServerUnaryReactor* DockService::CreateDock(
    grpc::CallbackServerContext* context, const v1::CreateDockRequest* request,
    v1::CreateDockResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<DockSpec> spec = CreateDockSpec(*request);
  if (!spec.ok()) return FinishNow(context, spec.status());
  // Answered once the spec is stored: no RPC thread waits on the journal.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  registry_->Create(*std::move(spec),
                    [this, reactor, response](absl::StatusOr<std::shared_ptr<Dock>> dock) {
                      if (dock.ok()) {
                        *response->mutable_spec() = ToProto((*dock)->spec());
                        if (steps_ != nullptr) steps_->Changed((*dock)->name());
                      }
                      reactor->Finish(ToGrpcStatus(dock.status()));
                    });
  return reactor;
}

absl::StatusOr<DockSpec> DockService::CreateDockSpec(const v1::CreateDockRequest& request) const {
  TDOCK_RETURN_IF_ERROR(ServiceLimits::Check(
      static_cast<int64_t>(request.ByteSizeLong()), limits_.max_spec_bytes,
      absl::StrCat("CreateDock of '", request.spec().name(), "': the spec's bytes"),
      "max_spec_bytes"));
  return FromProto(request.spec());
}

grpc::ServerUnaryReactor* DockService::DeleteDock(
    grpc::CallbackServerContext* context, const v1::DeleteDockRequest* request,
    v1::DeleteDockResponse* /*response*/) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  registry_->Delete(request->dock(), [this, reactor, dock = request->dock()](absl::Status deleted) {
    if (deleted.ok() && steps_ != nullptr) steps_->Deleted(dock);
    reactor->Finish(ToGrpcStatus(deleted));
  });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::ListDocks(
    grpc::CallbackServerContext* context,
    const v1::ListDocksRequest* /*request*/, v1::ListDocksResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  return FinishNow(context, DoListDocks(response));
}

absl::Status DockService::DoListDocks(v1::ListDocksResponse* response) {
  for (const std::shared_ptr<Dock>& dock : registry_->List()) {
    const DockStats stats = dock->Stats();
    v1::DockSummary* summary = response->add_docks();
    summary->set_name(dock->name());
    summary->set_rows_per_step(stats.rows_per_step);
    summary->set_steps_in_flight(dock->spec().steps_in_flight);
    for (const StepStats& step : stats.steps)
      summary->add_live_steps(step.step);
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DockService::GetDockStatus(
    grpc::CallbackServerContext* context,
    const v1::GetDockStatusRequest* request,
    v1::GetDockStatusResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  return FinishNow(context, DoGetDockStatus(*request, response));
}

absl::Status DockService::DoGetDockStatus(
    const v1::GetDockStatusRequest& request,
    v1::GetDockStatusResponse* response) {
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<Dock> dock,
                         registry_->Find(request.dock()));
  const DockStats stats = dock->Stats();
  *response->mutable_spec() = ToProto(dock->spec());
  for (const StepStats& step : stats.steps) {
    FillStepStatus(stats, step, response->add_steps());
  }
  for (size_t i = 0; i < stats.consumers.size(); ++i) {
    v1::ConsumerStatus* consumer = response->add_consumers();
    consumer->set_name(stats.consumers[i]);
    consumer->set_waiters(i < stats.waiters.size() ? stats.waiters[i] : 0);
    if (i < stats.leases_in_flight.size()) {
      consumer->set_leases_in_flight(stats.leases_in_flight[i]);
      consumer->set_rows_in_flight(stats.rows_in_flight[i]);
      consumer->set_lease_expiries(stats.lease_expiries_total[i]);
      consumer->set_lease_nacks(stats.lease_nacks_total[i]);
      consumer->set_rows_returned(stats.rows_returned_total[i]);
    }
    if (i < stats.staleness.size()) {
      const StalenessStats& staleness = stats.staleness[i];
      consumer->set_versioned_rows(staleness.count);
      consumer->set_staleness_sum(staleness.sum);
      consumer->set_stale_rows(staleness.stale_rows);
      for (size_t b = 0; b < staleness.buckets.size(); ++b) {
        v1::StalenessBucket* bucket = consumer->add_staleness();
        bucket->set_max(b < kStalenessBounds.size() ? kStalenessBounds[b] : -1);
        bucket->set_rows(staleness.buckets[b]);
      }
    }
  }
  response->set_arena_bytes_used(stats.arena_bytes_used);
  response->set_arena_bytes_reserved(stats.arena_bytes_reserved);
  response->set_memory_limit_bytes(stats.memory_limit_bytes);
  response->set_parked_puts(stats.parked_puts);
  FillDropCounts(stats.rows_dropped_total, response->mutable_dropped_total());
  response->set_version(stats.version);
  response->set_front_step(stats.front_step);
  response->set_reservations_live(stats.reservations_live);
  response->set_reservations_parked(stats.reservations_parked);
  response->set_admission_waits(stats.admission_waits_total);
  response->set_admission_wait_seconds(stats.admission_wait_seconds_total);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* DockService::AddConsumer(
    grpc::CallbackServerContext* context, const v1::AddConsumerRequest* request,
    v1::AddConsumerResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::Status checked = ServiceLimits::Check(
      static_cast<int64_t>(request->ByteSizeLong()), limits_.max_spec_bytes,
      absl::StrCat("AddConsumer on dock '", request->dock(), "': the request's bytes"),
      "max_spec_bytes");
  if (!checked.ok()) return FinishNow(context, checked);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<ConsumerSpec> consumer = FromProto(request->consumer());
  if (!consumer.ok()) return FinishNow(context, consumer.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->AddConsumer(*std::move(consumer),
                       [reactor, response](absl::StatusOr<ConsumerSpec> added) {
                         if (added.ok()) *response->mutable_consumer() = ToProto(*added);
                         reactor->Finish(ToGrpcStatus(added.status()));
                       });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::AddColumn(grpc::CallbackServerContext* context,
                                                 const v1::AddColumnRequest* request,
                                                 v1::AddColumnResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::Status checked = ServiceLimits::Check(
      static_cast<int64_t>(request->ByteSizeLong()), limits_.max_spec_bytes,
      absl::StrCat("AddColumn on dock '", request->dock(), "': the request's bytes"),
      "max_spec_bytes");
  if (!checked.ok()) return FinishNow(context, checked);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<ColumnSpec> column = FromProto(request->column());
  if (!column.ok()) return FinishNow(context, column.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->AddColumn(*std::move(column), [reactor, response](absl::StatusOr<ColumnSpec> added) {
    if (added.ok()) *response->mutable_column() = ToProto(*added);
    reactor->Finish(ToGrpcStatus(added.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::ListRows(grpc::CallbackServerContext* context,
                                                const v1::ListRowsRequest* request,
                                                v1::ListRowsResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  const std::vector<std::string> columns(request->columns().begin(), request->columns().end());
  absl::StatusOr<RowListing> listing = (*dock)->ListRows(request->step(), columns);
  if (!listing.ok()) return FinishNow(context, listing.status());
  *response = ToProto(*listing);
  response->set_cell_locations(shards_ != nullptr);
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* DockService::RemoveConsumer(
    grpc::CallbackServerContext* context, const v1::RemoveConsumerRequest* request,
    v1::RemoveConsumerResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->RemoveConsumer(request->consumer(),
                          [reactor, response](absl::StatusOr<ConsumerSpec> removed) {
                            if (removed.ok()) *response->mutable_consumer() = ToProto(*removed);
                            reactor->Finish(ToGrpcStatus(removed.status()));
                          });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::ReleaseStep(
    grpc::CallbackServerContext* context, const v1::ReleaseStepRequest* request,
    v1::ReleaseStepResponse* /*response*/) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->ReleaseStep(request->step(), [reactor](absl::Status released) {
    reactor->Finish(ToGrpcStatus(released));
  });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::SetVersion(grpc::CallbackServerContext* context,
                                                  const v1::SetVersionRequest* request,
                                                  v1::SetVersionResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->SetVersion(request->version(), [reactor, response, dock = *dock](absl::Status set) {
    if (set.ok()) response->set_version(dock->version());
    reactor->Finish(ToGrpcStatus(set));
  });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::Drop(grpc::CallbackServerContext* context,
                                            const v1::DropRequest* request,
                                            v1::DropResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  DropInput in;
  in.step = request->step();
  in.rows.assign(request->rows().begin(), request->rows().end());
  in.groups.assign(request->groups().begin(), request->groups().end());
  in.reason = FromProto(request->reason());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->Drop(std::move(in), AnswerDropped(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* DockService::Seal(grpc::CallbackServerContext* context,
                                            const v1::SealRequest* request,
                                            v1::SealResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  SealInput in;
  in.step = request->step();
  in.required_columns.assign(request->required_columns().begin(),
                             request->required_columns().end());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->Seal(std::move(in), AnswerDropped(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* DockService::Ack(grpc::CallbackServerContext* context,
                                           const v1::AckRequest* request,
                                           v1::AckResponse* response) {
  return EndLease(context, *request, /*ack=*/true, response);
}

grpc::ServerUnaryReactor* DockService::Nack(grpc::CallbackServerContext* context,
                                            const v1::AckRequest* request,
                                            v1::AckResponse* response) {
  return EndLease(context, *request, /*ack=*/false, response);
}

grpc::ServerUnaryReactor* DockService::ListLeases(grpc::CallbackServerContext* context,
                                                  const v1::ListLeasesRequest* request,
                                                  v1::ListLeasesResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<std::vector<LeaseInfo>> leases = (*dock)->ListLeases(request->consumer());
  if (!leases.ok()) return FinishNow(context, leases.status());
  const absl::Time now = absl::Now();
  for (const LeaseInfo& lease : *leases) {
    v1::LeaseInfo* out = response->add_leases();
    out->set_lease_id(lease.lease_id);
    out->set_step(lease.step);
    out->set_rank(lease.rank);
    out->set_round(lease.round);
    out->set_rows(lease.rows);
    // A lease whose hand-out is still being recorded has not started to run.
    out->set_expires_in_ms(
        lease.deadline == absl::InfiniteFuture()
            ? -1
            : std::max<int64_t>(0, absl::ToInt64Milliseconds(lease.deadline - now)));
  }
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* DockService::NackAll(grpc::CallbackServerContext* context,
                                               const v1::NackAllRequest* request,
                                               v1::NackAllResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  std::optional<int32_t> rank;
  if (request->has_rank()) rank = request->rank();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  (*dock)->NackAll(request->consumer(), rank,
                   [reactor, response](absl::StatusOr<NackAllResult> back) {
                     if (back.ok()) {
                       response->set_leases(back->leases);
                       response->set_rows(back->rows);
                     }
                     reactor->Finish(ToGrpcStatus(back.status()));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::Checkpoint(grpc::CallbackServerContext* context,
                                                  const v1::CheckpointRequest* request,
                                                  v1::CheckpointResponse* /*response*/) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  if (!checkpoint_) {
    return FinishNow(context, absl::FailedPreconditionError(
                                  "Checkpoint: this server runs without --data_dir"));
  }
  if (request->dir().empty()) {
    return FinishNow(context, absl::InvalidArgumentError("Checkpoint: dir is empty"));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  checkpoint_(request->dir(), [reactor](absl::Status copied) {
    reactor->Finish(ToGrpcStatus(copied));
  });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::RegisterShard(grpc::CallbackServerContext* context,
                                                     const v1::RegisterShardRequest* request,
                                                     v1::RegisterShardResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  if (shards_ == nullptr) {
    return FinishNow(context, absl::UnimplementedError(
                                  "RegisterShard: this server is standalone, not a controller "
                                  "(tdock-server --role=controller)"));
  }
  const v1::ShardInfo& shard = request->shard();
  response->set_controller_incarnation(reconciler_->controller_incarnation());
  return FinishNow(context,
                   shards_->Register({.id = shard.id(),
                                      .address = shard.address(),
                                      .node = shard.node(),
                                      .incarnation = shard.incarnation(),
                                      .memory_bytes = static_cast<int64_t>(shard.memory_bytes()),
                                      .memory_limit_bytes =
                                          static_cast<int64_t>(shard.memory_limit_bytes()),
                                      .shm_prefix = shard.shm_prefix()}));
}

grpc::ServerUnaryReactor* DockService::ReconcileShard(
    grpc::CallbackServerContext* context, const v1::ReconcileShardRequest* request,
    v1::ReconcileShardResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  if (shards_ == nullptr) {
    return FinishNow(context, absl::UnimplementedError(
                                  "ReconcileShard: this server is standalone, not a controller "
                                  "(tdock-server --role=controller)"));
  }
  if (shards_->Lost({request->shard_id(), request->incarnation()})) {
    return FinishNow(context, absl::FailedPreconditionError(absl::StrCat(
                                  "ReconcileShard: shard ", request->shard_id(), " incarnation ",
                                  request->incarnation(), " was declared lost: its cells are "
                                  "counted gone; it drops them and registers as a new "
                                  "incarnation")));
  }
  shard::ShardReconciler::Inventory inventory{
      .shard = request->shard_id(),
      .incarnation = request->incarnation(),
      .held = {request->held().begin(), request->held().end()},
      .unresolved = {request->unresolved().begin(), request->unresolved().end()},
      .next_extent = request->next_extent(),
      .complete = request->complete()};
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reconciler_->Reconcile(
      std::move(inventory),
      [reactor, response](absl::StatusOr<shard::ShardReconciler::Outcome> outcome) {
        if (outcome.ok()) {
          for (const auto& [extent, step] : outcome->stored) {
            response->add_stored(extent);
            response->add_stored_steps(step);
          }
          response->mutable_given_up()->Assign(outcome->given_up.begin(),
                                               outcome->given_up.end());
          response->set_left(outcome->left);
          response->set_lost_rows(outcome->lost_rows);
          response->set_unsettled(outcome->unsettled);
        }
        reactor->Finish(ToGrpcStatus(outcome.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* DockService::ListShards(grpc::CallbackServerContext* context,
                                                  const v1::ListShardsRequest* /*request*/,
                                                  v1::ListShardsResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  if (shards_ == nullptr) {
    return FinishNow(context, absl::UnimplementedError(
                                  "ListShards: this server is standalone, not a controller "
                                  "(tdock-server --role=controller)"));
  }
  for (const shard::ShardEntry& entry : shards_->List()) {
    v1::ShardInfo* shard = response->add_shards();
    shard->set_id(entry.id);
    shard->set_address(entry.address);
    shard->set_node(entry.node);
    shard->set_incarnation(entry.incarnation);
    shard->set_state(entry.away ? v1::SHARD_AWAY : v1::SHARD_LIVE);
    shard->set_memory_bytes(static_cast<uint64_t>(entry.memory_bytes));
    shard->set_memory_limit_bytes(static_cast<uint64_t>(entry.memory_limit_bytes));
    shard->set_shm_prefix(entry.shm_prefix);
  }
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::StepWatermarks>* DockService::WatchSteps(
    grpc::CallbackServerContext* context, const v1::WatchStepsRequest* request) {
  absl::Status refused = Authorize(*context);
  if (refused.ok() && steps_ == nullptr) {
    refused = absl::UnimplementedError(
        "WatchSteps: this server is standalone, not a controller (tdock-server "
        "--role=controller)");
  }
  if (!refused.ok()) {
    // A watch that ends at once.
    class Refused final : public grpc::ServerWriteReactor<v1::StepWatermarks> {
     public:
      explicit Refused(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
      void OnDone() override { delete this; }
    };
    return new Refused(refused);
  }
  return steps_->Watch(request->shard_id());
}

grpc::ServerUnaryReactor* DockService::EndLease(grpc::CallbackServerContext* context,
                                                const v1::AckRequest& request, bool ack,
                                                v1::AckResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request.dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RowsCallback done = [reactor, response](absl::StatusOr<int64_t> rows) {
    if (rows.ok()) response->set_rows(*rows);
    reactor->Finish(ToGrpcStatus(rows.status()));
  };
  if (ack) {
    (*dock)->Ack(request.consumer(), request.lease_id(), std::move(done));
  } else {
    (*dock)->Nack(request.consumer(), request.lease_id(), std::move(done));
  }
  return reactor;
}

// ---- data plane ----

}  // namespace tdock
