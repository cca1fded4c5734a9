#include "server/service/step_feed.h"

#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "common/logging.h"

namespace tdock {

// One shard's watch. Writes go out one at a time: a change that comes while
// one is in flight is kept (`pending_`) and sent with the next, which reads
// the docks as they are then, so the last message about a dock is never
// older than its last change.
class StepFeed::Watcher final : public grpc::ServerWriteReactor<v1::StepWatermarks> {
 public:
  Watcher(StepFeed* feed, uint64_t shard) : feed_(feed), shard_(shard) {}

  // Sends the snapshot. REQUIRES: in the feed.
  void Start() {
    {
      tdock::MutexLock lock(&mu_);
      writing_ = true;
    }
    WriteNext();
  }

  // `dock` changed (`deleted`: by its deletion). REQUIRES: the feed's lock
  // held (the watch is not deleted meanwhile).
  void Add(const std::string& dock, bool deleted) {
    {
      tdock::MutexLock lock(&mu_);
      if (finishing_) return;
      pending_[dock] = pending_[dock] || deleted;
      if (writing_) return;
      writing_ = true;
    }
    WriteNext();
  }

  // Ends the watch with `status` (after the write in flight, if any).
  void End(grpc::Status status) {
    {
      tdock::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
      if (writing_) {
        end_ = std::move(status);
        return;
      }
    }
    Finish(std::move(status));
  }

 private:
  // REQUIRES: writing_ set by this thread.
  void WriteNext() {
    bool snapshot = false;
    absl::btree_map<std::string, bool> docks;
    {
      tdock::MutexLock lock(&mu_);
      snapshot = std::exchange(snapshot_, false);
      docks.swap(pending_);
    }
    message_.Clear();
    message_.set_snapshot(snapshot);
    if (snapshot) {
      for (const std::shared_ptr<Dock>& dock : feed_->registry_->List()) {
        feed_->Describe(dock->name(), false, message_);
      }
    } else {
      for (const auto& [dock, deleted] : docks) feed_->Describe(dock, deleted, message_);
    }
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> end;
    {
      tdock::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok && !finishing_) {
        finishing_ = true;
        end_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the shard stopped reading");
      }
      if (finishing_) {
        end = std::move(end_);
      } else if (!pending_.empty()) {
        writing_ = true;
      } else {
        return;
      }
    }
    if (end.has_value()) {
      Finish(*std::move(end));
      return;
    }
    WriteNext();
  }

  void OnCancel() override { End(grpc::Status::CANCELLED); }

  void OnDone() override {
    TDOCK_LOG(INFO) << "shard " << shard_ << " stopped watching the docks' steps";
    feed_->Remove(this);
    delete this;
  }

  StepFeed* const feed_;
  const uint64_t shard_;
  tdock::Mutex mu_;
  bool snapshot_ ABSL_GUARDED_BY(mu_) = true;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a write is in flight (or being built)
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);  // Finish with it once the write is done
  // Docks to send again, each with whether its deletion was the change.
  absl::btree_map<std::string, bool> pending_ ABSL_GUARDED_BY(mu_);
  v1::StepWatermarks message_;  // the write in flight's
};

StepFeed::~StepFeed() {
  tdock::MutexLock lock(&mu_);
  TDOCK_CHECK(watchers_.empty()) << "step feed destroyed with " << watchers_.size()
                                 << " watches open";
}

grpc::ServerWriteReactor<v1::StepWatermarks>* StepFeed::Watch(uint64_t shard) {
  auto* watcher = new Watcher(this, shard);
  tdock::MutexLock lock(&mu_);
  watchers_.insert(watcher);
  if (shut_down_) {
    watcher->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down"));
  } else {
    watcher->Start();
  }
  return watcher;
}

void StepFeed::Changed(const std::string& dock) {
  tdock::MutexLock lock(&mu_);
  for (Watcher* watcher : watchers_) watcher->Add(dock, false);
}

void StepFeed::Deleted(const std::string& dock) {
  tdock::MutexLock lock(&mu_);
  for (Watcher* watcher : watchers_) watcher->Add(dock, true);
}

void StepFeed::Shutdown() {
  tdock::MutexLock lock(&mu_);
  shut_down_ = true;
  for (Watcher* watcher : watchers_) {
    watcher->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down"));
  }
}

int StepFeed::watches() const {
  tdock::MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

void StepFeed::Describe(const std::string& name, bool deleted, v1::StepWatermarks& out) const {
  absl::StatusOr<std::shared_ptr<Dock>> dock = registry_->Find(name);
  if (deleted) {
    // Said even when a dock of the name is there again: a shard forgets the
    // old one's cells and steps before it hears of the new one's window.
    v1::DockSteps* steps = out.add_docks();
    steps->set_dock(name);
    steps->set_deleted(true);
  }
  if (!dock.ok()) return;
  const StepWindow window = (*dock)->Window();
  v1::DockSteps* steps = out.add_docks();
  steps->set_dock(name);
  steps->set_front_step(window.front_step);
  steps->mutable_admitted_steps()->Assign(window.admitted.begin(), window.admitted.end());
}

void StepFeed::Remove(Watcher* watcher) {
  tdock::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

}  // namespace tdock
