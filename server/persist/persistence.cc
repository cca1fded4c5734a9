#include "server/persist/persistence.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"
#include "server/persist/records.h"
#include "server/persist/store_dock_journal.h"

namespace tdock::persist {

using records::DockPrefix;
using records::PrefixEnd;
using records::SpecKey;
using records::TombPrefix;

absl::StatusOr<std::unique_ptr<Persistence>> Persistence::Open(PersistenceOptions options) {
  if (options.data_dir.empty()) {
    return absl::InvalidArgumentError("--data_dir is empty");
  }
  if (options.flush_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flush_interval_ms must be positive, got ", absl::FormatDuration(options.flush_interval)));
  }
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                         OpenRocksStore(options.data_dir, {.segment_bytes = options.segment_bytes}));
  return std::make_unique<Persistence>(std::move(store), std::move(options));
}

Persistence::Persistence(std::unique_ptr<Store> store, PersistenceOptions options)
    : options_(std::move(options)),
      store_(std::move(store)),
      journal_(std::make_unique<Journal>(
          store_.get(), Journal::Options{.durability = options_.durability,
                                         .flush_interval = options_.flush_interval})) {}

Persistence::~Persistence() = default;

// Recovery, before serving: submitted through the journal, waited for.
absl::Status Persistence::Write(StoreBatch batch) {
  std::promise<absl::Status> stored;
  journal_->Submit(std::move(batch), [&stored](absl::Status s) { stored.set_value(std::move(s)); });
  return stored.get_future().get();
}

std::shared_ptr<DockJournal> Persistence::NewJournal(const std::string& name) {
  return NewJournal(name, 0);
}

std::shared_ptr<StoreDockJournal> Persistence::NewJournal(const std::string& name,
                                                          uint64_t next_handout) {
  auto journal = std::make_shared<StoreDockJournal>(journal_.get(), name, next_handout);
  tdock::MutexLock lock(&mu_);
  journals_[name] = journal;
  return journal;
}

void Persistence::Created(const DockSpec& spec, StatusCallback done) {
  StoreBatch batch;
  batch.Put(SpecKey(spec.name), ToProto(spec).SerializeAsString());
  // A dock of the same name may have been deleted: start from nothing.
  const std::string prefix = DockPrefix(spec.name);
  batch.DeleteRange(prefix, PrefixEnd(prefix));
  const std::string tombs = TombPrefix(spec.name);
  batch.DeleteRange(tombs, PrefixEnd(tombs));
  const std::string versions = records::DockVersionPrefix(spec.name);
  batch.DeleteRange(versions, PrefixEnd(versions));
  journal_->Submit(std::move(batch), [this, name = spec.name,
                                      done = std::move(done)](absl::Status stored) mutable {
    if (!stored.ok()) {
      // The dock never serves: its journal goes (it recorded nothing).
      tdock::MutexLock lock(&mu_);
      journals_.erase(name);
    }
    std::move(done)(std::move(stored));
  });
}

void Persistence::Deleted(const std::string& name, StatusCallback done) {
  StoreBatch batch;
  batch.Delete(SpecKey(name));
  for (const std::string& prefix :
       {DockPrefix(name), TombPrefix(name), records::DockVersionPrefix(name)}) {
    batch.DeleteRange(prefix, PrefixEnd(prefix));
  }
  std::shared_ptr<StoreDockJournal> journal;
  {
    tdock::MutexLock lock(&mu_);
    auto it = journals_.find(name);
    if (it != journals_.end()) {
      journal = std::move(it->second);
      journals_.erase(it);
    }
  }
  if (journal == nullptr) {
    journal_->Submit(std::move(batch), std::move(done));
    return;
  }
  // The deletion goes after the dock's last record, and none follows it;
  // if it is not stored, the dock records again (it was not deleted).
  journal->Close(std::move(batch), [this, name, journal, done = std::move(done)](
                                       absl::Status stored) mutable {
    if (!stored.ok()) {
      journal->Reopen();
      tdock::MutexLock lock(&mu_);
      journals_.emplace(name, std::move(journal));
    }
    std::move(done)(std::move(stored));
  });
}

absl::Status Persistence::Checkpoint(const std::string& dir) {
  return journal_->RunWhenFlushed([&] { return store_->Checkpoint(dir); });
}

void Persistence::Checkpoint(const std::string& dir, StatusCallback done) {
  journal_->WhenFlushed([this, dir] { return store_->Checkpoint(dir); }, std::move(done));
}

}  // namespace tdock::persist
