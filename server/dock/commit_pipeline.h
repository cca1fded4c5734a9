// CommitPipeline: the one place where a dock's change is recorded before it
// takes effect.
//
// A change another party can observe is made in three parts: the caller
// stages it (under the dock's locks: cells written but not ready, rows
// closed, a step marked releasing), then hands the pipeline how to record it
// (`store`) and how to finish it (`apply`); `apply` gets the record's
// outcome and makes the change visible, or undoes the staging and answers
// the error. The pipeline calls `store` only when the dock has a journal:
// a dock without one (no --data_dir) runs the same staging and the same
// `apply`, at once and with OK, so that no operation has a path of its own
// for running with or without persistence.
//
//   commit_.Commit(
//       [&](DockJournal& journal, DockJournal::Done stored) {
//         journal.Released(step, std::move(stored));
//       },
//       [this, step](absl::Status stored) { FinishRelease(step, stored); });
//
// Ordering: records complete in the order they were submitted (DockJournal's
// promise), so two changes applied through the pipeline take effect in the
// order they were recorded.
//
// Thread safety: Attach is called once, before the dock serves; Commit from
// any thread, with no dock lock held (`apply` may run inside it and takes
// the locks it needs). `apply` runs exactly once, on the calling thread or
// where the journal completes the record (the dock's queue, with sync
// durability), while the pipeline's owner is kept alive.
#ifndef TDOCK_SERVER_DOCK_COMMIT_PIPELINE_H_
#define TDOCK_SERVER_DOCK_COMMIT_PIPELINE_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "server/dock/journal_hook.h"

namespace tdock::internal {

class CommitPipeline final {
 public:
  CommitPipeline() = default;
  CommitPipeline(const CommitPipeline&) = delete;
  CommitPipeline& operator=(const CommitPipeline&) = delete;

  // Records are stored in `journal` from now on; `owner` (the dock) is kept
  // alive by every record in flight, so an `apply` never outlives it.
  void Attach(std::shared_ptr<DockJournal> journal, std::weak_ptr<const void> owner) {
    journal_ = std::move(journal);
    owner_ = std::move(owner);
    serving_ = true;
  }
  // Attached: the dock serves. Before, recovery replays what was recorded,
  // and a change the dock would decide by itself (seal_when) waits for it.
  bool serving() const { return serving_; }

  // True when records are stored before they apply; false when they apply
  // at once. Read in one place only: a stale pass-over holds its step's end
  // for its consumer while its record can still fail, and must not when
  // there is none, so that the Get that passes over a step's last rows
  // ends it (DockImpl::PassOverStaleLocked).
  bool durable() const { return journal_ != nullptr; }

  // `store(DockJournal&, DockJournal::Done)` submits the record; `apply`
  // (callable with absl::Status) finishes the change. Without a journal,
  // `apply(OkStatus())` runs before Commit returns and nothing is
  // allocated.
  template <typename Store, typename Apply>
  void Commit(Store&& store, Apply&& apply) {
    if (journal_ == nullptr) {
      std::forward<Apply>(apply)(absl::OkStatus());
      return;
    }
    std::forward<Store>(store)(
        *journal_, DockJournal::Done([owner = owner_.lock(), apply = std::forward<Apply>(apply)](
                                         absl::Status stored) mutable {
          std::move(apply)(std::move(stored));
        }));
  }

 private:
  // Set by Attach before the dock serves, then constant.
  bool serving_ = false;
  std::shared_ptr<DockJournal> journal_;
  std::weak_ptr<const void> owner_;
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_COMMIT_PIPELINE_H_
