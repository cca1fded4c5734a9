#include "server/dock/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {
namespace {

// Specs compare equal when they normalize to the same fields.
bool SameSpec(const DockSpec& a, const DockSpec& b) {
  auto column_key = [](const ColumnSpec& c) {
    return std::make_tuple(c.name, c.dtype, c.inner_shape, c.max_len, c.rewritable);
  };
  auto consumer_key = [](const ConsumerSpec& c) {
    return std::make_tuple(c.name, c.columns, c.dispatch_size, c.dp_size,
                           c.whole_groups, c.policy, c.seed);
  };
  if (a.columns.size() != b.columns.size() ||
      a.consumers.size() != b.consumers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.columns.size(); ++i) {
    if (column_key(a.columns[i]) != column_key(b.columns[i])) return false;
  }
  for (size_t i = 0; i < a.consumers.size(); ++i) {
    if (consumer_key(a.consumers[i]) != consumer_key(b.consumers[i])) return false;
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
  TDOCK_ASSIGN_OR_RETURN(spec, NormalizeSpec(std::move(spec)));
  tdock::MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::UnavailableError("server is shutting down");
  }
  auto it = docks_.find(spec.name);
  if (it != docks_.end()) {
    if (SameSpec(it->second->spec(), spec)) return it->second;
    return absl::AlreadyExistsError(absl::StrCat(
        "dock '", spec.name, "' already exists with a different spec"));
  }
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Dock> dock, Dock::Create(spec));
  std::shared_ptr<Dock> shared = std::move(dock);
  docks_.emplace(spec.name, shared);
  return shared;
}

absl::StatusOr<std::shared_ptr<Dock>> DockRegistry::Find(const std::string& name) const {
  tdock::MutexLock lock(&mu_);
  auto it = docks_.find(name);
  if (it == docks_.end()) {
    return absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist"));
  }
  return it->second;
}

absl::Status DockRegistry::Delete(const std::string& name) {
  std::shared_ptr<Dock> dock;
  {
    tdock::MutexLock lock(&mu_);
    auto it = docks_.find(name);
    if (it == docks_.end()) {
      return absl::NotFoundError(absl::StrCat("dock '", name, "' does not exist"));
    }
    dock = std::move(it->second);
    docks_.erase(it);
  }
  // Parked calls end now; calls in progress keep the dock alive until done.
  dock->Shutdown();
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Dock>> DockRegistry::List() const {
  tdock::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Dock>> out;
  for (const auto& [name, dock] : docks_) out.push_back(dock);
  return out;
}

void DockRegistry::Shutdown() {
  std::vector<std::shared_ptr<Dock>> docks;
  {
    tdock::MutexLock lock(&mu_);
    shut_down_ = true;
    for (const auto& [name, dock] : docks_) docks.push_back(dock);
  }
  for (const auto& dock : docks) dock->Shutdown();
}

}  // namespace tdock
