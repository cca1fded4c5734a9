// Sampling and claiming for one consumer in one partition.
//
// Units are rows, or groups for whole-group consumers. A unit is available
// when the ready bit (group-ready bit) of every needed column is set and the
// consumer's consumed bit is clear. Claiming sets consumed bits with fetch_or;
// a bit another claimer set first is simply not ours, so concurrent claimers
// never take the same unit and never block each other.
//
// Thread safety: all functions run concurrently under the dock's shared lock.
#ifndef TDOCK_SERVER_DOCK_SAMPLER_H_
#define TDOCK_SERVER_DOCK_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/batch_meta.h"
#include "common/spec.h"
#include "server/dock/partition.h"

namespace tdock::internal {

// A consumer's spec resolved to indices, once.
struct ConsumerPlan {
  int index = 0;
  std::string name;
  std::vector<int> columns;  // needed column indices
  bool whole_groups = false;
  Policy policy = Policy::kFifo;
  uint64_t seed = 0;
  int64_t dispatch_size = 0;
  int32_t dp_size = 1;
  int32_t replicas = 1;  // per rank (BALANCED)
  CostModel cost;
  std::optional<MicroBatchOptions> micro_batch;
  bool same_count_across_ranks = true;
  RoundPad pad = RoundPad::kNone;  // BALANCED
  absl::Duration lease = absl::ZeroDuration();  // zero: no leases
  // The staleness bound (ConsumerSpec's fields of that name): unset, no
  // bound; with stale_drop, rows past it are dropped, else passed over.
  std::optional<int64_t> max_staleness;
  bool stale_drop = false;
  bool oldest_first = false;  // a step's oldest versions first
  // The consumer's life (ConsumerSpec's fields of that name); the dock's
  // ConsumerTable's plans follow it, copies do not.
  bool optional = false;
  bool joined = false;
  bool removed = false;
  // With a journal: the join of an optional consumer is being recorded, or
  // why its record failed (the next Get tries again).
  bool joining = false;
  absl::Status join_failed;
  bool holds_steps() const { return !removed && (!optional || joined); }
  // The oldest version the consumer may take while the dock is at version
  // `now`; kNoVersion: no bound, or none that any row can be under.
  int64_t min_version(int64_t now) const {
    if (!max_staleness.has_value()) return kNoVersion;
    const int64_t oldest = now - *max_staleness;
    return oldest > 0 ? oldest : kNoVersion;  // versions are >= 0: none is under it
  }
};

// A BALANCED consumer's rounds are followed per (rank, replica): the index
// of that pair in ConsumerState's per-taker tables.
inline int32_t TakerOf(const ConsumerPlan& plan, int32_t rank, int32_t replica) {
  return rank * plan.replicas + replica;
}

// `state` is the plan's consumer in `part` (Partition::consumer).
//
// `min_version`: the oldest version the consumer may take now (the dock's
// version minus its max_staleness); a unit with a row older than that is
// stale and not available. kNoVersion: no bound. A row without a version
// is never stale.

// Units ready and not consumed, counted up to `enough` (the scan stops
// there, so a Get at the start of a step looks at a few words only).
int64_t CountAvailable(const Partition& part, const ConsumerState& state,
                       const ConsumerPlan& plan, int64_t enough,
                       int64_t min_version = kNoVersion);

// Claims up to `need` available units (FIFO: lowest first; RANDOM: uniformly,
// seeded by `seed`; with oldest_first, the oldest version first and then
// that order). Returns the units claimed, ascending; fewer than `need` when
// there were not enough or others won some.
std::vector<int64_t> Claim(const Partition& part, ConsumerState& state,
                           const ConsumerPlan& plan, int64_t need, uint64_t seed,
                           int64_t min_version = kNoVersion);

// Claims every unit that is ready and not consumed but stale, ascending.
std::vector<int64_t> ClaimStale(const Partition& part, ConsumerState& state,
                                const ConsumerPlan& plan, int64_t min_version);

// A unit's version: its row's, or the oldest of its group's rows not
// dropped; kNoVersion when none has one.
int64_t UnitVersion(const Partition& part, const ConsumerPlan& plan, int64_t unit);
// Clears the consumed bits of `units` (undoing a Claim that fell short).
void Unclaim(ConsumerState& state, const std::vector<int64_t>& units);

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_SAMPLER_H_
