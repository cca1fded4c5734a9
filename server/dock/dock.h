// Dock: one named buffer for one training job.
//
// Producers Put columns of rows of a step; consumers Get batches of rows once
// every column they need is ready. Each row is handed to each consumer exactly
// once per step. Steps live in a ring of `steps_in_flight` partitions; a Put to
// a step whose partition still holds an older step waits (bounded) for it.
//
// Thread safety: every method may be called from any thread. Put and Get never
// block the caller: they complete through their callback, possibly before
// returning (immediate result) or later from another thread (a Put that made
// rows available, the wait-bound timer, Cancel, or a release). Callbacks run
// without any dock lock held, exactly once.
//
// Ownership: the Dock owns its partitions, cell store and parked waiters.
// Batches pin the cells of their step, so a batch stays valid after release.
// Destroying the Dock completes every parked call with UNAVAILABLE and stops
// its timers; records still being stored complete afterwards (their
// callbacks hold the dock's state, never a freed one).
#ifndef TDOCK_SERVER_DOCK_DOCK_H_
#define TDOCK_SERVER_DOCK_DOCK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cell_location.h"
#include "common/spec.h"
#include "server/dock/journal_hook.h"
#include "server/dock/types.h"

namespace tdock {

namespace internal {
class DockImpl;
}

class Dock final {
 public:
  // Validates and normalizes `spec`; INVALID_ARGUMENT naming the field at
  // fault. With a journal, every change is recorded before it is
  // acknowledged (see journal_hook.h). A new dock is a recovery from no
  // records (DockRecovery::Start, then Finish).
  static absl::StatusOr<std::unique_ptr<Dock>> Create(
      DockSpec spec, DockLimits limits = {}, std::shared_ptr<DockJournal> journal = nullptr);
  ~Dock();
  Dock(const Dock&) = delete;
  Dock& operator=(const Dock&) = delete;

  const std::string& name() const;
  // The normalized spec, including consumers added since creation.
  DockSpec spec() const;

  // Writes cells. Errors (nothing is written): INVALID_ARGUMENT (unknown
  // column, wrong dtype, row out of range, offsets that do not match the data,
  // duplicate row, row over max_len), ALREADY_EXISTS (cell already written in
  // a non-rewritable column), FAILED_PRECONDITION (step already released),
  // RESOURCE_EXHAUSTED (the step's partition still holds an older step, or the
  // memory limit, past `wait`). Keys (PutInput::keys) and new rows
  // (PutInput::new_rows) add their own: a key another live row has
  // (ALREADY_EXISTS), a row that has another key or none though written
  // (FAILED_PRECONDITION), no room for new rows (RESOURCE_EXHAUSTED), a
  // sealed step (FAILED_PRECONDITION). The result lists the rows assigned.
  // A dock whose spec sets add_columns_on_write first adds the columns the
  // Put writes that it lacks (PutInput::new_columns), each as AddColumn
  // does; the Put is checked with them before the first is added.
  void Put(PutInput input, PutCallback done);

  // Claims and returns up to `count` rows for a consumer. Waits up to `wait`
  // for `count` rows (or the step's remainder, which ends the step for that
  // consumer); on timeout returns an empty batch with timed_out set. A Get
  // for a step the consumer has fully taken, or for a released step, returns
  // an empty batch with end_of_step set at once. Returns an id usable with
  // Cancel while the call is parked (0 if it completed).
  uint64_t Get(GetInput input, GetCallback done);

  // Completes a parked Get, Put or Reserve with CANCELLED; no-op if it
  // already ended.
  void Cancel(uint64_t id);

  // Consumers with lease_ms > 0. Ack completes the lease's rows for the
  // consumer; Nack hands them back at once (to the same rank's next Get for a
  // BALANCED consumer, to any Get otherwise). Both return the lease's rows.
  // NOT_FOUND: unknown consumer or a lease never handed out;
  // INVALID_ARGUMENT: another consumer's lease; FAILED_PRECONDITION naming
  // the lease and what ended it: expired (its rows were handed back), already
  // acknowledged, nacked, superseded, or its step released.
  // With a journal, the lease ends once its end is recorded; a failed record
  // leaves it in flight (UNAVAILABLE, "not stored").
  void Ack(const std::string& consumer, uint64_t lease_id, RowsCallback done);
  void Nack(const std::string& consumer, uint64_t lease_id, RowsCallback done);
  // The consumer's leases in flight, oldest first (a job resuming after its
  // workers died finds what they held). NotFound / FailedPrecondition as Ack.
  absl::StatusOr<std::vector<LeaseInfo>> ListLeases(const std::string& consumer) const;
  // Hands back every lease of the consumer in flight (of rank `rank` if
  // set), each as Nack does (recorded first); a lease that ends otherwise
  // meanwhile, or whose hand-out or end is being recorded at that moment,
  // is left out. INVALID_ARGUMENT for a rank out of range.
  void NackAll(const std::string& consumer, std::optional<int32_t> rank, NackAllCallback done);

  // Returns written cells of `rows` without claiming them. `columns` empty
  // means every column. FAILED_PRECONDITION if a cell is not written.
  absl::StatusOr<Batch> Read(int64_t step, const std::vector<int64_t>& rows,
                             const std::vector<std::string>& columns);
  // The same for the rows that have `keys` (all in one step), in that order:
  // NOT_FOUND for a key no live row has, INVALID_ARGUMENT for keys of two
  // steps.
  absl::StatusOr<Batch> ReadKeys(const std::vector<std::string>& keys,
                                 const std::vector<std::string>& columns);
  // A live step's rows without payload: key, group, columns written,
  // consumers that have taken it, drop reason; and each row's written cells
  // of `columns` (small cells: tags, scores). FAILED_PRECONDITION if the step
  // is not live; INVALID_ARGUMENT for an unknown or repeated column;
  // RESOURCE_EXHAUSTED if the cells hold more than one answer carries.
  absl::StatusOr<RowListing> ListRows(int64_t step,
                                      absl::Span<const std::string> columns = {}) const;

  // Adds a consumer; it sees every row of live steps as unconsumed. With a
  // journal, the consumer exists (takes Gets) only once the new spec is
  // stored; additions are recorded one at a time, in the order asked.
  void AddConsumer(ConsumerSpec consumer, ConsumerCallback done);
  // Removes a consumer: its Gets, parked ones included, and Acks fail with
  // NOT_FOUND ("was removed"), and it no longer holds any step (live steps
  // the others are done with are released). It stays in the spec, marked
  // removed; its name is free for a new consumer. NOT_FOUND for an unknown
  // consumer; FAILED_PRECONDITION if seal_when names it. Answers with the
  // consumer's spec. With a journal, recorded before it takes effect, in
  // order with additions.
  void RemoveConsumer(const std::string& consumer, ConsumerCallback done);
  // Adds a column: no cell of it is written in any step; Puts may write it
  // (live steps included) and consumers added from then on may need it.
  // ALREADY_EXISTS for a name taken; INVALID_ARGUMENT for a bad column
  // (named as CreateDock names it); RESOURCE_EXHAUSTED past the columns a
  // dock holds (DockLimits::max_columns). Answers with the column,
  // normalized. With a journal, recorded before it takes effect, in order
  // with the consumers' changes.
  void AddColumn(ColumnSpec column, ColumnCallback done);

  // Frees the step's partition now, consumed or not. FAILED_PRECONDITION if the
  // step is not live. The step takes no Put and hands out nothing from the
  // call on, and is freed once its release is recorded (with a journal, a
  // failed record makes it live again: UNAVAILABLE).
  void ReleaseStep(int64_t step, StatusCallback done);
  // Sets the dock's current policy version (the trainer's, after a weight
  // update): a row's version may not be newer. INVALID_ARGUMENT if
  // negative, FAILED_PRECONDITION if older than the current one (a version
  // only advances; the same one changes nothing). With a journal it takes
  // effect once recorded.
  void SetVersion(int64_t version, StatusCallback done);

  // Admission before generation: reserves rows for data a producer is about
  // to generate with policy `version` (unset: the dock's version when they
  // are granted, which the answer names), in the oldest step with room where
  // rows of that version can still be trained on within the consumers'
  // staleness bounds (dock_reservations.cc); waits up to `wait` for one
  // (then answers timed_out, nothing reserved). The rows are the
  // producer's: no append takes them, they carry the version, and those
  // without a cell at the deadline are dropped ("expired"). Errors:
  // INVALID_ARGUMENT (a negative version, no rows or both rows and group
  // sizes, a group size out of [1, n], more than a step holds, a deadline
  // out of (0, 24h]), FAILED_PRECONDITION (a version newer than the
  // dock's). With a journal it is recorded before it is answered. Returns an
  // id usable with Cancel while it waits (0 if it completed).
  uint64_t Reserve(ReserveInput input, ReserveCallback done);
  // Takes rows (and every row of groups) out of a live step for a reason:
  // a dropped row is never handed out again (a formed round's share leaves
  // it out), counts as done for every consumer (so it never holds the step
  // or a group), and a later Put or Read of it fails with
  // FAILED_PRECONDITION naming the drop. Rows already handed out stay
  // handed out; a lease none of whose rows is left ends. Dropping a row
  // again changes nothing. Answers with the rows it dropped. Errors:
  // INVALID_ARGUMENT (no reason, no rows, a row or group out of range),
  // FAILED_PRECONDITION (the step is released or has not started). With a
  // journal the drop is recorded before it takes effect (UNAVAILABLE: not
  // stored, nothing dropped).
  void Drop(DropInput input, RowsCallback done);
  // A controller's dock (DockLimits::cells kLocations): shard `shard`'s
  // incarnation `incarnation` (the high 32 bits of its extents; 0: any) is
  // gone, its cells with it. Every row of a live step with a cell there is
  // dropped as "lost" (with its group, when a consumer takes whole groups),
  // as Drop drops rows. Answers with the rows dropped (0 for a dock that
  // holds cells itself, or none there).
  void DropLost(uint64_t shard, uint32_t incarnation, RowsCallback done);
  // A controller's dock: the cells of `extents` (ascending) of shard `shard`
  // are gone from it (committed, then missing there). Every row of a live
  // step with a cell in one of them is dropped as "lost", as DropLost drops.
  void DropLostExtents(uint64_t shard, std::vector<uint64_t> extents, RowsCallback done);
  // A controller's dock: the extents of shard `shard`'s incarnation
  // `incarnation` below `below` that its live steps hold cells of, by
  // extent (empty for a dock that holds cells itself); live_rows is false
  // for those of a step being released.
  std::vector<StoredExtent> ExtentsOnShard(uint64_t shard, uint32_t incarnation,
                                           uint64_t below) const;
  // A controller's dock: the shards in `away` (each an incarnation, 0: any)
  // cannot be read for now. Until the next call, every row of a live step
  // with a cell on one of them is held back from hand-outs (it waits; a
  // parked Get is answered once it is let go, or without it), and a call
  // without them lets them go. Rows committed between calls are held from
  // the next. Nothing is recorded: a restarted controller holds what its
  // shards' state holds then. A dock that holds cells itself ignores it.
  void HoldShards(std::vector<ShardIncarnation> away);
  // A controller's dock: the shard incarnations holding a cell of a live
  // row (the extents' high 32 bits), ascending; empty for a dock that holds
  // cells itself.
  std::vector<ShardIncarnation> ShardsOfLiveRows() const;
  // Seals a live step: its rows that lack a cell of a required column (with
  // none named: every row with no cell) are dropped as "sealed", so every
  // row left can be completed and a consumer's end of step comes once each
  // of them is handed to it. Sealing again drops what the new requirement
  // adds. Answers with the rows it dropped; errors as Drop's, and
  // INVALID_ARGUMENT for an unknown column.
  void Seal(SealInput input, RowsCallback done);

  // The same eight, waiting for the callback: for tests and tools, never on a
  // thread that runs the dock's or the journal's callbacks.
  absl::StatusOr<int64_t> Ack(const std::string& consumer, uint64_t lease_id);
  absl::StatusOr<int64_t> Nack(const std::string& consumer, uint64_t lease_id);
  absl::StatusOr<NackAllResult> NackAll(const std::string& consumer,
                                        std::optional<int32_t> rank = std::nullopt);
  absl::StatusOr<ConsumerSpec> AddConsumer(ConsumerSpec consumer);
  absl::StatusOr<ConsumerSpec> RemoveConsumer(const std::string& consumer);
  absl::StatusOr<ColumnSpec> AddColumn(ColumnSpec column);
  absl::Status ReleaseStep(int64_t step);
  absl::Status SetVersion(int64_t version);
  absl::StatusOr<Reservation> Reserve(ReserveInput input);
  int64_t version() const;  // the current policy version
  absl::StatusOr<int64_t> Drop(DropInput input);
  absl::StatusOr<int64_t> Seal(SealInput input);

  DockStats Stats() const;
  // The steps it takes Puts of now (see StepWindow).
  StepWindow Window() const;

  // Completes every parked Get and Put with UNAVAILABLE ("shutting down") and
  // makes later calls that would park fail the same way. For server shutdown.
  void Shutdown();

 private:
  friend class DockRecovery;
  explicit Dock(std::shared_ptr<internal::DockImpl> impl);
  // Shared with the dock's journal callbacks in flight, which keep it alive
  // until they have run; ~Dock stops its threads and parked calls first.
  std::shared_ptr<internal::DockImpl> impl_;
};

// DockRecovery: the one way a Dock is built, from its records (none for a new
// dock). Before the dock serves anything: the cells go in with Put, then
// what was handed out is restored; Finish releases the steps that were done
// and returns the dock, recording through its journal from then on.
//
// Thread safety: one thread at a time; the dock it returns, any.
class DockRecovery final {
 public:
  static absl::StatusOr<DockRecovery> Start(DockSpec spec, DockLimits limits = {});
  DockRecovery(DockRecovery&&) noexcept;
  DockRecovery& operator=(DockRecovery&&) noexcept;
  ~DockRecovery();

  // The normalized spec.
  DockSpec spec() const;
  // What the dock stores as a cell (DockLimits::cells): what a stored Put's
  // cell bytes are.
  CellForm cell_form() const;
  // `step` was released (so later steps of its partition may start). Comes
  // before any cell of the step's partition.
  absl::Status Released(int64_t step);
  // The dock's version was set to `version` (the highest recorded).
  void DockVersion(int64_t version);
  // Writes recovered cells (waits for nothing: a Put that would wait fails).
  absl::Status Put(PutInput input);
  // What was handed out, after every cell: rounds, then deliveries, then
  // hand-outs; then drops. Records of released steps are ignored.
  absl::Status Round(const DockJournal::RoundRecord& record);
  absl::Status Delivery(int64_t step, int consumer, int64_t round, int32_t taker,
                        uint64_t lease_id);
  absl::Status HandOut(const DockJournal::HandOut& handout);
  // Lease `lease_id` was acknowledged: an Ack of it retried after the
  // restart fails saying so.
  void Acknowledged(uint64_t lease_id);
  // Rows dropped (a step sealed), after every hand-out: applied as Drop
  // applies it then.
  absl::Status Dropped(const DockJournal::DropRecord& record);
  // Row `row` of `step` has `key`: after the step's cells, before drops.
  absl::Status Key(int64_t step, int64_t row, const std::string& key);
  // A write of row `row` of `step` carried `version`: after the step's cells.
  absl::Status Version(int64_t step, int64_t row, int64_t version);
  // The answer of a Put with its writer's id (PutInput::put_id) and its
  // fingerprint, after the step's cells: a Put sent again with the id gets
  // it (ignored unless the step is live).
  void PutAnswer(uint64_t put_id, const PutResult& answer, uint64_t fingerprint);
  // A reservation: after the cells, before versions and drops.
  absl::Status Reserved(const DockJournal::ReservationRecord& record);
  // Units of rows carried into `step` count as done for `consumer`: after
  // the step's cells, before hand-outs.
  absl::Status CarriedDone(int64_t step, int consumer, const std::vector<int64_t>& units);
  // Rows `step` still owes the next step (seal_when.carry), with the units
  // of them each consumer took: after drops.
  absl::Status Carry(int64_t step, std::vector<int64_t> rows, std::vector<ConsumerUnits> taken);
  // The dock; with a journal, the releases of steps found done are recorded.
  std::unique_ptr<Dock> Finish(std::shared_ptr<DockJournal> journal) &&;

 private:
  explicit DockRecovery(std::shared_ptr<internal::DockImpl> impl);
  std::shared_ptr<internal::DockImpl> impl_;  // null once finished or moved from
};

}  // namespace tdock

#endif  // TDOCK_SERVER_DOCK_DOCK_H_
