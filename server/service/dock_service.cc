#include "server/service/dock_service.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/tdock/v1/convert.h"
#include "server/service/byte_buffers.h"
#include "server/service/wait_call.h"

namespace tdock {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

namespace {

// Parses a small typed request out of a raw request buffer.
template <typename Message>
absl::Status ParseRequest(const grpc::ByteBuffer& request, Message* message) {
  if (!request.Valid()) return absl::OkStatus();  // an empty message
  grpc::ByteBuffer copy(request);  // shares the slices; Deserialize clears it
  const grpc::Status parsed =
      grpc::SerializationTraits<Message>::Deserialize(&copy, message);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", Message::descriptor()->full_name(), ": ",
                     parsed.error_message()));
  }
  return absl::OkStatus();
}

// A wait bound in milliseconds from the wire; `what` names the request.
absl::StatusOr<absl::Duration> WaitBound(const std::string& dock,
                                         absl::string_view what,
                                         int64_t wait_ms, const ServiceLimits& limits) {
  if (wait_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " on dock '", dock, "': wait_ms must be >= 0, got ", wait_ms));
  }
  TDOCK_RETURN_IF_ERROR(ServiceLimits::Check(
      wait_ms, limits.max_wait_ms, absl::StrCat(what, " on dock '", dock, "': wait_ms"),
      "max_wait_ms"));
  return absl::Milliseconds(wait_ms);
}

absl::Status WritePutResponse(const PutResult& result,
                              grpc::ByteBuffer* response) {
  v1::PutResponse reply;
  reply.set_rows(result.rows);
  reply.set_bytes(result.bytes);
  reply.mutable_assigned()->Assign(result.assigned.begin(), result.assigned.end());
  reply.set_step(result.step);
  reply.set_replayed(result.replayed);
  bool own_buffer = false;
  return FromGrpcStatus(grpc::SerializationTraits<v1::PutResponse>::Serialize(
      reply, response, &own_buffer));
}

// A Put cannot be cancelled once parked, so its wait ends at the RPC
// deadline: a parked Put the client gave up on is not kept waiting. (A retry
// already under way at that moment may still commit just after it.)
absl::Duration ClampToDeadline(absl::Duration wait,
                               const grpc::CallbackServerContext& context) {
  const absl::Duration left =
      absl::FromChrono(context.deadline()) - absl::Now();
  return std::max(absl::ZeroDuration(), std::min(wait, left));
}

absl::StatusOr<GetInput> ToGetInput(const v1::GetRequest& request,
                                    bool metadata_only, const ServiceLimits& limits) {
  GetInput input;
  input.consumer = request.consumer();
  input.rank = request.rank();
  input.replica = request.replica();
  if (request.has_step()) input.step = request.step();
  input.count = request.count();
  if (request.has_round()) input.round = request.round();
  TDOCK_ASSIGN_OR_RETURN(
      input.wait, WaitBound(request.dock(), metadata_only ? "Sample" : "Get",
                            request.wait_ms(), limits));
  TDOCK_RETURN_IF_ERROR(ServiceLimits::Check(
      request.count(), limits.max_rows_per_request,
      absl::StrCat(metadata_only ? "Sample" : "Get", " on dock '", request.dock(), "': count"),
      "max_rows_per_request"));
  input.metadata_only = metadata_only;
  return input;
}

// What a Get-like call starts in the dock with, or why it cannot.
struct WaitStart {
  std::shared_ptr<Dock> dock;
  GetInput input;
};
absl::StatusOr<WaitStart> PrepareWait(DockRegistry& registry, const v1::GetRequest& request,
                                      bool metadata_only, const ServiceLimits& limits) {
  WaitStart start;
  TDOCK_ASSIGN_OR_RETURN(start.input, ToGetInput(request, metadata_only, limits));
  TDOCK_ASSIGN_OR_RETURN(start.dock, registry.Find(request.dock()));
  return start;
}

// Starts a unary Get-like call: errors before the dock is reached finish inline.
grpc::ServerUnaryReactor* StartWait(
    grpc::CallbackServerContext* context, DockRegistry& registry,
    const v1::GetRequest& request, bool metadata_only,
    const ServiceLimits& limits, ServiceObserver* observer,
    absl::FunctionRef<internal::WaitCall*()> new_call) {
  absl::StatusOr<WaitStart> start = PrepareWait(registry, request, metadata_only, limits);
  if (!start.ok()) return FinishNow(context, start.status());
  internal::WaitCall* call = new_call();  // deleted by its OnDone
  call->Start(start->dock, std::move(start->input), observer);
  return call;
}

// A streaming call that fails before it starts.
class FailedStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }

 private:
  void OnDone() override { delete this; }
};

}  // namespace


absl::Status ServiceLimits::PutRows(const v1::PutRequest& put) const {
  return Check(std::max<int64_t>({put.rows_size(), put.keys_size(), put.new_rows(),
                                  put.group_sizes_size(), put.versions_size()}),
               max_rows_per_request, absl::StrCat("Put on dock '", put.dock(), "': rows"),
               "max_rows_per_request");
}

absl::Status ServiceLimits::Check(int64_t value, int64_t limit, absl::string_view what,
                                  absl::string_view flag) {
  if (limit <= 0 || value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", value,
                                                 " is over the server's limit of ", limit,
                                                 " (--", flag, ")"));
}

// ---- control plane ----

absl::StatusOr<shard::ShardReconciler::Extents> DockService::CellsOnLiveShards(
    const std::string& dock, const std::vector<PackedColumn>& columns) const {
  shard::ShardReconciler::Extents extents;
  std::optional<CellLocation> last;  // a Put's cells are one extent of one shard
  for (const PackedColumn& column : columns) {
    char record[kCellLocationBytes];
    for (int64_t r = 0; r * kCellLocationBytes + kCellLocationBytes <= column.data_bytes(); ++r) {
      CopyFromSegments(column.segments, r * kCellLocationBytes, kCellLocationBytes, record);
      absl::StatusOr<CellLocation> where = DecodeCellLocation(ByteSpan(record, sizeof(record)));
      if (!where.ok()) continue;  // the dock's checks name it
      if (last.has_value() && last->shard == where->shard && last->extent == where->extent) {
        continue;
      }
      last = *where;
      extents[where->shard].push_back(where->extent);
      const ShardIncarnation on{where->shard, static_cast<uint32_t>(where->extent >> 32)};
      if (shards_->Lost(on)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Put on dock '", dock, "': its cells are on shard ", on.shard, " incarnation ",
            on.incarnation, ", which was declared lost: this controller counts its cells gone "
            "(the shard restarts to serve again)"));
      }
    }
  }
  for (auto& [shard, ids] : extents) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return extents;
}

grpc::ServerUnaryReactor* DockService::Put(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<internal::RequestBytes> bytes =
      internal::RequestBytes::From(*request);
  if (!bytes.ok()) return FinishNow(context, bytes.status());
  absl::StatusOr<bulk::Decoded<v1::PutRequest>> message = bulk::DecodePut(bytes->spans());
  if (!message.ok()) return FinishNow(context, message.status());
  v1::PutRequest& header = message->header;
  if (header.cell_locations() != (shards_ != nullptr)) {
    return FinishNow(
        context,
        shards_ != nullptr
            ? absl::FailedPreconditionError(absl::StrCat(
                  "Put on dock '", header.dock(), "': this server is a controller, which holds "
                  "where cells are and not their bytes: Put to a shard (ListShards lists them)"))
            : absl::InvalidArgumentError(absl::StrCat(
                  "Put on dock '", header.dock(), "': cell_locations come from a shard to its "
                  "controller; this server is standalone and holds the cells themselves")));
  }
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(header.dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<absl::Duration> wait = WaitBound(header.dock(), "Put", header.wait_ms(), limits_);
  if (!wait.ok()) return FinishNow(context, wait.status());
  if (absl::Status rows = limits_.PutRows(header); !rows.ok()) return FinishNow(context, rows);

  PutInput input;
  input.step = header.step();
  input.rows.assign(header.rows().begin(), header.rows().end());
  input.columns = std::move(message->columns);  // spans into *bytes
  shard::ShardReconciler::Extents extents;
  if (shards_ != nullptr) {
    absl::StatusOr<shard::ShardReconciler::Extents> alive =
        CellsOnLiveShards(header.dock(), input.columns);
    if (!alive.ok()) return FinishNow(context, alive.status());
    extents = *std::move(alive);
  }
  input.wait = ClampToDeadline(*wait, *context);
  input.ack_lease = header.ack_lease();
  input.keys.assign(header.keys().begin(), header.keys().end());
  input.new_rows = header.new_rows();
  input.group_sizes.assign(header.group_sizes().begin(), header.group_sizes().end());
  input.versions.assign(header.versions().begin(), header.versions().end());
  input.reservation = header.reservation();
  input.put_id = header.put_id();
  for (int i = 0; i < header.new_columns_size(); ++i) {
    absl::StatusOr<ColumnSpec> column = FromProto(header.new_columns(i));
    if (!column.ok()) {
      return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                    "Put on dock '", header.dock(), "': new_columns[", i,
                                    "]: ", column.status().message())));
    }
    input.new_columns.push_back(*std::move(column));
  }
  // A shard's commit: in flight at its reconciler until answered.
  shard::ShardReconciler* reconciler = extents.empty() ? nullptr : reconciler_;
  if (reconciler != nullptr) {
    if (absl::Status begun = reconciler->BeginCommit(header.dock(), extents); !begun.ok()) {
      return FinishNow(context, begun);
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The callback owns the request slices, so the spans in `input` stay valid
  // until the core has copied them and completed the Put.
  // A controller's Put carries locations: no payload crosses it.
  ServiceObserver* payload = header.cell_locations() ? nullptr : observer_;
  (*dock)->Put(std::move(input), [reactor, response, payload, reconciler,
                                  extents = std::move(extents), bytes = *std::move(bytes)](
                                     absl::StatusOr<PutResult> result) {
    if (reconciler != nullptr) reconciler->EndCommit(extents);
    absl::Status status = result.status();
    if (status.ok()) status = WritePutResponse(*result, response);
    if (status.ok() && payload != nullptr && !result->replayed) {
      payload->OnPayload(result->bytes, 0);
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

namespace {

// A Reserve, which may wait for admission: its parked reservation is
// cancelled with the call. Deleted in OnDone. The dock is held weakly (a
// parked call does not keep a deleted dock alive; deletion answers it).
class ReserveCall final : public grpc::ServerUnaryReactor {
 public:
  ReserveCall(std::shared_ptr<Dock> dock, v1::ReserveResponse* response)
      : dock_(dock), response_(response) {}

  void Start(const std::shared_ptr<Dock>& dock, ReserveInput input) {
    const uint64_t id = dock->Reserve(
        std::move(input), [this](absl::StatusOr<Reservation> granted) { Complete(granted); });
    uint64_t cancel = 0;
    {
      absl::MutexLock lock(&mu_);
      if (completed_ || id == 0) return;
      parked_ = id;
      if (cancelled_) cancel = id;
    }
    if (cancel != 0) dock->Cancel(cancel);
  }

 private:
  void OnCancel() override {
    uint64_t cancel = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (!completed_) cancel = parked_;
    }
    if (cancel == 0) return;
    if (std::shared_ptr<Dock> dock = dock_.lock()) dock->Cancel(cancel);
  }
  void OnDone() override { delete this; }

  void Complete(const absl::StatusOr<Reservation>& granted) {
    if (granted.ok()) {
      response_->set_reservation(granted->id);
      response_->set_step(granted->step);
      response_->mutable_rows()->Assign(granted->rows.begin(), granted->rows.end());
      response_->set_version(granted->version);
      response_->set_timed_out(granted->timed_out);
      // The server's docks run on the real clock.
      if (!granted->timed_out) {
        response_->set_deadline_unix_ms(absl::ToUnixMillis(granted->deadline));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      completed_ = true;
    }
    Finish(ToGrpcStatus(granted.status()));
  }

  const std::weak_ptr<Dock> dock_;
  v1::ReserveResponse* const response_;
  absl::Mutex mu_;
  uint64_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* DockService::Reserve(grpc::CallbackServerContext* context,
                                               const v1::ReserveRequest* request,
                                               v1::ReserveResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(request->dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<absl::Duration> wait =
      WaitBound(request->dock(), "Reserve", request->wait_ms(), limits_);
  if (!wait.ok()) return FinishNow(context, wait.status());
  int64_t rows = request->rows();
  for (int32_t size : request->group_sizes()) rows += std::max(size, 0);
  if (absl::Status limited = ServiceLimits::Check(
          rows, limits_.max_rows_per_request,
          absl::StrCat("Reserve on dock '", request->dock(), "': rows"), "max_rows_per_request");
      !limited.ok()) {
    return FinishNow(context, limited);
  }
  ReserveInput input;
  if (request->has_version()) input.version = request->version();
  input.rows = request->rows();
  input.group_sizes.assign(request->group_sizes().begin(), request->group_sizes().end());
  input.deadline = absl::Milliseconds(request->deadline_ms());
  input.wait = ClampToDeadline(*wait, *context);
  auto* call = new ReserveCall(*dock, response);  // deleted by its OnDone
  call->Start(*dock, std::move(input));
  return call;
}

grpc::ServerUnaryReactor* DockService::Get(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  v1::GetRequest get;
  const absl::Status parsed = ParseRequest(*request, &get);
  if (!parsed.ok()) return FinishNow(context, parsed);
  return StartWait(context, *registry_, get, /*metadata_only=*/false, limits_, observer_,
                   [response] { return new internal::GetCall(response); });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DockService::GetStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  v1::GetRequest get;
  absl::Status status = Authorize(*context);
  if (status.ok()) status = ParseRequest(*request, &get);
  absl::StatusOr<WaitStart> start =
      status.ok() ? PrepareWait(*registry_, get, /*metadata_only=*/false, limits_) : status;
  if (!start.ok()) return new FailedStream(start.status());  // deleted by its OnDone
  auto* call = new internal::GetStreamCall();                 // deleted by its OnDone
  call->Start(start->dock, std::move(start->input), observer_);
  return call;
}

grpc::ServerUnaryReactor* DockService::Sample(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::SampleResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  return StartWait(context, *registry_, *request, /*metadata_only=*/true, limits_,
                   observer_, [response] { return new internal::SampleCall(response); });
}

grpc::ServerUnaryReactor* DockService::Read(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  return FinishNow(context, DoRead(*request, response));
}

absl::Status DockService::DoRead(const grpc::ByteBuffer& request,
                                 grpc::ByteBuffer* response) {
  v1::ReadRequest read;
  TDOCK_RETURN_IF_ERROR(ParseRequest(request, &read));
  TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<Dock> dock,
                         registry_->Find(read.dock()));
  TDOCK_RETURN_IF_ERROR(ServiceLimits::Check(
      std::max(read.rows_size(), read.keys_size()), limits_.max_rows_per_request,
      absl::StrCat("Read on dock '", read.dock(), "': rows"), "max_rows_per_request"));
  const std::vector<int64_t> rows(read.rows().begin(), read.rows().end());
  const std::vector<std::string> columns(read.columns().begin(),
                                         read.columns().end());
  if (read.keys_size() > 0 && !rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Read on dock '", read.dock(), "' names rows and keys; name one or the other"));
  }
  Batch batch;
  if (read.keys_size() > 0) {
    const std::vector<std::string> keys(read.keys().begin(), read.keys().end());
    TDOCK_ASSIGN_OR_RETURN(batch, dock->ReadKeys(keys, columns));
  } else {
    TDOCK_ASSIGN_OR_RETURN(batch, dock->Read(read.step(), rows, columns));
  }
  if (observer_ != nullptr && !batch.cell_locations) observer_->OnPayload(0, batch.payload_bytes());
  *response = internal::BatchToByteBuffer(std::move(batch));
  return absl::OkStatus();
}

}  // namespace tdock
