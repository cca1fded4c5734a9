// Crash points: randomized workloads against a journaled dock (several
// writers and readers, leased and BALANCED consumers, Put with ack_lease,
// Nack, early releases, AddConsumer, failed writes), whose journal writes
// are then replayed up to every crash point k (the first k writes survive,
// the rest are lost). At every k:
//   - the server comes back: recovery succeeds;
//   - every Put acknowledged by k is present and whole; a Put in doubt is
//     all there or not at all; a step holding acknowledged cells is gone
//     only if it was released, or every consumer may have been done with it;
//   - draining every consumer after recovery hands out no row whose
//     hand-out (without a lease) or acknowledgement (with one) was answered
//     by k, hands out no row twice, and hands out every row that is ready
//     and that no consumer's answer may have counted as done.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/crash_workload.h"
#include "tests/test_util.h"

namespace tdock::persist::crash {
namespace {

using testing::GetSync;
using testing::RowValues;

// The checker of one crash point; failures are collected as text.
class CrashPoint {
 public:
  CrashPoint(const CrashWorkload& workload, int64_t k) : w_(workload), k_(k) {}

  std::vector<std::string> Check(std::unique_ptr<Store> store) {
    Persistence persistence(std::move(store), {.data_dir = absl::StrCat("crash point ", k_)});
    DockRegistry registry;
    absl::StatusOr<RecoveryStats> recovered = persistence.Recover(registry);
    if (!recovered.ok()) {
      Fail(absl::StrCat("recovery failed: ", recovered.status().ToString()));
      return failures_;
    }
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Find("crash");
    if (dock.ok()) {
      CheckDock(**dock);
    } else if (k_ >= w_.created()) {
      Fail(absl::StrCat("the dock is gone: ", dock.status().ToString()));
    }
    registry.Shutdown();
    return failures_;
  }

 private:
  bool Acked(const Event& e) const { return e.acked <= k_; }
  bool Possibly(const Event& e) const { return e.issued < k_ && e.acked != kNever; }
  void Fail(std::string what) { failures_.push_back(absl::StrCat("crash point ", k_, ": ", what)); }

  bool DoneBy(const std::string& consumer, int64_t step, int64_t row, bool acked) const {
    auto it = w_.done().find({consumer, step, row});
    if (it == w_.done().end()) return false;
    for (const Event& e : it->second) {
      if (acked ? Acked(e) : Possibly(e)) return true;
    }
    return false;
  }

  void CheckDock(Dock& dock) {
    const DockSpec spec = dock.spec();
    std::set<int64_t> live;
    for (const StepStats& s : dock.Stats().steps) live.insert(s.step);
    CheckPuts(dock, spec, live);
    // Which cells are there, before draining releases steps.
    std::map<int64_t, std::vector<std::set<std::string>>> cells;
    for (int64_t step : live) {
      cells[step].resize(kRows);
      for (int64_t row = 0; row < kRows; ++row) {
        for (const ColumnSpec& c : spec.columns) {
          if (dock.Read(step, {row}, {c.name}).ok()) cells[step][row].insert(c.name);
        }
      }
    }
    // The producers write what is missing, so every row can reach every
    // consumer.
    for (int64_t step : live) {
      for (const ColumnSpec& c : spec.columns) {
        std::vector<int64_t> rows;
        for (int64_t row = 0; row < kRows; ++row) {
          if (cells[step][row].count(c.name) == 0) rows.push_back(row);
        }
        if (rows.empty()) continue;
        absl::StatusOr<PutResult> put =
            testing::PutSync(dock, step, rows, {ColumnOf(c.name, step, rows)});
        if (!put.ok()) {
          Fail(absl::StrCat("step ", step, ": writing the missing ", c.name,
                            " cells failed: ", put.status().ToString()));
        }
      }
    }
    // Leases still in flight come back, as when their workers are gone.
    for (const auto& [consumer, ids] : w_.leases()) {
      for (uint64_t id : ids) (void)dock.Nack(consumer, id);
    }
    for (int64_t step : live) {
      for (const ConsumerSpec& consumer : spec.consumers) {
        CheckDrain(dock, consumer, step);
      }
    }
  }

  void CheckPuts(Dock& dock, const DockSpec& spec, const std::set<int64_t>& live) {
    for (const PutRecord& put : w_.puts()) {
      if (!Possibly(put.event)) continue;
      if (live.count(put.step) == 0) {
        if (Acked(put.event) && !MayBeReleased(spec, put.step)) {
          Fail(absl::StrCat("step ", put.step, " holds an acknowledged Put of ", put.column,
                            " but is gone after recovery"));
        }
        continue;
      }
      int present = 0;
      for (int64_t row : put.rows) {
        absl::StatusOr<Batch> read = dock.Read(put.step, {row}, {put.column});
        if (!read.ok()) continue;
        ++present;
        const bool right = put.column == "ids"
                               ? RowValues<int32_t>(read->columns[0], 0) == IdsOf(put.step, row)
                               : RowValues<float>(read->columns[0], 0) ==
                                     std::vector<float>{ScoreOf(put.step, row)};
        if (!right) Fail(absl::StrCat("step ", put.step, " row ", row, " ", put.column, " differs"));
      }
      const int rows = static_cast<int>(put.rows.size());
      if (Acked(put.event) && present != rows) {
        Fail(absl::StrCat("an acknowledged Put of step ", put.step, " ", put.column, " has ",
                          present, " of its ", rows, " cells"));
      } else if (present != 0 && present != rows) {
        Fail(absl::StrCat("a Put of step ", put.step, " ", put.column, " is partial: ", present,
                          " of ", rows, " cells"));
      }
    }
  }

  // A step may be gone if it was released, or if every consumer may have
  // taken every row.
  bool MayBeReleased(const DockSpec& spec, int64_t step) const {
    auto released = w_.releases().find(step);
    if (released != w_.releases().end() && released->second < k_) return true;
    for (const ConsumerSpec& c : spec.consumers) {
      for (int64_t row = 0; row < kRows; ++row) {
        if (!DoneBy(c.name, step, row, /*acked=*/false)) return false;
      }
    }
    return true;
  }

  void CheckDrain(Dock& dock, const ConsumerSpec& consumer, int64_t step) {
    std::vector<int64_t> drained;
    for (int32_t rank = 0; rank < consumer.dp_size; ++rank) {
      for (int i = 0; i < 4 * kRows; ++i) {
        GetInput in = testing::GetOf(consumer.name);
        in.rank = rank;
        in.step = step;
        absl::StatusOr<Batch> got = GetSync(dock, in);
        if (!got.ok()) {
          Fail(absl::StrCat(consumer.name, " step ", step, ": Get failed: ",
                            got.status().ToString()));
          return;
        }
        drained.insert(drained.end(), got->rows.begin(), got->rows.end());
        if (got->lease_id != 0) (void)dock.Ack(consumer.name, got->lease_id);
        if (got->end_of_step || got->timed_out || got->rows.empty()) break;
      }
    }
    std::set<int64_t> seen;
    for (int64_t row : drained) {
      if (!seen.insert(row).second) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row, " handed out twice"));
      }
      if (DoneBy(consumer.name, step, row, /*acked=*/true)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was acknowledged before the crash and is handed out again"));
      }
    }
    for (int64_t row = 0; row < kRows; ++row) {
      if (seen.count(row) == 0 && !DoneBy(consumer.name, step, row, /*acked=*/false)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was never acknowledged, but is not handed out"));
      }
    }
  }

  const CrashWorkload& w_;
  const int64_t k_;
  std::vector<std::string> failures_;
};

// Runs workload `seed` and checks every crash point; returns the number of
// crash points and appends failures.
int64_t RunAndCheck(uint64_t seed, int ops, std::vector<std::string>& failures) {
  auto owned = std::make_unique<RecordingStore>();
  RecordingStore* store = owned.get();
  int64_t writes = 0;
  std::unique_ptr<CrashWorkload> workload;
  {
    Persistence persistence(std::move(owned), {.data_dir = "recording"});
    DockRegistry registry;
    EXPECT_OK(persistence.Recover(registry).status());
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Create(CrashSpec());
    EXPECT_OK(dock.status());
    if (!dock.ok()) return 0;
    workload = std::make_unique<CrashWorkload>(seed, store, *dock);
    workload->Run(ops);
    registry.Shutdown();
    workload->WaitParked();
    EXPECT_OK(persistence.journal().Flush());
    writes = store->writes();
    for (int64_t k = 0; k <= writes; ++k) {
      for (std::string& f : CrashPoint(*workload, k).Check(store->Replay(k))) {
        failures.push_back(absl::StrCat("seed ", seed, " ", f));
      }
    }
  }
  return writes + 1;
}

TEST(CrashPoint, EveryPrefixOfTheJournalRecovers) {
  constexpr int kWorkloads = 24;
  constexpr int kOps = 160;
  std::vector<std::string> failures;
  int64_t points = 0;
  for (uint64_t seed = 1; seed <= kWorkloads; ++seed) points += RunAndCheck(seed, kOps, failures);
  std::printf("crash points: %d workloads of %d operations, %lld crash points, %zu failures\n",
              kWorkloads, kOps, static_cast<long long>(points), failures.size());
  for (size_t i = 0; i < failures.size() && i < 40; ++i) ADD_FAILURE() << failures[i];
  EXPECT_GT(points, kWorkloads * 20);
}

}  // namespace
}  // namespace tdock::persist::crash
