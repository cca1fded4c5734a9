// BALANCED consumers over the gRPC service: the round, the micro-batch plan
// and the round's balance statistics reach the client in GetResponse (hand
// encoded, read here by the protobuf-generated classes) and SampleResponse,
// and GetRequest.round asks for a round again.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"
#include "tests/test_util.h"

namespace tdock::service_testing {
namespace {

// The design docs' worked example: 8 rows of [7, 6, 8, 5, 1, 3, 8, 6] tokens.
const std::vector<int> kLengths = {7, 6, 8, 5, 1, 3, 8, 6};
constexpr int64_t kBudget = 12;

// Dock "bal": 8 prompts x 1 sample, column "tokens" (the length column).
// Consumer "actor": BALANCED over dp_size 2, 4 rows per rank, micro-batches
// of at most 12 padded tokens (round_to 2).
v1::DockSpec BalancedSpec() {
  v1::DockSpec spec;
  spec.set_name("bal");
  spec.set_num_prompts(static_cast<int64_t>(kLengths.size()));
  spec.set_n_samples_per_prompt(1);
  spec.add_length_columns("tokens");
  v1::ColumnSpec* column = spec.add_columns();
  column->set_name("tokens");
  column->set_dtype(v1::INT32);
  v1::ConsumerSpec* actor = spec.add_consumers();
  actor->set_name("actor");
  actor->add_columns("tokens");
  actor->set_dispatch_size(4);
  actor->set_dp_size(2);
  actor->set_policy(v1::BALANCED);
  v1::MicroBatchSpec* mb = actor->mutable_micro_batch();
  mb->set_max_tokens(kBudget);
  mb->set_round_to(2);
  mb->set_padded(true);
  return spec;
}

// Step 0, every row: row i holds kLengths[i] tokens whose values are i.
v1::PutRequest BalancedPut() {
  v1::PutRequest put;
  put.set_dock("bal");
  std::vector<std::vector<int32_t>> cells;
  for (size_t i = 0; i < kLengths.size(); ++i) {
    put.add_rows(static_cast<int64_t>(i));
    cells.push_back(std::vector<int32_t>(kLengths[i], static_cast<int32_t>(i)));
  }
  *put.add_columns() = Int32Column("tokens", cells);
  return put;
}

v1::GetRequest RankGet(int32_t rank) {
  v1::GetRequest get;
  get.set_dock("bal");
  get.set_consumer("actor");
  get.set_rank(rank);
  get.set_wait_ms(5000);
  return get;
}

// What a rank's share must satisfy on its own, for GetResponse and
// SampleResponse alike: its micro-batches tile its rows in order, each
// within the padded budget, with the tokens of its rows; the balance stats
// describe the round of 44 tokens split 22/22.
template <typename Response>
void ExpectValidShare(const Response& share) {
  EXPECT_EQ(share.round(), 0);
  ASSERT_EQ(share.rows_size(), 4);
  ASSERT_EQ(share.token_counts_size(), 4);
  int64_t tokens = 0;
  for (int i = 0; i < share.rows_size(); ++i) {
    EXPECT_EQ(share.token_counts(i), kLengths[share.rows(i)]) << "row " << share.rows(i);
    tokens += share.token_counts(i);
  }
  EXPECT_EQ(tokens, 22);
  ASSERT_GT(share.micro_batches_size(), 0);
  int64_t next = 0;
  for (const v1::MicroBatch& mb : share.micro_batches()) {
    EXPECT_EQ(mb.begin(), next);
    ASSERT_GT(mb.end(), mb.begin());
    ASSERT_LE(mb.end(), share.rows_size());
    int64_t mb_tokens = 0, longest = 0;
    for (int64_t i = mb.begin(); i < mb.end(); ++i) {
      mb_tokens += share.token_counts(i);
      longest = std::max<int64_t>(longest, share.token_counts(i));
    }
    EXPECT_EQ(mb.tokens(), mb_tokens);
    EXPECT_EQ(mb.padded_len(), (longest + 1) / 2 * 2);
    EXPECT_EQ(mb.padded_tokens(), mb.padded_len() * (mb.end() - mb.begin()));
    EXPECT_LE(mb.padded_tokens(), kBudget);
    next = mb.end();
  }
  EXPECT_EQ(next, share.rows_size());
  ASSERT_TRUE(share.has_balance());
  const v1::BalanceStats& balance = share.balance();
  EXPECT_EQ(balance.rank_tokens_min(), 22);
  EXPECT_EQ(balance.rank_tokens_max(), 22);
  EXPECT_EQ(balance.rank_cost_max(), 22);  // default cost model: a = 1, b = 0
  EXPECT_EQ(balance.tokens(), 44);
  EXPECT_GE(balance.padded_tokens(), 44);
  EXPECT_DOUBLE_EQ(balance.padding_ratio(), balance.padded_tokens() / 44.0);
  // same_count_across_ranks (unset: true): both ranks have as many.
  EXPECT_EQ(balance.micro_batches(), 2 * share.micro_batches_size());
}

std::vector<int64_t> Rows(const google::protobuf::RepeatedField<int64_t>& rows) {
  return std::vector<int64_t>(rows.begin(), rows.end());
}

class BalancedServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    ASSERT_OK(CreateDock(BalancedSpec()));
    ASSERT_OK(Put(BalancedPut()));
  }
};

// Two ranks of round 0 get disjoint rows covering the step, 22 tokens each,
// with the plan and the round's stats; the payload follows the plan's row
// order. Rank 0 asking again with round 0 (while the step is live: it is
// released once every rank has fetched its share) gets the same rows, plan
// and payload.
TEST_F(BalancedServiceTest, RanksGetBalancedDisjointSharesAndCanAskAgain) {
  ASSERT_OK_AND_ASSIGN(const v1::GetResponse r0, Get(RankGet(0)));
  v1::GetRequest again = RankGet(0);
  again.set_has_step(true);  // a round is asked for within a named step
  again.set_step(0);
  again.set_round(0);
  ASSERT_OK_AND_ASSIGN(const v1::GetResponse r0_again, Get(again));
  ASSERT_OK_AND_ASSIGN(const v1::GetResponse r1, Get(RankGet(1)));
  ExpectValidShare(r0);
  ExpectValidShare(r1);
  std::vector<int64_t> all = Rows(r0.rows());
  all.insert(all.end(), r1.rows().begin(), r1.rows().end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(r1.end_of_step());
  // Row i's cell holds kLengths[i] copies of i, in the response's row order.
  ASSERT_EQ(r0.columns_size(), 1);
  for (int i = 0; i < r0.rows_size(); ++i) {
    const std::vector<int32_t> cell(kLengths[r0.rows(i)], static_cast<int32_t>(r0.rows(i)));
    EXPECT_EQ(CellBytes(r0.columns(0), i, 4),
              std::string(reinterpret_cast<const char*>(cell.data()), cell.size() * 4));
  }

  EXPECT_EQ(r0_again.round(), 0);
  EXPECT_EQ(Rows(r0_again.rows()), Rows(r0.rows()));
  ASSERT_EQ(r0_again.micro_batches_size(), r0.micro_batches_size());
  for (int i = 0; i < r0.micro_batches_size(); ++i) {
    EXPECT_EQ(r0_again.micro_batches(i).SerializeAsString(),
              r0.micro_batches(i).SerializeAsString());
  }
  ASSERT_EQ(r0_again.columns_size(), 1);
  EXPECT_EQ(r0_again.columns(0).data(), r0.columns(0).data());
}

// Sample carries the same plan and stats in the typed SampleResponse, and
// takes GetRequest.round too.
TEST_F(BalancedServiceTest, SampleCarriesPlanAndRound) {
  v1::SampleResponse s0, s1, s0_again;
  ASSERT_OK(FromGrpcStatus(stub_->Sample(Context().get(), RankGet(0), &s0)));
  v1::GetRequest again = RankGet(0);
  again.set_has_step(true);  // a round is asked for within a named step
  again.set_step(0);
  again.set_round(0);
  ASSERT_OK(FromGrpcStatus(stub_->Sample(Context().get(), again, &s0_again)));
  ASSERT_OK(FromGrpcStatus(stub_->Sample(Context().get(), RankGet(1), &s1)));
  ExpectValidShare(s0);
  ExpectValidShare(s1);
  EXPECT_EQ(Rows(s0_again.rows()), Rows(s0.rows()));
  EXPECT_EQ(s0_again.micro_batches_size(), s0.micro_batches_size());
  std::vector<int64_t> all = Rows(s0.rows());
  all.insert(all.end(), s1.rows().begin(), s1.rows().end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// Of a given step, a round that is not formed yet is refused by number; a
// consumer that is not BALANCED answers round -1 with no plan and no stats.
TEST_F(BalancedServiceTest, UnformedRoundAndPlainConsumers) {
  v1::GetRequest ahead = RankGet(0);
  ahead.set_has_step(true);
  ahead.set_step(0);
  ahead.set_has_step(true);
  ahead.set_step(0);
  ahead.set_round(3);
  EXPECT_STATUS(Get(ahead).status(), absl::StatusCode::kInvalidArgument, "round 3");

  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(ServiceTest::Put(FullStepPut()));
  ASSERT_OK_AND_ASSIGN(const v1::GetResponse plain, Get(GetFor("actor", 2, 1000)));
  EXPECT_EQ(plain.rows_size(), 2);
  EXPECT_EQ(plain.round(), -1);
  EXPECT_EQ(plain.micro_batches_size(), 0);
  EXPECT_FALSE(plain.has_balance());
}

}  // namespace
}  // namespace tdock::service_testing
