// DockImpl: the implementation behind tdock::Dock (see dock.h for the
// contract): orchestration over the state classes. Split over dock_impl.cc
// (creation, status, release), dock_put.cc, dock_get.cc, dock_rounds.cc,
// dock_leases.cc, dock_waiters.cc, dock_consumers.cc, dock_columns.cc,
// dock_keys.cc, dock_drops.cc, dock_seal.cc, dock_carry.cc,
// dock_reservations.cc, dock_reservation_rows.cc, dock_staleness.cc,
// dock_versions.cc, dock_journal.cc and dock_recovery.cc. The classes it
// works over (a call's checks in PutChecks, response sizes in ResponseSizes,
// batches in RowReader), what each owns, the lock order and how a wake-up is
// never lost: docs/architecture.md.
#ifndef TDOCK_SERVER_DOCK_DOCK_IMPL_H_
#define TDOCK_SERVER_DOCK_DOCK_IMPL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/cell_location.h"
#include "common/mutex.h"
#include "common/spec.h"
#include "common/timer_service.h"
#include "server/dock/attempts.h"
#include "server/dock/cell_store.h"
#include "server/dock/column_table.h"
#include "server/dock/commit_pipeline.h"
#include "server/dock/consumer_table.h"
#include "server/dock/journal_hook.h"
#include "server/dock/key_index.h"
#include "server/dock/leases.h"
#include "server/dock/partition.h"
#include "server/dock/policy_version.h"
#include "server/dock/put_checks.h"
#include "server/dock/put_id_table.h"
#include "server/dock/reservation_table.h"
#include "server/dock/response_sizes.h"
#include "server/dock/retry_times.h"
#include "server/dock/round_dispatcher.h"
#include "server/dock/row_reader.h"
#include "server/dock/sampler.h"
#include "server/dock/step_ring.h"
#include "server/dock/types.h"
#include "server/dock/waiter_table.h"

namespace tdock::internal {

struct StagedColumn;  // dock_put.cc

class DockImpl final : public std::enable_shared_from_this<DockImpl> {
 public:
  static absl::StatusOr<std::shared_ptr<DockImpl>> Create(DockSpec spec,
                                                          DockLimits limits);
  ~DockImpl();
  // Stops the dock's alarm (wait bounds, leases) and ends every parked
  // call. Later journal callbacks still run; they find the dock stopped.
  // Idempotent; the destructor calls it too.
  void Stop();
  DockImpl(const DockImpl&) = delete;
  DockImpl& operator=(const DockImpl&) = delete;

  const std::string& name() const { return name_; }
  DockSpec spec() const;
  CellForm cell_form() const { return limits_.cells; }
  void Put(PutInput input, PutCallback done);
  uint64_t Get(GetInput input, GetCallback done);
  void Cancel(uint64_t id);
  void EndLease(const std::string& consumer, uint64_t lease_id, LeaseTable::End end,
                RowsCallback done);
  absl::StatusOr<std::vector<LeaseInfo>> ListLeases(const std::string& consumer) const;
  void NackAll(const std::string& consumer, std::optional<int32_t> rank, NackAllCallback done);
  absl::StatusOr<Batch> Read(int64_t step, const std::vector<int64_t>& rows,
                             const std::vector<std::string>& columns);
  // The rows that have `keys` (all in one step), in that order.
  absl::StatusOr<Batch> ReadKeys(const std::vector<std::string>& keys,
                                 const std::vector<std::string>& columns);
  absl::StatusOr<RowListing> ListRows(int64_t step, absl::Span<const std::string> columns) const;
  void AddConsumer(ConsumerSpec consumer, ConsumerCallback done);
  void RemoveConsumer(const std::string& consumer, ConsumerCallback done);
  void AddColumn(ColumnSpec column, ColumnCallback done);
  void ReleaseStep(int64_t step, StatusCallback done);
  void SetVersion(int64_t version, StatusCallback done);
  // Returns an id for Cancel while it waits for admission (0 if answered).
  uint64_t Reserve(ReserveInput input, ReserveCallback done);
  int64_t version() const { return version_.current(); }
  // The dock's version becomes `version` if that is newer (recorded, or
  // recovered); returns the version now.
  int64_t AdvanceVersion(int64_t version);
  void Drop(DropInput input, RowsCallback done);
  // dock_lost.cc: a controller's rows on shards that are gone or away.
  void DropLost(uint64_t shard, uint32_t incarnation, RowsCallback done);
  void DropLostExtents(uint64_t shard, std::vector<uint64_t> extents, RowsCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<StoredExtent> ExtentsOnShard(uint64_t shard, uint32_t incarnation,
                                           uint64_t below) const ABSL_LOCKS_EXCLUDED(mu_);
  void HoldShards(std::vector<ShardIncarnation> away);
  std::vector<ShardIncarnation> ShardsOfLiveRows() const;
  void Seal(SealInput input, RowsCallback done);
  DockStats Stats() const;
  StepWindow Window() const ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown();

  // Recovery (dock_journal.cc, dock_recovery.cc), for DockRecovery: before
  // serving.
  void AttachJournal(std::shared_ptr<DockJournal> journal);
  absl::Status RecoverReleased(int64_t step);
  absl::Status RecoverHandOut(const DockJournal::HandOut& handout);
  absl::Status RecoverRound(const DockJournal::RoundRecord& record);
  absl::Status RecoverDelivery(int64_t step, int consumer, int64_t round, int32_t taker,
                               uint64_t lease_id);
  void RecoverAcknowledged(uint64_t lease_id) { leases_->RecoverAcknowledged(lease_id); }
  absl::Status RecoverDrop(const DockJournal::DropRecord& record);
  // Row `row` of `step` (which holds its cells) has `key`.
  absl::Status RecoverKey(int64_t step, int64_t row, const std::string& key);
  absl::Status RecoverVersion(int64_t step, int64_t row, int64_t version);
  void RecoverPutAnswer(uint64_t put_id, const PutResult& answer, uint64_t fingerprint);
  absl::Status RecoverReservation(const DockJournal::ReservationRecord& record);
  // Step `step` owes `rows` (dropped as carried) to the next step.
  absl::Status RecoverCarry(int64_t step, std::vector<int64_t> rows,
                            std::vector<ConsumerUnits> taken);
  // Units of rows carried into `step` are done for `consumer`.
  absl::Status RecoverCarriedDone(int64_t step, int consumer, const std::vector<int64_t>& units);
  void FinishRecovery();

 private:
  // A controller's dock: the rows a stored Put (sent again as `input`,
  // answered `answer`) wrote that were dropped as lost since, with their
  // shard's cells (dock_lost.cc). Empty for a released step.
  std::vector<int64_t> LostRowsOfPut(const PutInput& input, const PutResult& answer) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The rows of `part` (a live step of a controller's dock) not dropped
  // with a cell on one of `shards` (dock_lost.cc).
  std::vector<int64_t> RowsOnShards(const Partition& part,
                                    const std::vector<ShardIncarnation>& shards) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The rows of `part` (a live step of a controller's dock) not dropped
  // with a cell `where` picks (dock_lost.cc).
  std::vector<int64_t> RowsWhere(const Partition& part,
                                 const std::function<bool(const CellLocation&)>& where) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops as "lost" every row of a live step with a cell `lost` picks (with
  // its group when a consumer takes whole groups): DropLost's work.
  void DropLostWhere(const std::function<bool(const CellLocation&)>& lost, RowsCallback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // ---- Consumers changing (dock_consumers.cc): additions, removals and
  // joins of optional consumers, one at a time in the order asked: the first
  // of the ConsumerTable's queue is checked, recorded (with a journal), then
  // applied.
  void ChangeSpec(SpecChange change);
  // Checks and applies (or starts recording) changes until one is recorded.
  void NextChange();
  // The record of the first change came back: apply it, or answer why not
  // (the caller goes on with the next).
  void FinishChange(int index, const absl::Status& stored);
  // The spec after `change`, and the index of its consumer; or why it
  // cannot be made.
  absl::StatusOr<DockSpec> CheckChangeLocked(const SpecChange& change, int* index) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ApplyChangeLocked(SpecChange& change, int index, DockSpec next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The consumer (column) `index` of the spec now, with `status`.
  ChangeAnswer AnswerLocked(SpecChange::Kind kind, int index, absl::Status status) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The spec with the columns added, or why they cannot be.
  absl::StatusOr<DockSpec> CheckColumnsLocked(absl::Span<const ColumnSpec> columns) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // add_columns_on_write: the columns `in` writes that the dock lacks, as
  // they would be added (PutChecks::ColumnsToAdd), if they fit the spec.
  absl::StatusOr<std::vector<ColumnSpec>> ColumnsToAdd(const PutInput& in) const;
  // Adds `adding` (one at a time, each recorded), then writes the Put; a
  // column added meanwhile by another Put is taken as it is.
  void AddColumnsThenPut(std::vector<ColumnSpec> adding, PutInput input, PutCallback done);
  // Wakes the consumer's parked Gets; a removal lets live steps release.
  void AfterChange(SpecChange::Kind kind, int index);
  // An optional consumer's first Get: joins it (with a journal, once the
  // join is recorded; its Gets wait for that).
  void RequestJoin(const ConsumerPlan& plan);
  // The normalized consumer, or why it cannot be added.
  absl::StatusOr<ConsumerSpec> CheckConsumerLocked(ConsumerSpec consumer) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void AddConsumerLocked(const ConsumerSpec& consumer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- Records (dock_journal.cc), through commit_.
  // Records the cells a committed Put staged in `cells`, then applies it.
  void RecordPut(const PutInput& in, PutResult result, std::shared_ptr<StepCells> cells,
                 std::vector<WrittenColumn> columns, PutCallback done);
  // Submits the Put's record (its cells, keys, versions, acknowledgement and
  // unused rows), or fails it if its step was released meanwhile.
  void StorePut(const PutInput& in, const StagedPut& put, DockJournal& journal,
                DockJournal::Done stored);
  // The record's cells and keys.
  void BuildPutRecordLocked(Partition& part, const StagedPut& put,
                            DockJournal::PutRecord& record) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes the Put's cells ready and answers (`stored`), or undoes them.
  void ApplyPut(StagedPut& put, const absl::Status& stored);
  // Wraps a Get's callback: records the hand-out (a lease's clock starts
  // once it is stored), then lets the step auto-release if that waited for
  // it, then answers (or returns the rows and fails).
  GetCallback RecordingGet(const ConsumerPlan& plan, int32_t rank, int32_t replica,
                           GetCallback done);
  // A hand-out of a step held by `partition_step`'s partition is recorded
  // (or failed): the last one to end runs the auto-release that waited.
  void EndHandOut(int64_t partition_step);
  // The round's record, unless one of its deliveries stored it already.
  std::optional<DockJournal::RoundRecord> RoundToRecord(int64_t step, int consumer,
                                                        int64_t round);
  void MarkRoundRecorded(int64_t step, int consumer, int64_t round);
  void ReturnUnrecorded(int consumer, int32_t rank, int32_t replica, const Batch& batch);
  void JournalLeaseEnd(const Lease& lease, bool acked, DockJournal::Done done);
  // A Put of `step` made cells of `columns` ready: wakes the parked Gets of
  // the consumers that need any of them. With `step`, only those of a
  // consumer that could now be answered in that step: it has as many units
  // available there as its parked Get that asks for the fewest needs (or
  // the step is over for it, or it has a staleness bound). Without, all.
  void WakeConsumersOf(const std::vector<int>& columns, std::optional<int64_t> step);

  DockImpl(DockSpec spec, DockLimits limits);

  using StepState = StepRing::StepState;
  // The steps the partitions hold now, ascending.
  std::vector<int64_t> LiveSteps() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string Where(int64_t step) const;  // "dock 'x' step 3"
  // FAILED_PRECONDITION for a call that needs `step` live; refused as
  // released when it was.
  absl::Status NotLiveLocked(int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // ---- Put (dock_put.cc; its checks: PutChecks)
  // (dock_drops.cc) The rows past an appended Put's declared group sizes, closed to Puts
  // since it committed: dropped as "unused" once its cells are `stored`,
  // open again if they were not; nothing if the step is gone.
  void CloseUnusedRows(int64_t step, const std::vector<int64_t>& rows, bool stored);
  // `in` gets its rows when it asks for new ones (AssignRows).
  PutAttempt TryPut(PutInput& in);
  PutAttempt TryPutOnce(PutInput& in);
  // The live step's cells for a Put, starting the step if its partition is
  // free (*activated). nullptr with *blocked set: an older step holds the
  // partition. Checks the cells and budgets the Put would touch first.
  absl::StatusOr<std::shared_ptr<StepCells>> ActivateForPut(const PutInput& in,
                                                            std::string* blocked,
                                                            bool* activated);
  // Undoes an activation by a Put that then could not stage anything.
  void DeactivateIfUnused(int64_t step, const std::shared_ptr<StepCells>& cells);
  // An append answered: gives back the rows its claim still holds.
  void EndAppend(int64_t step, uint64_t claim);
  // A first write of a cell is staged (written, not ready) and a rewrite
  // stays invisible (the old cell is served) until recorded; `columns`
  // receives the columns written.
  absl::StatusOr<PutResult> CommitPut(const PutInput& in,
                                      const std::shared_ptr<StepCells>& cells,
                                      const std::vector<StagedColumn>& staged,
                                      PutResult result,
                                      std::vector<WrittenColumn>* columns);
  // Under the commit lock: no row of the Put is closed (a Seal or an append
  // being stored) or assigned to another append, and no row its groups
  // leave unused closed.
  absl::Status CheckOpenLocked(Partition& part, const PutInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  absl::Status CheckUnclaimedLocked(Partition& part, const PutInput& in,
                                    int64_t row) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  // A Put about to add columns: the refusals its step and rows would give
  // now (released, sealed to new rows, rows dropped or written, keys, token
  // budgets), so that a Put refused for them adds no column.
  absl::Status PrecheckPut(const PutInput& in) const;
  absl::Status CheckUnwrittenLocked(const Partition& part, const PutInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool CanPutNow(const PutInput& in) const;
  std::string MemoryReason(int64_t step) const;
  // No live step is older: the memory limit does not hold its Puts back.
  bool IsOldestLiveStep(int64_t step) const;
  // Answers a Put whose attempt is done (committed: once its cells are
  // recorded).
  void FinishPut(const PutInput& in, PutAttempt attempt, PutCallback done);
  // Put after its ack_lease (if any) is pinned.
  void WritePut(PutInput input, PutCallback done);

  // ---- Get (dock_get.cc)
  // The plan of the consumer `in` names, or (`index` >= 0) of the consumer
  // at `index`: a parked Get's, whatever its name names now (a consumer
  // removed and added again under it is another one). Checks `in` against it.
  absl::StatusOr<ConsumerPlan> PlanFor(const GetInput& in, int index = -1) const;
  GetAttempt TryGet(const GetInput& in, const ConsumerPlan& plan);
  GetAttempt TryGetLocked(const GetInput& in, const ConsumerPlan& plan)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  GetAttempt ServeLocked(Partition& part, const GetInput& in,
                         const ConsumerPlan& plan, bool explicit_step)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A hand-out (not BALANCED) takes effect, serving and recovery alike: the
  // `units` of `plan` claimed in `part` (their consumed bits set), `rows` of
  // their rows handed out to `rank`, are counted, under a pinned lease when
  // `lease` is set (0: a new id; recovery: the recorded one). Returns the
  // lease's id (0: none) and the rows of the step now counted done for the
  // consumer. The lease's clock starts once the record is stored
  // (StartLeaseClock).
  HandedOut HandOutLocked(Partition& part, const ConsumerPlan& plan, int32_t rank,
                          std::vector<int64_t> units, int64_t rows,
                          std::optional<uint64_t> lease) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ---- Balanced rounds and micro-batch plans (dock_rounds.cc)
  GetAttempt ServeRoundLocked(Partition& part, const GetInput& in,
                              const ConsumerPlan& plan, bool explicit_step)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The rank asked for the round after the last formed: claims its rows and
  // drafts it once they are available (the step's end when none are left).
  GetAttempt StartRoundLocked(Partition& part, const GetInput& in, const ConsumerPlan& plan,
                              bool explicit_step) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // What planning a round over the claimed `units` reads (round_dispatcher.h).
  RoundDraft DraftRoundLocked(const Partition& part, const ConsumerPlan& plan,
                              std::vector<int64_t> units) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Plans the draft's round with no lock held, then keeps it (or notes why
  // it failed) if its step is still held, and wakes the consumer's Gets.
  void FormAndCommitRound(const RoundDraft& draft) ABSL_LOCKS_EXCLUDED(mu_);
  // A round takes effect on its consumer's counts, serving and recovery
  // alike: `round` of `plan` in `part`, whose `units` units are claimed
  // (their consumed bits set), counts its rows handed out and its units
  // done, and `round.last` says whether the step's rows are all counted
  // with it. REQUIRES: the consumer's RoundBook lock, where the caller keeps
  // the round next.
  void CountRoundLocked(Partition& part, const ConsumerPlan& plan, Round& round, int64_t units)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Orders claimed rows micro-batch after micro-batch and fills the batch's
  // plan (consumers with a micro_batch plan that are not BALANCED).
  absl::Status PlanRowsLocked(const Partition& part, const ConsumerPlan& plan,
                              std::vector<int64_t>& rows, Batch& batch) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A Put must not make any row exceed a consumer's micro-batch budget, nor
  // what one response carries (ResponseSizes).
  absl::Status CheckBudgetsLocked(const Partition& part, const PutInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Every live step's rows (groups) fit one response to `plan`'s consumer
  // (AddConsumer); INVALID_ARGUMENT naming the first that does not.
  absl::Status CheckWrittenFitLocked(const ConsumerPlan& plan) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  void AfterGet(GetAttempt& attempt, int consumer);
  // Releases `step` if every consumer is done with it (with a journal: once
  // the release is recorded).
  void MaybeAutoRelease(int64_t step);
  // The release record of `step` came back: free the partition, or (failed)
  // make the step live again; then `answer` (may be empty) gets `stored`,
  // and the calls the release wakes are served.
  void FinishRelease(int64_t step, const absl::Status& stored, StatusCallback answer = {});
  // A stored release of `step` takes effect, serving and recovery alike:
  // the partition holding it adds its counts to the released totals, the
  // step's leases, reservations and keys go, and its cells are returned
  // (for AfterRelease); a partition not holding it (recovery replays
  // releases before cells) only learns that `step` was released.
  std::shared_ptr<StepCells> ApplyReleaseLocked(Partition& part, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AfterRelease(std::shared_ptr<StepCells> cells);

  // ---- Drops and seals (dock_drops.cc)
  // OK if rows of `step` can be dropped; else why not ("dropped from",
  // "sealed": `what` the caller asked for).
  absl::Status CheckDroppableLocked(int64_t step, absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The rows a drop (a seal) takes out: sorted, unique; or why it cannot.
  absl::StatusOr<std::vector<int64_t>> DropRowsLocked(const DropInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The rows are closed to Puts until the seal's record is stored or fails
  // (EndDropInFlightLocked).
  absl::StatusOr<std::vector<int64_t>> SealRowsLocked(const SealInput& in)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A Drop's or Seal's record (counted in flight) was stored or failed.
  void EndDropInFlightLocked(const DockJournal::DropRecord& record)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records the drop of `rows`, then applies it and answers
  // with the rows it dropped; answers `rows`' error if it has one.
  // `in_flight`: the caller counted the record in flight (Drop, Seal).
  void RecordAndApplyDrop(absl::StatusOr<std::vector<int64_t>> rows, int64_t step,
                          DropReason reason, bool seal, bool in_flight, RowsCallback done);
  void RecordAndApplyDrop(DockJournal::DropRecord record, bool in_flight, RowsCallback done);
  int64_t ApplyDropLocked(const DockJournal::DropRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The consumer's accounting of a row just dropped.
  void CountDroppedLocked(Partition& part, const ConsumerPlan& plan, int64_t row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the leases of the partition's step none of whose rows is left.
  void EndDroppedLeasesLocked(Partition& part) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AfterDrop(int64_t step);
  // Rows of `step` left with nothing and no write coming: a sealed step's
  // rows a Seal kept for a write that was not stored (or lost in a crash),
  // and an expired reservation's rows it skipped for a write that was not
  // stored. Dropped as sealed and as expired, recorded first (the rows
  // closed meanwhile), so they never hold the step; tried again from the
  // alarm while a record fails.
  void DropOrphans(int64_t step);
  // The rows DropOrphans drops for `reason` (kSealed or kExpired), closed.
  std::vector<int64_t> OrphansLocked(Partition& part, DropReason reason)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  // seal_when (dock_seal.cc): seals `step` if the consumer it names has
  // enough complete groups, dropping the other groups as surplus; then runs
  // `then` (once the seal is recorded and applied).
  void MaybeAutoSeal(int64_t step, absl::AnyInvocable<void() &&> then = {});
  // The seal to make now, if any, marked pending: sealed once recorded.
  std::optional<DockJournal::DropRecord> DecideSeal(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // ---- Carry (dock_carry.cc): seal_when.carry
  // Moves the groups of `surplus` that carry (complete for `sealer`, and
  // nothing a consumer took of them can still come back to it here) out of
  // it, and returns their rows; `taken` gets what each consumer took of them.
  std::vector<int64_t> CarryRowsLocked(Partition& part, const ConsumerPlan& sealer,
                                       std::vector<int64_t>& surplus,
                                       std::vector<ConsumerUnits>& taken) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the rows `step` owes the next step there (a Put that may wait for
  // its partition); a no-op unless some are owed and none is being written.
  void CarryForward(int64_t step);
  void EndCarry(int64_t step, const absl::Status& status);
  void CarryAgainSoon();  // from the alarm
  // A Seal or seal_when of the live `step` is being recorded.
  bool BeingSealedLocked(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The seal's decision to carry `record.carry`: held on the partition (the
  // units the consumers had not taken claimed for them) until its record is
  // stored (ApplyCarryLocked: dropped as carried, those units done) or
  // fails (DropCarryLocked: the units given back).
  void HoldCarryLocked(Partition& part, const DockJournal::DropRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ApplyCarryLocked(Partition& part, const DockJournal::DropRecord& record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropCarryLocked(Partition& part) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The units count as done for the consumer in `part` (not handed out).
  void CountCarriedDoneLocked(Partition& part, const ConsumerPlan& plan,
                              const std::vector<int64_t>& units) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Gives claimed units back to be handed out again; `counted`: they were
  // counted in consumed_rows (a lease's), else claimed only (a round being
  // formed). Units dropped meanwhile stay claimed and count as done.
  void GiveBackLocked(Partition& part, const ConsumerPlan& plan,
                      const std::vector<int64_t>& units, bool counted)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A round's share without the rows dropped since it was formed.
  RoundShare LiveShareLocked(const Partition& part, const RoundShare& share) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // ---- Keys (dock_keys.cc)
  using RowRef = KeyIndex::RowRef;
  // A Put asking for new rows (in.new_rows, rows empty) of its live step:
  // the first free groups (no cell, key or drop) from the step's append
  // cursor, enough for them; their first new_rows rows become in.rows.
  // With group_sizes: one group per size, its first `size` rows in in.rows
  // and the rest in in.unused.
  // RESOURCE_EXHAUSTED past the step's capacity, FAILED_PRECONDITION once
  // it is sealed (or not live: then the caller tries again).
  // `reserve` non-zero: the rows are reserved under that id (and a declared
  // group's rest closed) in the same hold.
  absl::Status AssignRows(PutInput& in, uint64_t reserve = 0);
  absl::StatusOr<RowRef> FindKey(absl::string_view key) const;
  // A Put naming rows by key: the rows of `step` that have them.
  absl::StatusOr<std::vector<int64_t>> RowsOfKeys(int64_t step,
                                                  const std::vector<std::string>& keys) const;
  // The Put's keys fit its rows: a row has the key named, or none yet and
  // no cell (a key comes with a row's first write), and no other live row
  // has it.
  absl::Status CheckKeysLocked(const Partition& part, const PutInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The keys the Put gives rows that have none yet, or why a row cannot
  // take its key (CheckKeysLocked's row checks).
  absl::StatusOr<std::vector<KeyIndex::Entry>> NewKeysLocked(const Partition& part,
                                                             const PutInput& in) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ALREADY_EXISTS: `key`, which a Put of `step` names, is another row's.
  absl::Status KeyTaken(int64_t step, absl::string_view key,
                        const KeyIndex::Taken& taken) const;
  // Checks the Put's keys again and gives its rows their keys, the index
  // checked and added in one step; UnsetKeysLocked undoes it for `rows` no
  // stored or in-flight write keeps (the Put's record failed).
  absl::Status SetKeysLocked(Partition& part, const PutInput& in) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  void UnsetKeysLocked(Partition& part, const std::vector<int64_t>& rows)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  // Recovery, once drops are applied: the index of the keys of rows not
  // dropped.
  void RebuildKeyIndex() ABSL_LOCKS_EXCLUDED(mu_);
  // ListRows: the cells of `columns` (indices) of the rows `listing` says
  // have one, as views valid while the step's cells are; or, past what one
  // answer carries, RESOURCE_EXHAUSTED.
  absl::StatusOr<std::vector<ListedCells>> CellsToListLocked(const Partition& part,
                                                             absl::Span<const int> columns,
                                                             const RowListing& listing) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // ---- Leases (dock_leases.cc)
  // Records the lease over `rows` rows being handed out (consumers with a
  // lease), pinned until StartLeaseClock, and returns its id: `units` are
  // the claimed units (non-BALANCED), `round` the round (BALANCED; -1
  // otherwise). `recorded_id`: recovery's, the id the hand-out's record
  // holds (0: a new one). Raises the in-flight rows (once per lease: a
  // rank's replicas share theirs); the caller counts the rows consumed
  // after this.
  uint64_t LeaseRowsLocked(Partition& part, const ConsumerPlan& plan, int32_t rank,
                           std::vector<int64_t> units, int64_t round, int64_t rows,
                           uint64_t recorded_id = 0) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A hand-out's lease runs from now: its record is stored (or, in
  // recovery, was).
  void StartLeaseClock(uint64_t id, absl::Duration lease) {
    leases_->Unpin(id, limits_.clock->Now() + lease);
  }
  // A BALANCED share's lease was acknowledged: replicas that take the share
  // later need none.
  void NoteAckedLocked(const Lease& lease) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes an ended, unacknowledged lease's rows available again.
  void ReturnLeaseLocked(const Lease& lease) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops the in-flight rows of an ended lease (acknowledged or superseded).
  void SettleLeaseLocked(const Lease& lease) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Lets a pinned lease run again (from `deadline` if given) and wakes the
  // consumer's parked Gets, which may wait for the lease's share.
  void UnpinLease(uint64_t id, int consumer, std::optional<absl::Time> deadline);
  // Wakes the consumer's parked Gets; auto-releases `settled_step` (>= 0) if
  // it is now done.
  void AfterLeaseEnded(int consumer, int64_t settled_step);
  // Called by the lease table's thread when a deadline passed.
  void ExpireLeases();
  // A Put that acknowledges a lease: pins it, runs the Put, settles or unpins.
  void PutAndAck(PutInput input, PutCallback done);

  // ---- Staleness bounds (dock_staleness.cc)
  // Claims the units of `part` that are stale for the consumer and counts
  // them done for it (into attempt.stale).
  void PassOverStaleLocked(Partition& part, const ConsumerPlan& plan, int64_t min_version,
                           GetAttempt& attempt) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Records (and with drop, drops) what a claim passed over; gives the units
  // back to the consumer if the record fails.
  void RecordStale(StaleTake take);
  void EndStaleTake(const StaleTake& take, bool stored);

  // ---- Reservations (dock_reservations.cc: admission; dock_reservation_rows.cc:
  // expiry, Puts naming one, recovery)
  // A Reserve for rows of a version the consumers' staleness bounds never
  // admit is refused at once (Refusal::kStale).
  absl::Status CheckAdmissible(const ReserveInput& in) const ABSL_LOCKS_EXCLUDED(mu_);
  ReserveAttempt TryReserve(const ReserveInput& in, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Records a granted reservation (its rows take its version once stored)
  // and answers; a failed record frees its rows. `waited`: how long it was
  // parked (none: it was granted at once).
  // A reservation stored (granted, or replayed in recovery): its rows'
  // versions and its entry, under mu_ and the step's commit lock.
  void ApplyReservationLocked(Partition& part, uint64_t id, ReservationTable::Entry entry)
      ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.row_index().mu());
  void FinishReserve(ReserveAttempt attempt, ReserveCallback done,
                     std::optional<absl::Duration> waited = std::nullopt);
  // A Reserve that cannot be granted now waits in the waiter table; returns
  // its id for Cancel (0 if it was answered).
  uint64_t ParkReserve(ReserveInput in, ReserveCallback done);
  void RetryReserve(std::shared_ptr<Waiter> w);
  // Retries the parked Reserves: a step was released, the version or the
  // consumers changed, or a reservation's rows came back.
  void WakeReservations() ABSL_LOCKS_EXCLUDED(mu_);
  // Parked Reserves are tried again shortly, from the dock's alarm.
  void RetryReservesSoon();
  // Drops the rows not written of reservations past their deadline.
  void ExpireReservations(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // A Put naming a reservation: its rows (or a check that `rows` are some).
  absl::Status RowsOfReservation(PutInput& in) const;

  // ---- Waiting (dock_waiters.cc)
  uint64_t ParkGet(GetInput in, const ConsumerPlan& plan, GetCallback done);
  void ParkPut(PutInput in, PutAttempt attempt, PutCallback done);
  // Retries the parked Gets of consumers for which `wanted[k]` is true, or of
  // every consumer when `wanted` is empty.
  void WakeGets(const std::vector<bool>& wanted);
  void WakePuts();
  void RetryGet(std::shared_ptr<Waiter> w);
  void RetryPut(std::shared_ptr<Waiter> w);
  void EndWaiter(std::shared_ptr<Waiter> w, Waiter::End end);
  absl::Status ShuttingDown() const;
  // The dock's alarm rang: ends parked calls past their wait bound, expires
  // leases, retries parked Puts, and sets the alarm for what comes next.
  void OnAlarm();

  // Constant after construction.
  const std::string name_;
  const DockLimits limits_;
  const int64_t rows_per_step_;
  PolicyVersion version_;  // SetVersion's; read without locks by Puts
  const int32_t group_size_;
  ColumnTable columns_;  // grows with AddColumn (spec_.columns too)
  const PutChecks checks_;  // over columns_ and version_
  const ResponseSizes sizes_;  // over columns_
  const RowReader reader_;      // over columns_: token counts, batches
  const std::optional<SealWhen> seal_when_;  // the spec's, fixed at creation
  const std::unique_ptr<CellStore> store_;  // the cells' bytes
  StepRing ring_;  // the partitions, one per step in flight

  mutable tdock::Mutex mu_;
  ConsumerTable consumers_;  // the spec, plans, changes; under mu_
  // Granted reservations (dock_reservations.cc).
  ReservationTable reservations_;
  // When the alarm tries again (on the dock's clock): the parked Reserves
  // after lost races with starts of their steps, the drop of sealed steps'
  // orphans after its record failed, the parked Gets after a stale
  // pass-over's record failed.
  RetryTimes retries_;

  // Keys of live rows (dock_keys.cc); its lock is a leaf.
  KeyIndex keys_;
  // The answers of live steps' Puts by their writers' ids (dock_put.cc);
  // its lock is a leaf.
  PutIdTable put_ids_;

  // HoldShards: one change of the held rows at a time; before mu_ (and
  // released before it wakes parked Gets).
  tdock::Mutex holds_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<ShardIncarnation> held_shards_ ABSL_GUARDED_BY(holds_mu_);

  // Parked calls; its lock comes before mu_ (a parking call re-checks its
  // condition under it).
  WaiterTable waiters_;

  std::atomic<uint64_t> random_calls_{0};  // per-Get seed diversifier
  // On the server's timer service (DockLimits::timers). Set in Create, then
  // constant; rings through a weak reference, so it never keeps the dock
  // alive, and Stop stops it before the dock goes.
  std::unique_ptr<TimerService::Alarm> alarm_;
  std::unique_ptr<TimerService> own_timers_;  // without DockLimits::timers
  std::unique_ptr<LeaseTable> leases_;
  // Every change's record before its effect (commit_pipeline.h); its
  // journal is attached before serving.
  CommitPipeline commit_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_DOCK_IMPL_H_
