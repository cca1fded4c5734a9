// The round dispatcher of DESIGN.md §4: forms the balanced rounds of a
// BALANCED consumer outside the dock's locks.
//
// A round is formed in three phases:
//   1. Draft, under the dock's locks (DockImpl::ServeRoundLocked): the rows
//      are claimed, the consumer's round is marked as being formed (no other
//      round of it starts meanwhile, and its ranks asking for it park), and
//      what planning reads is copied into a RoundDraft: the claimed units,
//      each row's token count and its share of a response.
//   2. Plan, with no lock held: FormRound splits the rows over the ranks
//      (Karmarkar–Karp, refined within its time budget) and plans each
//      share's micro-batches; a round whose largest share would not fit one
//      response is formed again with fewer units.
//   3. Commit, under the dock's locks (DockImpl::CommitRound): if the
//      partition still holds the step, the units the round left out are
//      given back and the round is kept (or the failure noted for its next
//      Get); the consumer's parked Gets are woken. A step released meanwhile
//      took the claims with it, and the result is dropped.
//
// Planning takes up to the partitioner's time budget (20 ms by default);
// holding the dock's lock that long would stall every step's release and
// start, and holding the consumer's round lock would stall its ranks'
// fetches of rounds already formed.
//
//   RoundDraft draft = ...;                    // under the locks
//   FormedRound formed = FormRound(draft);     // no lock held
//   ...commit...                               // under the locks
//
// Thread safety: FormRound is a pure function of its draft.
#ifndef TDOCK_SERVER_DOCK_ROUND_DISPATCHER_H_
#define TDOCK_SERVER_DOCK_ROUND_DISPATCHER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/balance/round.h"
#include "server/dock/partition.h"

namespace tdock::internal {

// What planning a round reads, copied under the dock's locks.
struct RoundDraft {
  int64_t step = 0;
  int consumer = 0;         // index
  std::string who;          // "dock 'x' step 3 consumer 'c'", for errors
  bool whole_groups = false;  // units are groups (else rows)
  std::vector<int64_t> units;    // claimed, ascending
  // The units' rows (a group's rows that are not dropped), unit after unit,
  // and how many each unit has.
  std::vector<int64_t> rows;
  std::vector<int32_t> unit_sizes;
  // Per row of `rows`: its token count, and (with a response limit) its
  // share of a response.
  std::vector<int64_t> lengths;
  std::vector<int64_t> row_bytes;
  RoundOptions options;  // whole groups: group_sizes lists unit_sizes
  int64_t max_batch_bytes = 0;    // one response, at most; 0: unlimited
  int64_t fixed_bytes = 0;        // a response's bytes besides its rows
};

// A planned round: formed over the first `kept` units of the draft (the
// rest go back), or why it cannot be formed.
struct FormedRound {
  absl::StatusOr<Round> round;
  size_t kept = 0;
};

FormedRound FormRound(const RoundDraft& draft);

// A plan's micro-batches as contiguous ranges of `order`, which receives the
// plan's positions micro-batch after micro-batch.
std::vector<MicroBatchInfo> MicroBatchRanges(const std::vector<MicroBatch>& micro_batches,
                                             std::vector<int>& order);

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_ROUND_DISPATCHER_H_
