// The round dispatcher: FormRound on its own (shares, rounds cut to fit one
// response, errors), and a dock forming a BALANCED round with none of its
// locks held (a formation held open by DockLimits::before_round_planned).
#include "server/dock/round_dispatcher.h"

#include <algorithm>
#include <future>
#include <numeric>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using internal::FormedRound;
using internal::FormRound;
using internal::RoundDraft;
using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

// A draft over `units` of `unit_rows` rows each; row r of the draft has
// lengths[r] tokens and (with a limit) row_bytes[r] bytes.
RoundDraft Draft(std::vector<int64_t> units, int32_t unit_rows, std::vector<int64_t> lengths,
                 int dp_size) {
  RoundDraft draft;
  draft.who = "dock 'd' step 0 consumer 'actor'";
  draft.whole_groups = unit_rows > 1;
  for (int64_t unit : units) {
    for (int32_t i = 0; i < unit_rows; ++i) draft.rows.push_back(unit * unit_rows + i);
    draft.unit_sizes.push_back(unit_rows);
  }
  draft.units = std::move(units);
  draft.lengths = std::move(lengths);
  draft.options.dp_size = dp_size;
  if (draft.whole_groups) {
    draft.options.group_sizes.assign(draft.unit_sizes.begin(), draft.unit_sizes.end());
  }
  return draft;
}

std::vector<int64_t> AllRows(const internal::Round& round) {
  std::vector<int64_t> rows;
  for (const internal::RoundShare& share : round.ranks) {
    rows.insert(rows.end(), share.rows.begin(), share.rows.end());
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Shares name the units' rows (not the draft's positions), each unit's rows
// on one rank, equal unit counts per rank, tokens balanced.
TEST(RoundDispatcher, SharesAreTheUnitsRowsSplitEvenly) {
  // Groups 3, 5, 8, 9 of 2 rows: rows 6-7, 10-11, 16-17, 18-19.
  RoundDraft draft = Draft({3, 5, 8, 9}, 2, {5, 5, 1, 1, 4, 4, 2, 2}, 2);
  FormedRound formed = FormRound(draft);
  ASSERT_OK(formed.round);
  EXPECT_EQ(formed.kept, 4u);
  EXPECT_EQ(AllRows(*formed.round),
            (std::vector<int64_t>{6, 7, 10, 11, 16, 17, 18, 19}));
  for (const internal::RoundShare& share : formed.round->ranks) {
    ASSERT_EQ(share.rows.size(), 4u);
    for (int64_t row : share.rows) {
      const int64_t mate = row % 2 == 0 ? row + 1 : row - 1;
      EXPECT_NE(std::find(share.rows.begin(), share.rows.end(), mate), share.rows.end())
          << "row " << row << " left its group";
    }
  }
  // {10+2, 8+4} is the best split of the group totals 10, 2, 8, 4.
  EXPECT_DOUBLE_EQ(formed.round->stats.rank_tokens.max, 12);
  EXPECT_DOUBLE_EQ(formed.round->stats.rank_tokens.min, 12);
}

// A round whose largest share would not fit one response is formed over
// fewer units, the first ones, until every share fits.
TEST(RoundDispatcher, RoundIsCutUntilEveryShareFits) {
  RoundDraft draft = Draft({0, 1, 2, 3, 4, 5, 6, 7}, 1, std::vector<int64_t>(8, 3), 2);
  draft.row_bytes.assign(8, 100);
  draft.fixed_bytes = 50;
  draft.max_batch_bytes = 50 + 2 * 100;  // two rows per share
  FormedRound formed = FormRound(draft);
  ASSERT_OK(formed.round);
  ASSERT_EQ(formed.kept, 4u);
  EXPECT_EQ(AllRows(*formed.round), (std::vector<int64_t>{0, 1, 2, 3}));
  for (const internal::RoundShare& share : formed.round->ranks) {
    EXPECT_EQ(share.rows.size(), 2u);
  }
}

// A unit that alone is larger than one response fails the round, naming the
// dock, step, consumer, unit and limit.
TEST(RoundDispatcher, UnitLargerThanAResponseFails) {
  RoundDraft draft = Draft({4, 6}, 2, {1, 1, 1, 1}, 2);
  draft.row_bytes = {300, 300, 10, 10};
  draft.max_batch_bytes = 500;
  FormedRound formed = FormRound(draft);
  EXPECT_STATUS(formed.round, absl::StatusCode::kResourceExhausted,
                "dock 'd' step 0 consumer 'actor': group 4 alone is larger than one "
                "response carries (500 bytes)");
  EXPECT_EQ(formed.kept, 0u);
}

// A planning error names the consumer it was for.
TEST(RoundDispatcher, PlanningErrorNamesTheConsumer) {
  RoundDraft draft = Draft({0, 1}, 1, {9, 2}, 2);
  draft.options.micro_batch = MicroBatchOptions{.max_tokens = 4};
  EXPECT_STATUS(FormRound(draft).round, absl::StatusCode::kInvalidArgument,
                "dock 'd' step 0 consumer 'actor': ");
}

// ---- A dock forming rounds

// 8 rows of 1-8 tokens per step; consumer "actor": 2 ranks x 2 rows, so a
// step has two rounds.
DockSpec Spec() {
  DockSpec spec;
  spec.name = "rounds";
  spec.num_prompts = 8;
  spec.n_samples_per_prompt = 1;
  spec.steps_in_flight = 2;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"actor", {"tokens"}, 2, 2, false, Policy::kBalanced, 0}};
  return spec;
}

absl::Status Fill(Dock& dock, int64_t step) {
  std::vector<std::vector<int32_t>> cells;
  for (int i = 1; i <= 8; ++i) cells.push_back(std::vector<int32_t>(i, i));
  std::vector<int64_t> rows(8);
  std::iota(rows.begin(), rows.end(), 0);
  return PutSync(dock, step, rows,
                 {OwnedColumn::Of<int32_t>("tokens", DType::kInt32, cells)})
      .status();
}

GetInput RankGet(int rank, int64_t step, absl::Duration wait = absl::Seconds(30)) {
  GetInput in = GetOf("actor", 0, wait);
  in.rank = rank;
  in.step = step;
  return in;
}

// On a thread of its own, joined when the future goes (before the dock).
std::future<absl::StatusOr<Batch>> GetAsync(Dock& dock, GetInput in) {
  return std::async(std::launch::async, [&dock, in] { return GetSync(dock, in); });
}

template <typename T>
bool ReadyWithin(std::future<T>& future, absl::Duration bound) {
  return future.wait_for(absl::ToChronoMilliseconds(bound)) == std::future_status::ready;
}

// Holds the formation of one round (`step`, the `nth` formation of it from
// 1) until Go(); every other formation passes.
class FormationGate {
 public:
  FormationGate(int64_t step, int nth) : step_(step), nth_(nth) {}
  void Install(DockLimits& limits) {
    limits.before_round_planned = [this](int64_t step, int) {
      if (step != step_ || ++seen_ != nth_) return;
      entered_.Notify();
      go_.WaitForNotification();
    };
  }
  bool Entered() { return entered_.WaitForNotificationWithTimeout(absl::Seconds(30)); }
  void Go() { go_.Notify(); }

 private:
  const int64_t step_;
  const int nth_;
  std::atomic<int> seen_{0};
  absl::Notification entered_;
  absl::Notification go_;
};

constexpr absl::Duration kBound = absl::Seconds(20);  // liveness, not speed

// While a round is planned, nothing of the dock waits for it but the Gets of
// that round: a rank fetches its share of the round before it, a new step
// starts and is released, the other rank's Get for the round parks; once the
// round is kept both ranks get their shares of it.
TEST(DockRoundFormation, PlannedWithNoLockOfTheDockHeld) {
  FormationGate gate(0, 2);
  DockLimits limits;
  gate.Install(limits);
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(Spec(), limits));
  ASSERT_OK(Fill(*dock, 0));
  ASSERT_OK_AND_ASSIGN(Batch r0_round0, GetSync(*dock, RankGet(0, 0)));
  auto r0_round1 = GetAsync(*dock, RankGet(0, 0));
  ASSERT_TRUE(gate.Entered());

  auto r1_round0 = GetAsync(*dock, RankGet(1, 0));
  ASSERT_TRUE(ReadyWithin(r1_round0, kBound)) << "a formed round's share waited";
  ASSERT_OK(r1_round0.get());
  auto put = std::async(std::launch::async, [&] {
    absl::Status s = Fill(*dock, 1);
    return s.ok() ? dock->ReleaseStep(1) : s;
  });
  ASSERT_TRUE(ReadyWithin(put, kBound)) << "a step's start or release waited";
  ASSERT_OK(put.get());
  auto r1_round1 = GetAsync(*dock, RankGet(1, 0));
  EXPECT_FALSE(ReadyWithin(r1_round1, absl::Milliseconds(50)));  // not formed yet

  gate.Go();
  ASSERT_OK_AND_ASSIGN(Batch a, r0_round1.get());
  ASSERT_OK_AND_ASSIGN(Batch b, r1_round1.get());
  EXPECT_EQ(a.round, 1);
  EXPECT_EQ(b.round, 1);
  EXPECT_TRUE(a.end_of_step);
  std::vector<int64_t> rows = r0_round0.rows;
  for (const Batch* batch : {&a, &b}) rows.insert(rows.end(), batch->rows.begin(), batch->rows.end());
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows.size(), 6u);  // rank 1's round-0 share is the other 2
  EXPECT_EQ(std::unique(rows.begin(), rows.end()), rows.end());
}

// A step released while its round is planned takes the round's rows with
// it: the Get forming it learns that the step is over, and the round kept
// by nobody: the partition's next step forms its own rounds from scratch.
TEST(DockRoundFormation, StepReleasedWhileItsRoundIsPlanned) {
  FormationGate gate(0, 1);
  DockLimits limits;
  gate.Install(limits);
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(Spec(), limits));
  ASSERT_OK(Fill(*dock, 0));
  auto forming = GetAsync(*dock, RankGet(0, 0));
  ASSERT_TRUE(gate.Entered());
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK(Fill(*dock, 1));
  ASSERT_OK(Fill(*dock, 2));  // partition 0 again
  gate.Go();
  ASSERT_OK_AND_ASSIGN(Batch over, forming.get());
  EXPECT_TRUE(over.end_of_step);
  EXPECT_TRUE(over.rows.empty());

  std::vector<int64_t> rows;
  for (int round = 0; round < 2; ++round) {
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, RankGet(rank, 2)));
      EXPECT_EQ(b.round, round);
      rows.insert(rows.end(), b.rows.begin(), b.rows.end());
    }
  }
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace tdock
