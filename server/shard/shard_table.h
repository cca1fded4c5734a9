// ShardTable: the shards a controller knows, by id: where clients reach each
// and on which node it runs. A shard registers when it starts (and again
// after either side restarts); clients list the table to find the shard on
// their node and the shards holding a batch's cells.
//
// Thread safety: thread-safe.
#ifndef TDOCK_SERVER_SHARD_SHARD_TABLE_H_
#define TDOCK_SERVER_SHARD_SHARD_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/mutex.h"

namespace tdock::shard {

struct ShardEntry {
  uint64_t id = 0;
  std::string address;  // host:port clients reach it at
  std::string node;     // the node it runs on

  bool operator==(const ShardEntry&) const = default;
};

class ShardTable final {
 public:
  // INVALID_ARGUMENT for id 0 or an empty address; ALREADY_EXISTS when
  // another shard holds the id (another address). The same shard
  // registering again (a restart) is OK and may change its node.
  absl::Status Register(ShardEntry shard);
  // By id.
  std::vector<ShardEntry> List() const;

 private:
  mutable tdock::Mutex mu_;
  std::map<uint64_t, ShardEntry> shards_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHARD_TABLE_H_
