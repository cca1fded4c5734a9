// StepFeed: a controller's docks' step windows (Dock::Window), streamed to
// its shards (Dock.WatchSteps). A watch's first message is every dock (a
// snapshot); after that, each dock whose window moved (a step released) or
// that was created or deleted is sent again, changes that come while a
// write is in flight coalescing into the next. A shard keeps a Put of a
// step not yet admitted waiting at itself, and frees released steps' cells,
// as it hears, instead of asking.
//
//   StepFeed feed(&registry);
//   registry limits: .steps_changed = [&feed](const std::string& d) { feed.Changed(d); }
//   DockService::WatchSteps -> feed.Watch(context)
//   ... at shutdown, before the grpc::Server's: feed.Shutdown();
//
// Thread safety: thread-safe. Changed may be called from any thread that
// holds no lock of a dock. Ownership: borrows the registry, which outlives
// it; a watch is owned by gRPC and deleted when done (it leaves the feed
// first). A watch's writes are built under the feed's lock, which is
// taken before the registry's and the docks'.
#ifndef TDOCK_SERVER_SERVICE_STEP_FEED_H_
#define TDOCK_SERVER_SERVICE_STEP_FEED_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "server/dock/registry.h"
#include "tdock/v1/dock.pb.h"

namespace tdock {

class StepFeed final {
 public:
  explicit StepFeed(DockRegistry* registry) : registry_(registry) {}
  // REQUIRES: no watch open (Shutdown, and the grpc::Server's, first).
  ~StepFeed();
  StepFeed(const StepFeed&) = delete;
  StepFeed& operator=(const StepFeed&) = delete;

  // A watch for shard `shard` (for the logs), its snapshot on its way.
  // After Shutdown: finished at once, UNAVAILABLE.
  grpc::ServerWriteReactor<v1::StepWatermarks>* Watch(uint64_t shard);
  // `dock`'s window moved, or it was created: every watch sends it again.
  void Changed(const std::string& dock);
  // `dock` was deleted (its deletion stored): every watch says so (and, if
  // a dock of that name is there again by then, sends its window after).
  void Deleted(const std::string& dock);
  // Finishes every watch (UNAVAILABLE: shutting down) and refuses new ones,
  // so that a server's shutdown does not wait for them.
  void Shutdown();
  // Watches open (tests).
  int watches() const;

 private:
  class Watcher;
  // Adds `dock` to `out`: deleted if `deleted` (its deletion was the
  // change); then its window as it stands now, if it is there (not found: it
  // is being created or deleted, and told again once that is done).
  void Describe(const std::string& dock, bool deleted, v1::StepWatermarks& out) const;
  void Remove(Watcher* watcher);

  DockRegistry* const registry_;
  mutable tdock::Mutex mu_;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_SERVICE_STEP_FEED_H_
