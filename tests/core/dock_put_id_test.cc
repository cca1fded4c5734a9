// Put ids: a writer whose answer was lost sends its Put again with the same
// put_id and gets the answer of the Put the dock stored (replayed set),
// writing nothing twice, also for appends (whose rows the dock assigns); a
// Put sent while one with its id is being stored is refused (ABORTED); an id
// sent with another Put (another step, rows, lengths) is refused; a Put
// that failed leaves its id free; a released step's answers are remembered
// (the latest 4096).
#include <future>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "server/dock/put_id_table.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::Iota;
using testing::ReadyRows;
using testing::Reader;

DockSpec IdSpec(int steps_in_flight = 2) {
  DockSpec spec = testing::DropSpec({Reader("actor", {"prompt"}, 0)});
  spec.num_prompts = 2;
  spec.max_rows_per_step = 8;
  spec.steps_in_flight = steps_in_flight;
  return spec;
}

// An append of `count` rows to `step` with `put_id`.
PutInput Append(int64_t step, int64_t count, uint64_t put_id,
                absl::Duration wait = absl::ZeroDuration()) {
  // Row i of the Put holds i + 1 tokens; the column outlives the call.
  static const testing::OwnedColumn kCells[] = {Cells("prompt", Iota(0, 0)),
                                                Cells("prompt", Iota(0, 1)),
                                                Cells("prompt", Iota(0, 2))};
  PutInput in;
  in.step = step;
  in.new_rows = count;
  in.put_id = put_id;
  in.wait = wait;
  in.columns.push_back(kCells[count].View());
  return in;
}

TEST(PutIdTest, AnAppendSentAgainGetsTheStoredAnswerAndWritesNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(IdSpec()));
  ASSERT_OK_AND_ASSIGN(PutResult first, testing::PutSync(*dock, Append(0, 2, 77)));
  EXPECT_FALSE(first.replayed);
  EXPECT_EQ(first.assigned, (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(PutResult again, testing::PutSync(*dock, Append(0, 2, 77)));
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.assigned, first.assigned);
  EXPECT_EQ(again.rows, first.rows);
  EXPECT_EQ(again.bytes, first.bytes);
  EXPECT_EQ(again.step, 0);
  EXPECT_EQ(ReadyRows(*dock, 0), 2) << "the Put sent again wrote rows";
  // Another id is another Put.
  ASSERT_OK_AND_ASSIGN(PutResult other, testing::PutSync(*dock, Append(0, 2, 78)));
  EXPECT_FALSE(other.replayed);
  EXPECT_EQ(other.assigned, (std::vector<int64_t>{2, 3}));
  // Without an id nothing is remembered.
  ASSERT_OK(testing::PutSync(*dock, Append(0, 2, 0)).status());
  ASSERT_OK(testing::PutSync(*dock, Append(0, 2, 0)).status());
  EXPECT_EQ(ReadyRows(*dock, 0), 8);
}

TEST(PutIdTest, AnIdSentWithAnotherPutIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(IdSpec()));
  ASSERT_OK(testing::PutSync(*dock, Append(0, 2, 77)).status());
  EXPECT_STATUS(testing::PutSync(*dock, Append(1, 2, 77)), absl::StatusCode::kInvalidArgument,
                "dock 'drops' step 1: put_id 77 is the id of another Put, stored in step 0");
  EXPECT_STATUS(testing::PutSync(*dock, Append(0, 1, 77)), absl::StatusCode::kInvalidArgument,
                "put_id 77 is the id of another Put");
  EXPECT_EQ(ReadyRows(*dock, 0), 2);
  EXPECT_EQ(ReadyRows(*dock, 1), 0);
}

TEST(PutIdTest, AFailedPutLeavesItsIdFree) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(IdSpec()));
  PutInput bad = Append(0, 2, 5);
  bad.columns[0].name = "nope";
  EXPECT_STATUS(testing::PutSync(*dock, std::move(bad)), absl::StatusCode::kInvalidArgument,
                "nope");
  ASSERT_OK_AND_ASSIGN(PutResult put, testing::PutSync(*dock, Append(0, 2, 5)));
  EXPECT_FALSE(put.replayed);
  EXPECT_EQ(ReadyRows(*dock, 0), 2);
}

// A Put that waits (its step is not admitted yet) holds its id: the same
// Put sent meanwhile is told to ask again, and once the first is stored it
// gets its answer.
TEST(PutIdTest, APutSentWhileItsIdIsBeingStoredIsAborted) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(IdSpec(/*steps_in_flight=*/1)));
  ASSERT_OK(testing::PutSync(*dock, Append(0, 2, 1)).status());
  std::promise<absl::StatusOr<PutResult>> parked;
  dock->Put(Append(1, 2, 9, absl::Hours(1)),
            [&parked](absl::StatusOr<PutResult> r) { parked.set_value(std::move(r)); });
  EXPECT_STATUS(testing::PutSync(*dock, Append(1, 2, 9)), absl::StatusCode::kAborted,
                "a Put with put_id 9 is being stored; ask again for its answer");
  ASSERT_OK(dock->ReleaseStep(0));
  ASSERT_OK_AND_ASSIGN(PutResult first, parked.get_future().get());
  EXPECT_FALSE(first.replayed);
  ASSERT_OK_AND_ASSIGN(PutResult again, testing::PutSync(*dock, Append(1, 2, 9)));
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.assigned, first.assigned);
  EXPECT_EQ(ReadyRows(*dock, 1), 2);
  // After its step's release the answer is still given (the release may
  // follow the last hand-out at once, before the writer sent it again).
  ASSERT_OK_AND_ASSIGN(PutResult released, testing::PutSync(*dock, Append(0, 2, 1)));
  EXPECT_TRUE(released.replayed);
  EXPECT_EQ(released.assigned, (std::vector<int64_t>{0, 1}));
}

TEST(PutIdTable, AnAnswerIsGivenOnceItsPutIsAnsweredAndOutlivesItsStepInTheMemo) {
  using internal::PutIdTable;
  PutIdTable table;
  PutIdTable::Stored stored;
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kNew);
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kInFlight);
  table.End(1);  // answered without being stored: free again
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kNew);
  table.Finish(1, {PutResult{2, 16, {4, 5}, 3}, 0xf1});
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kInFlight) << "before its own answer";
  table.End(1);
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kAnswered);
  EXPECT_EQ(stored.answer.assigned, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(stored.answer.step, 3);
  EXPECT_EQ(stored.fingerprint, 0xf1u);
  table.Restore(2, {PutResult{1, 8, {}, 4}, 0xf2});
  EXPECT_EQ(table.answered(), 2u);
  table.ForgetStep(3);
  EXPECT_EQ(table.answered(), 1u);
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kAnswered) << "from the memo";
  // The memo keeps the latest kReleasedRemembered.
  for (uint64_t id = 100; id < 100 + PutIdTable::kReleasedRemembered; ++id) {
    ASSERT_EQ(table.Begin(id, &stored), PutIdTable::Claim::kNew);
    table.Finish(id, {PutResult{1, 8, {}, 5}, id});
    table.End(id);
  }
  table.ForgetStep(5);
  EXPECT_EQ(table.Begin(1, &stored), PutIdTable::Claim::kNew) << "the oldest left the memo";
  EXPECT_EQ(table.Begin(100, &stored), PutIdTable::Claim::kAnswered);
}

// The fingerprint tells Puts apart by what they write, not by their bytes.
TEST(PutIdTable, TheFingerprintTellsPutsApart) {
  const testing::OwnedColumn cells = Cells("prompt", Iota(0, 2));
  PutInput a;
  a.step = 1;
  a.rows = {0, 1};
  a.columns.push_back(cells.View());
  PutInput same = a;
  EXPECT_EQ(internal::PutFingerprint(a), internal::PutFingerprint(same));
  PutInput rows = a;
  rows.rows = {2, 3};
  PutInput step = a;
  step.step = 2;
  PutInput lease = a;
  lease.ack_lease = 9;
  PutInput lengths = a;
  lengths.columns[0].offsets = {0, 2, 3};
  for (const PutInput* other : {&rows, &step, &lease, &lengths}) {
    EXPECT_NE(internal::PutFingerprint(a), internal::PutFingerprint(*other));
  }
}

}  // namespace
}  // namespace tdock
