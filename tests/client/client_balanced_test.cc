// tdock::Client with a BALANCED consumer: Get and Sample return the round,
// the micro-batch plan and the round's balance statistics, and
// ClientGet::round asks for a round again.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// The design docs' worked example: rows of [7, 6, 8, 5, 1, 3, 8, 6] tokens.
const std::vector<int> kLengths = {7, 6, 8, 5, 1, 3, 8, 6};

// 8 prompts x 1 sample; consumer "actor" BALANCED over 2 ranks of 4 rows,
// micro-batches of at most 10 real tokens (packed counting).
DockSpec BalancedSpec() {
  DockSpec spec;
  spec.name = "bal";
  spec.num_prompts = static_cast<int64_t>(kLengths.size());
  spec.n_samples_per_prompt = 1;
  spec.length_columns = {"ids"};
  ColumnSpec ids;
  ids.name = "ids";
  ids.dtype = DType::kInt32;
  spec.columns = {ids};
  ConsumerSpec actor;
  actor.name = "actor";
  actor.columns = {"ids"};
  actor.dispatch_size = 4;
  actor.dp_size = 2;
  actor.policy = Policy::kBalanced;
  actor.micro_batch = MicroBatchOptions{.max_tokens = 10};
  spec.consumers = {actor};
  return spec;
}

class ClientBalancedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
    ASSERT_OK(server_->Start());
    ASSERT_OK_AND_ASSIGN(client_, Client::Connect({.address = absl::StrCat(
                                                       "127.0.0.1:", server_->port())}));
    ASSERT_OK(client_->CreateDock(BalancedSpec()).status());
    std::vector<std::vector<int32_t>> cells;
    ClientPut put{.dock = "bal", .step = 0};
    for (size_t i = 0; i < kLengths.size(); ++i) {
      put.rows.push_back(static_cast<int64_t>(i));
      cells.push_back(std::vector<int32_t>(kLengths[i], static_cast<int32_t>(i)));
    }
    put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, cells));
    ASSERT_OK(client_->Put(put).status());
  }
  void TearDown() override { server_->Shutdown(); }

  static ClientGet RankGet(int32_t rank) {
    return {.dock = "bal", .consumer = "actor", .rank = rank, .wait = absl::Seconds(5)};
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// A share's micro-batches tile its rows within the budget, with their
// tokens; the stats describe a round of 44 tokens split 22/22.
void ExpectValidShare(const ClientBatch& share) {
  EXPECT_EQ(share.round, 0);
  ASSERT_EQ(share.rows.size(), 4u);
  EXPECT_EQ(std::accumulate(share.token_counts.begin(), share.token_counts.end(), int64_t{0}),
            22);
  int64_t next = 0;
  for (const MicroBatchInfo& mb : share.micro_batches) {
    EXPECT_EQ(mb.begin, next);
    ASSERT_LE(mb.end, static_cast<int64_t>(share.rows.size()));
    int64_t tokens = 0;
    for (int64_t i = mb.begin; i < mb.end; ++i) tokens += share.token_counts[i];
    EXPECT_EQ(mb.tokens, tokens);
    EXPECT_EQ(mb.padded_tokens, tokens);  // packed counting
    EXPECT_LE(mb.padded_tokens, 10);
    next = mb.end;
  }
  EXPECT_EQ(next, 4);
  ASSERT_TRUE(share.balance.has_value());
  EXPECT_EQ(share.balance->rank_tokens.min, 22);
  EXPECT_EQ(share.balance->rank_tokens.max, 22);
  EXPECT_EQ(share.balance->tokens, 44);
  EXPECT_EQ(share.balance->padded_tokens, 44);
  EXPECT_EQ(share.balance->padding_ratio, 1.0);
  EXPECT_EQ(share.balance->micro_batches, 2 * static_cast<int64_t>(share.micro_batches.size()));
}

// Rank 0 by Get, the same round again by ClientGet::round (same rows, plan
// and cells), rank 1 by Sample: disjoint halves of the step, both valid.
TEST_F(ClientBalancedTest, GetAgainAndSampleCarryThePlan) {
  ASSERT_OK_AND_ASSIGN(const ClientBatch r0, client_->Get(RankGet(0)));
  ExpectValidShare(r0);
  const PackedColumn* ids = r0.column("ids");
  ASSERT_NE(ids, nullptr);
  for (size_t i = 0; i < r0.rows.size(); ++i) {
    EXPECT_EQ(r0.Row<int32_t>(*ids, static_cast<int64_t>(i)),
              std::vector<int32_t>(kLengths[r0.rows[i]], static_cast<int32_t>(r0.rows[i])));
  }

  ClientGet again = RankGet(0);
  again.step = 0;  // a round is asked for within a named step
  again.round = 0;
  ASSERT_OK_AND_ASSIGN(const ClientBatch r0_again, client_->Get(again));
  EXPECT_EQ(r0_again.rows, r0.rows);
  ASSERT_EQ(r0_again.micro_batches.size(), r0.micro_batches.size());
  for (size_t i = 0; i < r0.micro_batches.size(); ++i) {
    EXPECT_EQ(r0_again.micro_batches[i].begin, r0.micro_batches[i].begin);
    EXPECT_EQ(r0_again.micro_batches[i].end, r0.micro_batches[i].end);
  }

  ASSERT_OK_AND_ASSIGN(const ClientBatch r1, client_->Sample(RankGet(1)));
  ExpectValidShare(r1);
  EXPECT_TRUE(r1.columns.empty());
  std::vector<int64_t> all = r0.rows;
  all.insert(all.end(), r1.rows.begin(), r1.rows.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// Of a given step, a round not yet formed is refused, naming it.
TEST_F(ClientBalancedTest, UnformedRoundIsRefused) {
  ClientGet ahead = RankGet(1);
  ahead.step = 0;
  ahead.step = 0;
  ahead.round = 2;
  EXPECT_STATUS(client_->Get(ahead).status(), absl::StatusCode::kInvalidArgument, "round 2");
}

}  // namespace
}  // namespace tdock
