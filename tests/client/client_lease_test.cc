// Leases over the wire: the lease a Get hands out reaches the C++ client;
// Ack, Nack, NackAll and a Put's ack_lease reach the dock, ListLeases lists
// the leases in flight; lease errors arrive with the
// server's code and message; Sample hands out leases too; status and the
// spec carry lease_ms and the lease counters.
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

// 4 rows; "worker" reads prompts under a 60 s lease and writes scores;
// "trainer" reads scores without a lease.
DockSpec LeaseSpec() {
  DockSpec spec;
  spec.name = "leased";
  spec.num_prompts = 4;
  spec.length_columns = {"prompt"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"score", DType::kFloat32, {}, 0, false}};
  ConsumerSpec worker{"worker", {"prompt"}, 2, 1, false, Policy::kFifo, 0};
  worker.lease_ms = 60'000;
  spec.consumers = {worker, {"trainer", {"score"}, 4, 1, false, Policy::kFifo, 0}};
  return spec;
}

class ClientLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
    ASSERT_OK(server_->Start());
    ASSERT_OK_AND_ASSIGN(
        client_, Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
    ASSERT_OK_AND_ASSIGN(DockSpec created, client_->CreateDock(LeaseSpec()));
    EXPECT_EQ(created.consumers[0].lease_ms, 60'000);
    ClientPut put{.dock = "leased", .step = 0, .rows = {0, 1, 2, 3}};
    put.columns.push_back(
        ClientColumn::FromRows<int32_t>("prompt", DType::kInt32, {{1}, {2, 2}, {3}, {4}}));
    ASSERT_OK(client_->Put(put));
  }
  void TearDown() override { server_->Shutdown(); }

  absl::StatusOr<PutAck> PutScores(const std::vector<int64_t>& rows, uint64_t ack_lease) {
    ClientPut put{.dock = "leased", .step = 0, .rows = rows, .ack_lease = ack_lease};
    std::vector<std::vector<float>> scores(rows.size(), std::vector<float>{0.5f});
    put.columns.push_back(ClientColumn::FromRows<float>("score", DType::kFloat32, scores));
    return client_->Put(put);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// A Get's lease reaches the client; a Put with ack_lease settles it; Ack of
// the same lease then fails with FAILED_PRECONDITION naming it.
TEST_F(ClientLeaseTest, GetLeaseAndPutAck) {
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "leased", .consumer = "worker"}));
  ASSERT_EQ(batch.rows.size(), 2u);
  EXPECT_NE(batch.lease_id, 0u);
  EXPECT_EQ(batch.lease, absl::Seconds(60));
  ASSERT_OK(PutScores(batch.rows, batch.lease_id));
  EXPECT_STATUS(client_->Ack("leased", "worker", batch.lease_id),
                absl::StatusCode::kFailedPrecondition,
                absl::StrCat("lease ", batch.lease_id, " is not in flight"));
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("leased"));
  ASSERT_EQ(status.leases.size(), 1u);
  EXPECT_EQ(status.leases[0].consumer, "worker");
  EXPECT_EQ(status.leases[0].leases_in_flight, 0);
}

// Nack hands rows back at once; Ack returns the rows covered; the status
// counts in-flight rows and nacks.
TEST_F(ClientLeaseTest, NackThenAck) {
  ASSERT_OK_AND_ASSIGN(ClientBatch first, client_->Get({.dock = "leased", .consumer = "worker"}));
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("leased"));
  EXPECT_EQ(status.leases[0].rows_in_flight, 2);
  ASSERT_OK_AND_ASSIGN(int64_t nacked, client_->Nack("leased", "worker", first.lease_id));
  EXPECT_EQ(nacked, 2);
  ASSERT_OK_AND_ASSIGN(ClientBatch again, client_->Get({.dock = "leased", .consumer = "worker"}));
  EXPECT_EQ(again.rows, first.rows);
  ASSERT_OK_AND_ASSIGN(int64_t acked, client_->Ack("leased", "worker", again.lease_id));
  EXPECT_EQ(acked, 2);
  ASSERT_OK_AND_ASSIGN(status, client_->GetDockStatus("leased"));
  EXPECT_EQ(status.leases[0].nacks, 1);
  EXPECT_EQ(status.leases[0].rows_returned, 2);
  EXPECT_EQ(status.leases[0].rows_in_flight, 0);
}

// ListLeases and NackAll over the wire: the leases in flight with their
// step, rank, rows and time left; NackAll hands them all back (the rows go
// out again at once); a bad rank or consumer keeps its code and message.
TEST_F(ClientLeaseTest, ListLeasesAndNackAll) {
  ASSERT_OK_AND_ASSIGN(ClientBatch first, client_->Get({.dock = "leased", .consumer = "worker"}));
  ASSERT_OK_AND_ASSIGN(ClientBatch second, client_->Get({.dock = "leased", .consumer = "worker"}));
  ASSERT_OK_AND_ASSIGN(std::vector<ClientLease> leases, client_->ListLeases("leased", "worker"));
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0].lease_id, first.lease_id);
  EXPECT_EQ(leases[1].lease_id, second.lease_id);
  EXPECT_EQ(leases[0].step, 0);
  EXPECT_EQ(leases[0].round, -1);
  EXPECT_EQ(leases[0].rows, 2);
  EXPECT_GT(leases[0].expires_in, absl::ZeroDuration());
  EXPECT_LE(leases[0].expires_in, absl::Seconds(60));
  EXPECT_STATUS(client_->NackAll("leased", "worker", 1), absl::StatusCode::kInvalidArgument,
                "rank 1 is out of range [0, 1)");
  EXPECT_STATUS(client_->ListLeases("leased", "trainer"), absl::StatusCode::kFailedPrecondition,
                "consumer 'trainer' has no leases");
  ASSERT_OK_AND_ASSIGN(ClientNackAll back, client_->NackAll("leased", "worker"));
  EXPECT_EQ(back.leases, 2);
  EXPECT_EQ(back.rows, 4);
  ASSERT_OK_AND_ASSIGN(leases, client_->ListLeases("leased", "worker"));
  EXPECT_TRUE(leases.empty());
  ASSERT_OK_AND_ASSIGN(ClientBatch again, client_->Get({.dock = "leased", .consumer = "worker"}));
  EXPECT_EQ(again.rows.size(), 2u);
}

// Sample (metadata only) claims under a lease too.
TEST_F(ClientLeaseTest, SampleHandsOutALease) {
  ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                       client_->Sample({.dock = "leased", .consumer = "worker"}));
  EXPECT_NE(batch.lease_id, 0u);
  EXPECT_EQ(batch.lease, absl::Seconds(60));
  ASSERT_OK(client_->Ack("leased", "worker", batch.lease_id));
}

// Errors keep the server's code and message; a Put with a bad ack_lease
// writes nothing.
TEST_F(ClientLeaseTest, LeaseErrors) {
  EXPECT_STATUS(client_->Ack("leased", "worker", 77), absl::StatusCode::kNotFound,
                "lease 77 was never handed out");
  EXPECT_STATUS(client_->Ack("leased", "trainer", 1), absl::StatusCode::kFailedPrecondition,
                "consumer 'trainer' has no leases");
  EXPECT_STATUS(client_->Nack("nodock", "worker", 1), absl::StatusCode::kNotFound, "nodock");
  EXPECT_STATUS(PutScores({0}, 77), absl::StatusCode::kNotFound, "nothing was written");
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("leased"));
  EXPECT_EQ(status.steps[0].ready[1].second, 0);  // no score written
}

// A lease_ms out of range is refused at creation, naming the consumer.
TEST_F(ClientLeaseTest, LeaseMsIsValidated) {
  DockSpec spec = LeaseSpec();
  spec.name = "bad";
  spec.consumers[0].lease_ms = -1;
  EXPECT_STATUS(client_->CreateDock(spec), absl::StatusCode::kInvalidArgument,
                "consumer 'worker' lease_ms -1 must be in [0, 86400000]");
}

}  // namespace
}  // namespace tdock
