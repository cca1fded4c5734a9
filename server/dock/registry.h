// DockRegistry: the docks a server holds, by name.
//
// Thread safety: all methods are safe to call concurrently. Docks are handed
// out as shared_ptr so a call in progress keeps its dock alive across a
// concurrent Delete. Every dock's timers run on one TimerService thread.
#ifndef TDOCK_SERVER_DOCK_REGISTRY_H_
#define TDOCK_SERVER_DOCK_REGISTRY_H_

#include <map>
#include <optional>
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
  // The journal a new dock records through from its start (nothing is
  // written yet).
  virtual std::shared_ptr<DockJournal> NewJournal(const std::string& name) = 0;
  // Records a new dock's spec (normalized); `done` once stored. An error
  // refuses the creation: the dock never serves, and its journal is closed.
  virtual void Created(const DockSpec& spec, StatusCallback done) = 0;
  // A deleted dock; `done` once its records are gone. An error leaves the
  // dock and its journal as they were.
  virtual void Deleted(const std::string& name, StatusCallback done) = 0;
};

using DockCallback = absl::AnyInvocable<void(absl::StatusOr<std::shared_ptr<Dock>>) &&>;

class DockRegistry final {
 public:
  explicit DockRegistry(RegistryLimits limits = {})
      : limits_(limits), timers_(std::make_shared<TimerService>()) {}
  // Waits for creations and deletions being stored.
  ~DockRegistry();
  DockRegistry(const DockRegistry&) = delete;
  DockRegistry& operator=(const DockRegistry&) = delete;

  // Creates a dock; `done` gets it once its spec is stored (with
  // persistence), and only then does it serve. ALREADY_EXISTS if a dock of
  // that name exists, or is being created, with another spec; the existing
  // dock if it was created with the same spec (idempotent: a creation of the
  // same spec in progress answers both calls, with one dock built).
  // INVALID_ARGUMENT over max_columns_per_dock, RESOURCE_EXHAUSTED at
  // max_docks. The dock is built (and its memory warmed) on the calling
  // thread, outside the registry's lock, so other docks' calls never wait
  // for it; nothing waits on the journal.
  void Create(DockSpec spec, DockCallback done);
  // The same, waiting (tests, tools): never on a journal's thread.
  absl::StatusOr<std::shared_ptr<Dock>> Create(DockSpec spec);
  // A dock rebuilt from its records (server/persist), before serving;
  // ALREADY_EXISTS if its name is taken.
  absl::Status AddRecovered(std::shared_ptr<Dock> dock);
  // The limits a dock of this registry is built with.
  DockLimits dock_limits() const;
  // NOT_FOUND naming the dock.
  absl::StatusOr<std::shared_ptr<Dock>> Find(const std::string& name) const;
  // Deletes the dock once the deletion is recorded (with persistence):
  // meanwhile it is not found and its name cannot be created again; then its
  // parked calls end and `done` gets OK. If the record fails the dock is
  // back as it was and `done` gets UNAVAILABLE. NOT_FOUND naming the dock;
  // ABORTED while it is being created or deleted.
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
    DockSpec spec;  // as created, or (recovered) as it is now: compared AsCreated
    std::shared_ptr<Dock> dock;
    bool deleting = false;  // its deletion is being recorded: not served
  };
  // The deletion record of `name` came back: the dock goes, or (not
  // stored) serves again.
  void FinishDelete(const std::string& name, const absl::Status& stored, StatusCallback done);
  // A dock whose spec is being stored: not served yet.
  struct Creating {
    DockSpec spec;
    std::shared_ptr<Dock> dock;
    std::vector<DockCallback> waiting;  // every Create of it, answered together
  };
  // How a Create finds its name: free, answered (`answer` is set), or
  // joined to a creation of the same spec in progress (`done` moved there).
  enum class Found { kFree, kAnswer, kJoined };
  Found ExistingLocked(const DockSpec& spec, DockCallback& done,
                       absl::StatusOr<std::shared_ptr<Dock>>& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The spec record of `name` came back: the dock serves (or, not stored, is
  // dropped), and every Create waiting for it is answered.
  void FinishCreate(const std::string& name, const absl::Status& stored);
  std::map<std::string, Entry> docks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Creating> creating_ ABSL_GUARDED_BY(mu_);
  // Creations taken out of creating_ whose answers are still running: the
  // registry must outlive them too.
  int finishing_ ABSL_GUARDED_BY(mu_) = 0;
  // Deletions whose record is in flight: they answer through the registry.
  int deleting_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar created_;  // a creation finished
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tdock

#endif  // TDOCK_SERVER_DOCK_REGISTRY_H_
