// The RocksDB store (Debian's librocksdb 7.8).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "server/persist/store.h"

namespace tdock::persist {
namespace {

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
  RocksStore(std::string dir, std::unique_ptr<rocksdb::DB> db)
      : dir_(std::move(dir)), db_(std::move(db)) {}

  absl::Status Write(const StoreBatch& batch, bool sync) override {
    rocksdb::WriteBatch write;
    for (const StoreBatch::Op& op : batch.ops()) {
      rocksdb::Status s;
      switch (op.kind) {
        case StoreBatch::Op::Kind::kPut: {
          const absl::string_view value = op.put_value();
          s = write.Put(op.key, rocksdb::Slice(value.data(), value.size()));
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
    return FromRocks(db_->Write(options, &write), absl::StrCat("store '", dir_, "': write"));
  }

  absl::Status Sync() override {
    return FromRocks(db_->SyncWAL(), absl::StrCat("store '", dir_, "': sync"));
  }

  absl::Status Scan(absl::string_view prefix,
                    absl::FunctionRef<absl::Status(absl::string_view, absl::string_view)> fn)
      const override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(rocksdb::Slice(prefix.data(), prefix.size()));
         it->Valid() && it->key().starts_with(rocksdb::Slice(prefix.data(), prefix.size()));
         it->Next()) {
      const rocksdb::Slice key = it->key();
      const rocksdb::Slice value = it->value();
      if (absl::Status s = fn(absl::string_view(key.data(), key.size()),
                              absl::string_view(value.data(), value.size()));
          !s.ok()) {
        return s;
      }
    }
    return FromRocks(it->status(), absl::StrCat("store '", dir_, "': scan"));
  }

  absl::Status Checkpoint(const std::string& dir) override {
    rocksdb::Checkpoint* raw = nullptr;
    if (absl::Status s = FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                                   absl::StrCat("store '", dir_, "': checkpoint"));
        !s.ok()) {
      return s;
    }
    std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
    return FromRocks(checkpoint->CreateCheckpoint(dir),
                     absl::StrCat("store '", dir_, "': checkpoint to '", dir, "'"));
  }

 private:
  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksStore(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // Cells are written once and deleted by range when their step is released,
  // usually before their memtable is flushed: a large memtable keeps most of
  // them out of SST files. Token data does not compress.
  options.compression = rocksdb::kNoCompression;
  options.write_buffer_size = int64_t{256} << 20;
  options.max_write_buffer_number = 4;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open the store in '", dir, "'"));
  return std::make_unique<RocksStore>(dir, std::unique_ptr<rocksdb::DB>(raw));
}

}  // namespace tdock::persist
