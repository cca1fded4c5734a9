// tdock::Client: the typed control plane (CreateDock, ..., ReleaseStep,
// leases, checkpoints). Connecting and health are in client_connect.cc, the
// raw data plane in client_data.cc.
#include "client/client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {

absl::StatusOr<int64_t> Client::Impl::EndLease(const std::string& dock,
                                               const std::string& consumer,
                                               uint64_t lease_id, bool ack) const {
  v1::AckRequest request;
  request.set_dock(dock);
  request.set_consumer(consumer);
  request.set_lease_id(lease_id);
  v1::AckResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(
      ack ? stub->Ack(&context, request, &response)
          : stub->Nack(&context, request, &response)));
  return response.rows();
}

absl::StatusOr<DockSpec> Client::CreateDock(const DockSpec& spec) {
  v1::CreateDockRequest request;
  *request.mutable_spec() = ToProto(spec);
  v1::CreateDockResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->CreateDock(&context, request, &response)));
  return FromProto(response.spec());
}

absl::Status Client::DeleteDock(const std::string& dock) {
  v1::DeleteDockRequest request;
  request.set_dock(dock);
  v1::DeleteDockResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  return FromGrpcStatus(impl_->stub->DeleteDock(&context, request, &response));
}

absl::StatusOr<std::vector<DockSummaryInfo>> Client::ListDocks() {
  v1::ListDocksRequest request;
  v1::ListDocksResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->ListDocks(&context, request, &response)));
  std::vector<DockSummaryInfo> docks;
  docks.reserve(response.docks_size());
  for (const v1::DockSummary& summary : response.docks()) {
    docks.push_back({.name = summary.name(),
                     .rows_per_step = summary.rows_per_step(),
                     .steps_in_flight = summary.steps_in_flight(),
                     .live_steps = {summary.live_steps().begin(),
                                    summary.live_steps().end()}});
  }
  return docks;
}

namespace {

std::vector<std::pair<std::string, int64_t>> Counts(
    const google::protobuf::RepeatedPtrField<v1::ColumnCount>& counts) {
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(counts.size());
  for (const v1::ColumnCount& count : counts) {
    out.emplace_back(count.name(), count.rows());
  }
  return out;
}

std::vector<std::pair<DropReason, int64_t>> DropCounts(
    const google::protobuf::RepeatedPtrField<v1::DropCount>& counts) {
  std::vector<std::pair<DropReason, int64_t>> out;
  for (const v1::DropCount& count : counts) out.emplace_back(FromProto(count.reason()), count.rows());
  return out;
}

}  // namespace

absl::StatusOr<DockStatusInfo> Client::GetDockStatus(const std::string& dock) {
  v1::GetDockStatusRequest request;
  request.set_dock(dock);
  v1::GetDockStatusResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->GetDockStatus(&context, request, &response)));
  DockStatusInfo info;
  TDOCK_ASSIGN_OR_RETURN(info.spec, FromProto(response.spec()));
  for (const v1::StepStatus& step : response.steps()) {
    info.steps.push_back({.step = step.step(),
                          .partition = step.partition(),
                          .ready = Counts(step.ready()),
                          .consumed = Counts(step.consumed()),
                          .sealed = step.sealed(),
                          .dropped = DropCounts(step.dropped())});
  }
  for (const v1::ConsumerStatus& consumer : response.consumers()) {
    info.waiters.emplace_back(consumer.name(), consumer.waiters());
    ConsumerStalenessInfo& staleness = info.staleness.emplace_back();
    staleness.consumer = consumer.name();
    staleness.versioned_rows = consumer.versioned_rows();
    staleness.staleness_sum = consumer.staleness_sum();
    staleness.stale_rows = consumer.stale_rows();
    for (const v1::StalenessBucket& bucket : consumer.staleness()) {
      staleness.buckets.emplace_back(bucket.max(), bucket.rows());
    }
  }
  for (const ConsumerSpec& consumer : info.spec.consumers) {
    if (consumer.lease_ms == 0 || consumer.removed) continue;
    for (const v1::ConsumerStatus& status : response.consumers()) {
      if (status.name() != consumer.name) continue;
      info.leases.push_back({.consumer = status.name(),
                             .leases_in_flight = status.leases_in_flight(),
                             .rows_in_flight = status.rows_in_flight(),
                             .expiries = status.lease_expiries(),
                             .nacks = status.lease_nacks(),
                             .rows_returned = status.rows_returned()});
    }
  }
  info.reservations_live = response.reservations_live();
  info.reservations_parked = response.reservations_parked();
  info.admission_waits = response.admission_waits();
  info.admission_wait_seconds = response.admission_wait_seconds();
  info.arena_bytes_used = response.arena_bytes_used();
  info.arena_bytes_reserved = response.arena_bytes_reserved();
  info.memory_limit_bytes = response.memory_limit_bytes();
  info.parked_puts = response.parked_puts();
  info.dropped_total = DropCounts(response.dropped_total());
  info.version = response.version();
  return info;
}

absl::StatusOr<ConsumerSpec> Client::AddConsumer(const std::string& dock,
                                                 const ConsumerSpec& consumer) {
  v1::AddConsumerRequest request;
  request.set_dock(dock);
  *request.mutable_consumer() = ToProto(consumer);
  v1::AddConsumerResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->AddConsumer(&context, request, &response)));
  return FromProto(response.consumer());
}

absl::StatusOr<ColumnSpec> Client::AddColumn(const std::string& dock,
                                             const ColumnSpec& column) {
  v1::AddColumnRequest request;
  request.set_dock(dock);
  *request.mutable_column() = ToProto(column);
  v1::AddColumnResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->AddColumn(&context, request, &response)));
  return FromProto(response.column());
}

absl::StatusOr<std::vector<ShardInfo>> Client::ListShards() {
  v1::ListShardsResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->ListShards(&context, {}, &response)));
  std::vector<ShardInfo> shards;
  for (const v1::ShardInfo& shard : response.shards()) {
    shards.push_back({.id = shard.id(),
                      .address = shard.address(),
                      .node = shard.node(),
                      .away = shard.state() == v1::SHARD_AWAY,
                      .memory_bytes = static_cast<int64_t>(shard.memory_bytes()),
                      .memory_limit_bytes = static_cast<int64_t>(shard.memory_limit_bytes()),
                      .incarnation = shard.incarnation()});
  }
  return shards;
}

absl::StatusOr<RowListing> Client::ListRows(const std::string& dock, int64_t step,
                                            const std::vector<std::string>& columns) {
  v1::ListRowsRequest request;
  request.set_dock(dock);
  request.set_step(step);
  request.mutable_columns()->Assign(columns.begin(), columns.end());
  v1::ListRowsResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->ListRows(&context, request, &response)));
  RowListing listing = FromProto(response);
  if (response.cell_locations()) TDOCK_RETURN_IF_ERROR(impl_->ReadListedCells(dock, listing));
  return listing;
}

absl::StatusOr<ConsumerSpec> Client::RemoveConsumer(const std::string& dock,
                                                    const std::string& consumer) {
  v1::RemoveConsumerRequest request;
  request.set_dock(dock);
  request.set_consumer(consumer);
  v1::RemoveConsumerResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(
      FromGrpcStatus(impl_->stub->RemoveConsumer(&context, request, &response)));
  return FromProto(response.consumer());
}

absl::Status Client::ReleaseStep(const std::string& dock, int64_t step) {
  v1::ReleaseStepRequest request;
  request.set_dock(dock);
  request.set_step(step);
  v1::ReleaseStepResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  return FromGrpcStatus(impl_->stub->ReleaseStep(&context, request, &response));
}

absl::StatusOr<int64_t> Client::SetVersion(const std::string& dock, int64_t version) {
  v1::SetVersionRequest request;
  request.set_dock(dock);
  request.set_version(version);
  v1::SetVersionResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->SetVersion(&context, request, &response)));
  return response.version();
}

absl::StatusOr<ClientReservation> Client::Reserve(const ClientReserve& reserve) {
  v1::ReserveRequest request;
  request.set_dock(reserve.dock);
  if (reserve.version.has_value()) request.set_version(*reserve.version);
  request.set_rows(reserve.rows);
  request.mutable_group_sizes()->Assign(reserve.group_sizes.begin(), reserve.group_sizes.end());
  request.set_deadline_ms(absl::ToInt64Milliseconds(reserve.deadline));
  request.set_wait_ms(absl::ToInt64Milliseconds(reserve.wait));
  v1::ReserveResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context, reserve.wait);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->Reserve(&context, request, &response)));
  ClientReservation out;
  out.id = response.reservation();
  out.step = response.step();
  out.rows.assign(response.rows().begin(), response.rows().end());
  out.version = response.version();
  out.deadline = absl::FromUnixMillis(response.deadline_unix_ms());
  out.timed_out = response.timed_out();
  return out;
}

absl::StatusOr<int64_t> Client::Drop(const std::string& dock, int64_t step,
                                     const std::vector<int64_t>& rows,
                                     const std::vector<int64_t>& groups, DropReason reason) {
  if (rows.empty() && groups.empty()) {
    // Nothing to drop (a list of failed rows that came out empty): 0, without
    // asking the server; the step and reason are still checked.
    if (step < 0) return absl::InvalidArgumentError(absl::StrCat("drop: step ", step, " is negative"));
    if (DropReasonName(reason) == DropReasonName(DropReason::kUnspecified) ||
        ServerOwnDropReason(reason)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "drop: reason '", DropReasonName(reason),
          "' is not one of filtered, failed, stale, sealed, expired, surplus, other"));
    }
    return 0;
  }
  v1::DropRequest request;
  request.set_dock(dock);
  request.set_step(step);
  request.mutable_rows()->Add(rows.begin(), rows.end());
  request.mutable_groups()->Add(groups.begin(), groups.end());
  request.set_reason(ToProto(reason));
  v1::DropResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->Drop(&context, request, &response)));
  return response.dropped();
}

absl::StatusOr<int64_t> Client::Seal(const std::string& dock, int64_t step,
                                     const std::vector<std::string>& required_columns) {
  v1::SealRequest request;
  request.set_dock(dock);
  request.set_step(step);
  for (const std::string& column : required_columns) request.add_required_columns(column);
  v1::SealResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->Seal(&context, request, &response)));
  return response.dropped();
}

absl::StatusOr<int64_t> Client::Ack(const std::string& dock,
                                     const std::string& consumer, uint64_t lease_id) {
  return impl_->EndLease(dock, consumer, lease_id, /*ack=*/true);
}

absl::StatusOr<int64_t> Client::Nack(const std::string& dock,
                                      const std::string& consumer, uint64_t lease_id) {
  return impl_->EndLease(dock, consumer, lease_id, /*ack=*/false);
}

absl::StatusOr<std::vector<ClientLease>> Client::ListLeases(const std::string& dock,
                                                            const std::string& consumer) {
  v1::ListLeasesRequest request;
  request.set_dock(dock);
  request.set_consumer(consumer);
  v1::ListLeasesResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->ListLeases(&context, request, &response)));
  std::vector<ClientLease> leases;
  for (const v1::LeaseInfo& lease : response.leases()) {
    leases.push_back({lease.lease_id(), lease.step(), lease.rank(), lease.round(), lease.rows(),
                      lease.expires_in_ms() < 0 ? absl::InfiniteDuration()
                                                : absl::Milliseconds(lease.expires_in_ms())});
  }
  return leases;
}

absl::StatusOr<ClientNackAll> Client::NackAll(const std::string& dock,
                                              const std::string& consumer,
                                              std::optional<int32_t> rank) {
  v1::NackAllRequest request;
  request.set_dock(dock);
  request.set_consumer(consumer);
  if (rank.has_value()) request.set_rank(*rank);
  v1::NackAllResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  TDOCK_RETURN_IF_ERROR(FromGrpcStatus(impl_->stub->NackAll(&context, request, &response)));
  return ClientNackAll{response.leases(), response.rows()};
}

absl::Status Client::Checkpoint(const std::string& dir) {
  v1::CheckpointRequest request;
  request.set_dir(dir);
  v1::CheckpointResponse response;
  grpc::ClientContext context;
  impl_->SetDeadline(&context);
  return FromGrpcStatus(impl_->stub->Checkpoint(&context, request, &response));
}

ClientColumn ClientColumn::View(std::string name, DType dtype,
                                std::vector<int64_t> offsets, ByteSpan data) {
  ClientColumn column;
  column.name = std::move(name);
  column.dtype = dtype;
  column.offsets = std::move(offsets);
  column.borrows = true;
  column.borrowed = data;
  return column;
}

const PackedColumn* ClientBatch::column(std::string_view name) const {
  for (const PackedColumn& column : columns) {
    if (column.name == name) return &column;
  }
  return nullptr;
}

}  // namespace tdock
