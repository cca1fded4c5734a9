// StoreShardJournal: a shard's ShardJournal over the data dir's Store, through
// a Journal (group commit; sync or async durability), and its recovery.
//
// Keys (bytewise ordered; numbers big-endian), all under "H" so that a dock
// journal (records.h) and a shard's never share a data dir:
//   H m              the store's incarnation <incarnation:4>
//   H n              the next extent id: every id below it was given <id:8>
//   H x <extent:8>   a staged Put: <step:8> <dock length:4> <dock> <cells:4>
//                    <cell length:8>... then the cells' bytes, in order
//   H c <extent:8>   the step the controller stored it in <step:8>
// A freed extent's keys are deleted; a new incarnation deletes every x and c
// key and writes m.
//
// Thread safety: thread-safe (the Journal's).
#ifndef TDOCK_SERVER_PERSIST_STORE_SHARD_JOURNAL_H_
#define TDOCK_SERVER_PERSIST_STORE_SHARD_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/persist/journal.h"
#include "server/persist/store.h"
#include "server/shard/shard_journal.h"

namespace tdock::persist {

class StoreShardJournal final : public shard::ShardJournal {
 public:
  // `journal` is borrowed and outlives this.
  explicit StoreShardJournal(Journal* journal) : journal_(journal) {}

  absl::AnyInvocable<void() &&> Staged(const Extent& extent, uint64_t next_id,
                                       std::vector<ByteSpan> cells,
                                       std::shared_ptr<const void> pin, Done done) override;
  void Committed(uint64_t extent, int64_t step, Done done) override;
  void Freed(const std::vector<uint64_t>& extents) override;
  void Reincarnated(uint32_t incarnation) override;

 private:
  Journal* const journal_;
};

// What `store` holds of a shard. FAILED_PRECONDITION when it holds docks (a
// standalone server's or a controller's data dir, `dir` naming it);
// DATA_LOSS naming a record that cannot be read.
absl::StatusOr<shard::RecoveredShard> RecoverShard(const Store& store, const std::string& dir);

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_STORE_SHARD_JOURNAL_H_
