// DockJournal: what a dock tells the journal that makes it durable
// (server/persist implements it over RocksDB; the core never includes it).
// Each call's `done` runs once the record is stored (sync durability), or at
// once (async); the dock completes the request only then, and undoes its
// effect if `done` gets an error: a Put's cells never become ready, a Get's
// rows go back to be handed out again.
//
// Thread safety: called from any thread, without dock locks held.
#ifndef TDOCK_SERVER_DOCK_JOURNAL_HOOK_H_
#define TDOCK_SERVER_DOCK_JOURNAL_HOOK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/packed.h"
#include "common/spec.h"
#include "server/dock/types.h"

namespace tdock {

class DockJournal {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  virtual ~DockJournal() = default;

  struct Cell {
    int column = 0;
    int64_t row = 0;
    ByteSpan bytes;  // valid while `pin` is held
  };
  // A row's key, recorded with the row's cells.
  struct Key {
    int64_t row = 0;
    std::string key;
  };
  // A row's policy version, recorded with the cells of the write that
  // carried it (a row's version is the oldest recorded).
  struct Version {
    int64_t row = 0;
    int64_t version = 0;
  };
  struct LeaseEnd;
  struct DropRecord;

  // A Put's record, stored in one write (all of it or nothing): the cells it
  // wrote, the keys and versions of its rows (empty: none), the lease it acknowledges
  // (null: none) and the rows its appended groups leave unused (closed past
  // their declared sizes; null: none). `pin` keeps the cells' bytes (the
  // step's StepCells) alive. A Put that carries rows of step `carried_from`
  // (>= 0) into this one ends that step's pending carry (DropRecord::carry)
  // in the same write, with the units its consumers had taken.
  struct PutRecord {
    int64_t step = 0;
    std::vector<Cell> cells;
    std::vector<Key> keys;
    std::vector<Version> versions;
    std::shared_ptr<const void> pin;
    const LeaseEnd* ack = nullptr;
    const DropRecord* unused = nullptr;
    int64_t carried_from = -1;
    // Per consumer, the units of the carried rows it had taken in step
    // `carried_from`: done for it in this step.
    std::vector<ConsumerUnits> carried_done;
    // Non-zero: the writer's id for the Put (PutInput::put_id), recorded
    // with `answer`, what a Put sent again with the id is answered, and the
    // Put's fingerprint (PutFingerprint), which tells another Put sent with
    // the id.
    uint64_t put_id = 0;
    uint64_t put_fingerprint = 0;
    const PutResult* answer = nullptr;
  };
  virtual void Put(const PutRecord& put, Done done) = 0;

  // Rows handed to a consumer by one Get (units: rows, or groups for
  // whole-group consumers).
  struct HandOut {
    int64_t step = 0;
    int consumer = 0;
    std::vector<int64_t> units;
    uint64_t lease_id = 0;  // 0: no lease
    int32_t rank = 0;       // the rank whose Get took them (its lease's)
  };
  virtual void HandedOut(const HandOut& handout, Done done) = 0;

  // A BALANCED consumer's round: every rank's share (recorded once, with its
  // first delivery), and each rank's delivery of it.
  struct RoundRecord {
    int64_t step = 0;
    int consumer = 0;
    int64_t round = 0;
    std::vector<std::vector<int64_t>> shares;  // per rank, rows in batch order
    std::vector<std::vector<MicroBatchInfo>> micro_batches;  // per rank
    // Per rank, the positions in its share that are repeats (pad: repeat);
    // empty, or one (possibly empty) list per rank.
    std::vector<std::vector<int64_t>> repeats;
    BalanceStats stats;
    // Formed as the step's last round. Kept in the record's format; recovery
    // does not go by it (an earlier round may be unrecorded).
    bool last = false;
  };
  // `formed`: the round itself, when this is its first delivery (recorded in
  // the same write). `taker`: the rank, or with replicas the rank's replica
  // (rank x replicas + replica).
  virtual void RoundDelivered(int64_t step, int consumer, int64_t round, int32_t taker,
                              uint64_t lease_id, const RoundRecord* formed, Done done) = 0;

  // A lease ended: acknowledged (its rows are done for the consumer) or
  // returned (its hand-out, or BALANCED delivery, no longer counts).
  struct LeaseEnd {
    int64_t step = 0;
    int consumer = 0;
    uint64_t lease_id = 0;
    int64_t round = -1;  // BALANCED: the delivered share's round and rank
    int32_t rank = 0;
    bool acked = false;
    // BALANCED: the rank's replicas; returned, the share's delivery to each
    // of them no longer counts.
    int32_t replicas = 1;
  };
  virtual void LeaseEnded(const LeaseEnd& end, Done done) = 0;

  // Rows taken out of a step (Drop), or a step sealed with the rows that
  // dropped (Seal). A seal (seal_when.carry) may also drop `carry` as
  // carried, stored with it as the step's pending carry until a Put
  // (PutRecord::carried_from) writes them into the next step.
  struct DropRecord {
    int64_t step = 0;
    std::vector<int64_t> rows;  // ascending, unique
    DropReason reason = DropReason::kUnspecified;
    bool seal = false;
    std::vector<int64_t> carry;  // ascending, unique; none of `rows`
    std::vector<ConsumerUnits> carry_taken;  // per consumer, the units of `carry` it took
  };
  virtual void Dropped(const DropRecord& drop, Done done) = 0;

  // Rows granted to a producer before it generates (Dock::Reserve): stored
  // in one write with the rows' version and, for declared groups, the drop
  // of the rows they leave unused.
  struct ReservationRecord {
    int64_t step = 0;
    uint64_t id = 0;
    std::vector<int64_t> rows;
    int64_t version = 0;
    int64_t deadline_unix_ms = 0;  // wall clock: it outlives a restart
  };
  virtual void Reserved(const ReservationRecord& reservation, const DropRecord* unused,
                        Done done) = 0;

  // The step's records can go: it was released.
  virtual void Released(int64_t step, Done done) = 0;
  // The step owes nothing to the next any more (DropRecord::carry): the
  // next step refused the rows for good.
  virtual void CarryEnded(int64_t step, Done done) = 0;
  // The dock's policy version was set (recovery takes the highest stored).
  virtual void VersionSet(int64_t version, Done done) = 0;
  // The dock's spec changed (AddConsumer).
  virtual void SpecChanged(const DockSpec& spec, Done done) = 0;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_DOCK_JOURNAL_HOOK_H_
