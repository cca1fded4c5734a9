#include "server/dock/key_index.h"

namespace tdock::internal {

const KeyIndex::RowRef* KeyIndex::FindHeld(absl::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second;
}

std::optional<KeyIndex::RowRef> KeyIndex::Find(absl::string_view key) const {
  tdock::MutexLock lock(&mu_);
  const RowRef* ref = FindHeld(key);
  if (ref == nullptr) return std::nullopt;
  return *ref;
}

std::optional<KeyIndex::Taken> KeyIndex::FindTaken(
    absl::Span<const absl::string_view> keys) const {
  tdock::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const RowRef* ref = FindHeld(keys[i])) return Taken{i, *ref};
  }
  return std::nullopt;
}

std::optional<KeyIndex::Taken> KeyIndex::Insert(absl::Span<const Entry> entries) {
  tdock::MutexLock lock(&mu_);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (const RowRef* ref = FindHeld(entries[i].key)) return Taken{i, *ref};
  }
  for (const Entry& e : entries) index_.emplace(std::string(e.key), e.row);
  return std::nullopt;
}

void KeyIndex::Forget(absl::Span<const Entry> entries) {
  tdock::MutexLock lock(&mu_);
  for (const Entry& e : entries) {
    auto it = index_.find(e.key);
    if (it != index_.end() && it->second == e.row) index_.erase(it);
  }
}

void KeyIndex::ForgetRows(const tdock::Mutex& dock_mu, int64_t step, const RowIndex& index,
                          absl::Span<const int64_t> rows) {
  if (!index.has_keys()) return;
  std::vector<Entry> gone;
  for (int64_t row : rows) {
    if (const std::string* key = index.key(row)) gone.push_back({*key, {step, row}});
  }
  Forget(gone);
}

void KeyIndex::ForgetStep(const tdock::Mutex& dock_mu, int64_t step, const RowIndex& index,
                          int64_t rows) {
  if (!index.has_keys()) return;
  std::vector<Entry> gone;
  for (int64_t row = 0; row < rows; ++row) {
    if (const std::string* key = index.key(row)) gone.push_back({*key, {step, row}});
  }
  Forget(gone);
}

void KeyIndex::Reset(absl::Span<const Entry> entries) {
  tdock::MutexLock lock(&mu_);
  index_.clear();
  for (const Entry& e : entries) index_.insert_or_assign(std::string(e.key), e.row);
}

size_t KeyIndex::size() const {
  tdock::MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace tdock::internal
