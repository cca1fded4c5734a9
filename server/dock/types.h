// Request and result types of the dock core. They carry payload as spans into
// memory owned elsewhere (the transport's request buffer on the way in, the
// step's cells on the way out), so the core copies payload exactly once.
#ifndef TDOCK_SERVER_DOCK_TYPES_H_
#define TDOCK_SERVER_DOCK_TYPES_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/batch_meta.h"
#include "common/cell_location.h"
#include "common/drop.h"
#include "common/packed.h"
#include "common/row_state.h"
#include "common/spec.h"
#include "common/timer_service.h"

namespace tdock {

// Units of one consumer (rows, or groups for whole-group consumers).
struct ConsumerUnits {
  int consumer = 0;
  std::vector<int64_t> units;
};

// One column of a Put: segments point into the caller's request buffer,
// which must stay valid until the Put's callback runs.
using ColumnInput = PackedColumn;

struct PutInput {
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::vector<ColumnInput> columns;
  absl::Duration wait = absl::ZeroDuration();  // bound on backpressure
  // Non-zero: the lease this Put acknowledges once it is written (a worker
  // writing its results for the rows it was handed). Checked first: a lease
  // that is not in flight fails the Put and nothing is written.
  uint64_t ack_lease = 0;
  // Empty, or one per row: the rows' keys. A row's key comes with its first
  // write (a later Put may name it again) and is unique among the dock's
  // live rows. With `rows` empty, the rows are those that have these keys.
  std::vector<std::string> keys;
  // With `rows` empty: the server assigns this many new rows of the step
  // (whole groups, from its first free one) and the result lists them. Keys
  // no live row has ask for new rows the same way.
  int64_t new_rows = 0;
  // With rows the server assigns: the sizes of the groups they open, in
  // order, each in [1, n], summing to the rows asked for. Each takes one of
  // the step's groups; its rows past the size are closed (dropped as
  // "unused") once the Put is stored. Empty: groups of n, the last one
  // maybe left partly open.
  std::vector<int32_t> group_sizes;
  // Set by the dock when it assigns the rows: the rows it closes.
  std::vector<int64_t> unused;
  // Set by the dock for a Put that asks for new rows: the claim that holds
  // them from other Puts until it is committed or answered.
  uint64_t append_claim = 0;
  // Non-zero: the reservation (Dock::Reserve) whose rows this Put writes:
  // with `rows` empty, all of them; else `rows` must be some of them. The
  // Put's step is the reservation's.
  uint64_t reservation = 0;
  // Empty, one for every row, or one per row: the policy version (>= 0)
  // the rows were generated with. A row's version is the oldest a stored
  // write of it carried.
  std::vector<int64_t> versions;
  // Docks with add_columns_on_write: definitions of columns of `columns`
  // the dock may lack. One it lacks is added before the Put (as by
  // AddColumn), from its definition here or else its name and dtype.
  std::vector<ColumnSpec> new_columns;
  // Set by the dock for the Put that carries rows of step `carried_from`
  // into this one (seal_when.carry), never by a caller: per consumer index,
  // the positions of the Put's rows it had taken there, done for it here.
  int64_t carried_from = -1;
  std::vector<std::pair<int, std::vector<size_t>>> carried_taken;
  // Non-zero: the writer's id for this Put. A Put with the id of one the
  // dock stored (in a step still live) is not written again: it gets that
  // Put's answer, with `replayed` set; one sent while a Put with its id is
  // being stored is refused (ABORTED: ask again).
  uint64_t put_id = 0;
  // Set by the dock for a Put with a put_id: PutFingerprint of the Put as
  // it came, kept with its answer.
  uint64_t put_fingerprint = 0;
  int64_t version_of(size_t i) const { return versions.size() == 1 ? versions[0] : versions[i]; }
  // The rows the Put writes: `rows`, or as many as it asks the server for.
  int64_t row_count() const {
    return rows.empty() ? new_rows : static_cast<int64_t>(rows.size());
  }
};

struct PutResult {
  int64_t rows = 0;
  int64_t bytes = 0;
  std::vector<int64_t> assigned;  // the rows the server assigned (new_rows)
  int64_t step = 0;               // the step written (a reservation's, too)
  bool replayed = false;  // the answer of an earlier Put with the same put_id
};

struct GetInput {
  std::string consumer;
  int32_t rank = 0;
  std::optional<int64_t> step;  // nullopt: oldest step with available rows
  int64_t count = 0;            // 0: the consumer's dispatch_size
  absl::Duration wait = absl::ZeroDuration();
  bool metadata_only = false;   // Sample: rows and token counts only
  // BALANCED consumers: the round of `step` to serve (asking again returns
  // the same rows; needs a step); nullopt: this rank's next round.
  std::optional<int64_t> round;
  // Consumers with replicas: which replica of the rank asks.
  int32_t replica = 0;
};

// Capacity asked for before generating (Dock::Reserve): `rows` new rows
// (whole groups of n, the last maybe partly), or groups of `group_sizes`,
// for data generated with policy `version` (unset: the dock's version when
// the rows are granted; the producer generates with those weights).
struct ReserveInput {
  std::optional<int64_t> version;
  int64_t rows = 0;
  std::vector<int32_t> group_sizes;
  // Rows of the reservation with no cell by then are dropped ("expired").
  absl::Duration deadline = absl::ZeroDuration();
  // How long to wait for admission (a step the rows can be trained from
  // within the consumers' staleness bounds, with room for them).
  absl::Duration wait = absl::ZeroDuration();
  int64_t row_count() const {
    int64_t rows_asked = rows;
    for (int32_t size : group_sizes) rows_asked += size;
    return rows_asked;
  }
};

// Rows granted to a producer (Dock::Reserve): its Puts write them (by row, or
// naming the reservation).
struct Reservation {
  uint64_t id = 0;
  int64_t step = 0;
  std::vector<int64_t> rows;
  int64_t version = 0;
  absl::Time deadline;
  bool timed_out = false;  // not admitted within the wait: nothing reserved
};

// Rows taken out of a step (Dock::Drop): `rows` and every row of `groups`.
struct DropInput {
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::vector<int64_t> groups;
  DropReason reason = DropReason::kUnspecified;
};

// Closing a step to new rows (Dock::Seal): its rows that lack a cell of any
// of `required_columns` (with none named: that have no cell at all) are
// dropped as "sealed".
struct SealInput {
  int64_t step = 0;
  std::vector<std::string> required_columns;
};

// One column of a batch: segments are views into the step's cells, valid
// while Batch::pin is held; rows in batch order.
using ColumnView = PackedColumn;

// A batch handed out: its metadata (common/batch_meta.h) and its columns.
struct Batch : BatchMeta {
  std::vector<ColumnView> columns;
  // Keeps the step's cells alive while segments are referenced, even after
  // the step is released. Copy it to extend the lifetime.
  std::shared_ptr<const void> pin;

  int64_t payload_bytes() const;
};

// Server-wide limits a dock enforces (flags of tdock-server).
struct DockLimits {
  // Bytes one Get's response may carry (the server's message limit): a Get
  // claims no more rows than fit, and a Put of a row (or group) that would
  // not fit alone is INVALID_ARGUMENT. 0: unlimited.
  int64_t max_batch_bytes = 0;
  // Columns a dock holds at most, AddColumn included (the server's
  // --max_columns_per_dock). 0: its spec's columns and 256 more.
  int64_t max_columns = 0;
  // Gets of one consumer that may wait at once; one more fails with
  // RESOURCE_EXHAUSTED. 0: unlimited.
  int64_t max_parked_gets_per_consumer = 0;
  int64_t max_parked_reserves = 0;  // the same for the dock's Reserves
  // The first lease id the dock hands out. With persistence each start of
  // the server takes a new epoch and starts at epoch << 40, so a lease id is
  // never handed out twice across restarts (an Ack retried after a restart
  // cannot acknowledge another worker's lease).
  uint64_t first_lease_id = 1;
  // The timer service the dock's wait bounds and leases run on (a server
  // shares one among its docks). Null: the dock starts one of its own.
  std::shared_ptr<TimerService> timers;
  // Where the dock reads the time (lease deadlines, wait bounds); `timers`
  // must run on the same clock. Default: the real clock.
  std::shared_ptr<Clock> clock = Clock::Real();
  // Called with a BALANCED round's step and consumer index on the thread
  // that forms it, with no lock of the dock held, before the round is
  // planned (tests hold a formation with it). Default: none.
  std::function<void(int64_t step, int consumer)> before_round_planned;
  // What the dock stores as a cell: its bytes (a standalone server), or
  // where they are (a controller: a Put's and a batch's column data is one
  // CellLocation a row, common/cell_location.h; the bytes' memory limit is
  // the shards', so the dock's own memory_limit_bytes is not enforced).
  CellForm cells = CellForm::kBytes;
  // Called with the dock's name after one of its steps is released (its
  // StepWindow moved), on the thread that applied the release, with no lock
  // of the dock held. Default: none.
  std::function<void(const std::string& dock)> steps_changed;
};

// Which steps a dock takes Puts of (Dock::Window).
struct StepWindow {
  int64_t front_step = 0;  // every step below it is released
  // Per partition, in order: the step it holds, or takes next. A Put of
  // that step is admitted; a later step of the partition waits for it; an
  // earlier one is released.
  std::vector<int64_t> admitted;
};

using PutCallback = absl::AnyInvocable<void(absl::StatusOr<PutResult>) &&>;
using GetCallback = absl::AnyInvocable<void(absl::StatusOr<Batch>) &&>;
// Control operations (Ack, Nack, AddConsumer, ReleaseStep) complete the same
// way: once their record is stored (with persistence), never by waiting.
using StatusCallback = absl::AnyInvocable<void(absl::Status) &&>;
using RowsCallback = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;
using ConsumerCallback = absl::AnyInvocable<void(absl::StatusOr<ConsumerSpec>) &&>;
using ColumnCallback = absl::AnyInvocable<void(absl::StatusOr<ColumnSpec>) &&>;
using ReserveCallback = absl::AnyInvocable<void(absl::StatusOr<Reservation>) &&>;

// A lease in flight (Dock::ListLeases).
struct LeaseInfo {
  uint64_t lease_id = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int64_t round = -1;  // BALANCED: the round of the rank's share
  int64_t rows = 0;
  absl::Time deadline;
};
// What Dock::NackAll handed back.
struct NackAllResult {
  int64_t leases = 0;
  int64_t rows = 0;
};
using NackAllCallback = absl::AnyInvocable<void(absl::StatusOr<NackAllResult>) &&>;

// Snapshot for metrics and status, taken without stopping the data path.
struct StepStats {
  int64_t step = 0;
  int32_t partition = 0;
  std::vector<int64_t> ready_rows;     // per column, in spec order
  std::vector<int64_t> consumed_rows;  // per consumer, in spec order
  // Per consumer: rows whose needed columns are all ready and that it has
  // not taken yet.
  std::vector<int64_t> available_rows;
  bool sealed = false;
  // Rows dropped, by reason (indexed by DropReason's value).
  std::array<int64_t, kDropReasons> dropped_rows{};
};

// How stale the rows handed to a consumer were (the dock's version minus
// the row's, when the row was claimed; rows without a version are not
// counted), since the dock was created.
inline constexpr std::array<int64_t, 10> kStalenessBounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 32};
struct StalenessStats {
  // Per bucket: rows with staleness <= kStalenessBounds[i] and above the
  // bound before it; the last counts those above every bound.
  std::array<int64_t, kStalenessBounds.size() + 1> buckets{};
  int64_t sum = 0;
  int64_t count = 0;
  // Rows over the consumer's max_staleness: passed over, or dropped.
  int64_t stale_rows = 0;
};

struct DockStats {
  std::string name;
  int64_t rows_per_step = 0;
  std::vector<std::string> columns;
  std::vector<std::string> consumers;
  std::vector<StepStats> steps;          // live steps, oldest first
  int64_t front_step = 0;  // the oldest step not released: every step below it is
  std::vector<int64_t> waiters;          // per consumer: parked Gets
  int64_t parked_puts = 0;
  int64_t arena_bytes_used = 0;          // payload bytes in live steps
  int64_t arena_bytes_reserved = 0;      // bytes of chunks the pool holds
  int64_t memory_limit_bytes = 0;        // 0: unlimited
  // Since the dock was created (released and live steps): rows written per
  // column and rows handed out per consumer.
  std::vector<int64_t> rows_written_total;
  std::vector<int64_t> rows_handed_out_total;
  // Rows dropped since the dock was created, by reason (DropReason's value).
  std::array<int64_t, kDropReasons> rows_dropped_total{};
  int64_t version = 0;  // the dock's current policy version (Dock::SetVersion)
  std::vector<StalenessStats> staleness;  // per consumer
  // Reservations: granted and not yet expired; waiting for admission; and
  // since creation, those that waited and the seconds they waited.
  int64_t reservations_live = 0;
  int64_t reservations_parked = 0;
  int64_t admission_waits_total = 0;
  double admission_wait_seconds_total = 0;
  // Per consumer: its lease_ms (0: no leases), and (zero without leases)
  // leases and their rows in flight now;
  // leases that expired or were returned by Nack, and the rows they handed
  // back, since the dock was created.
  std::vector<int64_t> lease_ms;
  std::vector<int64_t> leases_in_flight;
  std::vector<int64_t> rows_in_flight;
  std::vector<int64_t> lease_expiries_total;
  std::vector<int64_t> lease_nacks_total;
  std::vector<int64_t> rows_returned_total;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_DOCK_TYPES_H_
