#include "server/dock/registry.h"

#include <future>

#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {
namespace {

bool SameMicroBatch(const std::optional<MicroBatchOptions>& a,
                    const std::optional<MicroBatchOptions>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a.has_value()) return true;
  return std::make_tuple(a->max_tokens, a->max_rows, a->round_to, a->count_multiple,
                         a->min_count, a->padded, a->planner, a->order) ==
         std::make_tuple(b->max_tokens, b->max_rows, b->round_to, b->count_multiple,
                         b->min_count, b->padded, b->planner, b->order);
}

bool SameConsumer(const ConsumerSpec& a, const ConsumerSpec& b) {
  return std::make_tuple(a.name, a.columns, a.dispatch_size, a.dp_size,
                         a.whole_groups, a.policy, a.seed, a.cost.a, a.cost.b,
                         a.same_count_across_ranks) ==
             std::make_tuple(b.name, b.columns, b.dispatch_size, b.dp_size,
                             b.whole_groups, b.policy, b.seed, b.cost.a, b.cost.b,
                             b.same_count_across_ranks) &&
         SameMicroBatch(a.micro_batch, b.micro_batch);
}

// Specs compare equal when they normalize to the same fields.
bool SameSpec(const DockSpec& a, const DockSpec& b) {
  auto column_key = [](const ColumnSpec& c) {
    return std::make_tuple(c.name, c.dtype, c.inner_shape, c.max_len, c.rewritable);
  };
  if (a.columns.size() != b.columns.size() ||
      a.consumers.size() != b.consumers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.columns.size(); ++i) {
    if (column_key(a.columns[i]) != column_key(b.columns[i])) return false;
  }
  for (size_t i = 0; i < a.consumers.size(); ++i) {
    if (!SameConsumer(a.consumers[i], b.consumers[i])) return false;
  }
  return std::make_tuple(a.name, a.num_prompts, a.n_samples_per_prompt,
                         a.steps_in_flight, a.length_columns, a.preallocate_bytes,
                         a.memory_limit_bytes, a.chunk_bytes) ==
         std::make_tuple(b.name, b.num_prompts, b.n_samples_per_prompt,
                         b.steps_in_flight, b.length_columns, b.preallocate_bytes,
                         b.memory_limit_bytes, b.chunk_bytes);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Dock>> DockRegistry::Create(DockSpec spec) {
  if (limits_.max_columns_per_dock > 0 &&
      static_cast<int64_t>(spec.columns.size()) > limits_.max_columns_per_dock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dock '", spec.name, "' has ", spec.columns.size(),
        " columns, over the server's limit of ", limits_.max_columns_per_dock,
        " (--max_columns_per_dock)"));
  }
  TDOCK_ASSIGN_OR_RETURN(spec, NormalizeSpec(std::move(spec)));
  tdock::MutexLock creating(&create_mu_);
  // Answers from the existing entry, if any; nullopt: the name is free.
  auto existing = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)
      -> std::optional<absl::StatusOr<std::shared_ptr<Dock>>> {
    if (shut_down_) return absl::UnavailableError("server is shutting down");
    auto it = docks_.find(spec.name);
    if (it == docks_.end()) {
      if (limits_.max_docks > 0 && static_cast<int64_t>(docks_.size()) >= limits_.max_docks) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot create dock '", spec.name, "': the server holds ", docks_.size(),
            " docks, its limit (--max_docks); delete one first"));
      }
      return std::nullopt;
    }
    if (SameSpec(it->second.spec, spec)) return it->second.dock;
    return absl::AlreadyExistsError(absl::StrCat(
        "dock '", spec.name, "' already exists with a different spec"));
  };
  {
    tdock::MutexLock lock(&mu_);
    if (auto answer = existing()) return *std::move(answer);
  }
  DockLimits dock_limits = limits_.dock;
  dock_limits.first_lease_id = first_lease_id_;
  if (dock_limits.timers == nullptr) dock_limits.timers = timers_;
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Dock> dock, Dock::Create(spec, dock_limits));
  if (hooks_ != nullptr) TDOCK_RETURN_IF_ERROR(hooks_->Created(*dock));
  tdock::MutexLock lock(&mu_);
  if (auto answer = existing()) return *std::move(answer);  // lost a race
  std::shared_ptr<Dock> shared = std::move(dock);
  docks_.emplace(spec.name, Entry{spec, shared});
  return shared;
}

absl::StatusOr<std::shared_ptr<Dock>> DockRegistry::Find(const std::string& name) const {
  tdock::MutexLock lock(&mu_);
  auto it = docks_.find(name);
  if (it == docks_.end()) {
    return absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist"));
  }
  return it->second.dock;
}

void DockRegistry::Delete(const std::string& name, StatusCallback done) {
  // Serialized with creations: a dock of the same name created meanwhile
  // can neither lose its records to this deletion nor keep the old dock's
  // journal open (hooks only queue their records, so this is brief).
  tdock::MutexLock deleting(&create_mu_);
  std::shared_ptr<Dock> dock;
  {
    tdock::MutexLock lock(&mu_);
    auto it = docks_.find(name);
    if (it == docks_.end()) {
      std::move(done)(absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist")));
      return;
    }
    dock = std::move(it->second.dock);
    docks_.erase(it);
  }
  // Parked calls end now; calls in progress keep the dock alive until done.
  dock->Shutdown();
  if (hooks_ == nullptr) {
    std::move(done)(absl::OkStatus());
    return;
  }
  hooks_->Deleted(name, std::move(done));
}

absl::Status DockRegistry::Delete(const std::string& name) {
  std::promise<absl::Status> deleted;
  Delete(name, [&deleted](absl::Status s) { deleted.set_value(std::move(s)); });
  return deleted.get_future().get();
}

std::vector<std::shared_ptr<Dock>> DockRegistry::List() const {
  tdock::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Dock>> out;
  for (const auto& [name, entry] : docks_) out.push_back(entry.dock);
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
