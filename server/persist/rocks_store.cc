// The RocksDB store (Debian's librocksdb 7.8), with large values in a value
// log beside it (value_log.h).
//
// Every RocksDB value starts with a tag: kInline, then the value's bytes, or
// kInLogGroup, then the length of the key's group (2 bytes, big-endian) and
// a ValueRef (kInLog: only the ValueRef, as written before groups were
// kept). Puts of at least kMinLogValue bytes go to the log
// (written and synced before the batch that points at them), smaller ones
// inline. An index of the keys that point into the log, kept in memory
// (built when the store opens), tells the log which values a Put, Delete or
// DeleteRange made dead, so its segments can be reused.
#include <sys/stat.h>

#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "server/persist/store.h"
#include "server/persist/value_log.h"

namespace tdock::persist {
namespace {

constexpr char kInline = 0;
constexpr char kInLog = 1;
constexpr char kInLogGroup = 2;
constexpr size_t kPointerBytes = 1 + 2 + ValueRef::kEncodedBytes;

// A pointer's bytes after its tag: the ref and the length of its key's
// group (0: not known). False if they do not decode.
bool DecodePointer(char tag, absl::string_view bytes, ValueRef& ref, size_t& group_len) {
  group_len = 0;
  if (tag == kInLogGroup) {
    if (bytes.size() < 2) return false;
    group_len = static_cast<size_t>(static_cast<unsigned char>(bytes[0])) << 8 |
                static_cast<unsigned char>(bytes[1]);
    bytes.remove_prefix(2);
  }
  return ValueRef::Decode(bytes, ref);
}
// Values this large go to the value log: each is a cell of at least 256
// int32 tokens, and the index entry (~100 bytes) is small beside it.
constexpr size_t kMinLogValue = 1024;

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace() || status.IsIOError()) return absl::UnavailableError(message);
  if (status.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

class RocksStore final : public Store {
 public:
  RocksStore(std::string dir, std::unique_ptr<rocksdb::DB> db, std::unique_ptr<ValueLog> log,
             int64_t max_log_value)
      : dir_(std::move(dir)), db_(std::move(db)), max_log_value_(max_log_value),
        log_(std::move(log)) {}

  // Reads every pointer into the value log into the index; then the log
  // reuses segments nothing points into.
  absl::Status BuildIndex() {
    tdock::MutexLock lock(&mu_);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const rocksdb::Slice value = it->value();
      if (value.size() == 0 || (value[0] != kInLog && value[0] != kInLogGroup)) continue;
      ValueRef ref;
      size_t group_len = 0;
      if (!DecodePointer(value[0], absl::string_view(value.data() + 1, value.size() - 1), ref,
                         group_len) ||
          group_len > it->key().size()) {
        // Not knowing where it points, no segment could be reused safely.
        return absl::DataLossError(absl::StrCat(
            "store '", dir_, "': a pointer into the value log does not decode (",
            value.size() - 1, " bytes)"));
      }
      index_.emplace(it->key().ToString(), ref);
      log_->Live(ref, absl::string_view(it->key().data(), group_len));
    }
    TDOCK_RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat("store '", dir_, "': index")));
    // What RocksDB replayed from its log at open must be on disk before a
    // segment it no longer points into is written over.
    TDOCK_RETURN_IF_ERROR(FromRocks(db_->SyncWAL(), absl::StrCat("store '", dir_, "': sync")));
    log_->FinishRecovery();
    return absl::OkStatus();
  }

  absl::Status Write(const StoreBatch& batch, bool sync) override {
    tdock::MutexLock lock(&mu_);
    // The large values first, into the log (synced).
    std::vector<ValueLog::Value> large;
    for (const StoreBatch::Op& op : batch.ops()) {
      if (InLog(op)) large.push_back({absl::string_view(op.key).substr(0, op.group_len), op.put_value()});
    }
    std::vector<ValueRef> refs;
    if (!large.empty()) {
      absl::StatusOr<std::vector<ValueRef>> appended = log_->Append(large);
      if (!appended.ok()) {
        return absl::Status(appended.status().code(),
                            absl::StrCat("store '", dir_, "': ", appended.status().message()));
      }
      refs = *std::move(appended);
    }
    rocksdb::WriteBatch write;
    size_t next_ref = 0;
    for (const StoreBatch::Op& op : batch.ops()) {
      rocksdb::Status s;
      switch (op.kind) {
        case StoreBatch::Op::Kind::kPut: {
          const absl::string_view value = op.put_value();
          char encoded[kPointerBytes];
          rocksdb::Slice parts[2];
          if (InLog(op)) {
            // A group too long to note (never a dock's) is not known later.
            const size_t group_len = op.group_len <= 0xffff ? op.group_len : 0;
            encoded[0] = kInLogGroup;
            encoded[1] = static_cast<char>(group_len >> 8);
            encoded[2] = static_cast<char>(group_len & 0xff);
            refs[next_ref++].EncodeTo(encoded + 3);
            parts[0] = rocksdb::Slice(encoded, sizeof encoded);
          } else {
            encoded[0] = kInline;
            parts[0] = rocksdb::Slice(encoded, 1);
            parts[1] = rocksdb::Slice(value.data(), value.size());
          }
          const rocksdb::Slice key(op.key);
          s = write.Put(rocksdb::SliceParts(&key, 1), rocksdb::SliceParts(parts, 2));
          break;
        }
        case StoreBatch::Op::Kind::kDelete:
          s = write.Delete(op.key);
          break;
        case StoreBatch::Op::Kind::kDeleteRange:
          if (op.key < op.value) s = write.DeleteRange(op.key, op.value);
          break;
      }
      if (!s.ok()) return FromRocks(s, absl::StrCat("store '", dir_, "': batch"));
    }
    rocksdb::WriteOptions options;
    options.sync = sync;
    if (absl::Status written =
            FromRocks(db_->Write(options, &write), absl::StrCat("store '", dir_, "': write"));
        !written.ok()) {
      // RocksDB may still have logged the batch (and replay it after a
      // restart): its values stay live, never reused, until the store is
      // reopened and its index rebuilt from what RocksDB really holds.
      for (const ValueRef& ref : refs) log_->Live(ref);
      return written;
    }
    // Stored: the index follows, in the batch's order.
    next_ref = 0;
    for (const StoreBatch::Op& op : batch.ops()) {
      switch (op.kind) {
        case StoreBatch::Op::Kind::kPut:
          if (InLog(op)) {
            const ValueRef& ref = refs[next_ref++];
            auto [it, inserted] = index_.try_emplace(op.key, ref);
            if (!inserted) {
              log_->Dead(it->second);
              it->second = ref;
            }
            log_->Live(ref);
          } else {
            Unindex(index_.find(op.key), 1);
          }
          break;
        case StoreBatch::Op::Kind::kDelete:
          Unindex(index_.find(op.key), 1);
          break;
        case StoreBatch::Op::Kind::kDeleteRange:
          if (op.key < op.value) {
            auto first = index_.lower_bound(op.key);
            Unindex(first, std::distance(first, index_.lower_bound(op.value)));
            log_->DropGroups(op.key, op.value);  // a deleted dock's
          }
          break;
      }
    }
    if (sync) log_->Durable();
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    tdock::MutexLock lock(&mu_);
    TDOCK_RETURN_IF_ERROR(FromRocks(db_->SyncWAL(), absl::StrCat("store '", dir_, "': sync")));
    log_->Durable();
    return absl::OkStatus();
  }

  absl::Status Scan(absl::string_view prefix,
                    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn)
      const override {
    tdock::MutexLock lock(&mu_);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    std::string buffer;
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size()));
         it->Valid() && it->key().starts_with(rocksdb::Slice(prefix.data(), prefix.size()));
         it->Next()) {
      const rocksdb::Slice key = it->key();
      const rocksdb::Slice stored = it->value();
      const absl::string_view key_view(key.data(), key.size());
      absl::string_view value(stored.data(), stored.size());
      if (value.empty()) {
        return absl::DataLossError(absl::StrCat("store '", dir_, "': a value has no tag"));
      }
      const char tag = value[0];
      value.remove_prefix(1);
      if (tag == kInLog || tag == kInLogGroup) {
        ValueRef ref;
        size_t group_len = 0;
        if (!DecodePointer(tag, value, ref, group_len)) {
          return absl::DataLossError(
              absl::StrCat("store '", dir_, "': a pointer into the value log does not decode"));
        }
        if (absl::Status s = log_->Read(ref, buffer); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat("store '", dir_, "': ", s.message()));
        }
        value = buffer;
      } else if (tag != kInline) {
        return absl::DataLossError(absl::StrCat("store '", dir_, "': a value has the unknown tag ",
                                                static_cast<int>(tag)));
      }
      TDOCK_RETURN_IF_ERROR(fn(key_view, value));
    }
    return FromRocks(it->status(), absl::StrCat("store '", dir_, "': scan"));
  }

  absl::Status Checkpoint(const std::string& dir) override {
    // Under the lock: no write lands between the copy of RocksDB and the
    // copy of the value log it points into.
    tdock::MutexLock lock(&mu_);
    rocksdb::Checkpoint* raw = nullptr;
    TDOCK_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                                    absl::StrCat("store '", dir_, "': checkpoint")));
    std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
    TDOCK_RETURN_IF_ERROR(
        FromRocks(checkpoint->CreateCheckpoint(dir),
                  absl::StrCat("store '", dir_, "': checkpoint to '", dir, "'")));
    absl::Status copied = log_->CopyTo(ValuesDir(dir));
    if (!copied.ok()) {
      return absl::Status(copied.code(), absl::StrCat("store '", dir_, "': checkpoint to '", dir,
                                                      "': ", copied.message()));
    }
    return absl::OkStatus();
  }

  static std::string ValuesDir(const std::string& dir) { return dir + "/values"; }

 private:
  // Values larger than a segment stay in RocksDB.
  bool InLog(const StoreBatch::Op& op) const {
    if (op.kind != StoreBatch::Op::Kind::kPut) return false;
    const size_t size = op.put_value().size();
    return size >= kMinLogValue && size <= static_cast<size_t>(max_log_value_);
  }
  // Drops `count` index entries from `first` on; their values are dead.
  void Unindex(absl::btree_map<std::string, ValueRef>::iterator first, ptrdiff_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (first == index_.end() || count == 0) return;
    auto last = std::next(first, count);
    for (auto it = first; it != last; ++it) log_->Dead(it->second);
    index_.erase(first, last);
  }

  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  const int64_t max_log_value_;
  mutable tdock::Mutex mu_;
  std::unique_ptr<ValueLog> log_ ABSL_PT_GUARDED_BY(mu_);
  absl::btree_map<std::string, ValueRef> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksStore(const std::string& dir,
                                                      RocksStoreOptions store_options) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // The memtable holds small records and pointers into the value log, which
  // are deleted by range when their step is released.
  options.compression = rocksdb::kNoCompression;
  options.write_buffer_size = int64_t{256} << 20;
  options.max_write_buffer_number = 4;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open the store in '", dir, "'"));
  std::unique_ptr<rocksdb::DB> db(raw);
  // A store written before the value log existed has no values/ and
  // untagged values: refuse it rather than misread it.
  struct stat values_dir;
  if (stat(RocksStore::ValuesDir(dir).c_str(), &values_dir) != 0) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the store in '", dir, "' was written by an earlier tdock (no values/ directory, "
          "values without a tag); start with an empty --data_dir"));
    }
  }
  absl::StatusOr<std::unique_ptr<ValueLog>> log = ValueLog::Open(
      RocksStore::ValuesDir(dir), {.segment_bytes = store_options.segment_bytes,
                                   .spare_segments = store_options.spare_segments});
  if (!log.ok()) {
    return absl::Status(log.status().code(), absl::StrCat("cannot open the store in '", dir,
                                                          "': ", log.status().message()));
  }
  auto store = std::make_unique<RocksStore>(dir, std::move(db), *std::move(log),
                                            store_options.segment_bytes);
  TDOCK_RETURN_IF_ERROR(store->BuildIndex());
  return store;
}

}  // namespace tdock::persist
