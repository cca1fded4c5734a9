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

absl::Status DockImpl::ValidateVersions(const PutInput& in) const {
  if (in.versions.empty()) return absl::OkStatus();
  const std::string where = Where(in.step);
  if (in.versions.size() != 1 && static_cast<int64_t>(in.versions.size()) != in.row_count()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", in.versions.size(),
                                                   " versions for ", in.row_count(),
                                                   " rows; give one for all, or one per row"));
  }
  const int64_t now = version_.current();
  for (size_t i = 0; i < in.versions.size(); ++i) {
    // Which row: by number when the Put names them, else by its place.
    const std::string of =
        in.versions.size() == 1 ? std::string()
        : in.rows.empty()       ? absl::StrCat(" of the Put's row ", i)
                                : absl::StrCat(" of row ", in.rows[i]);
    if (in.versions[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": version ", in.versions[i], of, " is negative"));
    }
    if (in.versions[i] > now) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": version ", in.versions[i], of, " is newer than the dock's version ", now,
          ": no weights of that version exist yet (the trainer sets the version)"));
    }
  }
  return absl::OkStatus();
}

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

void DockImpl::AddVersionsLocked(const Partition& part, const std::vector<int64_t>& rows,
                                 Batch& batch) const {
  if (!part.row_index().has_versions()) return;
  batch.versions.reserve(rows.size());
  for (int64_t row : rows) batch.versions.push_back(part.row_index().version(row));
}

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
