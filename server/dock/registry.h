// DockRegistry: the docks a server holds, by name.
//
// Thread safety: all methods are safe to call concurrently. Docks are handed
// out as shared_ptr so a call in progress keeps its dock alive across a
// concurrent Delete. Every dock's timers run on one TimerService thread.
#ifndef TDOCK_SERVER_DOCK_REGISTRY_H_
#define TDOCK_SERVER_DOCK_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/dock/dock.h"

namespace tdock {

// Server-wide limits on docks (flags of tdock-server).
struct RegistryLimits {
  // Docks a server holds at most; one more is RESOURCE_EXHAUSTED. 0: no limit.
  int64_t max_docks = 0;
  // Columns per dock at most; more is INVALID_ARGUMENT. 0: no limit.
  int64_t max_columns_per_dock = 0;
  DockLimits dock;
};

// What the registry tells persistence (server/persist).
class RegistryHooks {
 public:
  virtual ~RegistryHooks() = default;
  // A new dock, before it is served; an error refuses the creation.
  virtual absl::Status Created(Dock& dock) = 0;
  // A deleted dock; `done` once its records are gone.
  virtual void Deleted(const std::string& name, StatusCallback done) = 0;
};

class DockRegistry final {
 public:
  explicit DockRegistry(RegistryLimits limits = {})
      : limits_(limits), timers_(std::make_shared<TimerService>()) {}
  DockRegistry(const DockRegistry&) = delete;
  DockRegistry& operator=(const DockRegistry&) = delete;

  // Creates a dock. ALREADY_EXISTS if a dock of that name exists with another
  // spec; returns the existing dock if it was created with the same spec
  // (idempotent). INVALID_ARGUMENT over max_columns_per_dock,
  // RESOURCE_EXHAUSTED at max_docks. The dock is built (and its memory warmed) outside the
  // registry's lock, so other docks' calls never wait for it.
  absl::StatusOr<std::shared_ptr<Dock>> Create(DockSpec spec);
  // NOT_FOUND naming the dock.
  absl::StatusOr<std::shared_ptr<Dock>> Find(const std::string& name) const;
  // Ends the dock's parked calls, then `done` once its records are gone.
  void Delete(const std::string& name, StatusCallback done);
  // The same, waiting (tests, tools): never on a journal's thread.
  absl::Status Delete(const std::string& name);
  // Docks in name order.
  std::vector<std::shared_ptr<Dock>> List() const;
  // Dock::Shutdown on every dock, then refuses Create.
  void Shutdown();
  // Persistence's hooks (borrowed). REQUIRES: before serving.
  void SetHooks(RegistryHooks* hooks) { hooks_ = hooks; }
  // Where docks created from now on start their lease ids
  // (DockLimits::first_lease_id). REQUIRES: before serving.
  void SetFirstLeaseId(uint64_t id) { first_lease_id_ = id; }

 private:
  const RegistryLimits limits_;
  // One thread for every dock's wait bounds and leases.
  const std::shared_ptr<TimerService> timers_;
  RegistryHooks* hooks_ = nullptr;
  uint64_t first_lease_id_ = 1;
  // Serializes creations and deletions, so that a stored spec is the one
  // served and a deletion's records never meet a new dock's.
  tdock::Mutex create_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable tdock::Mutex mu_;
  struct Entry {
    DockSpec spec;  // as created (normalized), before any AddConsumer
    std::shared_ptr<Dock> dock;
  };
  std::map<std::string, Entry> docks_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_DOCK_REGISTRY_H_
