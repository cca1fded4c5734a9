#include "server/dock/consumer_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace tdock::internal {

std::vector<int> ResolveColumns(const DockSpec& spec, const std::vector<std::string>& names) {
  std::vector<int> out;
  out.reserve(names.size());
  for (const std::string& name : names) out.push_back(spec.ColumnIndex(name));
  return out;
}

ConsumerPlan MakePlan(const DockSpec& spec, int index) {
  const ConsumerSpec& c = spec.consumers[index];
  ConsumerPlan plan;
  plan.index = index;
  plan.name = c.name;
  plan.columns = ResolveColumns(spec, c.columns);
  plan.whole_groups = c.whole_groups;
  plan.policy = c.policy;
  plan.seed = c.seed;
  plan.dispatch_size = c.dispatch_size;
  plan.dp_size = c.dp_size;
  plan.replicas = c.replicas;
  plan.cost = c.cost;
  plan.micro_batch = c.micro_batch;
  plan.same_count_across_ranks = c.same_count_across_ranks;
  plan.pad = c.pad;
  plan.lease = absl::Milliseconds(c.lease_ms);
  plan.optional = c.optional;
  plan.joined = c.joined;
  plan.removed = c.removed;
  plan.max_staleness = c.max_staleness;
  plan.stale_drop = c.stale == StalePolicy::kDrop;
  plan.oldest_first = c.oldest_first();
  return plan;
}

ConsumerTable::ConsumerTable(const tdock::Mutex* dock_mu, DockSpec spec)
    : dock_mu_(dock_mu), spec_(std::move(spec)) {
  for (size_t k = 0; k < spec_.consumers.size(); ++k) {
    plans_.push_back(MakePlan(spec_, static_cast<int>(k)));
    staleness_.push_back(std::make_unique<StalenessCounters>());
    released_handed_total_.push_back(0);
  }
}

int ConsumerTable::IndexOf(const tdock::Mutex& dock_mu, absl::string_view name) const {
  HeldShared(dock_mu);
  return spec_.ConsumerIndex(name);
}

void StalenessCounters::Count(int64_t now, const RowIndex& index,
                              absl::Span<const int64_t> rows) {
  if (!index.has_versions()) return;
  int64_t total = 0, counted = 0;
  for (int64_t row : rows) {
    const int64_t version = index.version(row);
    if (version == kNoVersion) continue;
    const int64_t staleness = std::max<int64_t>(0, now - version);
    const size_t bucket = static_cast<size_t>(
        std::lower_bound(kStalenessBounds.begin(), kStalenessBounds.end(), staleness) -
        kStalenessBounds.begin());
    buckets[bucket].fetch_add(1, std::memory_order_relaxed);
    total += staleness;
    ++counted;
  }
  if (counted == 0) return;
  sum.fetch_add(total, std::memory_order_relaxed);
  count.fetch_add(counted, std::memory_order_relaxed);
}

StalenessStats StalenessCounters::Snapshot() const {
  StalenessStats stats;
  for (size_t i = 0; i < stats.buckets.size(); ++i) {
    stats.buckets[i] = buckets[i].load(std::memory_order_relaxed);
  }
  stats.sum = sum.load(std::memory_order_relaxed);
  stats.count = count.load(std::memory_order_relaxed);
  stats.stale_rows = stale_rows.load(std::memory_order_relaxed);
  return stats;
}

absl::StatusOr<int> ConsumerTable::Find(const tdock::Mutex& dock_mu,
                                        absl::string_view name) const {
  HeldShared(dock_mu);
  if (const int index = spec_.ConsumerIndex(name); index >= 0) return index;
  const bool removed = std::any_of(spec_.consumers.begin(), spec_.consumers.end(),
                                   [&](const ConsumerSpec& c) { return c.name == name && c.removed; });
  return absl::NotFoundError(absl::StrCat("dock '", spec_.name, "': consumer '", name, "' ",
                                          removed ? "was removed" : "is unknown"));
}

std::optional<int64_t> ConsumerTable::AdmissionBound(const tdock::Mutex& dock_mu,
                                                     std::string* consumer) const {
  HeldShared(dock_mu);
  std::optional<int64_t> bound;
  for (const ConsumerPlan& plan : plans_) {
    if (!plan.holds_steps() || !plan.max_staleness.has_value()) continue;
    if (!bound.has_value() || *plan.max_staleness < *bound) {
      bound = plan.max_staleness;
      *consumer = plan.name;
    }
  }
  return bound;
}

absl::StatusOr<int> ConsumerTable::FindLeasing(const tdock::Mutex& dock_mu,
                                               absl::string_view name) const {
  HeldShared(dock_mu);
  TDOCK_ASSIGN_OR_RETURN(const int index, Find(dock_mu, name));
  if (plans_[index].lease == absl::ZeroDuration()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dock '", spec_.name, "': consumer '", name,
        "' has no leases (lease_ms is 0): its rows need no acknowledgement"));
  }
  return index;
}

absl::Status ConsumerTable::Gone(const tdock::Mutex& dock_mu, const ConsumerPlan& plan) const {
  HeldShared(dock_mu);
  const ConsumerPlan& now = plans_[plan.index];
  if (now.removed) {
    return absl::NotFoundError(
        absl::StrCat("dock '", spec_.name, "': consumer '", plan.name, "' was removed"));
  }
  if (now.optional && !now.joined && !now.joining) return now.join_failed;
  return absl::OkStatus();
}

const ConsumerPlan& ConsumerTable::Add(const tdock::Mutex& dock_mu,
                                       const ConsumerSpec& consumer) {
  HeldExclusive(dock_mu);
  spec_.consumers.push_back(consumer);
  plans_.push_back(MakePlan(spec_, static_cast<int>(spec_.consumers.size()) - 1));
  staleness_.push_back(std::make_unique<StalenessCounters>());
  released_handed_total_.push_back(0);
  return plans_.back();
}

void ConsumerTable::Replace(const tdock::Mutex& dock_mu, DockSpec next) {
  HeldExclusive(dock_mu);
  TDOCK_CHECK(next.consumers.size() == plans_.size())
      << "consumer table: a replaced spec has " << next.consumers.size() << " consumers, not "
      << plans_.size();
  spec_ = std::move(next);
}

bool ConsumerTable::Enqueue(const tdock::Mutex& dock_mu, SpecChange change) {
  HeldExclusive(dock_mu);
  changes_.push_back(std::move(change));
  if (working_) return false;  // the worker goes on to it
  working_ = true;
  return true;
}

SpecChange* ConsumerTable::Next(const tdock::Mutex& dock_mu) {
  HeldExclusive(dock_mu);
  if (changes_.empty()) {
    working_ = false;
    return nullptr;
  }
  return &changes_.front();
}

SpecChange ConsumerTable::Pop(const tdock::Mutex& dock_mu) {
  HeldExclusive(dock_mu);
  TDOCK_CHECK(!changes_.empty()) << "consumer table: no change to take";
  SpecChange change = std::move(changes_.front());
  changes_.pop_front();
  return change;
}

void ConsumerTable::StartRecording(const tdock::Mutex& dock_mu, DockSpec next, int added) {
  HeldExclusive(dock_mu);
  TDOCK_CHECK(!recording_spec_.has_value()) << "consumer table: two specs recorded at once";
  if (added >= 0) {
    recording_consumer_ = next.consumers[added];
    recording_plan_ = MakePlan(next, added);
  }
  recording_spec_ = std::move(next);
}

DockSpec ConsumerTable::EndRecording(const tdock::Mutex& dock_mu) {
  HeldExclusive(dock_mu);
  TDOCK_CHECK(recording_spec_.has_value()) << "consumer table: no spec is being recorded";
  DockSpec next = *std::move(recording_spec_);
  recording_spec_.reset();
  recording_consumer_.reset();
  recording_plan_.reset();
  return next;
}

void ConsumerTable::AddReleased(const tdock::Mutex& dock_mu, const Partition& part) {
  HeldExclusive(dock_mu);
  for (const ConsumerPlan& plan : plans_) {
    // acquire: pairs with the claimers' increments (all done: the step is
    // fully taken, or released by the caller's decision).
    const ConsumerState& state = part.consumer(dock_mu, plan.index);
    released_handed_total_[plan.index] += state.handed_total.load(std::memory_order_acquire);
  }
}

}  // namespace tdock::internal
