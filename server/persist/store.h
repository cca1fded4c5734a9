// Store: the key-value store under tdock's journal (DESIGN.md §7). Keys are
// byte strings ordered bytewise; a batch of puts and deletes is applied
// atomically. Three implementations share tests/persist's suite: RocksDB
// (the real one), in memory (tests and the benchmark's baseline), and a fake
// that wraps the in-memory store and can delay or fail writes.
//
// Thread safety: every method may be called from any thread.
#ifndef TDOCK_SERVER_PERSIST_STORE_H_
#define TDOCK_SERVER_PERSIST_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace tdock::persist {

// Puts and deletes applied together. Values are copied in.
class StoreBatch {
 public:
  struct Op {
    enum class Kind { kPut, kDelete, kDeleteRange };
    Kind kind;
    std::string key;
    std::string value;  // kPut: the value; kDeleteRange: the end key (exclusive)
    // kPut of borrowed bytes (PutBorrowed): the value is `borrowed`, kept
    // valid by `pin`; `value` is empty.
    absl::string_view borrowed;
    std::shared_ptr<const void> pin;
    // Keys that share their first group_len bytes (a dock's) belong
    // together: a hint for where the store keeps their values.
    size_t group_len = 0;

    absl::string_view put_value() const { return pin != nullptr ? borrowed : value; }
  };

  void Put(absl::string_view key, absl::string_view value);
  // A put whose value is not copied into the batch: `pin` keeps `value`'s
  // memory alive until the batch is gone (a step's arena for its cells).
  void PutBorrowed(absl::string_view key, absl::string_view value,
                   std::shared_ptr<const void> pin, size_t group_len = 0);
  // A value made of pieces (e.g. a cell's payload spread over segments).
  void PutPieces(absl::string_view key, const std::vector<absl::string_view>& pieces);
  void Delete(absl::string_view key);
  // Deletes every key in [begin, end).
  void DeleteRange(absl::string_view begin, absl::string_view end);
  // Appends `other`'s operations, in order.
  void Append(StoreBatch&& other);

  const std::vector<Op>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }
  // Bytes of keys and values.
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<Op> ops_;
  int64_t bytes_ = 0;
};

class Store {
 public:
  virtual ~Store() = default;
  // Applies `batch` atomically. With `sync`, it is durable (in the WAL and
  // synced to disk) when this returns OK.
  virtual absl::Status Write(const StoreBatch& batch, bool sync) = 0;
  // Makes every earlier write durable.
  virtual absl::Status Sync() = 0;
  // Calls `fn` for every key that starts with `prefix`, in key order; stops
  // at the first error `fn` returns and returns it.
  virtual absl::Status Scan(
      absl::string_view prefix,
      absl::FunctionRef<absl::Status(absl::string_view key, absl::string_view value)> fn)
      const = 0;
  // An atomic, consistent copy of the store in `dir` (which must not exist),
  // openable with OpenRocksStore. UNIMPLEMENTED for stores without files.
  virtual absl::Status Checkpoint(const std::string& dir) = 0;
};

// RocksDB in `dir` (created if missing), with values of 1 KiB and more in a
// value log in `dir`/values (value_log.h). Corruption or an unreadable
// directory is an error naming the directory.
struct RocksStoreOptions {
  int64_t segment_bytes = int64_t{64} << 20;  // of the value log's files
  int spare_segments = 16;                    // recycled files kept at most
};
absl::StatusOr<std::unique_ptr<Store>> OpenRocksStore(const std::string& dir,
                                                      RocksStoreOptions options = {});

std::unique_ptr<Store> NewMemoryStore();

// The in-memory store with injectable trouble, for tests.
class FakeStore final : public Store {
 public:
  FakeStore();
  ~FakeStore() override;

  // The next `count` writes (and syncs) fail with `status` and change nothing.
  void FailNext(int count, absl::Status status);
  // Every write and sync sleeps this long first.
  void SetDelay(absl::Duration delay);
  // Hold(): writes and syncs wait inside the store until Release().
  void Hold();
  void Release();
  // Writes and syncs waiting in Hold now.
  int64_t held() const;
  int64_t writes() const;
  int64_t syncs() const;
  int64_t synced_writes() const;  // writes with sync = true

  absl::Status Write(const StoreBatch& batch, bool sync) override;
  absl::Status Sync() override;
  absl::Status Scan(absl::string_view prefix,
                    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn)
      const override;
  absl::Status Checkpoint(const std::string& dir) override;

 private:
  absl::Status Trouble();

  std::unique_ptr<Store> inner_;
  mutable tdock::Mutex mu_;
  int fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t synced_writes_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar released_;
};

}  // namespace tdock::persist

#endif  // TDOCK_SERVER_PERSIST_STORE_H_
