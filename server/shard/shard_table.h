// ShardTable: the shards a controller knows, by id: where clients reach each,
// on which node it runs, and how much memory its cells take. A shard
// registers when it starts and again every second or so (so a restarted
// controller learns of it); clients list the table to find the shard on
// their node and the shards holding a batch's cells. A shard not heard from
// for a while is away (Unavailable: its rows wait); one not heard from for
// long is taken out (TakeUnseen): its controller declares it lost, and its
// id is free again.
//
// A restarted controller learns from its journal which shard incarnations
// hold cells of live rows and expects them (Expect): an expected shard is
// away until it registers, a former incarnation of a shard that registers
// with another one is gone, and one that never registers is taken out as
// any other.
//
// Thread safety: thread-safe.
#ifndef TDOCK_SERVER_SHARD_SHARD_TABLE_H_
#define TDOCK_SERVER_SHARD_SHARD_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cell_location.h"
#include "common/mutex.h"

namespace tdock::shard {

struct ShardEntry {
  uint64_t id = 0;
  std::string address;  // host:port clients reach it at
  std::string node;     // the node it runs on
  uint32_t incarnation = 0;  // random for each start of the shard (0: not said)
  // As it last said: the bytes its cells take, and its limit (0: none).
  int64_t memory_bytes = 0;
  int64_t memory_limit_bytes = 0;
  std::string shm_prefix;  // its chunks' files in shared memory (empty: none)
  // Listed: not heard from for the `away_after` List was given.
  bool away = false;

  bool operator==(const ShardEntry&) const = default;
};

class ShardTable final {
 public:
  // INVALID_ARGUMENT for id 0 or an empty address; ALREADY_EXISTS when
  // another shard holds the id (another address and incarnation). The same
  // shard registering again is OK and may change its node and memory, and,
  // as the same incarnation (restarted with its data dir), its address. `gone`
  // (when given) gets the incarnations of the id that are gone with this
  // registration, whose cells are gone with them: the one it replaces when
  // it comes with another incarnation (it restarted), and the ones expected
  // of the id other than its own. `now`: when it was heard from (Now()).
  absl::Status Register(ShardEntry shard, absl::Time now = Now(),
                        std::vector<ShardEntry>* gone = nullptr);
  // Incarnation `expected.incarnation` of shard `expected.shard` holds cells
  // the controller knows of: until it registers it is away; since `now`.
  // Nothing for an incarnation registered already.
  void Expect(ShardIncarnation expected, absl::Time now = Now());
  // The time shards are heard from by: a steady clock (as an absl::Time),
  // which a step of the wall clock does not move.
  static absl::Time Now();
  // The registered shards by id; `away` set for those not heard from for
  // `away_after` by `now`.
  std::vector<ShardEntry> List(absl::Time now = Now(),
                               absl::Duration away_after = absl::InfiniteDuration()) const;
  // When shard `id` last registered (nullopt: not registered).
  std::optional<absl::Time> LastSeen(uint64_t id) const;
  // The incarnations whose cells cannot be read for now: the registered
  // shards not heard from for `away_after` by `now`, and the expected ones.
  std::vector<ShardIncarnation> Unavailable(absl::Time now, absl::Duration away_after) const;
  // Takes out and returns the shards last heard from before `now - after`,
  // and the incarnations expected since before it (with no address).
  std::vector<ShardEntry> TakeUnseen(absl::Time now, absl::Duration after);

 private:
  struct Held {
    ShardEntry entry;
    absl::Time seen;
  };
  struct Expected {
    std::set<uint32_t> incarnations;
    absl::Time since;
  };
  mutable tdock::Mutex mu_;
  std::map<uint64_t, Held> shards_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Expected> expected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_TABLE_H_
