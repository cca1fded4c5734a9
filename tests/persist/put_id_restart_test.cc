// Put ids across restarts: a Put's answer is recorded with its cells, in the
// same write. At every crash point of a workload of Puts with ids (appends,
// whose rows the dock assigns, and Puts naming rows), each Put sent again
// after the restart with its id:
//   - gets the answer it had, replayed, if it was answered before the crash;
//   - is written as new if it was not yet issued;
//   - is one or the other if it was in flight;
// and afterwards every Put's rows are there once: nothing written twice.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/core/drop_test_util.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

using testing::Cells;
using testing::Iota;
using testing::ReadyRows;

DockSpec IdSpec() {
  DockSpec spec = testing::DropSpec({testing::Reader("actor", {"prompt"}, 0)});
  spec.name = "crash";
  spec.num_prompts = 2;
  spec.max_rows_per_step = 8;
  spec.steps_in_flight = 2;
  return spec;
}

struct Sent {
  int64_t step;
  std::vector<int64_t> rows;  // empty: an append of 2 rows
  uint64_t put_id;
  int64_t before = 0;  // writes stored before it was issued
  int64_t after = 0;   // writes stored once it was answered
  PutResult answer;
};

PutInput InputOf(const Sent& sent) {
  static const testing::OwnedColumn kAppended = Cells("prompt", Iota(0, 2));
  static const testing::OwnedColumn kNamed = Cells("prompt", Iota(6, 8));
  PutInput in;
  in.step = sent.step;
  in.put_id = sent.put_id;
  in.rows = sent.rows;
  if (sent.rows.empty()) in.new_rows = 2;
  in.columns.push_back((sent.rows.empty() ? kAppended : kNamed).View());
  return in;
}

TEST(PutIdRestart, EveryCrashPointAnswersAStoredPutSentAgainWithoutWritingTwice) {
  Recording recording(IdSpec());
  RecordingStore& store = *recording.store;
  const int64_t created = store.writes();
  std::vector<Sent> sent = {{0, {}, 101}, {0, {}, 102}, {0, {6, 7}, 103}, {1, {}, 104}};
  for (Sent& put : sent) {
    put.before = store.writes();
    ASSERT_OK_AND_ASSIGN(put.answer, testing::PutSync(*recording.dock, InputOf(put)));
    put.after = store.writes();
  }
  recording.Stop();

  for (int64_t k = created; k <= store.writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(store, k);
    ASSERT_NE(restarted.dock, nullptr);
    for (const Sent& put : sent) {
      SCOPED_TRACE(absl::StrCat("put_id ", put.put_id));
      ASSERT_OK_AND_ASSIGN(PutResult again, testing::PutSync(*restarted.dock, InputOf(put)));
      if (put.after <= k) {
        EXPECT_TRUE(again.replayed) << "an answered Put was written again";
      } else if (put.before >= k) {
        EXPECT_FALSE(again.replayed) << "a Put issued after the crash was answered as stored";
      }
      if (again.replayed) {
        EXPECT_EQ(again.assigned, put.answer.assigned);
        EXPECT_EQ(again.rows, put.answer.rows);
        EXPECT_EQ(again.bytes, put.answer.bytes);
        EXPECT_EQ(again.step, put.step);
      }
    }
    EXPECT_EQ(ReadyRows(*restarted.dock, 0), 6) << "step 0's Puts are not each there once";
    EXPECT_EQ(ReadyRows(*restarted.dock, 1), 2) << "step 1's Put is not there once";
  }
}

}  // namespace
}  // namespace tdock::persist::crash
