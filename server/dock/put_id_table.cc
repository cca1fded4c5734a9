#include "server/dock/put_id_table.h"

#include <string>

namespace tdock::internal {
namespace {

// FNV-1a, 64 bits: stable across processes and builds.
class Fnv {
 public:
  void Bytes(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) hash_ = (hash_ ^ p[i]) * 1099511628211ull;
  }
  void Number(int64_t v) {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
    Bytes(le, sizeof(le));
  }
  void Text(const std::string& s) {
    Number(static_cast<int64_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  template <typename List>
  void Numbers(const List& list) {
    Number(static_cast<int64_t>(list.size()));
    for (auto v : list) Number(static_cast<int64_t>(v));
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace

uint64_t PutFingerprint(const PutInput& in) {
  Fnv f;
  f.Number(in.step);
  f.Numbers(in.rows);
  f.Number(static_cast<int64_t>(in.keys.size()));
  for (const std::string& key : in.keys) f.Text(key);
  f.Number(in.new_rows);
  f.Numbers(in.group_sizes);
  f.Numbers(in.versions);
  f.Number(static_cast<int64_t>(in.ack_lease));
  f.Number(static_cast<int64_t>(in.reservation));
  f.Number(static_cast<int64_t>(in.columns.size()));
  for (const ColumnInput& column : in.columns) {
    f.Text(column.name);
    f.Number(static_cast<int64_t>(column.dtype));
    f.Numbers(column.offsets);
  }
  return f.value();
}

PutIdTable::Claim PutIdTable::Begin(uint64_t id, Stored* stored) {
  tdock::MutexLock lock(&mu_);
  if (in_flight_.contains(id)) return Claim::kInFlight;
  if (auto it = answered_.find(id); it != answered_.end()) {
    *stored = it->second;
    return Claim::kAnswered;
  }
  if (auto it = released_.find(id); it != released_.end()) {
    *stored = it->second;
    return Claim::kAnswered;
  }
  in_flight_.insert(id);
  return Claim::kNew;
}

void PutIdTable::Finish(uint64_t id, const Stored& stored) {
  tdock::MutexLock lock(&mu_);
  answered_[id] = stored;
  by_step_[stored.answer.step].insert(id);
}

void PutIdTable::End(uint64_t id) {
  tdock::MutexLock lock(&mu_);
  in_flight_.erase(id);
}

void PutIdTable::Restore(uint64_t id, const Stored& stored) { Finish(id, stored); }

void PutIdTable::ForgetStep(int64_t step) {
  tdock::MutexLock lock(&mu_);
  auto it = by_step_.find(step);
  if (it == by_step_.end()) return;
  for (uint64_t id : it->second) {
    auto answered = answered_.find(id);
    if (answered == answered_.end()) continue;
    if (released_.emplace(id, answered->second).second) released_order_.push_back(id);
    answered_.erase(answered);
  }
  by_step_.erase(it);
  while (released_order_.size() > kReleasedRemembered) {
    released_.erase(released_order_.front());
    released_order_.pop_front();
  }
}

size_t PutIdTable::answered() const {
  tdock::MutexLock lock(&mu_);
  return answered_.size();
}

}  // namespace tdock::internal
