// Seals: a sealed step drops the rows that cannot be completed, so its
// consumers' end of step comes with the rows left; with seal_when the dock
// seals a step by itself at a target of complete groups and drops the
// surplus; with retain_steps a done step stays readable until released.
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::DropOf;
using testing::DropSpec;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::PutSync;
using testing::Reader;

// Seal drops the rows that lack a required column (by default, the rows
// with no cell), so the consumers' end of step comes with the rows left; a
// later Put to a sealed-off row fails naming the seal.
TEST(SealTest, SealDropsWhatCannotBeCompletedAndEndsTheStep) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("trainer", {"response"}, 8),
                                                         Reader("prompts", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 5), {Cells("response", Iota(0, 5))}));
  ASSERT_OK_AND_ASSIGN(Batch prompts, GetSync(*dock, GetOf("prompts")));
  EXPECT_EQ(prompts.rows, Iota(0, 8)) << "the prompt reader took every row before the seal";
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Seal(SealInput{0, {"response"}}));
  EXPECT_EQ(dropped, 3);
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_TRUE(stats.steps[0].sealed);
  EXPECT_EQ(stats.steps[0].dropped_rows[static_cast<int>(DropReason::kSealed)], 3);
  const absl::Status late = PutSync(*dock, 0, {6}, {Cells("response", {6})}).status();
  EXPECT_STATUS(late, absl::StatusCode::kFailedPrecondition, "row 6 was dropped (sealed)");
  EXPECT_REFUSED(late, Refusal::kSealed, DropReason::kSealed);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("trainer")));
  EXPECT_EQ(batch.rows, Iota(0, 5));
  EXPECT_TRUE(batch.end_of_step);
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// Without required columns, seal drops only the rows nothing was written to.
TEST(SealTest, DefaultSealDropsRowsWithNoCell) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("trainer", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Cells("response", {0, 1, 2})}));
  ASSERT_OK(PutSync(*dock, 0, {3}, {Cells("prompt", {3})}));
  ASSERT_OK_AND_ASSIGN(int64_t dropped, dock->Seal(SealInput{0, {}}));
  EXPECT_EQ(dropped, 4);
  ASSERT_OK_AND_ASSIGN(int64_t again, dock->Seal(SealInput{0, {}}));
  EXPECT_EQ(again, 0) << "sealing again drops nothing more";
  ASSERT_OK_AND_ASSIGN(Batch early, GetSync(*dock, GetOf("trainer")));
  EXPECT_EQ(early.rows, std::vector<int64_t>{}) << "rows 0-2 still wait for their prompts";
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2}, {Cells("prompt", {0, 1, 2})}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("trainer")));
  EXPECT_EQ(batch.rows, Iota(0, 4));
  EXPECT_TRUE(batch.end_of_step);
}

// seal_when: 6 groups of 2; the trainer takes whole groups of prompt and
// advantage; the dock seals the step once 2 groups are complete for it.
DockSpec SealWhenSpec() {
  DockSpec spec;
  spec.name = "dapo";
  spec.num_prompts = 6;
  spec.n_samples_per_prompt = 2;
  spec.length_columns = {"prompt"};
  // "adv" is written only for groups that passed the filter.
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"adv", DType::kInt32, {}, 0, false}};
  spec.consumers = {Reader("trainer", {"prompt", "adv"}, 2, true)};
  spec.seal_when = SealWhen{"trainer", 2};
  return spec;
}

// The second complete group seals the step (a filtered one does not count)
// and every other group drops as surplus; the trainer gets exactly the two.
TEST(SealWhenTest, SealsAtTheTargetAndDropsTheSurplus) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(SealWhenSpec()));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 12), {Cells("prompt", Iota(0, 12))}));
  ASSERT_OK(PutSync(*dock, 0, {8, 9}, {Cells("adv", {8, 9})}));
  ASSERT_OK(dock->Drop(DropOf(0, {}, DropReason::kFiltered, {1})));
  EXPECT_FALSE(dock->Stats().steps[0].sealed) << "one group is complete, one filtered out";
  ASSERT_OK(PutSync(*dock, 0, {0, 1}, {Cells("adv", {0, 1})}));
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_TRUE(stats.steps[0].sealed);
  EXPECT_EQ(stats.steps[0].dropped_rows[static_cast<int>(DropReason::kSurplus)], 6);
  EXPECT_EQ(stats.steps[0].dropped_rows[static_cast<int>(DropReason::kFiltered)], 2);
  const absl::Status surplus = PutSync(*dock, 0, {6}, {Cells("adv", {6})}).status();
  EXPECT_STATUS(surplus, absl::StatusCode::kFailedPrecondition, "row 6 was dropped (surplus)");
  EXPECT_REFUSED(surplus, Refusal::kDropped, DropReason::kSurplus);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("trainer", 4)));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1, 8, 9}));
  EXPECT_TRUE(batch.end_of_step);
  EXPECT_TRUE(dock->Stats().steps.empty());
}

// Groups the consumer took are kept first; of the others, the lowest.
TEST(SealWhenTest, GroupsTakenAreKeptFirst) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(SealWhenSpec()));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 12), {Cells("prompt", Iota(0, 12))}));
  ASSERT_OK(PutSync(*dock, 0, {10, 11}, {Cells("adv", {10, 11})}));
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("trainer")));
  ASSERT_EQ(first.rows, (std::vector<int64_t>{10, 11}));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 6), {Cells("adv", Iota(0, 6))}));
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, GetOf("trainer", 4)));
  EXPECT_EQ(second.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(second.end_of_step);
  EXPECT_EQ(dock->Stats().rows_dropped_total[static_cast<int>(DropReason::kSurplus)], 8);
}

// retain_steps: a step every consumer is done with stays readable until
// ReleaseStep, and holds its partition meanwhile (backpressure).
TEST(RetainStepsTest, ADoneStepStaysReadableUntilReleased) {
  DockSpec spec = DropSpec({Reader("reader", {"prompt"}, 8)});
  spec.retain_steps = true;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  EXPECT_TRUE(batch.end_of_step);
  ASSERT_EQ(dock->Stats().steps.size(), 1u) << "done, and kept";
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {3}, {"prompt"}));
  EXPECT_EQ(read.rows, std::vector<int64_t>{3});
  GetInput again = GetOf("reader");
  again.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch over, GetSync(*dock, again));
  EXPECT_TRUE(over.rows.empty());
  EXPECT_TRUE(over.end_of_step);
  EXPECT_STATUS(PutSync(*dock, 1, {0}, {Cells("prompt", {0})}),
                absl::StatusCode::kResourceExhausted, "waits for step 0 to be released");
  ASSERT_OK(dock->ReleaseStep(0));
  EXPECT_OK(PutSync(*dock, 1, {0}, {Cells("prompt", {0})}));
}

}  // namespace
}  // namespace tdock
