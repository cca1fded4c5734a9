// A shard with a data dir (server/persist/store_shard_journal.h): its cells
// are recorded before their locations go to the controller, so at every
// crash point (the store as it was after each of its writes) a restarted
// shard holds, byte for byte and under the same incarnation and extent ids,
// every staged Put whose record was acknowledged, committed ones with the
// step the controller stored them in, until the write that frees them;
// freed and aborted Puts stay gone once that write is in; and no extent id
// is given again. A new
// incarnation (the controller declared the old one lost) drops every
// record. A data dir of docks is refused to a shard, and a shard's to a
// dock server. And the two processes together: at every consistent crash
// point of a shard and its controller, every location the controller holds
// names cells the shard holds, and reconciling them frees what the
// controller never stored and loses nothing.
#include <algorithm>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/persist/journal.h"
#include "server/persist/persistence.h"
#include "server/persist/store_shard_journal.h"
#include "server/shard/shard_reconcile.h"
#include "server/shard/shard_store.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/persist_test_util.h"
#include "tests/persist/recording_server.h"
#include "tests/persist/recording_store.h"
#include "tests/test_util.h"

namespace tdock::persist {
namespace {

using shard::ShardStore;
using testing::OwnedColumn;

OwnedColumn Floats(const std::vector<int64_t>& lengths, float first) {
  std::vector<std::vector<float>> rows;
  float value = first;
  for (int64_t len : lengths) {
    std::vector<float>& row = rows.emplace_back();
    for (int64_t k = 0; k < len; ++k) row.push_back(value++);
  }
  return OwnedColumn::Of<float>("a", DType::kFloat32, rows);
}

// The bytes of every cell `locations` name, read from `store`; empty if
// any cannot be read.
std::vector<std::string> CellsOf(const ShardStore& store,
                                 const std::vector<CellLocation>& locations) {
  absl::StatusOr<ShardStore::Cells> cells = store.Read("d", locations);
  if (!cells.ok()) return {};
  std::vector<std::string> out;
  for (const ByteSpan& cell : cells->cells) out.emplace_back(cell.data(), cell.size());
  return out;
}

absl::Status Recorded(ShardStore& store, uint64_t extent) {
  std::promise<absl::Status> recorded;
  store.Record(extent, [&recorded](absl::Status s) { recorded.set_value(std::move(s)); });
  return recorded.get_future().get();
}

struct Put {
  std::vector<CellLocation> locations;
  std::vector<std::string> cells;
  int64_t step = 0;             // committed in (-1: not committed)
  int64_t recorded_at = 0;      // the store's writes once its record was acknowledged
  int64_t freed_before = -1;    // the store's writes before it was freed (-1: never)
  int64_t freed_after = -1;     // ... once the write freeing it was in
};

TEST(ShardRestart, EveryCrashPointKeepsEveryRecordedPutUntilItIsFreed) {
  RecordingStore disk;
  Journal journal(&disk, {.durability = Durability::kSync});
  StoreShardJournal records(&journal);
  ShardStore store(7, 4096, 0);
  ASSERT_OK(store.Recover(&records, {}));  // a new data dir: its incarnation
  std::map<uint64_t, Put> puts;
  auto stage = [&](std::optional<int64_t> step, std::vector<int64_t> lengths, float first) {
    OwnedColumn column = Floats(lengths, first);
    std::vector<PackedColumn> views = {column.View()};
    absl::StatusOr<ShardStore::Staged> staged = store.Stage("d", step, views, {4});
    EXPECT_OK(staged);
    Put& put = puts[staged->extent];
    put.locations = staged->locations[0];
    put.cells = CellsOf(store, put.locations);
    put.step = -1;
    EXPECT_OK(Recorded(store, staged->extent));
    put.recorded_at = disk.writes();
    return staged->extent;
  };
  const uint64_t first = stage(0, {2, 0, 3}, 0);
  ASSERT_OK(store.Commit(first, 0));
  puts[first].step = 0;
  const uint64_t staged = stage(1, {1}, 10);  // its answer never came
  const uint64_t reserved = stage(std::nullopt, {4, 1}, 20);
  ASSERT_OK(store.Commit(reserved, 1));
  puts[reserved].step = 1;
  const uint64_t refused = stage(1, {2}, 30);
  ASSERT_OK(journal.Flush());
  puts[refused].freed_before = disk.writes();
  store.Abort(refused);
  ASSERT_OK(journal.Flush());
  puts[refused].freed_after = disk.writes();
  puts[first].freed_before = disk.writes();
  store.Release("d", 0);  // no read grace: freed at once
  ASSERT_OK(journal.Flush());
  puts[first].freed_after = disk.writes();
  const int64_t writes = disk.writes();
  ASSERT_GE(writes, 4);  // each staged record was waited for: a write each at least

  for (int64_t point = 0; point <= writes; ++point) {
    SCOPED_TRACE(absl::StrCat("crash after ", point, " of ", writes, " writes"));
    std::unique_ptr<Store> replayed = disk.Replay(point);
    ASSERT_OK_AND_ASSIGN(shard::RecoveredShard recovered, RecoverShard(*replayed, "replayed"));
    ShardStore restarted(7, 4096, 0);
    ASSERT_OK(restarted.Recover(nullptr, recovered));
    if (point > 0) {
      EXPECT_EQ(restarted.incarnation(), store.incarnation());
    }
    std::map<uint64_t, int64_t> steps;  // recovered extent -> its step
    bool staged_back = false;  // a Put recovered staged: its commit's outcome is unknown
    for (const shard::ShardJournal::Extent& extent : recovered.extents) {
      steps[extent.id] = extent.committed ? extent.step : -1;
      staged_back |= !extent.committed;
    }
    EXPECT_EQ(restarted.HasUnresolved(), staged_back) << "staged Puts come back unresolved";
    for (const auto& [extent, put] : puts) {
      SCOPED_TRACE(absl::StrCat("extent ", extent));
      const bool held = point >= put.recorded_at &&
                        (put.freed_before < 0 || point <= put.freed_before);
      const bool gone = point < put.recorded_at ||
                        (put.freed_after >= 0 && point >= put.freed_after);
      ASSERT_FALSE(put.cells.empty());
      if (held) {
        EXPECT_EQ(CellsOf(restarted, put.locations), put.cells);
        ASSERT_EQ(steps.count(extent), 1u);
        // A commit is recorded after the Put (without waiting): it may be
        // missing, never wrong.
        if (steps[extent] >= 0) {
          EXPECT_EQ(steps[extent], put.step);
        }
      }
      if (gone) {
        EXPECT_EQ(steps.count(extent), 0u);
      }
    }
  }
  // At the end: the Put whose answer never came and the reservation's,
  // committed in step 1, are all that is held.
  std::unique_ptr<Store> last = disk.Replay(writes);
  ASSERT_OK_AND_ASSIGN(shard::RecoveredShard recovered, RecoverShard(*last, "last"));
  ASSERT_EQ(recovered.extents.size(), 2u);
  EXPECT_EQ(recovered.extents[0].id, staged);
  EXPECT_FALSE(recovered.extents[0].committed);
  EXPECT_EQ(recovered.extents[0].step, 1);
  EXPECT_EQ(recovered.extents[1].id, reserved);
  EXPECT_TRUE(recovered.extents[1].committed);
  EXPECT_EQ(recovered.extents[1].step, 1);
  // Extent ids go on past every id given, the freed ones' too: a stale
  // location names no other Put's cells.
  ShardStore restarted(7, 4096, 0);
  ASSERT_OK(restarted.Recover(nullptr, recovered));
  OwnedColumn column = Floats({1}, 0);
  std::vector<PackedColumn> views = {column.View()};
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged next, restarted.Stage("d", 1, views, {4}));
  EXPECT_GT(next.extent, refused);
  EXPECT_GT(refused, reserved);
}

// The controller's dock of the two-process test: eight rows a step, two
// steps in flight, a leased trainer.
DockSpec ControllerSpec() {
  DockSpec spec;
  spec.name = "crash";
  spec.num_prompts = crash::kRows;
  spec.n_samples_per_prompt = 1;
  spec.steps_in_flight = 2;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  ConsumerSpec trainer{"trainer", {"tokens"}, crash::kRows, 1, false, Policy::kFifo, 0};
  trainer.lease_ms = 600'000;
  spec.consumers = {trainer};
  return spec;
}

// Row `row` of `step`'s tokens.
std::vector<int32_t> TokensOf(int64_t step, int64_t row) {
  std::vector<int32_t> tokens(1 + (step * crash::kRows + row) % 5);
  for (size_t k = 0; k < tokens.size(); ++k) {
    tokens[k] = static_cast<int32_t>(1000 * step + 10 * row + static_cast<int64_t>(k));
  }
  return tokens;
}

// The Put protocol of a shard and its controller, in one process: the
// shard stages a Put and records it (waiting, as with sync durability),
// then the controller stores its locations, then the shard commits it;
// the controller releases a step once its rows are acknowledged, and the
// shard frees the step's cells after (as its feed tells it). Every crash
// point of the two is a prefix of each store's writes; those consistent
// with that order (the controller holds no Put the shard had not recorded,
// the shard freed nothing the controller had not released) are restarted:
// every location a live row of the controller holds names cells the shard
// holds, byte for byte, and the restarted shard is the same incarnation;
// reconciling them stores or frees every Put the shard never heard
// answered, drops nothing as lost, and every location still reads.
// Kills of one process alone are among them (the other's prefix whole).
TEST(TwoProcessRestart, AtEveryConsistentCrashPointTheControllersLocationsAreReadable) {
  crash::Recording controller(ControllerSpec(), nullptr, CellForm::kLocations);
  RecordingStore& ctrl = *controller.store;
  const int64_t created = ctrl.writes();  // the dock's creation is stored
  RecordingStore disk;
  Journal journal(&disk, {.durability = Durability::kSync});
  StoreShardJournal records(&journal);
  ShardStore shard(1, 4096, 0);
  ASSERT_OK(shard.Recover(&records, {}));
  struct Stored {
    int64_t recorded_at;  // shard writes once the shard's record was in
    int64_t ctrl_before;  // controller writes before it was sent there
  };
  std::vector<Stored> stored;
  auto put = [&](int64_t step, std::vector<int64_t> rows, bool sent) {
    std::vector<std::vector<int32_t>> cells;
    for (int64_t row : rows) cells.push_back(TokensOf(step, row));
    OwnedColumn column = OwnedColumn::Of<int32_t>("tokens", DType::kInt32, cells);
    std::vector<PackedColumn> views = {column.View()};
    ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged, shard.Stage("crash", step, views, {4}));
    ASSERT_OK(Recorded(shard, staged.extent));
    if (!sent) return;  // the shard died before the controller heard of it
    stored.push_back({disk.writes(), ctrl.writes()});
    OwnedColumn located{"tokens", DType::kInt32, {0}, {}};
    for (size_t r = 0; r < rows.size(); ++r) {
      located.offsets.push_back(located.offsets.back() +
                                static_cast<int64_t>(cells[r].size()));
      located.bytes += EncodeCellLocation(staged.locations[0][r]);
    }
    ASSERT_OK(testing::PutSync(*controller.dock, step, rows, {located}));
    ASSERT_OK(shard.Commit(staged.extent, step));
  };
  for (int64_t step = 0; step < 2; ++step) {
    put(step, {0, 1, 2, 3}, true);
    put(step, {4, 5, 6, 7}, true);
  }
  put(1, {4, 5}, false);
  // Step 0 is taken and acknowledged: the controller releases it, and then
  // the shard frees its cells.
  ASSERT_OK_AND_ASSIGN(Batch taken, testing::GetSync(*controller.dock, testing::GetOf("trainer")));
  ASSERT_EQ(taken.step, 0);
  ASSERT_OK(controller.dock->Ack("trainer", taken.lease_id));
  ASSERT_OK(controller.persistence->journal().Flush());
  const int64_t released_by = ctrl.writes();
  ASSERT_OK(journal.Flush());
  const int64_t freed_after = disk.writes();
  shard.Release("crash", 0);
  ASSERT_OK(journal.Flush());
  controller.Stop();
  const int64_t shard_writes = disk.writes();
  const int64_t ctrl_writes = ctrl.writes();

  int64_t points = 0;
  int64_t reads = 0;     // cells read back
  int64_t given_up = 0;  // unanswered Puts the shard freed on reconciling
  for (int64_t i = 0; i <= shard_writes; ++i) {
    for (int64_t j = created; j <= ctrl_writes; ++j) {
      bool consistent = !(i > freed_after && j < released_by);
      for (const Stored& put : stored) {
        if (j > put.ctrl_before && i < put.recorded_at) consistent = false;
      }
      if (!consistent) continue;
      ++points;
      SCOPED_TRACE(absl::StrCat("crash after shard write ", i, ", controller write ", j));
      crash::Restarted restarted(ctrl, j, nullptr, CellForm::kLocations);
      ASSERT_OK_AND_ASSIGN(shard::RecoveredShard recovered, RecoverShard(*disk.Replay(i), "i"));
      ShardStore back(1, 4096, 0);
      ASSERT_OK(back.Recover(nullptr, recovered));
      auto read_back = [&] {
        for (int64_t step = 0; step < 2; ++step) {
          absl::StatusOr<RowListing> listing = restarted.dock->ListRows(step, {"tokens"});
          if (!listing.ok()) continue;  // released, or not started
          for (const RowState& row : listing->rows) {
            if (row.cells.empty()) continue;
            ASSERT_OK_AND_ASSIGN(CellLocation where, DecodeCellLocation(row.cells[0].second));
            EXPECT_EQ(back.incarnation(), shard.incarnation());
            ASSERT_OK_AND_ASSIGN(ShardStore::Cells cells, back.Read("crash", {where}));
            ++reads;
            const std::vector<int32_t> want = TokensOf(step, row.row);
            EXPECT_EQ(std::string(cells.cells[0].data(), cells.cells[0].size()),
                      std::string(reinterpret_cast<const char*>(want.data()), want.size() * 4))
                << "step " << step << " row " << row.row;
          }
        }
      };
      read_back();
      // The shard reconciles with the restarted controller: every Put it
      // recorded but never heard answered is stored (committed in its step)
      // or given up (retired: unreadable, no grace here, and freed by the
      // next sweep); nothing is lost, since nothing is missing.
      const ShardStore::Inventory inventory = back.GetInventory();
      shard::ShardReconciler reconciler(&restarted.registry);
      std::promise<absl::StatusOr<shard::ShardReconciler::Outcome>> answered;
      reconciler.Reconcile({.shard = 1,
                            .incarnation = inventory.incarnation,
                            .held = inventory.held,
                            .unresolved = inventory.unresolved,
                            .next_extent = inventory.next_extent,
                            .complete = true},
                           [&answered](absl::StatusOr<shard::ShardReconciler::Outcome> got) {
                             answered.set_value(std::move(got));
                           });
      ASSERT_OK_AND_ASSIGN(shard::ShardReconciler::Outcome outcome,
                           answered.get_future().get());
      EXPECT_EQ(outcome.lost_rows, 0);
      EXPECT_EQ(outcome.left, 0);
      EXPECT_EQ(outcome.stored.size() + outcome.given_up.size(), inventory.unresolved.size());
      for (const auto& [extent, step] : outcome.stored) back.Resolve(extent, step);
      for (uint64_t extent : outcome.given_up) back.Resolve(extent, std::nullopt);
      EXPECT_FALSE(back.HasUnresolved());
      back.Sweep();
      const std::vector<uint64_t> held = back.GetInventory().held;
      for (uint64_t extent : outcome.given_up) {
        EXPECT_FALSE(std::binary_search(held.begin(), held.end(), extent))
            << "given up, extent " << extent << " is freed";
      }
      given_up += static_cast<int64_t>(outcome.given_up.size());
      read_back();
    }
  }
  EXPECT_GT(given_up, 0) << "the Put whose answer never came is given up where recorded";
  EXPECT_GT(points, shard_writes + ctrl_writes - created);
  EXPECT_GT(reads, points);
}

// The controller declared the incarnation lost: every record goes with
// the cells, and the data dir holds the new incarnation only.
TEST(ShardRestart, ANewIncarnationDropsEveryRecord) {
  RecordingStore disk;
  Journal journal(&disk, {.durability = Durability::kSync});
  StoreShardJournal records(&journal);
  ShardStore store(7, 4096, 0);
  ASSERT_OK(store.Recover(&records, {}));
  OwnedColumn column = Floats({3}, 0);
  std::vector<PackedColumn> views = {column.View()};
  ASSERT_OK_AND_ASSIGN(ShardStore::Staged staged, store.Stage("d", 0, views, {4}));
  ASSERT_OK(Recorded(store, staged.extent));
  const uint32_t next = store.Reincarnate();
  ASSERT_OK(journal.Flush());
  ASSERT_OK_AND_ASSIGN(shard::RecoveredShard recovered,
                       RecoverShard(*disk.Replay(disk.writes()), "dir"));
  EXPECT_EQ(recovered.incarnation, next);
  EXPECT_TRUE(recovered.extents.empty());
}

// A shard opens only a shard's data dir, and a dock server only its own.
TEST(ShardRestart, ADataDirOfDocksAndAShardsAreNotMixedUp) {
  const std::string dir = TempDir("shard_dir_kinds");
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> disk, OpenRocksStore(dir));
    StoreBatch batch;
    batch.Put("Sdock", "spec");
    ASSERT_OK(disk->Write(batch, true));
    EXPECT_STATUS(RecoverShard(*disk, dir).status(), absl::StatusCode::kFailedPrecondition,
                  "holds docks (written by a standalone server or a controller)");
  }
  RemoveDir(dir);
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> disk, OpenRocksStore(dir));
    Journal journal(disk.get(), {});
    StoreShardJournal records(&journal);
    ShardStore store(7, 4096, 0);
    ASSERT_OK(store.Recover(&records, {}));
    ASSERT_OK(journal.Flush());
  }
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Persistence> persistence,
                         Persistence::Open({.data_dir = dir}));
    DockRegistry registry;
    EXPECT_STATUS(persistence->Recover(registry).status(), absl::StatusCode::kFailedPrecondition,
                  "holds a shard's cells (written by --role=shard)");
  }
  RemoveDir(dir);
}

}  // namespace
}  // namespace tdock::persist
