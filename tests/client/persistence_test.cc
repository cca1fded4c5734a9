// Persistence end to end with in-process servers on a --data_dir: write,
// consume part, stop, start: the same rows are ready, the same rows are
// consumed (FIFO hand-outs, balanced rounds and their deliveries, leases in
// flight), the same bytes come back; releases survive; a checkpoint of a
// running server starts a server with the same state.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/grpc_environment.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// 4 prompts x 2 samples; "reader" takes 2 rows per Get; "bal" is balanced
// over 2 ranks, 1 row per rank and round; "leased" has a 60 s lease.
DockSpec Spec() {
  DockSpec spec;
  spec.name = "durable";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"ids"};
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}, {"score", DType::kFloat32, {}, 0, false}};
  spec.consumers = {{"reader", {"ids"}, 2, 1, false, Policy::kFifo, 0},
                    {"bal", {"ids"}, 1, 2, false, Policy::kBalanced, 0},
                    {"leased", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  spec.consumers[2].lease_ms = 60'000;
  return spec;
}

std::vector<std::vector<int32_t>> Ids() {
  std::vector<std::vector<int32_t>> rows;
  for (int r = 0; r < 8; ++r) rows.push_back(std::vector<int32_t>(r + 1, 100 * r));
  return rows;
}

class PersistenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/tdock_data_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    server_.reset();
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  void Start(const std::string& data_dir) {
    if (server_ != nullptr) server_->Shutdown();
    server_ = std::make_unique<Server>(ServerOptions{
        .listen = "127.0.0.1:0", .persistence = {.data_dir = data_dir}});
    ASSERT_OK(server_->Start());
    ASSERT_OK_AND_ASSIGN(client_,
                         Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
  }
  void Stop() {
    client_.reset();
    server_->Shutdown();
    server_.reset();
  }
  ClientBatch Get(const std::string& consumer, int rank = 0,
                  std::optional<int64_t> round = std::nullopt) {
    absl::StatusOr<ClientBatch> batch =
        client_->Get({.dock = "durable", .consumer = consumer, .rank = rank,
                      .step = round.has_value() ? std::optional<int64_t>(0) : std::nullopt,
                      .wait = absl::ZeroDuration(), .round = round});
    EXPECT_OK(batch);
    return batch.ok() ? *batch : ClientBatch{};
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// Write, consume part, stop, start: readiness, consumption, rounds, leases
// and bytes are as they were, and consumption goes on where it stopped.
TEST_F(PersistenceTest, RestartKeepsCellsConsumptionRoundsAndLeases) {
  Start(dir_ + "/db");
  ASSERT_OK(client_->CreateDock(Spec()));
  ClientPut put{.dock = "durable", .step = 0, .rows = {0, 1, 2, 3, 4, 5, 6, 7}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, Ids()));
  ASSERT_OK(client_->Put(put));
  const ClientBatch first = Get("reader");
  ASSERT_EQ(first.rows, (std::vector<int64_t>{0, 1}));
  const ClientBatch share0 = Get("bal", 0);
  ASSERT_EQ(share0.round, 0);
  const ClientBatch leased = Get("leased");
  ASSERT_NE(leased.lease_id, 0u);
  Stop();

  Start(dir_ + "/db");
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("durable"));
  ASSERT_EQ(status.steps.size(), 1u);
  EXPECT_EQ(status.steps[0].ready[0].second, 8);
  EXPECT_EQ(status.steps[0].consumed[0].second, 2);  // reader
  EXPECT_EQ(status.steps[0].consumed[1].second, 2);  // bal: round 0 (2 ranks)
  EXPECT_EQ(status.steps[0].consumed[2].second, 2);  // leased
  ASSERT_EQ(status.leases.size(), 1u);
  EXPECT_EQ(status.leases[0].rows_in_flight, 2);
  // The same bytes.
  ASSERT_OK_AND_ASSIGN(ClientBatch read, client_->Read("durable", 0, {7, 3}, {"ids"}));
  EXPECT_EQ(read.Row<int32_t>(read.columns[0], 0), std::vector<int32_t>(8, 700));
  EXPECT_EQ(read.Row<int32_t>(read.columns[0], 1), std::vector<int32_t>(4, 300));
  // Consumption goes on: reader never sees rows 0 and 1 again.
  EXPECT_EQ(Get("reader").rows, (std::vector<int64_t>{2, 3}));
  // The round is the same for rank 0; rank 1 gets its share of it.
  EXPECT_EQ(Get("bal", 0, 0).rows, share0.rows);
  const ClientBatch share1 = Get("bal", 1);
  EXPECT_EQ(share1.round, 0);
  EXPECT_NE(share1.rows, share0.rows);
  // The lease handed out before the restart is still in flight and can be
  // acknowledged by its id.
  ASSERT_OK_AND_ASSIGN(int64_t acked, client_->Ack("durable", "leased", leased.lease_id));
  EXPECT_EQ(acked, 2);
  Stop();

  Start(dir_ + "/db");
  ASSERT_OK_AND_ASSIGN(status, client_->GetDockStatus("durable"));
  EXPECT_EQ(status.steps[0].consumed[0].second, 4);
  EXPECT_EQ(status.leases[0].leases_in_flight, 0);
  EXPECT_EQ(status.leases[0].rows_in_flight, 0);
}

// A released step stays released; a deleted dock stays deleted.
TEST_F(PersistenceTest, ReleaseAndDeleteSurviveRestart) {
  Start(dir_ + "/db");
  ASSERT_OK(client_->CreateDock(Spec()));
  DockSpec other = Spec();
  other.name = "gone";
  ASSERT_OK(client_->CreateDock(other));
  for (int64_t step : {0, 1}) {
    ClientPut put{.dock = "durable", .step = step, .rows = {0, 1}};
    put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{1}, {2}}));
    ASSERT_OK(client_->Put(put));
  }
  ASSERT_OK(client_->ReleaseStep("durable", 0));
  ASSERT_OK(client_->DeleteDock("gone"));
  Stop();
  Start(dir_ + "/db");
  ASSERT_OK_AND_ASSIGN(std::vector<DockSummaryInfo> docks, client_->ListDocks());
  ASSERT_EQ(docks.size(), 1u);
  EXPECT_EQ(docks[0].name, "durable");
  EXPECT_EQ(docks[0].live_steps, std::vector<int64_t>{1});
  EXPECT_STATUS(client_->Read("durable", 0, {0}, {"ids"}), absl::StatusCode::kFailedPrecondition,
                "step 0");
}

// A checkpoint of a running server starts a server with the same state;
// Checkpoint without --data_dir is FAILED_PRECONDITION.
TEST_F(PersistenceTest, CheckpointStartsAnEqualServer) {
  Start(dir_ + "/db");
  ASSERT_OK(client_->CreateDock(Spec()));
  ClientPut put{.dock = "durable", .step = 0, .rows = {5}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{55, 56}}));
  ASSERT_OK(client_->Put(put));
  ASSERT_OK(client_->Checkpoint(dir_ + "/copy"));
  EXPECT_STATUS(client_->Checkpoint(dir_ + "/copy"), absl::StatusCode::kInvalidArgument,
                "checkpoint");
  Stop();
  Start(dir_ + "/copy");
  ASSERT_OK_AND_ASSIGN(ClientBatch read, client_->Read("durable", 0, {5}, {"ids"}));
  EXPECT_EQ(read.Row<int32_t>(read.columns[0], 0), (std::vector<int32_t>{55, 56}));
  Stop();

  server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
  ASSERT_OK(server_->Start());
  ASSERT_OK_AND_ASSIGN(client_,
                       Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
  EXPECT_STATUS(client_->Checkpoint(dir_ + "/x"), absl::StatusCode::kFailedPrecondition,
                "without --data_dir");
}

// Cells of 1 KiB and more live in the store's value log: they come back,
// and Gets go on, after a restart past steps_in_flight released steps and in
// a checkpoint (taken before the server released
// their step and wrote new cells over them); a value log that lost its file
// fails start-up with DATA_LOSS naming the dock.
TEST_F(PersistenceTest, LargeCellsSurviveRestartAndCheckpoint) {
  Start(dir_ + "/db");
  ASSERT_OK(client_->CreateDock(Spec()));
  std::vector<std::vector<int32_t>> rows;
  for (int r = 0; r < 8; ++r) {
    rows.emplace_back(1000 + 300 * r);
    for (size_t i = 0; i < rows[r].size(); ++i) rows[r][i] = static_cast<int32_t>(r * 7919 + i);
  }
  ClientPut put{.dock = "durable", .step = 0, .rows = {0, 1, 2, 3, 4, 5, 6, 7}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, rows));
  ASSERT_OK(client_->Put(put));
  ASSERT_OK(client_->Checkpoint(dir_ + "/copy"));
  ASSERT_OK(client_->ReleaseStep("durable", 0));
  for (int64_t step = 1; step <= 3; ++step) {  // new cells, written where step 0's were
    put.step = step;
    ASSERT_OK(client_->Put(put));
    ASSERT_OK(client_->ReleaseStep("durable", step));
  }
  put.step = 4;
  ASSERT_OK(client_->Put(put));
  Stop();
  for (const std::string& dir : {dir_ + "/db", dir_ + "/copy"}) {
    Start(dir);
    const int64_t step = dir == dir_ + "/db" ? 4 : 0;
    ASSERT_OK_AND_ASSIGN(ClientBatch read,
                         client_->Read("durable", step, {0, 1, 2, 3, 4, 5, 6, 7}, {"ids"}));
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(read.Row<int32_t>(read.columns[0], r), rows[r]) << dir << " row " << r;
    }
    // Consumption goes on at the step the server had reached.
    const ClientBatch got = Get("reader");
    EXPECT_EQ(got.step, step) << dir;
    EXPECT_EQ(got.rows.size(), 2u) << dir;
    Stop();
  }
  ASSERT_EQ(std::system(absl::StrCat("rm -f '", dir_, "'/copy/values/*.vlog").c_str()), 0);
  server_ = std::make_unique<Server>(ServerOptions{
      .listen = "127.0.0.1:0", .persistence = {.data_dir = dir_ + "/copy"}});
  EXPECT_STATUS(server_->Start(), absl::StatusCode::kDataLoss,
                "recovering dock 'durable' from '" + dir_ + "/copy'");
}

// A store that is not a RocksDB directory fails start-up, naming it.
TEST_F(PersistenceTest, UnusableDataDirFailsStartUp) {
  server_ = std::make_unique<Server>(
      ServerOptions{.listen = "127.0.0.1:0", .persistence = {.data_dir = "/proc/no-store"}});
  EXPECT_STATUS(server_->Start(), absl::StatusCode::kUnavailable, "/proc/no-store");
}

}  // namespace
}  // namespace tdock
