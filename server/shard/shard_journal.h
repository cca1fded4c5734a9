// ShardJournal: what a shard with a data dir records of its cells
// (server/persist/store_shard_journal.h writes it to the data dir's store),
// and what it recovers from on a restart. A shard without a data dir has
// none: its cells are in memory only.
//
// Record before effect: a staged Put is recorded (with sync durability,
// durably) before its locations go to the controller, so every location the
// controller stores names cells a restarted shard still has; with it, the
// highest extent id given so far, so a restarted shard never gives an id
// again (a stale location names no other Put's cells). A reservation's
// commit (the step the controller stored it in, which only that answer
// says) is recorded before the Put is answered. The rest is recorded
// without waiting: other commits (a staged Put is read like a committed
// one, and its step is in its record), and the extents freed (a freed
// extent that comes back is freed again once the controller's releases are
// heard, never read by a location the controller still hands out).
//
// Thread safety: implementations are thread-safe and called with the
// store's lock held (they only queue); `done` runs with no lock of the
// caller held.
#ifndef TDOCK_SERVER_SHARD_SHARD_JOURNAL_H_
#define TDOCK_SERVER_SHARD_SHARD_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/packed.h"

namespace tdock::shard {

class ShardJournal {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // One staged Put: its cells, their offsets in its payload running from 0
  // in order (each the sum of the lengths before it).
  struct Extent {
    uint64_t id = 0;
    std::string dock;
    int64_t step = -1;  // -1: a reservation's, its step not known yet
    bool committed = false;
    std::vector<uint64_t> cell_bytes;  // each cell's length, in offset order
    std::string payload;               // recovered: the cells' bytes, in order
  };

  virtual ~ShardJournal() = default;
  // `extent` was staged with `cells` (its cells' bytes in offset order,
  // valid while `pin` is held); `done` once it is recorded (sync
  // durability: durable), with the error if it could not be. Called with
  // the caller's lock held (so records keep the order of what they
  // record): returns what to run once that lock is let go (`done`, when it
  // is answered at once), or nothing.
  // `next_id` is the store's next extent id: every id below it was given.
  virtual absl::AnyInvocable<void() &&> Staged(const Extent& extent, uint64_t next_id,
                                               std::vector<ByteSpan> cells,
                                               std::shared_ptr<const void> pin, Done done) = 0;
  // The controller stored `extent` in `step`; `done` (may be empty) once
  // that is recorded. Called with the caller's lock held: `done` never runs
  // inline.
  virtual void Committed(uint64_t extent, int64_t step, Done done) = 0;
  // `extents` were freed (released and past their grace, aborted, their
  // dock deleted).
  virtual void Freed(const std::vector<uint64_t>& extents) = 0;
  // Every extent was dropped: the store is incarnation `incarnation` now.
  virtual void Reincarnated(uint32_t incarnation) = 0;
};

// What a data dir held at a restart.
struct RecoveredShard {
  uint32_t incarnation = 0;  // 0: a new data dir
  uint64_t next_id = 0;      // no extent id below it is given again
  std::vector<ShardJournal::Extent> extents;  // by id
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_JOURNAL_H_
