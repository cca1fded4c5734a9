// The Dock service over loopback: every RPC of the control and data plane,
// and that payload comes back byte for byte.
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

// CreateDock answers with the spec with defaults filled in, ListDocks shows
// the dock, DeleteDock removes it.
TEST_F(ServiceTest, CreateListDeleteDock) {
  v1::CreateDockRequest create;
  *create.mutable_spec() = GrpoSpec();
  v1::CreateDockResponse created;
  ASSERT_TRUE(stub_->CreateDock(Context().get(), create, &created).ok());
  EXPECT_EQ(created.spec().name(), "grpo");
  EXPECT_EQ(created.spec().consumers(0).dp_size(), 1);  // default filled in
  EXPECT_EQ(created.spec().columns_size(), 3);

  v1::ListDocksResponse list;
  ASSERT_TRUE(stub_->ListDocks(Context().get(), {}, &list).ok());
  ASSERT_EQ(list.docks_size(), 1);
  EXPECT_EQ(list.docks(0).name(), "grpo");
  EXPECT_EQ(list.docks(0).rows_per_step(), 4);
  EXPECT_EQ(list.docks(0).steps_in_flight(), 2);

  v1::DeleteDockRequest del;
  del.set_dock("grpo");
  v1::DeleteDockResponse deleted;
  ASSERT_TRUE(stub_->DeleteDock(Context().get(), del, &deleted).ok());
  list.Clear();
  ASSERT_TRUE(stub_->ListDocks(Context().get(), {}, &list).ok());
  EXPECT_EQ(list.docks_size(), 0);
  EXPECT_STATUS(Status("grpo"), absl::StatusCode::kNotFound, "grpo");
}

// CreateDock with the same spec again is accepted (idempotent).
TEST_F(ServiceTest, CreateDockTwiceWithSameSpecIsIdempotent) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  EXPECT_OK(CreateDock(GrpoSpec()));
}

// Put then Get returns exactly the bytes that were put, row by row, with
// offsets that are the rows' lengths, and token counts that are the sums of
// the length columns.
TEST_F(ServiceTest, PutThenGetReturnsIdenticalBytes) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  const v1::PutRequest put = FullStepPut();
  v1::PutResponse put_response;
  ASSERT_TRUE(stub_->Put(Context().get(), put, &put_response).ok());
  EXPECT_EQ(put_response.rows(), 4);
  EXPECT_EQ(put_response.bytes(),
            static_cast<int64_t>(put.columns(0).data().size() +
                                 put.columns(1).data().size()));

  std::map<int64_t, int> seen;
  for (int call = 0; call < 2; ++call) {
    ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 2, 0)));
    EXPECT_EQ(got.step(), 0);
    EXPECT_FALSE(got.timed_out());
    ASSERT_EQ(got.rows_size(), 2);
    ASSERT_EQ(got.columns_size(), 2);
    for (int i = 0; i < got.rows_size(); ++i) {
      const int64_t row = got.rows(i);
      ++seen[row];
      int64_t tokens = 0;
      for (int c = 0; c < 2; ++c) {
        const v1::PackedColumn& column = got.columns(c);
        EXPECT_EQ(column.name(), put.columns(c).name());
        EXPECT_EQ(column.dtype(), v1::INT32);
        EXPECT_EQ(CellBytes(column, i, 4), CellBytes(put.columns(c), row, 4))
            << "row " << row << " column " << column.name();
        tokens += column.offsets(i + 1) - column.offsets(i);
      }
      EXPECT_EQ(got.token_counts(i), tokens);
    }
  }
  EXPECT_EQ(seen.size(), 4u);  // every row exactly once
}

// A payload large enough to span many gRPC slices each way (4 rows of 3 MiB
// random bytes) round-trips unchanged.
TEST_F(ServiceTest, LargePayloadRoundTrip) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> prompts(4), responses(4);
  for (int row = 0; row < 4; ++row) {
    prompts[row].resize(16 + row);
    for (int32_t& v : prompts[row]) v = static_cast<int32_t>(rng());
    responses[row].resize((3 << 20) / 4 + row * 1000);
    for (int32_t& v : responses[row]) v = static_cast<int32_t>(rng());
  }
  v1::PutRequest put;
  put.set_dock("grpo");
  for (int row = 0; row < 4; ++row) put.add_rows(row);
  *put.add_columns() = Int32Column("prompt_ids", prompts);
  *put.add_columns() = Int32Column("response_ids", responses);
  ASSERT_OK(Put(put));

  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 4, 0)));
  ASSERT_EQ(got.rows_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const int64_t row = got.rows(i);
    EXPECT_EQ(CellBytes(got.columns(0), i, 4),
              CellBytes(put.columns(0), row, 4));
    EXPECT_EQ(CellBytes(got.columns(1), i, 4),
              CellBytes(put.columns(1), row, 4));
  }
}

// GetStream serves what Get serves, in parts of whole columns, the first
// with the batch's fields: the 1 MiB prompt column closes the first part,
// the 4 MiB response column is the second; the cells are the bytes
// written. A GetStream that cannot start (no such dock) ends with the
// error as its status.
TEST_F(ServiceTest, GetStreamServesTheBatchInParts) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  std::vector<std::vector<int32_t>> prompts(4), responses(4);
  for (int row = 0; row < 4; ++row) {
    prompts[row].assign((1 << 18) / 4, row);
    responses[row].assign((1 << 20) / 4 - row, 100 + row);
  }
  v1::PutRequest put;
  put.set_dock("grpo");
  for (int row = 0; row < 4; ++row) put.add_rows(row);
  *put.add_columns() = Int32Column("prompt_ids", prompts);
  *put.add_columns() = Int32Column("response_ids", responses);
  ASSERT_OK(Put(put));

  ASSERT_OK_AND_ASSIGN(std::vector<v1::GetResponse> parts,
                       GetStream(GetFor("actor", 4, 0)));
  ASSERT_EQ(parts.size(), 2u);
  const v1::GetResponse& head = parts[0];
  ASSERT_EQ(head.rows_size(), 4);
  EXPECT_TRUE(head.end_of_step());
  ASSERT_EQ(head.columns_size(), 1);
  ASSERT_EQ(parts[1].columns_size(), 1);
  EXPECT_EQ(parts[1].rows_size(), 0);
  const v1::PackedColumn& got_prompts = head.columns(0);
  const v1::PackedColumn& got_responses = parts[1].columns(0);
  EXPECT_EQ(got_prompts.name(), "prompt_ids");
  EXPECT_EQ(got_responses.name(), "response_ids");
  for (int i = 0; i < 4; ++i) {
    const int64_t row = head.rows(i);
    EXPECT_EQ(CellBytes(got_prompts, i, 4), CellBytes(put.columns(0), row, 4));
    EXPECT_EQ(CellBytes(got_responses, i, 4), CellBytes(put.columns(1), row, 4));
  }

  v1::GetRequest missing = GetFor("actor", 4, 0);
  missing.set_dock("nope");
  EXPECT_EQ(GetStream(missing).status().code(), absl::StatusCode::kNotFound);
}

// Read returns the requested cells without claiming them: a Get afterwards
// still receives every row.
TEST_F(ServiceTest, ReadReturnsCellsWithoutClaiming) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  const v1::PutRequest put = FullStepPut();
  ASSERT_OK(Put(put));

  v1::ReadRequest read;
  read.set_dock("grpo");
  read.set_step(0);
  read.add_rows(3);
  read.add_rows(1);
  read.add_columns("response_ids");
  v1::GetResponse cells;
  ASSERT_TRUE(stub_->Read(Context().get(), read, &cells).ok());
  ASSERT_EQ(cells.rows_size(), 2);
  EXPECT_EQ(cells.rows(0), 3);
  EXPECT_EQ(cells.rows(1), 1);
  ASSERT_EQ(cells.columns_size(), 1);
  EXPECT_EQ(CellBytes(cells.columns(0), 0, 4), CellBytes(put.columns(1), 3, 4));
  EXPECT_EQ(CellBytes(cells.columns(0), 1, 4), CellBytes(put.columns(1), 1, 4));

  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 4, 0)));
  EXPECT_EQ(got.rows_size(), 4);
}

// Sample claims rows and returns token counts only; the rows it took are not
// handed to the same consumer again.
TEST_F(ServiceTest, SampleClaimsRowsAndReturnsTokenCounts) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(Put(FullStepPut()));
  v1::SampleResponse sample;
  ASSERT_TRUE(
      stub_->Sample(Context().get(), GetFor("actor", 2, 0), &sample).ok());
  ASSERT_EQ(sample.rows_size(), 2);
  ASSERT_EQ(sample.token_counts_size(), 2);
  for (int i = 0; i < 2; ++i) {
    // Row r has r + 1 prompt tokens and 2 (r + 1) response tokens.
    EXPECT_EQ(sample.token_counts(i), 3 * (sample.rows(i) + 1));
  }
  ASSERT_OK_AND_ASSIGN(v1::GetResponse rest, Get(GetFor("actor", 2, 0)));
  ASSERT_EQ(rest.rows_size(), 2);
  for (int64_t row : rest.rows()) {
    EXPECT_NE(row, sample.rows(0));
    EXPECT_NE(row, sample.rows(1));
  }
}

// GetDockStatus counts rows ready per column and consumed per consumer, and
// AddConsumer adds a consumer (with defaults) that sees every row unconsumed.
TEST_F(ServiceTest, StatusAndAddConsumer) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(Put(FullStepPut()));
  ASSERT_OK(Get(GetFor("actor", 2, 0)));

  v1::AddConsumerRequest add;
  add.set_dock("grpo");
  add.mutable_consumer()->set_name("critic");
  add.mutable_consumer()->add_columns("prompt_ids");
  v1::AddConsumerResponse added;
  ASSERT_TRUE(stub_->AddConsumer(Context().get(), add, &added).ok());
  EXPECT_EQ(added.consumer().name(), "critic");
  EXPECT_EQ(added.consumer().dp_size(), 1);
  EXPECT_GT(added.consumer().dispatch_size(), 0);

  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse status, Status("grpo"));
  EXPECT_EQ(status.spec().consumers_size(), 3);
  ASSERT_EQ(status.steps_size(), 1);
  std::map<std::string, int64_t> ready, consumed;
  for (const auto& c : status.steps(0).ready()) ready[c.name()] = c.rows();
  for (const auto& c : status.steps(0).consumed())
    consumed[c.name()] = c.rows();
  EXPECT_EQ(ready["prompt_ids"], 4);
  EXPECT_EQ(ready["response_ids"], 4);
  EXPECT_EQ(ready["rewards"], 0);
  EXPECT_EQ(consumed["actor"], 2);
  EXPECT_EQ(consumed["reward"], 0);
  EXPECT_EQ(consumed["critic"], 0);
  EXPECT_GT(status.arena_bytes_used(), 0);

  v1::SampleResponse sample;
  ASSERT_TRUE(
      stub_->Sample(Context().get(), GetFor("critic", 4, 0), &sample).ok());
  EXPECT_EQ(sample.rows_size(), 4);
}

// ReleaseStep frees a live step: it leaves the status and ListDocks.
TEST_F(ServiceTest, ReleaseStep) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(Put(FullStepPut()));
  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse before, Status("grpo"));
  ASSERT_EQ(before.steps_size(), 1);

  v1::ReleaseStepRequest release;
  release.set_dock("grpo");
  release.set_step(0);
  v1::ReleaseStepResponse released;
  ASSERT_TRUE(stub_->ReleaseStep(Context().get(), release, &released).ok());
  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse after, Status("grpo"));
  EXPECT_EQ(after.steps_size(), 0);
  v1::ListDocksResponse list;
  ASSERT_TRUE(stub_->ListDocks(Context().get(), {}, &list).ok());
  ASSERT_EQ(list.docks_size(), 1);
  EXPECT_EQ(list.docks(0).live_steps_size(), 0);
}

// The standard health service reports SERVING, overall and for tdock.v1.Dock.
TEST_F(ServiceTest, HealthCheckServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "tdock.v1.Dock"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status =
        health->Check(Context().get(), request, &response);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING)
        << service;
  }
}

}  // namespace
}  // namespace tdock::service_testing
