// RecordingStore: the in-memory store that keeps every successful write in
// order, so a test can rebuild the store as it was after any number of
// writes: every crash point of a journal (DESIGN.md §4, record before
// effect). Writes can be made to fail, as a full disk would.
//
// Thread safety: every method may be called from any thread.
#ifndef TDOCK_TESTS_PERSIST_RECORDING_STORE_H_
#define TDOCK_TESTS_PERSIST_RECORDING_STORE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/persist/store.h"

namespace tdock::persist {

class RecordingStore final : public Store {
 public:
  RecordingStore() : inner_(NewMemoryStore()) {}
  // Records the writes made on top of `inner` (a replayed store, say).
  explicit RecordingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  // Every write from now on takes at least `delay` (a slow disk).
  void SlowDown(absl::Duration delay) {
    tdock::MutexLock lock(&mu_);
    delay_ = delay;
  }

  // After `after` more successful writes, the next `count` writes fail with
  // `status`, change nothing and are not recorded.
  void FailNext(int count, absl::Status status, int after = 0) {
    tdock::MutexLock lock(&mu_);
    fail_after_ = after;
    fail_count_ = count;
    fail_status_ = std::move(status);
  }

  // Writes that failed on request so far.
  int64_t failed() const {
    tdock::MutexLock lock(&mu_);
    return failed_;
  }

  // While held, writes wait (a slow disk); Hold(false) lets them go.
  void Hold(bool held) {
    tdock::MutexLock lock(&mu_);
    held_ = held;
    released_.SignalAll();
  }

  // Writes waiting while held.
  int64_t waiting() const {
    tdock::MutexLock lock(&mu_);
    return waiting_;
  }

  // Waits until at least `n` writes wait while held; false if they do not
  // within `timeout`.
  bool AwaitWaiting(int64_t n, absl::Duration timeout = absl::Seconds(60)) const {
    const absl::Time give_up = absl::Now() + timeout;
    while (waiting() < n) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // Successful writes so far: a crash point is a number in [0, writes()].
  int64_t writes() const {
    tdock::MutexLock lock(&mu_);
    return static_cast<int64_t>(log_.size());
  }

  // A new in-memory store holding the first `count` writes.
  std::unique_ptr<Store> Replay(int64_t count) const {
    auto store = NewMemoryStore();
    tdock::MutexLock lock(&mu_);
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(log_.size()); ++i) {
      (void)store->Write(log_[i], /*sync=*/true);
    }
    return store;
  }

  // The first `count` writes, in order.
  std::vector<StoreBatch> Log(int64_t count) const {
    std::vector<StoreBatch> out;
    tdock::MutexLock lock(&mu_);
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(log_.size()); ++i) {
      out.push_back(Copy(log_[i]));
    }
    return out;
  }

  absl::Status Write(const StoreBatch& batch, bool sync) override {
    absl::Duration delay;
    {
      tdock::MutexLock lock(&mu_);
      delay = delay_;
    }
    absl::SleepFor(delay);  // outside the lock: the store reads meanwhile
    tdock::MutexLock lock(&mu_);
    ++waiting_;
    while (held_) released_.WaitWithDeadline(&mu_, absl::InfiniteFuture());
    --waiting_;
    if (fail_count_ > 0 && fail_after_ == 0) {
      --fail_count_;
      ++failed_;
      return fail_status_;
    }
    if (fail_after_ > 0) --fail_after_;
    // Under the lock: the log's order is the order the store applied.
    absl::Status status = inner_->Write(batch, sync);
    if (status.ok()) log_.push_back(Copy(batch));
    return status;
  }
  absl::Status Sync() override { return inner_->Sync(); }
  absl::Status Scan(absl::string_view prefix,
                    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn)
      const override {
    return inner_->Scan(prefix, fn);
  }
  absl::Status Checkpoint(const std::string&) override {
    return absl::UnimplementedError("the recording store has no files");
  }

 private:
  // A batch that owns its values (borrowed ones are copied in).
  static StoreBatch Copy(const StoreBatch& batch) {
    StoreBatch out;
    for (const StoreBatch::Op& op : batch.ops()) {
      switch (op.kind) {
        case StoreBatch::Op::Kind::kPut:
          out.Put(op.key, op.put_value());
          break;
        case StoreBatch::Op::Kind::kDelete:
          out.Delete(op.key);
          break;
        case StoreBatch::Op::Kind::kDeleteRange:
          out.DeleteRange(op.key, op.value);
          break;
      }
    }
    return out;
  }

  const std::unique_ptr<Store> inner_;
  mutable tdock::Mutex mu_;
  std::vector<StoreBatch> log_ ABSL_GUARDED_BY(mu_);
  int fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_after_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  CondVar released_;
};

}  // namespace tdock::persist

#endif  // TDOCK_TESTS_PERSIST_RECORDING_STORE_H_
