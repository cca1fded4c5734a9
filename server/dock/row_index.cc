#include "server/dock/row_index.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"

namespace tdock::internal {

RowIndex::RowIndex(int64_t rows)
    : rows_(rows),
      keys_(new std::atomic<const std::string*>[rows]),
      versions_(new std::atomic<int64_t>[rows]),
      pending_(static_cast<size_t>(rows), 0) {
  for (int64_t r = 0; r < rows_; ++r) {
    keys_[r].store(nullptr, std::memory_order_relaxed);
    versions_[r].store(kNoVersion, std::memory_order_relaxed);
  }
}

void RowIndex::Reset() {
  // Per-row state is cleared only if the step had any: a dock without keys,
  // versions or a journal pays nothing per row here. relaxed stores: the
  // next user of the partition acquires the dock's mutex, released after.
  if (keyed_.load(std::memory_order_relaxed)) {
    for (int64_t r = 0; r < rows_; ++r) keys_[r].store(nullptr, std::memory_order_relaxed);
    key_store_.clear();
    keyed_.store(false, std::memory_order_relaxed);
  }
  if (versioned_.load(std::memory_order_relaxed)) {
    for (int64_t r = 0; r < rows_; ++r) versions_[r].store(kNoVersion, std::memory_order_relaxed);
    versioned_.store(false, std::memory_order_relaxed);
    min_version_.store(std::numeric_limits<int64_t>::max(), std::memory_order_relaxed);
    max_version_.store(kNoVersion, std::memory_order_relaxed);
  }
  append_cursor_ = 0;
  for (const auto& [claim, rows] : claims_) {
    for (int64_t row : rows) row_claims_[row] = 0;
  }
  claims_.clear();
  closing_.clear();
  unused_.clear();
  expiring_.clear();
  reserved_.clear();
  expired_in_flight_.clear();
  sealing_ = 0;
  drops_in_flight_ = 0;
  if (pending_used_) {
    std::fill(pending_.begin(), pending_.end(), 0);
    pending_used_ = false;
  }
}

void RowIndex::SetKey(int64_t row, std::string key) {
  key_store_.push_back(std::make_unique<std::string>(std::move(key)));
  keys_[row].store(key_store_.back().get(), std::memory_order_release);
  keyed_.store(true, std::memory_order_release);
}

void RowIndex::LowerVersion(int64_t row, int64_t version) {
  const int64_t has = versions_[row].load(std::memory_order_relaxed);
  if (has != kNoVersion && has <= version) return;
  // release: pairs with version()'s acquire (set before the cells are ready).
  versions_[row].store(version, std::memory_order_release);
  versioned_.store(true, std::memory_order_release);
  // release: pairs with min_version()'s acquire; writers hold mu_.
  if (version < min_version_.load(std::memory_order_relaxed)) {
    min_version_.store(version, std::memory_order_release);
  }
  if (version > max_version_.load(std::memory_order_relaxed)) {
    max_version_.store(version, std::memory_order_release);
  }
}

void RowIndex::ClaimForAppend(const std::vector<int64_t>& rows, uint64_t claim) {
  if (rows.empty()) return;
  if (row_claims_ == nullptr) {
    row_claims_ = std::make_unique<uint64_t[]>(static_cast<size_t>(rows_));  // zeroed
  }
  std::vector<int64_t>& held = claims_[claim];
  for (int64_t row : rows) {
    TDOCK_CHECK(row_claims_[row] == 0 || row_claims_[row] == claim)
        << "row " << row << " assigned to two appends (claims " << row_claims_[row] << " and "
        << claim << ")";
    if (row_claims_[row] == claim) continue;
    row_claims_[row] = claim;
    held.push_back(row);
  }
}

bool RowIndex::ReleaseAppendClaim(uint64_t claim) {
  auto it = claims_.find(claim);
  if (it == claims_.end()) return false;
  for (int64_t row : it->second) row_claims_[row] = 0;
  claims_.erase(it);
  return true;
}

namespace {

void Mark(absl::flat_hash_set<int64_t>& marked, const std::vector<int64_t>& rows, bool in) {
  for (int64_t row : rows) {
    if (in) {
      marked.insert(row);
    } else {
      marked.erase(row);
    }
  }
}

}  // namespace

void RowIndex::SetUnused(const std::vector<int64_t>& rows, bool closed) {
  Mark(unused_, rows, closed);
}

void RowIndex::SetExpiring(const std::vector<int64_t>& rows, bool closed) {
  Mark(expiring_, rows, closed);
}

void RowIndex::AddDropInFlight(bool seal, const std::vector<int64_t>& rows, int32_t delta) {
  drops_in_flight_ += delta;
  if (!seal) return;
  sealing_ += delta;
  for (int64_t row : rows) {
    auto it = closing_.try_emplace(row, 0).first;
    it->second += delta;
    TDOCK_CHECK(it->second >= 0) << "row " << row << " opened by a Seal that did not close it";
    if (it->second == 0) closing_.erase(it);
  }
}

void RowIndex::SetReserved(const std::vector<int64_t>& rows, uint64_t id) {
  for (int64_t row : rows) {
    if (id != 0) {
      reserved_[row] = id;
    } else {
      reserved_.erase(row);
    }
  }
}

}  // namespace tdock::internal
