#include "server/service/shard_service.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "common/cell_location.h"
#include "common/logging.h"
#include "common/refusal.h"
#include "common/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/tdock/v1/bulk.h"
#include "proto/tdock/v1/convert.h"
#include "server/service/byte_buffers.h"

namespace tdock {
namespace {

void SetToken(grpc::ClientContext& context, const std::string& token) {
  if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

// A column of locations for the controller: the Put's offsets, one record a
// row.
void AddLocations(const PackedColumn& column, const std::vector<CellLocation>& where,
                  v1::PutRequest& out) {
  v1::PackedColumn* sent = out.add_columns();
  sent->set_name(column.name);
  sent->set_dtype(static_cast<v1::DType>(column.dtype));
  sent->mutable_offsets()->Assign(column.offsets.begin(), column.offsets.end());
  std::string* data = sent->mutable_data();
  data->resize(where.size() * kCellLocationBytes);
  for (size_t r = 0; r < where.size(); ++r) {
    EncodeCellLocation(where[r], data->data() + r * kCellLocationBytes);
  }
}

// An answer the controller may or may not have acted on.
bool OutcomeUnknown(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL;
}

// How often a Put waiting at the shard (for memory, or for its step to be
// admitted) is tried again.
constexpr absl::Duration kRetry = absl::Milliseconds(50);

}  // namespace

// One Put: sizes its columns (asking the controller for the spec when it
// must), stages the cells, commits their locations at the controller, and
// answers. Deleted in OnDone.
class ShardService::PutCall final : public grpc::ServerUnaryReactor {
 public:
  // `prepare`: a Shard.Prepare, answered with the prepared regions.
  PutCall(ShardService* service, grpc::CallbackServerContext* context,
          internal::RequestBytes bytes, bulk::Decoded<v1::PutRequest> put,
          grpc::ByteBuffer* response, bool prepare)
      : prepare_(prepare),
        service_(service),
        context_(context),
        bytes_(std::move(bytes)),
        put_(std::move(put)),
        response_(response),
        started_(absl::Now()),
        wait_(absl::Milliseconds(std::max<int64_t>(
            0, service->limits_.max_wait_ms > 0
                   ? std::min(put_.header.wait_ms(), service->limits_.max_wait_ms)
                   : put_.header.wait_ms()))) {}

  void Start() {
    if (ItemSizes()) {
      StageAndCommit();
      return;
    }
    // The spec, once, from the controller.
    spec_context_.set_deadline(context_->deadline());
    spec_request_.set_dock(put_.header.dock());
    service_->controller(spec_context_)
        .async()
        ->GetDockStatus(&spec_context_, &spec_request_, &spec_response_,
                        [this](grpc::Status status) {
                          if (!status.ok()) {
                            Finish(status);
                            return;
                          }
                          service_->CacheSpec(spec_response_.spec());
                          service_->store_->SetFrontStep(put_.header.dock(),
                                                         spec_response_.front_step());
                          ItemSizes(/*fall_back=*/true);
                          StageAndCommit();
                        });
  }

  void OnDone() override { delete this; }

  // Tried again after waiting for memory.
  void StageAndCommit() {
    const v1::PutRequest& header = put_.header;
    // A Put naming a reservation is of the reservation's step, which the
    // controller says.
    const std::optional<int64_t> step =
        header.reservation() != 0 ? std::nullopt : std::optional<int64_t>(header.step());
    if (header.prepared_extent() != 0) {
      // Its bytes are in place (it waited when it was prepared).
      absl::StatusOr<shard::ShardStore::Staged> filled = service_->store_->Fill(
          header.prepared_extent(), header.dock(), step, put_.columns, items_);
      if (filled.status().code() == absl::StatusCode::kInvalidArgument) {
        service_->store_->Abort(header.prepared_extent());
      }
      Stored(std::move(filled));
      return;
    }
    const bool can_wait = absl::Now() + kRetry < started_ + wait_;
    // Not admitted yet, as the feed says: it waits here, not at the
    // controller. Once its wait is over, the controller decides.
    if (step.has_value() && can_wait && service_->store_->Waits(header.dock(), *step)) {
      Wait(ServiceObserver::ShardWait::kAdmission);
      return;
    }
    if (prepare_) {
      absl::StatusOr<shard::ShardStore::Prepared> prepared =
          service_->store_->Prepare(header.dock(), step, put_.columns, items_);
      if (prepared.status().code() == absl::StatusCode::kResourceExhausted && can_wait) {
        Wait(ServiceObserver::ShardWait::kMemory);
        return;
      }
      Finish(ToGrpcStatus(Prepared(std::move(prepared))));
      return;
    }
    absl::StatusOr<shard::ShardStore::Staged> staged =
        service_->store_->Stage(header.dock(), step, put_.columns, items_);
    if (staged.status().code() == absl::StatusCode::kResourceExhausted && can_wait) {
      Wait(ServiceObserver::ShardWait::kMemory);  // memory comes back as steps are released
      return;
    }
    Stored(std::move(staged));
  }

 private:
  // A Put's cells staged (or not): recorded, then committed at the
  // controller.
  void Stored(absl::StatusOr<shard::ShardStore::Staged> staged) {
    const v1::PutRequest& header = put_.header;
    if (!staged.ok()) {
      Finish(ToGrpcStatus(WithMessage(
          staged.status(),
          absl::StrCat("Put on dock '", header.dock(), "': ", staged.status().message()))));
      return;
    }
    // Recorded before the controller hears of it (with a data dir): every
    // location it stores names cells a restarted shard still has.
    const uint64_t extent = staged->extent;
    service_->store_->Record(extent, [this, staged = *std::move(staged)](
                                         absl::Status recorded) mutable {
      if (!recorded.ok()) {
        service_->store_->Abort(staged.extent);
        Finish(ToGrpcStatus(absl::UnavailableError(absl::StrCat(
            "Put on dock '", put_.header.dock(), "': shard ", service_->store_->shard(),
            " could not record its cells: ", recorded.message()))));
        return;
      }
      Commit(std::move(staged));
    });
  }

  // A Prepare's answer: each column's regions, as chunk and offset (a
  // region split where its chunk ends).
  absl::Status Prepared(absl::StatusOr<shard::ShardStore::Prepared> prepared) {
    if (!prepared.ok()) {
      return WithMessage(prepared.status(), absl::StrCat("Prepare on dock '", put_.header.dock(),
                                                         "': ", prepared.status().message()));
    }
    v1::PrepareResponse answer;
    answer.set_extent(prepared->extent);
    answer.set_shm_prefix(service_->shm_->prefix());
    for (const std::vector<absl::Span<char>>& regions : prepared->regions) {
      v1::PreparedColumn* column = answer.add_columns();
      for (absl::Span<char> region : regions) {
        const char* at = region.data();
        uint64_t left = region.size();
        while (left > 0) {
          const std::optional<shard::ShmChunks::Place> place = service_->shm_->Locate(at);
          if (!place.has_value()) {
            service_->store_->Abort(prepared->extent);
            return absl::InternalError(absl::StrCat(
                "Prepare on dock '", put_.header.dock(), "': a region of shard ",
                service_->store_->shard(), " is not in its shared memory"));
          }
          const uint64_t bytes = std::min(left, place->chunk_bytes - place->offset);
          v1::ShmRegion* out = column->add_regions();
          out->set_chunk(place->chunk);
          out->set_offset(place->offset);
          out->set_bytes(bytes);
          out->set_chunk_bytes(place->chunk_bytes);
          at += bytes;
          left -= bytes;
        }
      }
    }
    bool own_buffer = false;
    return FromGrpcStatus(grpc::SerializationTraits<v1::PrepareResponse>::Serialize(
        answer, response_, &own_buffer));
  }

  // Sizes every column from the cached spec; with `fall_back`, a column it
  // lacks from the Put's definition of it, else its dtype.
  bool ItemSizes(bool fall_back = false) {
    items_.clear();
    for (const PackedColumn& column : put_.columns) {
      std::optional<int64_t> item = service_->CachedItemBytes(put_.header.dock(), column.name);
      if (!item.has_value() && fall_back) {
        item = static_cast<int64_t>(DTypeSize(column.dtype));
        for (const v1::ColumnSpec& defined : put_.header.new_columns()) {
          absl::StatusOr<ColumnSpec> spec = FromProto(defined);
          if (spec.ok() && spec->name == column.name) item = spec->item_bytes();
        }
      }
      if (!item.has_value()) return false;
      items_.push_back(*item);
    }
    return true;
  }

  void Commit(shard::ShardStore::Staged staged) {
    const v1::PutRequest& header = put_.header;
    extent_ = staged.extent;
    for (const std::vector<CellLocation>& column : staged.locations) {
      for (const CellLocation& cell : column) staged_bytes_ += static_cast<int64_t>(cell.bytes);
    }
    commit_request_ = header;  // every field; the columns are set below
    commit_request_.clear_columns();
    commit_request_.set_cell_locations(true);
    for (size_t i = 0; i < put_.columns.size(); ++i) {
      AddLocations(put_.columns[i], staged.locations[i], commit_request_);
    }
    if (header.wait_ms() > 0) {
      // What it waited here is taken off its wait at the controller.
      commit_request_.set_wait_ms(std::max<int64_t>(
          0, header.wait_ms() - absl::ToInt64Milliseconds(absl::Now() - started_)));
    }
    // The payload is in the store now: the request's slices can go.
    put_.columns.clear();
    bytes_.reset();
    commit_context_.set_deadline(context_->deadline());
    service_->controller(commit_context_)
        .async()
        ->Put(&commit_context_, &commit_request_, &commit_response_,
              [this](grpc::Status status) { Committed(std::move(status)); });
  }

  // Waits at the shard, `reason` counted once.
  void Wait(ServiceObserver::ShardWait reason) {
    waiting_for_ = reason;
    const int bit = 1 << static_cast<int>(reason);
    if ((counted_ & bit) == 0 && service_->observer_ != nullptr) {
      service_->observer_->OnShardWait(reason);
    }
    counted_ |= bit;
    service_->WaitAtShard(this);
  }

  void Committed(grpc::Status status) {
    if (status.ok() && commit_response_.replayed()) {
      // An earlier Put with this put_id was stored (its cells staged by this
      // shard or another): this one's copy is not needed.
      service_->store_->Abort(extent_);
      bool own_buffer = false;
      Finish(grpc::SerializationTraits<v1::PutResponse>::Serialize(commit_response_, response_,
                                                                   &own_buffer));
      return;
    }
    if (status.ok() && put_.header.reservation() != 0) {
      // Its step is known only from this answer: recorded (with a data
      // dir) before the writer hears it.
      service_->store_
          ->Commit(extent_, commit_response_.step(),
                   [this](absl::Status recorded) { Answer(std::move(recorded)); })
          .IgnoreError();  // answered through `recorded`, with it
      return;
    }
    if (status.ok()) {
      Answer(service_->store_->Commit(extent_, commit_response_.step()));
      return;
    }
    if (OutcomeUnknown(status.error_code())) {
      // The controller may have stored it: it says when the shard reconciles.
      service_->store_->Unresolved(extent_);
    } else {
      service_->store_->Abort(extent_);
      // The dock may have been made anew with other columns: the spec is
      // asked again by the next Put.
      if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          status.error_code() == grpc::StatusCode::NOT_FOUND) {
        service_->ForgetSpec(put_.header.dock());
      }
    }
    Finish(status);
  }

  // The controller stored it; `committed`: how the shard kept it.
  void Answer(absl::Status committed) {
    grpc::Status status;
    if (committed.ok()) {
      if (service_->observer_ != nullptr) {
        service_->observer_->OnPayload(staged_bytes_, 0);
        if (put_.header.prepared_extent() != 0) service_->observer_->OnShmPayload(staged_bytes_, 0);
      }
      bool own_buffer = false;
      status = grpc::SerializationTraits<v1::PutResponse>::Serialize(commit_response_, response_,
                                                                     &own_buffer);
    } else if (committed.code() == absl::StatusCode::kNotFound) {
      // Released meanwhile: the controller has them, this shard no more.
      status = ToGrpcStatus(absl::FailedPreconditionError(
          absl::StrCat("Put on dock '", put_.header.dock(), "' step ", commit_response_.step(),
                       " was stored but its step was released before the shard could keep "
                       "its cells: ", committed.message())));
    } else {
      // Sending it again with its put_id is answered as stored.
      status = ToGrpcStatus(absl::UnavailableError(
          absl::StrCat("Put on dock '", put_.header.dock(), "' step ", commit_response_.step(),
                       " was stored but shard ", service_->store_->shard(),
                       " could not record its step: ", committed.message())));
    }
    Finish(status);
  }

  // The caller gave up: so do the calls to the controller (an unanswered
  // commit leaves its cells staged, as any lost answer does).
  void OnCancel() override {
    if (service_->StopWaiting(this)) {
      Finish(ToGrpcStatus(absl::CancelledError(absl::StrCat(
          "Put on dock '", put_.header.dock(), "' cancelled while it waited at the shard for ",
          waiting_for_ == ServiceObserver::ShardWait::kAdmission
              ? absl::StrCat("step ", put_.header.step(), " to be admitted")
              : std::string("memory")))));
      return;
    }
    spec_context_.TryCancel();
    commit_context_.TryCancel();
  }

  const bool prepare_;
  ShardService* const service_;
  grpc::CallbackServerContext* const context_;
  std::optional<internal::RequestBytes> bytes_;
  bulk::Decoded<v1::PutRequest> put_;
  grpc::ByteBuffer* const response_;
  const absl::Time started_;
  const absl::Duration wait_;  // at the shard, at most
  ServiceObserver::ShardWait waiting_for_ = ServiceObserver::ShardWait::kMemory;
  int counted_ = 0;  // the reasons counted, a bit each
  std::vector<int64_t> items_;
  uint64_t extent_ = 0;
  int64_t staged_bytes_ = 0;

  grpc::ClientContext spec_context_;
  v1::GetDockStatusRequest spec_request_;
  v1::GetDockStatusResponse spec_response_;
  grpc::ClientContext commit_context_;
  v1::PutRequest commit_request_;
  v1::PutResponse commit_response_;
};

ShardService::ShardService(shard::ShardStore* store, std::shared_ptr<grpc::Channel> controller,
                           std::string controller_token, const BearerToken* token,
                           ServiceLimits limits, ServiceObserver* observer,
                           std::shared_ptr<shard::ShmChunks> shm)
    : store_(store),
      controller_(v1::Dock::NewStub(std::move(controller))),
      controller_token_(std::move(controller_token)),
      token_(token),
      limits_(limits),
      observer_(observer),
      shm_(std::move(shm)),
      retry_(timers_.NewAlarm([this] { RetryWaiting(); })) {
  std::random_device random;
  tdock::MutexLock lock(&sessions_mu_);
  // Below 2^62: never wraps to 0 (no session).
  next_session_ = ((uint64_t{random()} << 32 | random()) >> 2) + 1;
  next_pin_ = ((uint64_t{random()} << 32 | random()) >> 2) + 1;
}

ShardService::~ShardService() { EndSessions(); }

// A reader's session: its first message names it, then it stays open until
// the reader goes (or the shard ends it); its pins go with it. Deleted in
// OnDone.
class ShardService::Session final : public grpc::ServerWriteReactor<v1::AttachEvent> {
 public:
  Session(ShardService* service, uint64_t id) : service_(service), id_(id) {
    event_.set_session(id);
    StartWrite(&event_);
  }
  // Ends the stream, once.
  void End(grpc::Status status) {
    if (!ended_.exchange(true)) Finish(std::move(status));
  }
  void OnWriteDone(bool ok) override {
    if (!ok) End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the reader is gone"));
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    service_->SessionEnded(id_);
    delete this;
  }

 private:
  ShardService* const service_;
  const uint64_t id_;
  v1::AttachEvent event_;
  std::atomic<bool> ended_{false};
};

grpc::ServerWriteReactor<v1::AttachEvent>* ShardService::Attach(
    grpc::CallbackServerContext* context, const v1::AttachRequest* /*request*/) {
  const auto refuse = [](absl::Status status) {
    class Refused final : public grpc::ServerWriteReactor<v1::AttachEvent> {
     public:
      explicit Refused(absl::Status status) { Finish(ToGrpcStatus(status)); }
      void OnDone() override { delete this; }
    };
    return new Refused(std::move(status));
  };
  if (absl::Status auth = Authorize(*context); !auth.ok()) return refuse(auth);
  if (shm_ == nullptr) {
    return refuse(absl::FailedPreconditionError(absl::StrCat(
        "Attach: shard ", store_->shard(), " offers no shared memory (--shm_dir)")));
  }
  tdock::MutexLock lock(&sessions_mu_);
  if (sessions_ended_) return refuse(absl::UnavailableError("the shard is shutting down"));
  const uint64_t id = next_session_++;
  auto* session = new Session(this, id);
  sessions_[id].stream = session;
  return session;
}

void ShardService::SessionEnded(uint64_t session) {
  SessionPins ended;  // the pins go once the lock is let go
  tdock::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  ended = std::move(it->second);
  sessions_.erase(it);
  if (observer_ != nullptr && !ended.pins.empty()) {
    observer_->OnShmPins(-static_cast<int64_t>(ended.pins.size()));
  }
}

void ShardService::EndSessions() {
  tdock::MutexLock lock(&sessions_mu_);
  sessions_ended_ = true;
  // Each ends on its own thread (OnDone), which waits for this lock.
  for (auto& [id, session] : sessions_) {
    session.stream->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the shard is shutting down"));
  }
}

void ShardService::LetGo(uint64_t session, absl::Span<const uint64_t> unpin) {
  std::vector<std::vector<std::shared_ptr<const void>>> freed;  // let go unlocked
  tdock::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  for (uint64_t pin : unpin) {
    auto held = it->second.pins.find(pin);
    if (held == it->second.pins.end()) continue;
    freed.push_back(std::move(held->second));
    it->second.pins.erase(held);
  }
  if (observer_ != nullptr && !freed.empty()) {
    observer_->OnShmPins(-static_cast<int64_t>(freed.size()));
  }
}

grpc::ServerUnaryReactor* ShardService::Unpin(grpc::CallbackServerContext* context,
                                              const v1::UnpinRequest* request,
                                              v1::UnpinResponse* /*response*/) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  LetGo(request->session(), request->pins());
  return FinishNow(context, absl::OkStatus());
}

void ShardService::WaitAtShard(PutCall* call) {
  tdock::MutexLock lock(&waiting_mu_);
  waiting_.push_back(call);
  retry_->RingAt(absl::Now() + kRetry);
}

void ShardService::RetryWaiting() {
  std::vector<PutCall*> calls;
  {
    tdock::MutexLock lock(&waiting_mu_);
    calls.swap(waiting_);
  }
  // Out of the list, each is its own again: tried, then answered or back.
  for (PutCall* call : calls) call->StageAndCommit();
}

bool ShardService::StopWaiting(PutCall* call) {
  tdock::MutexLock lock(&waiting_mu_);
  auto it = std::find(waiting_.begin(), waiting_.end(), call);
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  return true;
}

v1::Dock::Stub& ShardService::controller(grpc::ClientContext& context) const {
  SetToken(context, controller_token_);
  return *controller_;
}

std::optional<int64_t> ShardService::CachedItemBytes(const std::string& dock,
                                                     const std::string& column) const {
  tdock::ReaderMutexLock lock(&mu_);
  auto it = item_bytes_.find(dock);
  if (it == item_bytes_.end()) return std::nullopt;
  auto found = it->second.find(column);
  if (found == it->second.end()) return std::nullopt;
  return found->second;
}

void ShardService::ForgetSpec(const std::string& dock) {
  tdock::MutexLock lock(&mu_);
  item_bytes_.erase(dock);
}

void ShardService::CacheSpec(const v1::DockSpec& spec) {
  absl::flat_hash_map<std::string, int64_t> items;
  for (const v1::ColumnSpec& column : spec.columns()) {
    absl::StatusOr<ColumnSpec> parsed = FromProto(column);
    if (parsed.ok()) items[parsed->name] = parsed->item_bytes();
  }
  tdock::MutexLock lock(&mu_);
  item_bytes_[spec.name()] = std::move(items);
}

grpc::ServerUnaryReactor* ShardService::Put(grpc::CallbackServerContext* context,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) {
  return StartPut(context, request, response, /*prepare=*/false);
}

grpc::ServerUnaryReactor* ShardService::Prepare(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  return StartPut(context, request, response, /*prepare=*/true);
}

grpc::ServerUnaryReactor* ShardService::StartPut(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response, bool prepare) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  absl::StatusOr<internal::RequestBytes> bytes = internal::RequestBytes::From(*request);
  if (!bytes.ok()) return FinishNow(context, bytes.status());
  absl::StatusOr<bulk::Decoded<v1::PutRequest>> message = bulk::DecodePut(bytes->spans());
  if (!message.ok()) return FinishNow(context, message.status());
  const v1::PutRequest& header = message->header;
  if (header.cell_locations()) {
    return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                  "Put on dock '", header.dock(), "': a shard takes cells, "
                                  "not cell_locations (those go to the controller)")));
  }
  if (prepare || header.prepared_extent() != 0) {
    const char* what = prepare ? "Prepare" : "Put";
    if (shm_ == nullptr) {
      return FinishNow(context, absl::FailedPreconditionError(absl::StrCat(
                                    what, " on dock '", header.dock(), "': shard ",
                                    store_->shard(), " offers no shared memory (--shm_dir)")));
    }
    for (const PackedColumn& column : message->columns) {
      if (column.data_bytes() != 0) {
        return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                      what, " on dock '", header.dock(), "': column '",
                                      column.name, "' carries ", column.data_bytes(),
                                      " bytes; a prepared Put's are in shared memory")));
      }
    }
    if (prepare && header.prepared_extent() != 0) {
      return FinishNow(context, absl::InvalidArgumentError(absl::StrCat(
                                    "Prepare on dock '", header.dock(),
                                    "': the Put names prepared_extent already")));
    }
  }
  if (absl::Status rows = limits_.PutRows(header); !rows.ok()) return FinishNow(context, rows);
  auto* call =
      new PutCall(this, context, *std::move(bytes), *std::move(message), response, prepare);
  call->Start();
  return call;
}

absl::Status ShardService::DoReadCells(const grpc::ByteBuffer& request,
                                       grpc::ByteBuffer* response) {
  v1::ReadCellsRequest read;
  grpc::ByteBuffer copy(request);
  if (grpc::Status parsed =
          grpc::SerializationTraits<v1::ReadCellsRequest>::Deserialize(&copy, &read);
      !parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed tdock.v1.ReadCellsRequest: ", parsed.error_message()));
  }
  if (read.shm_session() != 0) return ShmReadCells(read, response);
  std::vector<PackedColumn> columns;
  auto pins = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (const v1::PackedColumn& column : read.columns()) {
    TDOCK_ASSIGN_OR_RETURN(shard::ShardStore::Cells cells, ReadColumn(read.dock(), column));
    PackedColumn& out = columns.emplace_back();
    out.name = column.name();
    out.dtype = static_cast<DType>(column.dtype());
    out.offsets.assign(column.offsets().begin(), column.offsets().end());
    for (const ByteSpan& cell : cells.cells) {
      if (cell.empty()) continue;
      // Cells side by side in the store go out as one piece.
      if (!out.segments.empty() &&
          out.segments.back().data() + out.segments.back().size() == cell.data()) {
        out.segments.back() =
            ByteSpan(out.segments.back().data(), out.segments.back().size() + cell.size());
      } else {
        out.segments.push_back(cell);
      }
    }
    pins->insert(pins->end(), cells.pins.begin(), cells.pins.end());
  }
  if (observer_ != nullptr) {
    int64_t sent = 0;
    for (const PackedColumn& column : columns) sent += column.data_bytes();
    observer_->OnPayload(0, sent);
  }
  const v1::GetResponse header;
  *response = internal::EncodedToByteBuffer(bulk::EncodeBatch(header, columns), pins);
  return absl::OkStatus();
}

absl::StatusOr<shard::ShardStore::Cells> ShardService::ReadColumn(
    const std::string& dock, const v1::PackedColumn& column) const {
  const size_t rows = column.offsets_size() == 0 ? 0 : column.offsets_size() - 1;
  if (column.data().size() != rows * kCellLocationBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadCells on dock '", dock, "': column '", column.name(), "' has ", rows,
        " rows but ", column.data().size(), " bytes of cell locations (", kCellLocationBytes,
        " a row)"));
  }
  std::vector<CellLocation> where(rows);
  for (size_t r = 0; r < rows; ++r) {
    where[r] = *DecodeCellLocation(
        ByteSpan(column.data().data() + r * kCellLocationBytes, kCellLocationBytes));
  }
  absl::StatusOr<shard::ShardStore::Cells> cells = store_->Read(dock, where);
  if (!cells.ok()) {
    return absl::Status(cells.status().code(),
                        absl::StrCat("ReadCells on dock '", dock, "' column '", column.name(),
                                     "': ", cells.status().message()));
  }
  return cells;
}

absl::Status ShardService::ShmReadCells(const v1::ReadCellsRequest& read,
                                        grpc::ByteBuffer* response) {
  if (shm_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ReadCells on dock '", read.dock(), "': shard ", store_->shard(),
        " offers no shared memory (--shm_dir)"));
  }
  LetGo(read.shm_session(), read.unpin());
  v1::GetResponse answer;
  std::vector<std::shared_ptr<const void>> pins;
  int64_t sent = 0;
  for (const v1::PackedColumn& column : read.columns()) {
    TDOCK_ASSIGN_OR_RETURN(shard::ShardStore::Cells cells, ReadColumn(read.dock(), column));
    v1::PackedColumn* out = answer.add_columns();
    out->set_name(column.name());
    out->set_dtype(column.dtype());
    *out->mutable_offsets() = column.offsets();
    std::string* records = out->mutable_data();
    records->resize(cells.cells.size() * 16);
    for (size_t r = 0; r < cells.cells.size(); ++r) {
      uint64_t record[2] = {0, 0};
      if (!cells.cells[r].empty()) {
        const std::optional<shard::ShmChunks::Place> place = shm_->Locate(cells.cells[r].data());
        if (!place.has_value()) {
          return absl::InternalError(absl::StrCat(
              "ReadCells on dock '", read.dock(), "' column '", column.name(), "': shard ",
              store_->shard(), " holds a cell outside its shared memory"));
        }
        record[0] = place->chunk;
        record[1] = place->offset;
        sent += static_cast<int64_t>(cells.cells[r].size());
      }
      absl::little_endian::Store64(records->data() + r * 16, record[0]);
      absl::little_endian::Store64(records->data() + r * 16 + 8, record[1]);
    }
    pins.insert(pins.end(), cells.pins.begin(), cells.pins.end());
  }
  {
    tdock::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(read.shm_session());
    if (it == sessions_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ReadCells on dock '", read.dock(), "': shard ", store_->shard(),
          " has no session ", read.shm_session(), " (it ended: attach again)"));
    }
    const uint64_t pin = next_pin_++;
    it->second.pins[pin] = std::move(pins);
    answer.set_shm_pin(pin);
    if (observer_ != nullptr) observer_->OnShmPins(1);
  }
  if (observer_ != nullptr) {
    observer_->OnPayload(0, sent);
    observer_->OnShmPayload(0, sent);
  }
  bool own_buffer = false;
  return FromGrpcStatus(
      grpc::SerializationTraits<v1::GetResponse>::Serialize(answer, response, &own_buffer));
}

grpc::ServerUnaryReactor* ShardService::ReadCells(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  if (absl::Status auth = Authorize(*context); !auth.ok()) return FinishNow(context, auth);
  return FinishNow(context, DoReadCells(*request, response));
}

absl::Status ShardService::SyncReleases(absl::Duration timeout) {
  store_->Sweep();
  // The feed tells of every release and deletion as it comes.
  if (feed_live_.load() && !ask_once_.exchange(false)) return absl::OkStatus();
  absl::Status first;
  for (const auto& [dock, steps] : store_->HeldSteps()) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::GetDockStatusRequest request;
    request.set_dock(dock);
    v1::GetDockStatusResponse status;
    const grpc::Status asked = controller(context).GetDockStatus(&context, request, &status);
    if (asked.error_code() == grpc::StatusCode::NOT_FOUND) {
      store_->ForgetDock(dock);
      ForgetSpec(dock);
      continue;
    }
    if (!asked.ok()) {
      if (first.ok()) first = FromGrpcStatus(asked);
      continue;
    }
    store_->SetFrontStep(dock, status.front_step());
    // Every step below the front is released; a step past it may still be
    // started (a free partition's next), so it is kept.
    for (int64_t step : steps) {
      if (step >= 0 && step < status.front_step()) store_->Release(dock, step);
    }
  }
  return first;
}

absl::Status ShardService::Reconcile(absl::Duration timeout) {
  const uint64_t controller = controller_incarnation_.load();
  if (controller == 0) return absl::OkStatus();  // not registered yet
  const bool complete = controller != reconciled_with_.load();
  if (!complete && !store_->HasUnresolved()) return absl::OkStatus();
  const shard::ShardStore::Inventory inventory = store_->GetInventory();
  v1::ReconcileShardRequest request;
  request.set_shard_id(store_->shard());
  request.set_incarnation(inventory.incarnation);
  // Else the unresolved Puts alone: the rest was checked with this controller.
  const std::vector<uint64_t>& held = complete ? inventory.held : inventory.unresolved;
  request.mutable_held()->Assign(held.begin(), held.end());
  request.mutable_unresolved()->Assign(inventory.unresolved.begin(), inventory.unresolved.end());
  request.set_next_extent(inventory.next_extent);
  request.set_complete(complete);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ReconcileShardResponse response;
  const grpc::Status asked = this->controller(context).ReconcileShard(&context, request, &response);
  if (!asked.ok()) {
    return absl::Status(FromGrpcStatus(asked).code(),
                        absl::StrCat("shard ", store_->shard(), " cannot reconcile its ",
                                     inventory.held.size(), " Puts with its controller: ",
                                     asked.error_message()));
  }
  for (int i = 0; i < response.stored_size() && i < response.stored_steps_size(); ++i) {
    store_->Resolve(response.stored(i), response.stored_steps(i));
  }
  for (uint64_t extent : response.given_up()) store_->Resolve(extent, std::nullopt);
  if (response.stored_size() + response.given_up_size() + response.lost_rows() > 0) {
    TDOCK_LOG(INFO) << "shard " << store_->shard() << " reconciled with its controller: "
                    << response.stored_size() << " unanswered Puts were stored, "
                    << response.given_up_size() << " are not (retired), "
                    << response.left() << " are asked about again; "
                    << response.lost_rows() << " rows whose cells are not here were dropped "
                    << "as lost";
  }
  if (complete && !response.unsettled()) reconciled_with_.store(controller);
  return absl::OkStatus();
}

absl::Status ShardService::WatchSteps(uint64_t shard) {
  grpc::ClientContext context;
  {
    tdock::MutexLock lock(&watch_mu_);
    if (watch_stopped_) return absl::CancelledError("the shard is shutting down");
    watch_context_ = &context;
  }
  v1::WatchStepsRequest request;
  request.set_shard_id(shard);
  std::unique_ptr<grpc::ClientReader<v1::StepWatermarks>> reader =
      controller(context).WatchSteps(&context, request);
  v1::StepWatermarks message;
  while (reader->Read(&message)) ApplySteps(message);
  const grpc::Status ended = reader->Finish();
  {
    tdock::MutexLock lock(&watch_mu_);
    watch_context_ = nullptr;
  }
  // Nothing heard now: Puts go to the controller, which knows.
  if (feed_live_.exchange(false) && observer_ != nullptr) observer_->OnStepFeed(false);
  store_->ForgetWindows();
  RetryWaiting();
  return FromGrpcStatus(ended);
}

void ShardService::StopWatching() {
  tdock::MutexLock lock(&watch_mu_);
  watch_stopped_ = true;
  if (watch_context_ != nullptr) watch_context_->TryCancel();
}

void ShardService::EndWatch() {
  tdock::MutexLock lock(&watch_mu_);
  if (watch_context_ != nullptr) watch_context_->TryCancel();
}

void ShardService::ApplySteps(const v1::StepWatermarks& message) {
  if (message.snapshot()) store_->ForgetWindows();
  for (const v1::DockSteps& dock : message.docks()) {
    if (dock.deleted()) {
      store_->ForgetDock(dock.dock());
      ForgetSpec(dock.dock());
      continue;
    }
    store_->SetWindow(dock.dock(), dock.front_step(),
                      std::vector<int64_t>(dock.admitted_steps().begin(),
                                           dock.admitted_steps().end()));
  }
  if (message.snapshot()) {
    ask_once_.store(true);
    if (!feed_live_.exchange(true) && observer_ != nullptr) observer_->OnStepFeed(true);
  }
  RetryWaiting();  // a step admitted, or memory freed
}

}  // namespace tdock
