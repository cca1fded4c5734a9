// A server on a RecordingStore (tests/persist/recording_store.h) holding
// the crash dock, and a server restarted on what that store holds: for
// tests of what survives a restart.
#ifndef TDOCK_TESTS_PERSIST_RECORDING_SERVER_H_
#define TDOCK_TESTS_PERSIST_RECORDING_SERVER_H_

#include <memory>
#include <vector>

#include "common/clock.h"
#include "common/timer_service.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/crash_workload.h"
#include "tests/test_util.h"

namespace tdock::persist::crash {

// A registry whose docks run on `clock` (leases, reservations, wait bounds),
// on a timer service of its own; on the real clock if it is null. Its docks
// store cells in `cells`.
inline RegistryLimits LimitsOn(std::shared_ptr<Clock> clock, CellForm cells = CellForm::kBytes) {
  RegistryLimits limits;
  limits.dock.cells = cells;
  if (clock != nullptr) {
    limits.dock.timers = std::make_shared<TimerService>(clock);
    limits.dock.clock = std::move(clock);
  }
  return limits;
}

// A server started on the records `store` holds after its writes so far,
// or after its first `writes` (a crash point); its docks on `clock`.
struct Restarted {
  explicit Restarted(const RecordingStore& store) : Restarted(store, store.writes()) {}
  Restarted(const RecordingStore& store, int64_t writes, std::shared_ptr<Clock> clock = nullptr,
            CellForm cells = CellForm::kBytes)
      : persistence(store.Replay(writes), {.data_dir = "restarted"}),
        registry(LimitsOn(std::move(clock), cells)) {
    EXPECT_OK(persistence.Recover(registry).status());
    dock = *registry.Find("crash");
  }
  ~Restarted() { registry.Shutdown(); }
  Persistence persistence;
  DockRegistry registry;
  std::shared_ptr<Dock> dock;
};

// A server on a RecordingStore holding the crash dock; Stop shuts it down
// with every record stored.
struct Recording {
  // `clock`: the docks' clock (leases, reservations, wait bounds), on a timer
  // service of its own; the real clock by default.
  explicit Recording(DockSpec spec = CrashSpec(), std::shared_ptr<Clock> clock = nullptr,
                     CellForm cells = CellForm::kBytes)
      : registry(LimitsOn(std::move(clock), cells)) {
    auto owned = std::make_unique<RecordingStore>();
    store = owned.get();
    persistence = std::make_unique<Persistence>(std::move(owned),
                                                PersistenceOptions{.data_dir = "recording"});
    EXPECT_OK(persistence->Recover(registry).status());
    dock = *registry.Create(std::move(spec));
  }
  void Stop() {
    registry.Shutdown();
    EXPECT_OK(persistence->journal().Flush());
  }
  ~Recording() { registry.Shutdown(); }
  RecordingStore* store = nullptr;
  std::unique_ptr<Persistence> persistence;
  DockRegistry registry;
  std::shared_ptr<Dock> dock;
};

// Writes the ids of every row of `step`.
inline void WriteIds(Dock& dock, int64_t step) {
  std::vector<int64_t> rows;
  for (int64_t row = 0; row < kRows; ++row) rows.push_back(row);
  ASSERT_OK(testing::PutSync(dock, step, rows, {ColumnOf("ids", 0, step, rows)}));
}

}  // namespace tdock::persist::crash

#endif  // TDOCK_TESTS_PERSIST_RECORDING_SERVER_H_
