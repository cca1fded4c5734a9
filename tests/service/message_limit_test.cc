// The server's message limit (--max_message_mb) and Gets: a Get claims no
// more rows than one response carries, so no row is lost to a response gRPC
// refuses to send; and a Put that would make a row larger than any response
// can carry is refused, naming the row, the consumer and the limit.
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

constexpr int kBigCell = 100'000;  // int32 items: 400 KB

class MessageLimitTest : public ServiceTest {
 protected:
  void Configure(ServerOptions& options) override { options.max_message_mb = 1; }

  // Rows `rows` of step 0: a one-item prompt and a 400 KB response each.
  absl::Status PutBigRows(const std::vector<int64_t>& rows) {
    v1::PutRequest put;
    put.set_dock("grpo");
    std::vector<std::vector<int32_t>> prompts, responses;
    for (int64_t row : rows) {
      put.add_rows(row);
      prompts.push_back({static_cast<int32_t>(row)});
      responses.push_back(std::vector<int32_t>(kBigCell, static_cast<int32_t>(row)));
    }
    *put.add_columns() = Int32Column("prompt_ids", prompts);
    *put.add_columns() = Int32Column("response_ids", responses);
    return Put(put);
  }
};

// Four rows of 400 KB under a 1 MiB limit: a Get for all four returns the
// two that fit, the next Get the other two; every row arrives exactly once
// with its bytes, and each response fits.
TEST_F(MessageLimitTest, GetReturnsWhatOneResponseCarriesAndLosesNothing) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(PutBigRows({0, 1}));
  ASSERT_OK(PutBigRows({2, 3}));
  std::multiset<int64_t> seen;
  for (int call = 0; call < 4 && seen.size() < 4; ++call) {
    ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 4, 1000)));
    EXPECT_LE(got.ByteSizeLong(), size_t{1} << 20);
    EXPECT_GE(got.rows_size(), 1);
    for (int i = 0; i < got.rows_size(); ++i) {
      seen.insert(got.rows(i));
      ASSERT_EQ(got.columns_size(), 2);
      const v1::PackedColumn& responses =
          got.columns(0).name() == "response_ids" ? got.columns(0) : got.columns(1);
      EXPECT_EQ(CellBytes(responses, i, 4).size(), size_t{kBigCell} * 4);
    }
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3}));
}

// A row written in two Puts that together would not fit one response: the
// second Put is refused and changes nothing.
TEST_F(MessageLimitTest, PutOfARowNoResponseCarriesIsRefused) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  v1::PutRequest prompts;
  prompts.set_dock("grpo");
  prompts.add_rows(0);
  *prompts.add_columns() =
      Int32Column("prompt_ids", {std::vector<int32_t>(200'000, 1)});  // 800 KB
  ASSERT_OK(Put(prompts));
  v1::PutRequest responses;
  responses.set_dock("grpo");
  responses.add_rows(0);
  *responses.add_columns() =
      Int32Column("response_ids", {std::vector<int32_t>(kBigCell, 2)});  // 400 KB
  EXPECT_STATUS(Put(responses), absl::StatusCode::kInvalidArgument,
                "row 0 would take");
  EXPECT_STATUS(Put(responses), absl::StatusCode::kInvalidArgument, "max_message_mb");
  // Nothing was written: a response that fits is accepted for the cell.
  *responses.mutable_columns(0) = Int32Column("response_ids", {{2, 2}});
  EXPECT_OK(Put(responses));
}

// A consumer that could never be served is refused: after rows of 500 KB,
// a whole-group consumer (a group of two is over the 1 MiB limit) cannot be
// added, and nothing changes.
TEST_F(MessageLimitTest, AddConsumerThatNoResponseCouldServeIsRefused) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  for (int64_t row : {0, 1}) {
    v1::PutRequest put;
    put.set_dock("grpo");
    put.add_rows(row);
    *put.add_columns() = Int32Column("response_ids", {std::vector<int32_t>(125'000, 1)});
    ASSERT_OK(Put(put));
  }
  v1::AddConsumerRequest request;
  request.set_dock("grpo");
  request.mutable_consumer()->set_name("groups");
  request.mutable_consumer()->add_columns("response_ids");
  request.mutable_consumer()->set_whole_groups(true);
  v1::AddConsumerResponse response;
  EXPECT_STATUS(FromGrpcStatus(stub_->AddConsumer(Context().get(), request, &response)),
                absl::StatusCode::kInvalidArgument, "the group of row 0 would take");
  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse status, Status("grpo"));
  EXPECT_EQ(status.spec().consumers_size(), 2);
}

}  // namespace
}  // namespace tdock::service_testing
