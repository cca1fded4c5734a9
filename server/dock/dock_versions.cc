// DockImpl's row versions: the policy (weights) version a row was generated
// with. A Put may carry one for all its rows or one per row; a row's version
// is the oldest a stored write of it carried (a sample whose generation
// straddled a weight update keeps its oldest segment's). It is set under the
// partition's commit lock once the write is stored, before its cells are
// ready; batches, Reads and the row listing carry it. The dock's version is
// the trainer's current one: no row may be newer, and it only advances.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

void DockImpl::SetVersion(int64_t version, StatusCallback done) {
  const int64_t now = version_.current();
  if (version < 0) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("dock '", name_, "': version ", version, " is negative")));
    return;
  }
  if (version < now) {
    std::move(done)(absl::FailedPreconditionError(
        absl::StrCat("dock '", name_, "' is at version ", now, "; a version only advances (",
                     version, " was asked for)")));
    return;
  }
  if (version == now) {
    std::move(done)(absl::OkStatus());
    return;
  }
  auto apply = [this, version, done = std::move(done)](absl::Status stored) mutable {
    if (!stored.ok()) {
      std::move(done)(absl::UnavailableError(absl::StrCat(
          "dock '", name_, "': version ", version, " not stored (", stored.message(), ")")));
      return;
    }
    // A newer version set meanwhile wins: this one did not advance it.
    const int64_t now = AdvanceVersion(version);
    if (now > version) {
      std::move(done)(absl::FailedPreconditionError(
          absl::StrCat("dock '", name_, "' is at version ", now,
                       "; a version only advances (", version, " was asked for)")));
      return;
    }
    std::move(done)(absl::OkStatus());
    // Rows past a consumer's bound now are passed over: a Get waiting for
    // the end of their step may see it.
    bool bounded = false;
    {
      tdock::ReaderMutexLock lock(&mu_);
      for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
        bounded |= plan.max_staleness.has_value();
      }
    }
    if (bounded) WakeGets({});
    WakeReservations();  // those that generate with the newest version may go further
  };
  commit_.Commit(
      [version](DockJournal& journal, DockJournal::Done stored) {
        journal.VersionSet(version, std::move(stored));
      },
      std::move(apply));
}

int64_t DockImpl::AdvanceVersion(int64_t version) { return version_.Raise(version); }

absl::Status DockImpl::RecoverVersion(int64_t step, int64_t row, int64_t version) {
  tdock::ReaderMutexLock lock(&mu_);
  if (version < 0) {
    return absl::DataLossError(absl::StrCat(Where(step), ": row ", row, " has version ",
                                            version));
  }
  if (ring_.Classify(mu_, step) != StepState::kLive || row < 0 || row >= rows_per_step_) {
    return absl::DataLossError(absl::StrCat(Where(step), ": a version ", version, " of row ",
                                            row, " whose step holds no cell"));
  }
  Partition& part = ring_.Of(step);
  tdock::MutexLock commit(&part.row_index().mu());
  part.row_index().LowerVersion(row, version);
  return absl::OkStatus();
}

}  // namespace tdock::internal
