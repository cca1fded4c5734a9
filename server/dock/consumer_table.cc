#include "server/dock/consumer_table.h"

#include <utility>

#include "common/logging.h"

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
