// ShardStore: the cells a shard of a sharded deployment holds, and nothing
// else (it knows no consumers, leases, rounds or versions).
//
// A Put that reaches the shard is staged: its columns' bytes are copied into
// the arena of its dock's step, under the shard's memory limit, and it gets
// an extent id, unique for the store's life, naming its cells. Each cell's
// CellLocation (shard, extent, offset, bytes) is what the shard sends the
// controller; the offset is the cell's first byte in the Put's payload, its
// columns' data one after the other. The controller decides whether a
// staged Put counts: it hands out only locations it stored, possibly before
// the shard hears its answer, so staged cells are read like committed ones.
// Commit records the controller's answer (and the step it stored the Put in);
// Abort forgets a Put the controller refused (its bytes go back with its
// step's). A Put whose answer never came stays staged, unresolved, until the
// controller says (Resolve, when the shard reconciles) or its step is
// released. Release retires a step's cells once the controller has released
// the step: later Puts of it are refused at once, but its cells stay
// readable for `read_grace` more, because the controller releases a step
// when it hands out its last rows, before the consumer (one without a
// lease) has read them from here. Retired cells are freed when the grace
// ends (Sweep) or, earlier, when a Put needs their memory. A reader holding
// cells keeps their memory until it lets go (the pin).
//
//   ShardStore store(/*shard=*/2, 4 << 20, 8ll << 30);
//   ASSIGN_OR_RETURN(ShardStore::Staged staged, store.Stage("d", 0, columns, item_bytes));
//   ... the controller stores staged.locations ...
//   store.Commit(staged.extent, 0);
//   ASSIGN_OR_RETURN(ShardStore::Cells cells, store.Read("d", where));
//
// Thread safety: thread-safe. Read runs under a shared lock; the copy of a
// Put's bytes runs with no lock held.
#ifndef TDOCK_SERVER_SHARD_SHARD_STORE_H_
#define TDOCK_SERVER_SHARD_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cell_location.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/packed.h"
#include "server/dock/arena.h"
#include "server/dock/cell_store.h"
#include "server/dock/local_cell_store.h"
#include "server/shard/shard_journal.h"

namespace tdock::shard {

class ShardStore final {
 public:
  // shard: this shard's id, in every location it gives; chunk_bytes: the
  // arenas' chunk size; limit_bytes: the memory limit (0: none);
  // read_grace: how long a released step's cells stay readable; clock:
  // what tells the time (null: the real clock); memory: where the chunks
  // come from (null: the heap; a ShmChunks for same-host writers and
  // readers).
  ShardStore(uint64_t shard, int64_t chunk_bytes, int64_t limit_bytes,
             absl::Duration read_grace = absl::ZeroDuration(),
             std::shared_ptr<Clock> clock = nullptr,
             std::shared_ptr<internal::ChunkMemory> memory = nullptr);
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  // With a data dir: records through `journal` (borrowed; outlives the
  // store) from now on, after taking back what it held (`recovered`): its
  // incarnation (a new data dir's is this store's, recorded now) and its
  // extents, staged or committed as they were, under their ids.
  // INVALID_ARGUMENT for an extent of another incarnation, or whose cells
  // do not add up to its payload. REQUIRES: before any other call.
  absl::Status Recover(ShardJournal* journal, RecoveredShard recovered);
  // A staged Put is recorded (see shard_journal.h); `done` once it is (at
  // once without a journal), with NOT_FOUND if `extent` is not staged here.
  void Record(uint64_t extent, ShardJournal::Done done);

  struct Staged {
    uint64_t extent = 0;
    // Per column, its cells' locations in row order.
    std::vector<std::vector<CellLocation>> locations;
  };
  // Stages a Put of `dock`'s `step`: columns[i], items of item_bytes[i]
  // bytes (checked whole: INVALID_ARGUMENT naming the column). All or none:
  // RESOURCE_EXHAUSTED, nothing kept, when the memory limit does not allow
  // it, even after freeing every retired cell early; FAILED_PRECONDITION
  // when the step was released here. A step not
  // known yet (nullopt: a Put naming a reservation, whose step the
  // controller says) stages in an arena of the Put's own.
  absl::StatusOr<Staged> Stage(const std::string& dock, std::optional<int64_t> step,
                               absl::Span<const PackedColumn> columns,
                               absl::Span<const int64_t> item_bytes);
  // A Put whose writer puts the bytes in place itself (same-host shared
  // memory): Prepare takes the cells' memory as Stage would (the same
  // checks and refusals; `columns` need only their offsets) and gives each
  // column's payload regions, its rows' items back to back across them.
  // The extent is not readable until Fill.
  struct Prepared {
    uint64_t extent = 0;
    std::vector<std::vector<absl::Span<char>>> regions;  // per column
  };
  absl::StatusOr<Prepared> Prepare(const std::string& dock, std::optional<int64_t> step,
                                   absl::Span<const PackedColumn> columns,
                                   absl::Span<const int64_t> item_bytes);
  // The writer has put the bytes of the Put `columns` (offsets only) of
  // `step` (nullopt: a reservation's) in the regions of the prepared
  // `extent`: it is staged, as Stage leaves a Put. NOT_FOUND if `extent` is
  // not prepared here (for `dock`); FAILED_PRECONDITION if its step was
  // released meanwhile; INVALID_ARGUMENT if the Put is of another step or
  // other cells than it was prepared for (the service then aborts it).
  //
  // A prepared extent whose step is released stays (unreadable) for at
  // least kPreparedHold, however short the memory: its writer may still be
  // copying into it.
  absl::StatusOr<Staged> Fill(uint64_t extent, const std::string& dock,
                              std::optional<int64_t> step,
                              absl::Span<const PackedColumn> columns,
                              absl::Span<const int64_t> item_bytes);
  static constexpr absl::Duration kPreparedHold = absl::Seconds(60);
  // The controller stored the staged Put `extent` in `step` (a Put naming a
  // reservation learns its step from the controller): its cells are
  // readable, and freed with that step (retired at once if that step was
  // released here meanwhile). NOT_FOUND if no Put is staged as `extent`
  // (aborted, unknown). `recorded` (may be empty) gets the status once the
  // commit is recorded (at once without a journal, or with an error), with
  // no lock of the store held.
  absl::Status Commit(uint64_t extent, int64_t step, ShardJournal::Done recorded = nullptr);
  // The controller did not store it: it is forgotten.
  void Abort(uint64_t extent);
  // The staged Put `extent`'s commit was never answered (the call failed
  // with its outcome unknown): kept, and unresolved until Resolve. Staged
  // Puts recovered from a data dir are unresolved too.
  void Unresolved(uint64_t extent) ABSL_LOCKS_EXCLUDED(mu_);
  // What the store holds, for its controller to reconcile (ReconcileShard):
  // every extent, the unresolved ones, and the next extent id it gives.
  struct Inventory {
    uint32_t incarnation = 0;
    std::vector<uint64_t> held;        // ascending
    std::vector<uint64_t> unresolved;  // ascending
    uint64_t next_extent = 0;
  };
  Inventory GetInventory() const ABSL_LOCKS_EXCLUDED(mu_);
  bool HasUnresolved() const ABSL_LOCKS_EXCLUDED(mu_);
  // The controller's answer for the unresolved `extent`: stored in `step`
  // (committed, as Commit) or not in a live step (nullopt: it retires, freed
  // once read_grace has passed, as a released step's cells). Nothing for an
  // extent not unresolved (any more). `recorded` as Commit's.
  void Resolve(uint64_t extent, std::optional<int64_t> step,
               ShardJournal::Done recorded = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Cells by location, views valid while `pin` is held.
  struct Cells {
    std::vector<ByteSpan> cells;
    std::vector<std::shared_ptr<const void>> pins;
  };
  // NOT_FOUND naming the first location this shard does not hold (another
  // shard's, an extent unknown here (aborted or released), or not a cell's
  // start and length): the reader's listing or batch is stale.
  absl::StatusOr<Cells> Read(const std::string& dock, absl::Span<const CellLocation> where) const;

  // The controller released `dock`'s `step`: later Puts of it are refused
  // and its cells (staged ones too) retire: readable until read_grace has
  // passed, then freed.
  void Release(const std::string& dock, int64_t step);
  // The controller's oldest live step of `dock` (every step below it is
  // released): a Put of it goes in past the memory limit, so the step that
  // must end first always can.
  void SetFrontStep(const std::string& dock, int64_t step);
  // What the controller's step feed says of `dock` (StepWindow): every step
  // below `front_step`, and every step of a partition below the one it
  // admits, is released (Release); the front step is set (SetFrontStep);
  // and Waits answers from `admitted` until ForgetWindows.
  void SetWindow(const std::string& dock, int64_t front_step, std::vector<int64_t> admitted);
  // The feed broke: Waits knows no dock's window until SetWindow again.
  void ForgetWindows();
  // A Put of `dock`'s `step` would wait at the controller for the step to
  // be admitted, as the last window heard says (false when none is known,
  // or the step is admitted or released).
  bool Waits(const std::string& dock, int64_t step) const;
  // `dock` was deleted: every cell of it retires.
  void ForgetDock(const std::string& dock);
  // Frees the retired cells whose grace has passed.
  void Sweep();
  // The steps each dock has cells of here (staged or committed, not
  // retired), ascending.
  std::map<std::string, std::vector<int64_t>> HeldSteps() const;

  struct Stats {
    int64_t prepared_puts = 0;  // prepared, not filled yet
    int64_t staged_puts = 0;
    int64_t committed_puts = 0;
    int64_t cell_bytes = 0;      // payload of staged and committed Puts
    int64_t retired_bytes = 0;   // payload of released ones still readable
    int64_t reserved_bytes = 0;  // memory held by the arenas' pool
    int64_t limit_bytes = 0;
  };
  Stats GetStats() const;
  uint64_t shard() const { return shard_; }
  // This store's incarnation, random for each: the high 32 bits of every
  // extent it gives. A controller tells a restarted shard by it.
  uint32_t incarnation() const { return incarnation_.load(std::memory_order_acquire); }
  // Its controller declared this incarnation lost (counts its cells gone):
  // every cell is dropped and the store starts again as a new incarnation,
  // as a restarted shard would. Returns it.
  uint32_t Reincarnate();

 private:
  struct Cell {
    uint64_t offset = 0;
    ByteSpan bytes;
  };
  struct Extent {
    std::string dock;
    int64_t step = 0;
    bool committed = false;
    int64_t bytes = 0;
    std::vector<Cell> cells;  // by offset
    std::shared_ptr<internal::LocalStepCells> step_cells;  // keeps the bytes
    // When a release retired it, the time it is freed; InfiniteFuture: live.
    absl::Time free_at = absl::InfiniteFuture();
    bool prepared = false;  // its bytes not written yet (Prepare, before Fill)
    bool unresolved = false;  // staged, its commit never answered (Unresolved)
  };
  struct DockCells {
    std::map<int64_t, std::shared_ptr<internal::LocalStepCells>> steps;  // live here
    std::set<int64_t> released;  // steps the controller released
    int64_t front = -1;  // the oldest step not released, as last learnt (-1: not yet)
    // Per partition, the step it admits, from the controller's feed (empty:
    // not known).
    std::vector<int64_t> admitted;
  };

  // Stage and Prepare: the cells' memory taken (and, with `copy`, the
  // columns' bytes copied there), the extent held.
  absl::StatusOr<Staged> Place(const std::string& dock, std::optional<int64_t> step,
                               absl::Span<const PackedColumn> columns,
                               absl::Span<const int64_t> item_bytes, bool copy);
  static absl::Status NotHeld(const CellLocation& where, const std::string& why);
  // Commit's work, under the lock: `recorded` is moved to the journal if
  // there is one and the extent is held (else left for Commit to answer).
  absl::Status DoCommit(uint64_t extent, int64_t step, ShardJournal::Done& recorded)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the retired extents due by `by` out of extents_ (to be destroyed
  // once mu_ is let go), recording that they are freed.
  std::vector<Extent> TakeRetired(absl::Time by) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets free_at on `dock`'s live extents (of `step`, or of every step).
  void Retire(const std::string& dock, std::optional<int64_t> step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t shard_;
  std::atomic<uint32_t> incarnation_;  // changed under mu_
  // Set once, before serving (Recover).
  ShardJournal* journal_ ABSL_GUARDED_BY(mu_) = nullptr;
  const std::shared_ptr<internal::ChunkPool> pool_;
  const absl::Duration read_grace_;
  const std::shared_ptr<Clock> clock_;

  mutable tdock::Mutex mu_;
  // Starts at a random number for each store: a location from before a
  // restart of the shard (same id, same address) names no extent of this
  // one, so it is refused instead of reading another Put's cells.
  uint64_t next_extent_ ABSL_GUARDED_BY(mu_);
  // Ids given to Puts still being placed (their bytes copied), not held yet.
  std::set<uint64_t> placing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, DockCells> docks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Extent> extents_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_STORE_H_
