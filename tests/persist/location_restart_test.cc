// A dock that holds cell locations (the controller's) across restarts: its
// journal keeps each cell's location, and recovery reads a cell's length out
// of its location. At every crash point of a workload of Puts, leased Gets
// and acknowledgements:
//   - recovery succeeds;
//   - every Put acknowledged by then is there, every cell at the location it
//     was put with and of its length; a Put in doubt is all there or absent;
//   - draining the consumer hands out no row whose acknowledgement was
//     answered by then, and every written row that was not;
// and a lost shard's drop is kept like any drop.
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cell_location.h"
#include "gtest/gtest.h"
#include "tests/persist/recording_server.h"

namespace tdock::persist::crash {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;

constexpr int kSteps = 2;

DockSpec LocationSpec() {
  DockSpec spec;
  spec.name = "crash";
  spec.num_prompts = kRows;
  spec.n_samples_per_prompt = 1;
  spec.steps_in_flight = kSteps;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  ConsumerSpec trainer{"trainer", {"tokens"}, 2, 1, false, Policy::kFifo, 0};
  trainer.lease_ms = 600'000;
  spec.consumers = {trainer};
  return spec;
}

// The location and length the workload puts for a row.
int64_t LengthOf(int64_t step, int64_t row) { return 1 + (step * kRows + row) % 5; }
CellLocation LocationOf(int64_t step, int64_t row) {
  return {static_cast<uint64_t>(1 + row % 2), static_cast<uint64_t>(1000 * step + row),
          static_cast<uint64_t>(64 * row), static_cast<uint64_t>(LengthOf(step, row) * 4)};
}

OwnedColumn LocationsFor(int64_t step, const std::vector<int64_t>& rows) {
  OwnedColumn column{"tokens", DType::kInt32, {0}, {}};
  for (int64_t row : rows) {
    column.offsets.push_back(column.offsets.back() + LengthOf(step, row));
    column.bytes += EncodeCellLocation(LocationOf(step, row));
  }
  return column;
}

struct Recorded {
  int64_t step;
  std::vector<int64_t> rows;
  int64_t before;  // writes stored before it was issued
  int64_t after;   // writes stored once it was answered
};

TEST(LocationRestart, EveryCrashPointKeepsAcknowledgedLocations) {
  Recording recording(LocationSpec(), nullptr, CellForm::kLocations);
  Dock& dock = *recording.dock;
  RecordingStore& store = *recording.store;
  const int64_t created = store.writes();  // the dock's creation is stored
  std::vector<Recorded> puts;
  std::vector<Recorded> acks;
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int64_t first = 0; first < kRows; first += 4) {
      const std::vector<int64_t> rows = {first, first + 1, first + 2, first + 3};
      const int64_t before = store.writes();
      ASSERT_OK(testing::PutSync(dock, step, rows, {LocationsFor(step, rows)}));
      puts.push_back({step, rows, before, store.writes()});
    }
    // The trainer takes two rows and acknowledges them; two more it keeps.
    ASSERT_OK_AND_ASSIGN(Batch done, GetSync(dock, GetOf("trainer")));
    const int64_t before = store.writes();
    ASSERT_OK(dock.Ack("trainer", done.lease_id));
    acks.push_back({done.step, done.rows, before, store.writes()});
    ASSERT_OK_AND_ASSIGN(Batch kept, GetSync(dock, GetOf("trainer")));
    ASSERT_EQ(kept.rows.size(), 2u);
  }
  recording.Stop();
  ASSERT_GT(store.writes(), 8);

  for (int64_t k = created; k <= store.writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(store, k, nullptr, CellForm::kLocations);
    ASSERT_NE(restarted.dock, nullptr);
    // Every row that is there holds the location it was put with.
    std::map<std::pair<int64_t, int64_t>, bool> present;
    for (int64_t step = 0; step < kSteps; ++step) {
      absl::StatusOr<RowListing> listing = restarted.dock->ListRows(step, {"tokens"});
      if (!listing.ok()) continue;  // not started by then
      for (const RowState& row : listing->rows) {
        if (row.cells.empty()) continue;
        present[{step, row.row}] = true;
        ASSERT_OK_AND_ASSIGN(CellLocation where, DecodeCellLocation(row.cells[0].second));
        EXPECT_EQ(where, LocationOf(step, row.row)) << "step " << step << " row " << row.row;
      }
    }
    for (const Recorded& put : puts) {
      int there = 0;
      for (int64_t row : put.rows) there += present.count({put.step, row}) ? 1 : 0;
      if (put.after <= k) {
        EXPECT_EQ(there, 4) << "an acknowledged Put of step " << put.step << " is not whole";
      } else if (put.before >= k) {
        EXPECT_EQ(there, 0) << "a Put of step " << put.step << " stored after the crash";
      } else {
        EXPECT_TRUE(there == 0 || there == 4) << "a Put in doubt is partly there";
      }
    }
    // Draining hands out every row not surely acknowledged, each once, with
    // its length from the location.
    std::set<std::pair<int64_t, int64_t>> surely_done;
    for (const Recorded& ack : acks) {
      if (ack.after > k) continue;
      for (int64_t row : ack.rows) surely_done.insert({ack.step, row});
    }
    // Leases in flight at the crash are handed back first.
    ASSERT_OK(restarted.dock->NackAll("trainer"));
    std::set<std::pair<int64_t, int64_t>> handed;
    for (int get = 0; get < 4 * kRows; ++get) {
      absl::StatusOr<Batch> batch = GetSync(*restarted.dock, GetOf("trainer"));
      ASSERT_OK(batch);
      if (batch->rows.empty()) break;
      for (size_t i = 0; i < batch->rows.size(); ++i) {
        const std::pair<int64_t, int64_t> cell{batch->step, batch->rows[i]};
        EXPECT_TRUE(handed.insert(cell).second) << "row handed out twice";
        EXPECT_EQ(surely_done.count(cell), 0u) << "an acknowledged row handed out again";
        EXPECT_EQ(batch->columns[0].length(static_cast<int64_t>(i)),
                  LengthOf(cell.first, cell.second));
      }
      ASSERT_OK(restarted.dock->Ack("trainer", batch->lease_id));
    }
    for (const auto& [cell, there] : present) {
      if (surely_done.count(cell) == 0) {
        EXPECT_EQ(handed.count(cell), 1u)
            << "step " << cell.first << " row " << cell.second << " was never handed out";
      }
    }
  }
}

// The rows of a lost shard are dropped as "lost" through the journal: at
// every crash point after the drop was answered they are dropped, before it
// was issued they are not, and in between it is all or nothing.
TEST(LocationRestart, ALostShardsDropIsKeptAcrossARestart) {
  Recording recording(LocationSpec(), nullptr, CellForm::kLocations);
  RecordingStore& store = *recording.store;
  std::vector<int64_t> rows(kRows);
  for (int64_t row = 0; row < kRows; ++row) rows[row] = row;
  ASSERT_OK(testing::PutSync(*recording.dock, 0, rows, {LocationsFor(0, rows)}));
  const int64_t before = store.writes();
  std::promise<absl::StatusOr<int64_t>> dropped;
  recording.dock->DropLost(2, 0, [&dropped](absl::StatusOr<int64_t> n) { dropped.set_value(n); });
  ASSERT_OK_AND_ASSIGN(int64_t lost, dropped.get_future().get());
  EXPECT_EQ(lost, kRows / 2) << "every odd row's cell is on shard 2";
  const int64_t after = store.writes();
  recording.Stop();
  for (int64_t k = before; k <= store.writes(); ++k) {
    SCOPED_TRACE(absl::StrCat("crash point ", k));
    Restarted restarted(store, k, nullptr, CellForm::kLocations);
    ASSERT_NE(restarted.dock, nullptr);
    const int64_t dropped_rows =
        restarted.dock->Stats().steps[0].dropped_rows[static_cast<int>(DropReason::kLost)];
    if (k >= after) {
      EXPECT_EQ(dropped_rows, kRows / 2);
    } else if (k <= before) {
      EXPECT_EQ(dropped_rows, 0);
    } else {
      EXPECT_TRUE(dropped_rows == 0 || dropped_rows == kRows / 2);
    }
  }
}

// A data dir is reopened only with the cell form that wrote it: a
// controller's locations are not read as a standalone server's bytes, nor
// the reverse.
TEST(LocationRestart, ADataDirOpensOnlyInTheFormThatWroteIt) {
  for (CellForm wrote : {CellForm::kLocations, CellForm::kBytes}) {
    const CellForm other = wrote == CellForm::kBytes ? CellForm::kLocations : CellForm::kBytes;
    SCOPED_TRACE(CellFormName(wrote));
    Recording recording(LocationSpec(), nullptr, wrote);
    recording.Stop();
    Persistence persistence(recording.store->Replay(recording.store->writes()),
                            {.data_dir = "reopened"});
    DockRegistry registry(LimitsOn(nullptr, other));
    EXPECT_STATUS(persistence.Recover(registry).status(), absl::StatusCode::kFailedPrecondition,
                  absl::StrCat("'reopened' holds docks whose cells are stored as ",
                               CellFormName(wrote)));
    registry.Shutdown();
    Restarted same(*recording.store, recording.store->writes(), nullptr, wrote);
    EXPECT_NE(same.dock, nullptr);
  }
}

}  // namespace
}  // namespace tdock::persist::crash
