#include "bench/transport_env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace tdock::bench {
namespace {

constexpr int kMaxMessageBytes = 1 << 30;  // the client's default limit

int64_t BatchBytes(int64_t tokens) {
  return kRows * tokens * static_cast<int64_t>(sizeof(int32_t));
}

// One batch per step, one consumer that takes the whole step; the arena pool
// is warmed so the first steps do not page-fault.
DockSpec SpecFor(std::string name, int64_t tokens) {
  DockSpec spec;
  spec.name = std::move(name);
  spec.num_prompts = kRows;
  spec.n_samples_per_prompt = 1;
  spec.steps_in_flight = 1;
  spec.length_columns = {kColumn};
  ColumnSpec column;
  column.name = kColumn;
  column.dtype = DType::kInt32;
  spec.columns.push_back(column);
  ConsumerSpec consumer;
  consumer.name = kConsumer;
  consumer.columns = {kColumn};
  consumer.dispatch_size = kRows;
  spec.consumers.push_back(consumer);
  spec.preallocate_bytes = BatchBytes(tokens) + DockSpec::kDefaultChunkBytes;
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TransportEnv>> TransportEnv::Start(
    const std::vector<int64_t>& tokens_per_row) {
  std::unique_ptr<TransportEnv> env(new TransportEnv());
  int64_t max_tokens = 0;
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  for (int64_t tokens : tokens_per_row) {
    max_tokens = std::max(max_tokens, tokens);
    options.docks.push_back(SpecFor(PutDock(tokens), tokens));
    options.docks.push_back(SpecFor(GetDock(tokens), tokens));
  }
  // The payload: seeded values, written once so its pages are resident.
  env->payload_bytes_ = BatchBytes(max_tokens);
  env->payload_ = {static_cast<char*>(std::aligned_alloc(64, env->payload_bytes_)),
                   &std::free};
  if (env->payload_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a payload of ", env->payload_bytes_, " bytes"));
  }
  auto* values = reinterpret_cast<int32_t*>(env->payload_.get());
  std::mt19937 rng(20240611);
  for (int64_t i = 0; i < env->payload_bytes_ / 4; ++i) values[i] = static_cast<int32_t>(rng());

  env->server_ = std::make_unique<Server>(std::move(options));
  TDOCK_RETURN_IF_ERROR(env->server_->Start());
  const std::string address = absl::StrCat("127.0.0.1:", env->server_->port());
  ClientOptions client_options;
  client_options.address = address;
  client_options.max_message_bytes = kMaxMessageBytes;
  TDOCK_ASSIGN_OR_RETURN(env->client_, Client::Connect(client_options));
  TDOCK_RETURN_IF_ERROR(env->client_->Health());

  TDOCK_ASSIGN_OR_RETURN(
      env->baseline_server_,
      BaselineServer::Start(ByteSpan(env->payload_.get(), env->payload_bytes_),
                            kMaxMessageBytes));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  env->baseline_stub_ = Baseline::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", env->baseline_server_->port()),
      grpc::InsecureChannelCredentials(), args));
  return env;
}

TransportEnv::~TransportEnv() = default;

std::string TransportEnv::PutDock(int64_t tokens) { return absl::StrCat("put-", tokens); }
std::string TransportEnv::GetDock(int64_t tokens) { return absl::StrCat("get-", tokens); }

absl::StatusOr<std::shared_ptr<Dock>> TransportEnv::FindDock(const std::string& name) {
  return server_->registry().Find(name);
}

ByteSpan TransportEnv::Payload(int64_t tokens) const {
  return ByteSpan(payload_.get(), static_cast<size_t>(BatchBytes(tokens)));
}

std::vector<int64_t> TransportEnv::Offsets(int64_t tokens) {
  std::vector<int64_t> offsets(kRows + 1);
  for (int64_t i = 0; i <= kRows; ++i) offsets[i] = i * tokens;
  return offsets;
}

absl::Status TransportEnv::FillStep(Dock& dock, int64_t step, int64_t tokens) const {
  PutInput in;
  in.step = step;
  in.wait = absl::Seconds(10);
  for (int64_t i = 0; i < kRows; ++i) in.rows.push_back(i);
  PackedColumn column;
  column.name = kColumn;
  column.dtype = DType::kInt32;
  column.offsets = Offsets(tokens);
  column.segments.push_back(Payload(tokens));
  in.columns.push_back(std::move(column));
  absl::Status status;
  absl::Notification done;
  dock.Put(std::move(in), [&](absl::StatusOr<PutResult> result) {
    status = result.status();
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

absl::Status TransportEnv::Verify(const PackedColumn& column, int64_t tokens) const {
  const std::string where = absl::StrCat("column '", column.name, "' of a batch of ",
                                         tokens, " tokens per row");
  if (column.name != kColumn || column.dtype != DType::kInt32) {
    return absl::InternalError(absl::StrCat(where, ": wrong name or dtype"));
  }
  if (column.offsets != Offsets(tokens)) {
    return absl::InternalError(absl::StrCat(where, ": offsets differ"));
  }
  const ByteSpan expected = Payload(tokens);
  if (column.data_bytes() != static_cast<int64_t>(expected.size())) {
    return absl::InternalError(absl::StrCat(where, ": ", column.data_bytes(),
                                            " bytes, expected ", expected.size()));
  }
  size_t pos = 0;
  for (const ByteSpan& segment : column.segments) {
    if (std::memcmp(segment.data(), expected.data() + pos, segment.size()) != 0) {
      return absl::InternalError(
          absl::StrCat(where, ": payload differs in bytes [", pos, ", ",
                       pos + segment.size(), ")"));
    }
    pos += segment.size();
  }
  return absl::OkStatus();
}

}  // namespace tdock::bench
