// ShardTable: the shards a controller knows, by id: where clients reach each
// and on which node it runs. A shard registers when it starts and again
// every second or so (so a restarted controller learns of it); clients list
// the table to find the shard on their node and the shards holding a
// batch's cells. A shard not heard from for long is taken out (TakeUnseen):
// its controller declares it lost, and its id is free again.
//
// Thread safety: thread-safe.
#ifndef TDOCK_SERVER_SHARD_SHARD_TABLE_H_
#define TDOCK_SERVER_SHARD_SHARD_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tdock::shard {

struct ShardEntry {
  uint64_t id = 0;
  std::string address;  // host:port clients reach it at
  std::string node;     // the node it runs on
  uint32_t incarnation = 0;  // random for each start of the shard (0: not said)

  bool operator==(const ShardEntry&) const = default;
};

class ShardTable final {
 public:
  // INVALID_ARGUMENT for id 0 or an empty address; ALREADY_EXISTS when
  // another shard holds the id (another address). The same shard
  // registering again is OK and may change its node; if it comes with
  // another incarnation it restarted, and `restarted` (when given) is set
  // to the entry it replaces, whose cells are gone. `now`: when it was
  // heard from (Now()).
  absl::Status Register(ShardEntry shard, absl::Time now = Now(),
                        std::optional<ShardEntry>* restarted = nullptr);
  // The time shards are heard from by: a steady clock (as an absl::Time),
  // which a step of the wall clock does not move.
  static absl::Time Now();
  // By id.
  std::vector<ShardEntry> List() const;
  // When shard `id` last registered (nullopt: not in the table).
  std::optional<absl::Time> LastSeen(uint64_t id) const;
  // Takes out and returns the shards last heard from before `now - after`.
  std::vector<ShardEntry> TakeUnseen(absl::Time now, absl::Duration after);

 private:
  struct Held {
    ShardEntry entry;
    absl::Time seen;
  };
  mutable tdock::Mutex mu_;
  std::map<uint64_t, Held> shards_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_TABLE_H_
