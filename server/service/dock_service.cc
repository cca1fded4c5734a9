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
namespace {

// Finishes a call that completed inline.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

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
}

}  // namespace

absl::Status ServiceLimits::Check(int64_t value, int64_t limit, absl::string_view what,
                                  absl::string_view flag) {
  if (limit <= 0 || value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", value,
                                                 " is over the server's limit of ", limit,
                                                 " (--", flag, ")"));
}

// ---- control plane ----

grpc::ServerUnaryReactor* DockService::CreateDock(
    grpc::CallbackServerContext* context, const v1::CreateDockRequest* request,
    v1::CreateDockResponse* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<DockSpec> spec = CreateDockSpec(*request);
  if (!spec.ok()) return FinishNow(context, spec.status());
  // Answered once the spec is stored: no RPC thread waits on the journal.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  registry_->Create(*std::move(spec),
                    [reactor, response](absl::StatusOr<std::shared_ptr<Dock>> dock) {
                      if (dock.ok()) *response->mutable_spec() = ToProto((*dock)->spec());
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
  registry_->Delete(request->dock(), [reactor](absl::Status deleted) {
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
  }
  response->set_arena_bytes_used(stats.arena_bytes_used);
  response->set_arena_bytes_reserved(stats.arena_bytes_reserved);
  response->set_memory_limit_bytes(stats.memory_limit_bytes);
  response->set_parked_puts(stats.parked_puts);
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
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(header.dock());
  if (!dock.ok()) return FinishNow(context, dock.status());
  absl::StatusOr<absl::Duration> wait = WaitBound(header.dock(), "Put", header.wait_ms(), limits_);
  if (!wait.ok()) return FinishNow(context, wait.status());
  if (absl::Status rows = ServiceLimits::Check(
          header.rows_size(), limits_.max_rows_per_request,
          absl::StrCat("Put on dock '", header.dock(), "': rows"), "max_rows_per_request");
      !rows.ok()) {
    return FinishNow(context, rows);
  }

  PutInput input;
  input.step = header.step();
  input.rows.assign(header.rows().begin(), header.rows().end());
  input.columns = std::move(message->columns);  // spans into *bytes
  input.wait = ClampToDeadline(*wait, *context);
  input.ack_lease = header.ack_lease();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The callback owns the request slices, so the spans in `input` stay valid
  // until the core has copied them and completed the Put.
  (*dock)->Put(std::move(input), [reactor, response, bytes = *std::move(bytes)](
                                     absl::StatusOr<PutResult> result) {
    absl::Status status = result.status();
    if (status.ok()) status = WritePutResponse(*result, response);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
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
      read.rows_size(), limits_.max_rows_per_request,
      absl::StrCat("Read on dock '", read.dock(), "': rows"), "max_rows_per_request"));
  const std::vector<int64_t> rows(read.rows().begin(), read.rows().end());
  const std::vector<std::string> columns(read.columns().begin(),
                                         read.columns().end());
  TDOCK_ASSIGN_OR_RETURN(Batch batch, dock->Read(read.step(), rows, columns));
  *response = internal::BatchToByteBuffer(std::move(batch));
  return absl::OkStatus();
}

}  // namespace tdock
