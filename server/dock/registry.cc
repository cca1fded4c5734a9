#include "server/dock/registry.h"

#include <future>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"

namespace tdock {

DockRegistry::~DockRegistry() {
  // A creation in flight answers through this registry: wait for it.
  tdock::MutexLock lock(&mu_);
  while (!creating_.empty() || finishing_ > 0 || deleting_ > 0) {
    created_.WaitWithDeadline(&mu_, absl::InfiniteFuture());
  }
}

DockLimits DockRegistry::dock_limits() const {
  DockLimits limits = limits_.dock;
  limits.max_columns = limits_.max_columns_per_dock;
  limits.first_lease_id = first_lease_id_;
  if (limits.timers == nullptr) limits.timers = timers_;
  return limits;
}

DockRegistry::Found DockRegistry::ExistingLocked(const DockSpec& spec, DockCallback& done,
                                                 absl::StatusOr<std::shared_ptr<Dock>>& answer) {
  if (shut_down_) {
    answer = absl::UnavailableError("server is shutting down");
    return Found::kAnswer;
  }
  if (auto it = docks_.find(spec.name); it != docks_.end()) {
    if (it->second.deleting) {
      answer = absl::AbortedError(absl::StrCat(
          "dock '", spec.name, "' is being deleted; create it once its DeleteDock is answered"));
      return Found::kAnswer;
    }
    // Consumers and columns added (or removed) since do not make it another
    // dock.
    if (AsCreated(it->second.spec) == spec) {
      answer = it->second.dock;
    } else {
      answer = absl::AlreadyExistsError(
          absl::StrCat("dock '", spec.name, "' already exists with a different spec"));
    }
    return Found::kAnswer;
  }
  if (auto it = creating_.find(spec.name); it != creating_.end()) {
    if (it->second.spec == spec) {
      it->second.waiting.push_back(std::move(done));
      return Found::kJoined;
    }
    answer = absl::AlreadyExistsError(
        absl::StrCat("dock '", spec.name, "' is being created with a different spec"));
    return Found::kAnswer;
  }
  const int64_t held = static_cast<int64_t>(docks_.size() + creating_.size());
  if (limits_.max_docks > 0 && held >= limits_.max_docks) {
    answer = CapacityError(absl::StrCat(
        "cannot create dock '", spec.name, "': the server holds ", held,
        " docks, its limit (--max_docks); delete one first"));
    return Found::kAnswer;
  }
  return Found::kFree;
}

void DockRegistry::Create(DockSpec spec, DockCallback done) {
  if (limits_.max_columns_per_dock > 0 &&
      static_cast<int64_t>(spec.columns.size()) > limits_.max_columns_per_dock) {
    std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "dock '", spec.name, "' has ", spec.columns.size(),
        " columns, over the server's limit of ", limits_.max_columns_per_dock,
        " (--max_columns_per_dock)")));
    return;
  }
  for (const ConsumerSpec& consumer : spec.consumers) {
    absl::Status user = CheckNoServerState(spec.name, consumer);
    if (!user.ok()) {
      std::move(done)(std::move(user));
      return;
    }
  }
  for (const ColumnSpec& column : spec.columns) {
    absl::Status user = CheckNoServerState(spec.name, column);
    if (!user.ok()) {
      std::move(done)(std::move(user));
      return;
    }
  }
  absl::StatusOr<DockSpec> normalized = NormalizeSpec(std::move(spec));
  if (!normalized.ok()) {
    std::move(done)(normalized.status());
    return;
  }
  spec = *std::move(normalized);
  absl::StatusOr<std::shared_ptr<Dock>> answer;
  {
    // Creations and deletions one at a time: the records of a name stay in
    // the order asked (hooks only queue them, so this is brief but for
    // building the dock).
    tdock::MutexLock creating(&create_mu_);
    Found found = Found::kFree;
    {
      tdock::MutexLock lock(&mu_);
      found = ExistingLocked(spec, done, answer);
    }
    if (found == Found::kJoined) return;
    if (found == Found::kFree) {
      std::shared_ptr<DockJournal> journal =
          hooks_ != nullptr ? hooks_->NewJournal(spec.name) : nullptr;
      absl::StatusOr<std::unique_ptr<Dock>> built = Dock::Create(spec, dock_limits(), journal);
      if (!built.ok()) {
        answer = built.status();
      } else if (hooks_ == nullptr) {
        answer = std::shared_ptr<Dock>(*std::move(built));
        tdock::MutexLock lock(&mu_);
        docks_.emplace(spec.name, Entry{spec, *answer});
      } else {
        {
          tdock::MutexLock lock(&mu_);
          Creating& entry = creating_[spec.name];
          entry.spec = spec;
          entry.dock = *std::move(built);
          entry.waiting.push_back(std::move(done));
        }
        hooks_->Created(spec, [this, name = spec.name](absl::Status stored) {
          FinishCreate(name, stored);
        });
        return;
      }
    }
  }
  std::move(done)(std::move(answer));
}

void DockRegistry::FinishCreate(const std::string& name, const absl::Status& stored) {
  std::vector<DockCallback> waiting;
  std::shared_ptr<Dock> dock;
  bool shut_down = false;
  {
    tdock::MutexLock lock(&mu_);
    auto it = creating_.find(name);
    waiting = std::move(it->second.waiting);
    dock = std::move(it->second.dock);
    if (stored.ok()) docks_.emplace(name, Entry{std::move(it->second.spec), dock});
    creating_.erase(it);
    ++finishing_;
    shut_down = shut_down_;
  }
  if (!stored.ok() || shut_down) dock->Shutdown();
  for (DockCallback& done : waiting) {
    if (stored.ok()) {
      std::move(done)(dock);
    } else {
      std::move(done)(absl::UnavailableError(absl::StrCat(
          "dock '", name, "' was not created: its spec was not stored (", stored.message(), ")")));
    }
  }
  // Last, signalled under the lock: the destructor may go on once this
  // creation is finished, and not before this call is done with mu_.
  tdock::MutexLock lock(&mu_);
  --finishing_;
  created_.SignalAll();
}

absl::StatusOr<std::shared_ptr<Dock>> DockRegistry::Create(DockSpec spec) {
  std::promise<absl::StatusOr<std::shared_ptr<Dock>>> created;
  Create(std::move(spec), [&created](absl::StatusOr<std::shared_ptr<Dock>> dock) {
    created.set_value(std::move(dock));
  });
  return created.get_future().get();
}

absl::Status DockRegistry::AddRecovered(std::shared_ptr<Dock> dock) {
  tdock::MutexLock lock(&mu_);
  const std::string& name = dock->name();
  if (docks_.count(name) != 0 || creating_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("dock '", name, "' exists already"));
  }
  DockSpec spec = dock->spec();
  docks_.emplace(name, Entry{std::move(spec), std::move(dock)});
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Dock>> DockRegistry::Find(const std::string& name) const {
  tdock::MutexLock lock(&mu_);
  auto it = docks_.find(name);
  if (it == docks_.end()) {
    return absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist"));
  }
  if (it->second.deleting) {
    return absl::NotFoundError(absl::StrCat("dock '", name, "' is being deleted"));
  }
  return it->second.dock;
}

void DockRegistry::Delete(const std::string& name, StatusCallback done) {
  // Serialized with creations: a dock of the same name created meanwhile
  // can neither lose its records to this deletion nor keep the old dock's
  // journal open (hooks only queue their records, so this is brief).
  tdock::MutexLock deleting(&create_mu_);
  std::shared_ptr<Dock> dock;
  absl::Status refused;
  {
    tdock::MutexLock lock(&mu_);
    auto it = docks_.find(name);
    if (creating_.count(name) != 0) {
      refused = absl::AbortedError(absl::StrCat(
          "dock '", name, "' is being created; delete it once its CreateDock is answered"));
    } else if (it == docks_.end()) {
      refused = absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist"));
    } else if (it->second.deleting) {
      refused = absl::AbortedError(absl::StrCat("dock '", name, "' is being deleted"));
    } else {
      it->second.deleting = true;  // recorded before it takes effect
    }
  }
  if (!refused.ok()) {
    std::move(done)(std::move(refused));
    return;
  }
  if (hooks_ == nullptr) {
    FinishDelete(name, absl::OkStatus(), std::move(done));
    return;
  }
  {
    tdock::MutexLock lock(&mu_);
    ++deleting_;
  }
  hooks_->Deleted(name, [this, name, done = std::move(done)](absl::Status stored) mutable {
    FinishDelete(name, stored, std::move(done));
    tdock::MutexLock lock(&mu_);
    --deleting_;
    created_.SignalAll();
  });
}

void DockRegistry::FinishDelete(const std::string& name, const absl::Status& stored,
                                StatusCallback done) {
  std::shared_ptr<Dock> dock;
  {
    tdock::MutexLock lock(&mu_);
    // Creations and deletions of the name are refused while it is deleting:
    // the entry is this deletion's.
    auto it = docks_.find(name);
    if (it != docks_.end()) {
      if (stored.ok()) {
        dock = std::move(it->second.dock);
        docks_.erase(it);
      } else {
        it->second.deleting = false;
      }
    }
  }
  if (!stored.ok()) {
    std::move(done)(absl::UnavailableError(
        absl::StrCat("dock '", name, "': deletion not stored (", stored.message(), ")")));
    return;
  }
  // Parked calls end now; calls in progress keep the dock alive until done.
  if (dock != nullptr) dock->Shutdown();
  std::move(done)(absl::OkStatus());
}

absl::Status DockRegistry::Delete(const std::string& name) {
  std::promise<absl::Status> deleted;
  Delete(name, [&deleted](absl::Status s) { deleted.set_value(std::move(s)); });
  return deleted.get_future().get();
}

std::vector<std::shared_ptr<Dock>> DockRegistry::List() const {
  tdock::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Dock>> out;
  for (const auto& [name, entry] : docks_) {
    if (!entry.deleting) out.push_back(entry.dock);
  }
  return out;
}

void DockRegistry::Shutdown() {
  std::vector<std::shared_ptr<Dock>> docks;
  {
    tdock::MutexLock lock(&mu_);
    shut_down_ = true;
    for (const auto& [name, entry] : docks_) docks.push_back(entry.dock);
  }
  for (const auto& dock : docks) dock->Shutdown();
}

}  // namespace tdock
