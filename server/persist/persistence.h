// Persistence: a server's docks journaled to a Store (DESIGN.md §7).
//
// What is stored, and under which keys: records.h. Each dock records its
// changes through a StoreDockJournal (store_dock_journal.h).
//
// Recovery (Recover, before the server accepts calls) rebuilds every dock:
// spec, cells (through Put), hand-outs, rounds and deliveries, leases still
// in flight (with a fresh lease_ms), then releases steps that were done.
// A record that does not decode, or a spec that no longer validates, fails
// recovery with a message naming the dock: never a partial load
// (recovery.cc).
//
// Thread safety: after Recover, every method may be called from any thread.
#ifndef TDOCK_SERVER_PERSIST_PERSISTENCE_H_
#define TDOCK_SERVER_PERSIST_PERSISTENCE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/dock/registry.h"
#include "common/mutex.h"
#include "server/persist/journal.h"
#include "server/persist/store.h"
#include "server/persist/store_dock_journal.h"

namespace tdock::persist {

struct PersistenceOptions {
  std::string data_dir;  // the RocksDB directory
  Durability durability = Durability::kSync;
  absl::Duration flush_interval = absl::Milliseconds(100);
  int64_t segment_bytes = int64_t{64} << 20;  // of the value log's files
};

struct RecoveryStats {
  int64_t docks = 0;
  int64_t steps = 0;
  int64_t cells = 0;
  int64_t bytes = 0;
  int64_t handouts = 0;  // hand-outs, rounds and deliveries restored
  int64_t leases = 0;    // leases in flight again
  uint64_t epoch = 0;    // this start's (lease ids start at epoch << 40)
  absl::Duration took;
};

class Persistence final : public RegistryHooks {
 public:
  // Opens (or creates) the RocksDB store in options.data_dir.
  static absl::StatusOr<std::unique_ptr<Persistence>> Open(PersistenceOptions options);
  // Over a given store (tests: the fake or in-memory store).
  Persistence(std::unique_ptr<Store> store, PersistenceOptions options);
  ~Persistence() override;

  // Rebuilds every stored dock into `registry` (which must be empty) and
  // makes it record its changes from now on.
  absl::StatusOr<RecoveryStats> Recover(DockRegistry& registry);

  // RegistryHooks: a new dock records through a journal of its own (closed
  // when the dock is deleted); its spec is stored before it serves; a
  // deleted dock's records go.
  std::shared_ptr<DockJournal> NewJournal(const std::string& name) override;
  void Created(const DockSpec& spec, StatusCallback done) override;
  void Deleted(const std::string& name, StatusCallback done) override;

  // An atomic copy of the store in `dir`, after everything acknowledged so
  // far is stored; a server started with --data_dir=dir serves it.
  absl::Status Checkpoint(const std::string& dir);
  // The same, answering through `done` (on the journal's completion thread,
  // or the last dock queue to run what was completed before it).
  void Checkpoint(const std::string& dir, StatusCallback done);

  Journal& journal() { return *journal_; }
  Store& store() { return *store_; }

 private:
  absl::Status RecoverDock(DockRegistry& registry, const std::string& spec_bytes,
                           RecoveryStats& stats);
  absl::Status Write(StoreBatch batch);  // through the journal, waited for
  // The journal of dock `name`, whose hand-outs without a lease are
  // numbered from `next_handout`.
  std::shared_ptr<StoreDockJournal> NewJournal(const std::string& name, uint64_t next_handout);

  const PersistenceOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Journal> journal_;
  tdock::Mutex mu_;
  std::map<std::string, std::shared_ptr<StoreDockJournal>> journals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_PERSISTENCE_H_
