// StoreBatch, the in-memory store and the fake store.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/persist/store.h"

namespace tdock::persist {

void StoreBatch::Put(absl::string_view key, absl::string_view value) {
  bytes_ += static_cast<int64_t>(key.size() + value.size());
  ops_.push_back({Op::Kind::kPut, std::string(key), std::string(value), {}, nullptr});
}

void StoreBatch::PutBorrowed(absl::string_view key, absl::string_view value,
                             std::shared_ptr<const void> pin, size_t group_len) {
  bytes_ += static_cast<int64_t>(key.size() + value.size());
  ops_.push_back({Op::Kind::kPut, std::string(key), {}, value, std::move(pin),
                  std::min(group_len, key.size())});
}

void StoreBatch::PutPieces(absl::string_view key,
                           const std::vector<absl::string_view>& pieces) {
  std::string value;
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  value.reserve(size);
  for (absl::string_view piece : pieces) value.append(piece.data(), piece.size());
  bytes_ += static_cast<int64_t>(key.size() + value.size());
  ops_.push_back({Op::Kind::kPut, std::string(key), std::move(value), {}, nullptr});
}

void StoreBatch::Delete(absl::string_view key) {
  bytes_ += static_cast<int64_t>(key.size());
  ops_.push_back({Op::Kind::kDelete, std::string(key), {}, {}, nullptr});
}

void StoreBatch::DeleteRange(absl::string_view begin, absl::string_view end) {
  bytes_ += static_cast<int64_t>(begin.size() + end.size());
  ops_.push_back({Op::Kind::kDeleteRange, std::string(begin), std::string(end), {}, nullptr});
}

void StoreBatch::Append(StoreBatch&& other) {
  bytes_ += other.bytes_;
  if (ops_.empty()) {
    ops_ = std::move(other.ops_);
  } else {
    ops_.insert(ops_.end(), std::make_move_iterator(other.ops_.begin()),
                std::make_move_iterator(other.ops_.end()));
  }
  other.ops_.clear();
  other.bytes_ = 0;
}

namespace {

class MemoryStore final : public Store {
 public:
  absl::Status Write(const StoreBatch& batch, bool /*sync*/) override {
    tdock::MutexLock lock(&mu_);
    for (const StoreBatch::Op& op : batch.ops()) {
      switch (op.kind) {
        case StoreBatch::Op::Kind::kPut:
          data_[op.key] = std::string(op.put_value());
          break;
        case StoreBatch::Op::Kind::kDelete:
          data_.erase(op.key);
          break;
        case StoreBatch::Op::Kind::kDeleteRange:
          if (op.key < op.value) {
            data_.erase(data_.lower_bound(op.key), data_.lower_bound(op.value));
          }
          break;
      }
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Scan(absl::string_view prefix,
                    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn)
      const override {
    tdock::MutexLock lock(&mu_);
    for (auto it = data_.lower_bound(std::string(prefix));
         it != data_.end() && absl::string_view(it->first).substr(0, prefix.size()) == prefix;
         ++it) {
      if (absl::Status s = fn(it->first, it->second); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status Checkpoint(const std::string& dir) override {
    return absl::UnimplementedError(
        absl::StrCat("checkpoint to '", dir, "': the in-memory store has no files"));
  }

 private:
  mutable tdock::Mutex mu_;
  std::map<std::string, std::string, std::less<>> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

FakeStore::FakeStore() : inner_(NewMemoryStore()) {}
FakeStore::~FakeStore() = default;

void FakeStore::FailNext(int count, absl::Status status) {
  tdock::MutexLock lock(&mu_);
  fail_count_ = count;
  fail_status_ = std::move(status);
}

void FakeStore::SetDelay(absl::Duration delay) {
  tdock::MutexLock lock(&mu_);
  delay_ = delay;
}

void FakeStore::Hold() {
  tdock::MutexLock lock(&mu_);
  hold_ = true;
}

void FakeStore::Release() {
  tdock::MutexLock lock(&mu_);
  hold_ = false;
  released_.SignalAll();
}

int64_t FakeStore::held() const {
  tdock::MutexLock lock(&mu_);
  return held_;
}

int64_t FakeStore::writes() const {
  tdock::MutexLock lock(&mu_);
  return writes_;
}
int64_t FakeStore::syncs() const {
  tdock::MutexLock lock(&mu_);
  return syncs_;
}
int64_t FakeStore::synced_writes() const {
  tdock::MutexLock lock(&mu_);
  return synced_writes_;
}

absl::Status FakeStore::Trouble() {
  absl::Duration delay;
  absl::Status status;
  {
    tdock::MutexLock lock(&mu_);
    ++held_;
    while (hold_) released_.WaitWithDeadline(&mu_, absl::InfiniteFuture());
    --held_;
    delay = delay_;
    if (fail_count_ > 0) {
      --fail_count_;
      status = fail_status_;
    }
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  return status;
}

absl::Status FakeStore::Write(const StoreBatch& batch, bool sync) {
  if (absl::Status trouble = Trouble(); !trouble.ok()) return trouble;
  {
    tdock::MutexLock lock(&mu_);
    ++writes_;
    synced_writes_ += sync;
  }
  return inner_->Write(batch, sync);
}

absl::Status FakeStore::Sync() {
  if (absl::Status trouble = Trouble(); !trouble.ok()) return trouble;
  tdock::MutexLock lock(&mu_);
  ++syncs_;
  return absl::OkStatus();
}

absl::Status FakeStore::Scan(
    absl::string_view prefix,
    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn) const {
  return inner_->Scan(prefix, fn);
}

absl::Status FakeStore::Checkpoint(const std::string& dir) { return inner_->Checkpoint(dir); }

}  // namespace tdock::persist
