// What one try of a dock call decided: the values DockImpl's stages (check,
// decide in the state classes, record, apply, answer) hand each other.
#ifndef TDOCK_SERVER_DOCK_ATTEMPTS_H_
#define TDOCK_SERVER_DOCK_ATTEMPTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/spec.h"
#include "server/dock/cell_store.h"
#include "server/dock/journal_hook.h"
#include "server/dock/partition.h"
#include "server/dock/round_dispatcher.h"
#include "server/dock/types.h"

namespace tdock::internal {

// What a change answers: its status, and the consumer (or column) after it.
struct ChangeAnswer {
  absl::Status status;
  ConsumerSpec consumer;
  ColumnSpec column;
};

// A column a committed Put wrote: `blocks[i]` is the cell of the Put's
// i-th row. A first write of a cell is staged (the cell holds the block,
// not ready): made ready once stored, unstaged if not. A rewrite is not (the
// cell holds the block it replaces): published once stored.
struct WrittenColumn {
  int column = 0;
  const CellBlock* blocks = nullptr;  // in the step's cells
  // A rewritable column's: per row, whether the Put staged the cell (a
  // first write). Empty: every cell was a first write.
  std::vector<bool> staged;
  bool Staged(size_t i) const { return staged.empty() || staged[i]; }
};

// A Put's try: answered (`done`), or parked (why in `park_reason`).
struct PutAttempt {
  std::optional<absl::StatusOr<PutResult>> done;  // unset: park
  std::string park_reason;
  bool memory_limited = false;  // parked for memory, not for a partition
  bool raced = false;  // lost a race with a concurrent start of the step
  // Committed: the columns it wrote, staged until recorded, and the cells
  // that holds them.
  std::vector<WrittenColumn> columns;
  std::shared_ptr<StepCells> cells;
};

// A committed Put between its staging and its answer: what its record
// carries and what applying it needs (DockImpl::ApplyPut).
struct StagedPut {
  int64_t step = 0;
  uint64_t put_id = 0;  // PutInput::put_id: its answer is kept with its cells
  uint64_t put_fingerprint = 0;
  PutResult result;
  std::vector<WrittenColumn> columns;
  // Holds the cells' bytes while they are recorded; the step is still the
  // one they were written to while its partition's cells are these.
  std::shared_ptr<StepCells> cells;
  std::vector<int> written;  // its columns
  std::vector<int64_t> rows;  // the row of each column's blocks[i]
  std::vector<int64_t> unused;  // the rows its appended groups leave unused
  std::vector<DockJournal::Version> versions;
  // A carry (PutInput::carried_from): its source step, and per consumer the
  // units of this step done for it.
  int64_t carried_from = -1;
  std::vector<ConsumerUnits> carried_done;
  PutCallback done;
};

// Units a consumer with max_staleness claimed as stale: counted as done
// for it; recorded (a hand-out with no lease), or with stale_drop dropped
// for every consumer, once the locks are released.
struct StaleTake {
  int64_t step = 0;
  int consumer = 0;
  bool drop = false;
  std::vector<int64_t> units;
  std::vector<int64_t> rows;  // the units' rows not dropped
};

// A Get's try: answered (`done`), or parked; and what to do once the
// locks are released.
struct GetAttempt {
  std::optional<absl::StatusOr<Batch>> done;  // unset: park
  bool wake_consumer = false;  // a claim was undone: others may now serve
  // A hand-out of a consumer that is not balanced: the rows of its step it
  // has not taken since, and its dispatch size (AfterGet).
  int64_t rows_left = -1;
  int64_t dispatch_rows = 0;
  std::optional<int64_t> maybe_release;  // step that may be fully consumed
  // BALANCED: a round this Get began to form, to plan and commit once
  // the locks are released (AfterGet).
  std::optional<RoundDraft> draft;
  // Units passed over as stale, to record (AfterGet).
  std::vector<StaleTake> stale;
};

// A reservation's try: granted (rows assigned and reserved, not yet
// recorded) or refused; unset: wait (why in `reason`).
struct ReserveAttempt {
  std::optional<absl::StatusOr<Reservation>> done;
  std::vector<int64_t> unused;  // declared groups' rest, closed
  std::string reason;
  bool raced = false;  // lost races with concurrent starts of its step
};

// A hand-out taken effect (DockImpl::HandOutLocked): its lease (0: none)
// and the rows of the step now counted done for the consumer.
struct HandedOut {
  uint64_t lease_id = 0;
  int64_t done_rows = 0;
};

// A column's cells that ListRows answers: of `rows`, in order, as a view
// valid while the step's cells are.
struct ListedCells {
  int column = 0;
  std::vector<int64_t> rows;
  PackedColumn view;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ATTEMPTS_H_
