// Shared set-up of the service tests: an in-process Server on 127.0.0.1:0, a
// loopback channel and a Dock stub, plus builders for specs and packed
// columns and helpers that poll the dock's status.
#ifndef TDOCK_TESTS_SERVICE_SERVICE_FIXTURE_H_
#define TDOCK_TESTS_SERVICE_SERVICE_FIXTURE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "proto/tdock/v1/convert.h"
#include "server/server.h"
#include "tdock/v1/dock.grpc.pb.h"
#include "tests/test_util.h"

namespace tdock::service_testing {

// A packed column of int32 cells, one vector per row.
inline v1::PackedColumn Int32Column(
    const std::string& name, const std::vector<std::vector<int32_t>>& cells) {
  v1::PackedColumn column;
  column.set_name(name);
  column.set_dtype(v1::INT32);
  column.add_offsets(0);
  std::string data;
  for (const std::vector<int32_t>& cell : cells) {
    column.add_offsets(column.offsets(column.offsets_size() - 1) +
                       static_cast<int64_t>(cell.size()));
    data.append(reinterpret_cast<const char*>(cell.data()),
                cell.size() * sizeof(int32_t));
  }
  column.set_data(std::move(data));
  return column;
}

// The bytes of row `i` of a packed column with `item_bytes` per item.
inline std::string CellBytes(const v1::PackedColumn& column, int i,
                             int64_t item_bytes) {
  const int64_t begin = column.offsets(i) * item_bytes;
  const int64_t end = column.offsets(i + 1) * item_bytes;
  return column.data().substr(begin, end - begin);
}

// Dock "grpo": 2 prompts x 2 samples = 4 rows per step, 2 steps in flight.
// Columns prompt_ids and response_ids (int32, the length columns) and
// rewards (float32). Consumers: actor (prompt_ids, response_ids; 2 rows per
// Get) and reward (all three columns; 4 rows per Get).
inline v1::DockSpec GrpoSpec() {
  v1::DockSpec spec;
  spec.set_name("grpo");
  spec.set_num_prompts(2);
  spec.set_n_samples_per_prompt(2);
  spec.set_steps_in_flight(2);
  spec.add_length_columns("prompt_ids");
  spec.add_length_columns("response_ids");
  for (const char* name : {"prompt_ids", "response_ids"}) {
    v1::ColumnSpec* column = spec.add_columns();
    column->set_name(name);
    column->set_dtype(v1::INT32);
  }
  v1::ColumnSpec* rewards = spec.add_columns();
  rewards->set_name("rewards");
  rewards->set_dtype(v1::FLOAT32);
  v1::ConsumerSpec* actor = spec.add_consumers();
  actor->set_name("actor");
  actor->add_columns("prompt_ids");
  actor->add_columns("response_ids");
  actor->set_dispatch_size(2);
  v1::ConsumerSpec* reward = spec.add_consumers();
  reward->set_name("reward");
  reward->add_columns("prompt_ids");
  reward->add_columns("response_ids");
  reward->add_columns("rewards");
  reward->set_dispatch_size(4);
  return spec;
}

class ServiceTest : public ::testing::Test {
 protected:
  // Lets a test suite change the server's options before it starts.
  virtual void Configure(ServerOptions& options) {}

  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.shutdown_grace = absl::Seconds(5);
    Configure(options);
    server_ = std::make_unique<Server>(std::move(options));
    ASSERT_OK(server_->Start());
    ASSERT_GT(server_->port(), 0);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ =
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                  grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Dock::NewStub(channel_);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // A context whose deadline bounds every test call.
  static std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = absl::Seconds(30)) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return context;
  }

  absl::Status CreateDock(const v1::DockSpec& spec) {
    v1::CreateDockRequest request;
    *request.mutable_spec() = spec;
    v1::CreateDockResponse response;
    return FromGrpcStatus(
        stub_->CreateDock(Context().get(), request, &response));
  }

  absl::Status Put(const v1::PutRequest& request) {
    v1::PutResponse response;
    return FromGrpcStatus(stub_->Put(Context().get(), request, &response));
  }

  absl::StatusOr<v1::GetResponse> Get(const v1::GetRequest& request) {
    v1::GetResponse response;
    const grpc::Status status = stub_->Get(Context().get(), request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  // A GetStream's messages, in order, and its status.
  absl::StatusOr<std::vector<v1::GetResponse>> GetStream(const v1::GetRequest& request) {
    std::unique_ptr<grpc::ClientContext> context = Context();
    std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader =
        stub_->GetStream(context.get(), request);
    std::vector<v1::GetResponse> parts(1);
    while (reader->Read(&parts.back())) parts.emplace_back();
    parts.pop_back();
    const absl::Status status = FromGrpcStatus(reader->Finish());
    if (!status.ok()) return status;
    return parts;
  }

  absl::StatusOr<v1::GetDockStatusResponse> Status(const std::string& dock) {
    v1::GetDockStatusRequest request;
    request.set_dock(dock);
    v1::GetDockStatusResponse response;
    const grpc::Status status =
        stub_->GetDockStatus(Context().get(), request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  // Runs `call`, expects `code` and a message containing each of `names`,
  // and checks that the status of dock "grpo" did not change.
  void ExpectRejected(const std::function<absl::Status()>& call,
                      absl::StatusCode code,
                      const std::vector<std::string>& names) {
    ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse before, Status("grpo"));
    const absl::Status status = call();
    for (const std::string& name : names) EXPECT_STATUS(status, code, name);
    ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse after, Status("grpo"));
    EXPECT_TRUE(::google::protobuf::util::MessageDifferencer::Equals(before, after))
        << "before: " << before.DebugString()
        << "after: " << after.DebugString();
  }

  // Sends raw bytes as a Put, bypassing protobuf.
  absl::Status RawPut(const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    auto context = Context();
    std::promise<grpc::Status> done;
    generic.UnaryCall(context.get(), "/tdock.v1.Dock/Put", grpc::StubOptions(),
                      &request, &response,
                      [&done](grpc::Status status) { done.set_value(status); });
    return FromGrpcStatus(done.get_future().get());
  }

  // Parked Gets of `consumer`, or -1 if the status cannot be read.
  int64_t Waiters(const std::string& dock, const std::string& consumer) {
    absl::StatusOr<v1::GetDockStatusResponse> status = Status(dock);
    if (!status.ok()) return -1;
    for (const v1::ConsumerStatus& c : status->consumers()) {
      if (c.name() == consumer) return c.waiters();
    }
    return -1;
  }

  // Polls until `consumer` has `count` parked Gets; false after 30 s. A
  // synchronization point, not a timing assertion.
  bool AwaitWaiters(const std::string& dock, const std::string& consumer,
                    int64_t count) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      if (Waiters(dock, consumer) == count) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }

  // Step 0, all four rows of prompt_ids and response_ids (lengths 1..4 and
  // 2..8), the cells the round-trip tests compare against.
  static v1::PutRequest FullStepPut(int64_t step = 0) {
    v1::PutRequest put;
    put.set_dock("grpo");
    put.set_step(step);
    for (int row = 0; row < 4; ++row) put.add_rows(row);
    *put.add_columns() =
        Int32Column("prompt_ids", {{1}, {2, 3}, {4, 5, 6}, {7, 8, 9, 10}});
    *put.add_columns() =
        Int32Column("response_ids", {{11, 12},
                                     {13, 14, 15, 16},
                                     {17, 18, 19, 20, 21, 22},
                                     {23, 24, 25, 26, 27, 28, 29, 30}});
    return put;
  }

  static v1::GetRequest GetFor(const std::string& consumer, int64_t count,
                               int64_t wait_ms) {
    v1::GetRequest get;
    get.set_dock("grpo");
    get.set_consumer(consumer);
    get.set_count(count);
    get.set_wait_ms(wait_ms);
    return get;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Dock::Stub> stub_;
};

}  // namespace tdock::service_testing

#endif  // TDOCK_TESTS_SERVICE_SERVICE_FIXTURE_H_
