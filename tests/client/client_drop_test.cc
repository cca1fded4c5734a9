// Drops and seals over the wire: the C++ client's Drop and Seal reach the
// dock, the batches leave dropped rows out, the status carries the drop
// counts and the seal, and errors arrive with the server's code and message.
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

// 3 prompts x 2 samples; "trainer" takes whole groups of prompt + response.
DockSpec DropSpec() {
  DockSpec spec;
  spec.name = "dapo";
  spec.num_prompts = 3;
  spec.n_samples_per_prompt = 2;
  spec.length_columns = {"prompt"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"response", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"trainer", {"prompt", "response"}, 6, 1, true, Policy::kFifo, 0}};
  return spec;
}

class ClientDropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
    ASSERT_OK(server_->Start());
    ASSERT_OK_AND_ASSIGN(
        client_, Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
    ASSERT_OK(client_->CreateDock(DropSpec()).status());
  }
  void TearDown() override { server_->Shutdown(); }

  absl::Status PutColumn(const std::string& column, const std::vector<int64_t>& rows) {
    ClientPut put{.dock = "dapo", .step = 0, .rows = rows};
    std::vector<std::vector<int32_t>> values;
    for (int64_t row : rows) values.push_back({static_cast<int32_t>(row), 1});
    put.columns.push_back(ClientColumn::FromRows<int32_t>(column, DType::kInt32, values));
    return client_->Put(put).status();
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// Group 1 is filtered out, row 5's rollout failed, and the seal drops row 4
// (no response): the trainer gets groups 0 and 2 without row 5, and the
// status counts each reason.
TEST_F(ClientDropTest, DropAndSealShapeTheBatchAndTheStatus) {
  ASSERT_OK(PutColumn("prompt", {0, 1, 2, 3, 4, 5}));
  ASSERT_OK(PutColumn("response", {0, 1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(int64_t filtered, client_->Drop("dapo", 0, {}, {1}, DropReason::kFiltered));
  EXPECT_EQ(filtered, 2);
  ASSERT_OK_AND_ASSIGN(int64_t failed, client_->Drop("dapo", 0, {5}, {}, DropReason::kFailed));
  EXPECT_EQ(failed, 1);
  ASSERT_OK_AND_ASSIGN(int64_t sealed, client_->Seal("dapo", 0, {"response"}));
  EXPECT_EQ(sealed, 1);
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("dapo"));
  ASSERT_EQ(status.steps.size(), 1u);
  EXPECT_TRUE(status.steps[0].sealed);
  using Counts = std::vector<std::pair<DropReason, int64_t>>;
  const Counts expected = {{DropReason::kFiltered, 2}, {DropReason::kFailed, 1},
                           {DropReason::kSealed, 1}};
  EXPECT_EQ(status.steps[0].dropped, expected);
  EXPECT_EQ(status.dropped_total, expected);
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "dapo", .consumer = "trainer"}));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(batch.end_of_step) << "group 2 is gone whole (row 4 sealed, row 5 failed)";
  ASSERT_OK_AND_ASSIGN(status, client_->GetDockStatus("dapo"));
  EXPECT_TRUE(status.steps.empty());
  EXPECT_EQ(status.dropped_total, expected);
}

// An append declaring groups of 1 and 2 rows: the rest of the first group
// is closed ("unused"), the trainer takes both groups whole at their sizes
// once the step is sealed, and a write past a declared size is refused.
TEST_F(ClientDropTest, DeclaredGroupSizesReachTheDock) {
  ClientPut put{.dock = "dapo", .step = 0, .new_rows = 3, .group_sizes = {1, 2}};
  for (const char* column : {"prompt", "response"}) {
    put.columns.push_back(
        ClientColumn::FromRows<int32_t>(column, DType::kInt32, {{1}, {2}, {3}}));
  }
  ASSERT_OK_AND_ASSIGN(PutAck ack, client_->Put(put));
  EXPECT_EQ(ack.assigned, (std::vector<int64_t>{0, 2, 3}));
  // The refusal comes with its reason (a row dropped as unused), as the
  // dock gave it.
  const absl::Status past = PutColumn("response", {1});
  EXPECT_STATUS(past, absl::StatusCode::kFailedPrecondition,
                "row 1 is past the size of its group 0, declared with 1 rows");
  EXPECT_REFUSED(past, Refusal::kDropped, DropReason::kUnused);
  ASSERT_OK_AND_ASSIGN(int64_t sealed, client_->Seal("dapo", 0));
  EXPECT_EQ(sealed, 2) << "group 2, never opened";
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("dapo"));
  using Counts = std::vector<std::pair<DropReason, int64_t>>;
  EXPECT_EQ(status.steps.at(0).dropped,
            (Counts{{DropReason::kSealed, 2}, {DropReason::kUnused, 1}}));
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "dapo", .consumer = "trainer"}));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_TRUE(batch.end_of_step);
}

// Errors keep the dock's code and message; nothing is dropped.
TEST_F(ClientDropTest, ErrorsArriveWithTheServersCodeAndMessage) {
  ASSERT_OK(PutColumn("prompt", {0}));
  EXPECT_STATUS(client_->Drop("nosuchdock", 0, {0}, {}, DropReason::kFailed),
                absl::StatusCode::kNotFound, "nosuchdock");
  EXPECT_STATUS(client_->Drop("dapo", 0, {0}, {}, DropReason::kUnspecified),
                absl::StatusCode::kInvalidArgument, "a drop needs a reason");
  EXPECT_STATUS(client_->Drop("dapo", 0, {0}, {}, static_cast<DropReason>(kDropReasons)),
                absl::StatusCode::kInvalidArgument, "a drop needs a reason");
  EXPECT_STATUS(client_->Drop("dapo", 0, {0}, {}, DropReason::kCarried),
                absl::StatusCode::kInvalidArgument, "reason 'carried' is the server's own");
  EXPECT_STATUS(client_->Drop("dapo", 0, {}, {3}, DropReason::kFailed),
                absl::StatusCode::kInvalidArgument, "group 3 is out of range [0, 3)");
  EXPECT_STATUS(client_->Seal("dapo", 0, {"reward"}), absl::StatusCode::kInvalidArgument,
                "required column 'reward' is unknown");
  EXPECT_STATUS(client_->Seal("dapo", 1), absl::StatusCode::kFailedPrecondition,
                "step 1 has not started");
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("dapo"));
  EXPECT_TRUE(status.dropped_total.empty());
  EXPECT_FALSE(status.steps.at(0).sealed);
}

// Empty rows and groups (a list of failed rows that came out empty) drop
// nothing: 0, without asking the server, and the step is untouched; a
// negative step or a reason no drop may give is still refused.
TEST_F(ClientDropTest, DroppingNothingAnswersZero) {
  ASSERT_OK(PutColumn("prompt", {0, 1}));
  ASSERT_OK_AND_ASSIGN(int64_t dropped, client_->Drop("dapo", 0, {}, {}, DropReason::kFailed));
  EXPECT_EQ(dropped, 0);
  EXPECT_STATUS(client_->Drop("dapo", -1, {}, {}, DropReason::kFailed),
                absl::StatusCode::kInvalidArgument, "drop: step -1 is negative");
  EXPECT_STATUS(client_->Drop("dapo", 0, {}, {}, DropReason::kUnspecified),
                absl::StatusCode::kInvalidArgument, "reason 'unspecified' is not one of filtered");
  EXPECT_STATUS(client_->Drop("dapo", 0, {}, {}, DropReason::kUnused),
                absl::StatusCode::kInvalidArgument, "reason 'unused' is not one of filtered");
  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("dapo"));
  EXPECT_TRUE(status.dropped_total.empty());
  EXPECT_TRUE(status.steps.at(0).dropped.empty());
  ASSERT_OK(PutColumn("response", {0, 1}));
  ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                       client_->Get({.dock = "dapo", .consumer = "trainer", .count = 2}));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1})) << "group 0 whole: none was dropped";
}

}  // namespace
}  // namespace tdock
