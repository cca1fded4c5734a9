#include "server/persist/store_shard_journal.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "server/persist/records.h"

namespace tdock::persist {
namespace {

constexpr char kMetaKey[] = "Hm";
constexpr char kNextKey[] = "Hn";
constexpr char kExtentPrefix[] = "Hx";
constexpr char kCommitPrefix[] = "Hc";

std::string KeyOf(const char* prefix, uint64_t extent) {
  std::string key = prefix;
  records::PutBe(key, extent, 8);
  return key;
}

// A record written without waiting: a failure is said, and the journal
// fails what comes after (async) or the next Staged (sync) says it too.
Journal::Done Logged(std::string what) {
  return [what = std::move(what)](absl::Status stored) {
    if (!stored.ok()) {
      TDOCK_LOG(WARNING) << "shard journal: " << what << ": " << stored;
    }
  };
}

}  // namespace

absl::AnyInvocable<void() &&> StoreShardJournal::Staged(const Extent& extent,
                                                        uint64_t next_id,
                                                        std::vector<ByteSpan> cells,
                                                        std::shared_ptr<const void> pin,
                                                        Done done) {
  std::string head;
  records::PutBe(head, static_cast<uint64_t>(extent.step), 8);
  records::PutBe(head, extent.dock.size(), 4);
  head += extent.dock;
  records::PutBe(head, extent.cell_bytes.size(), 4);
  for (uint64_t bytes : extent.cell_bytes) records::PutBe(head, bytes, 8);
  std::vector<absl::string_view> pieces;
  pieces.reserve(cells.size() + 1);
  pieces.push_back(head);
  for (const ByteSpan& cell : cells) pieces.push_back(absl::string_view(cell.data(), cell.size()));
  StoreBatch batch;
  batch.PutPieces(KeyOf(kExtentPrefix, extent.id), pieces);
  if (extent.committed) {
    std::string step;
    records::PutBe(step, static_cast<uint64_t>(extent.step), 8);
    batch.Put(KeyOf(kCommitPrefix, extent.id), step);
  }
  // Batches are written in the order they are queued, and the store's
  // next id never goes down: this key only goes up.
  std::string next;
  records::PutBe(next, next_id, 8);
  batch.Put(kNextKey, next);
  pin.reset();  // PutPieces copied the bytes
  return journal_->Enqueue(std::move(batch), std::move(done));
}

void StoreShardJournal::Committed(uint64_t extent, int64_t step, Done done) {
  std::string value;
  records::PutBe(value, static_cast<uint64_t>(step), 8);
  StoreBatch batch;
  batch.Put(KeyOf(kCommitPrefix, extent), value);
  journal_->Submit(std::move(batch),
                   done ? std::move(done) : Logged(absl::StrCat("the commit of extent ", extent)));
}

void StoreShardJournal::Freed(const std::vector<uint64_t>& extents) {
  StoreBatch batch;
  for (uint64_t extent : extents) {
    batch.Delete(KeyOf(kExtentPrefix, extent));
    batch.Delete(KeyOf(kCommitPrefix, extent));
  }
  journal_->Submit(std::move(batch),
                   Logged(absl::StrCat("freeing ", extents.size(), " extents")));
}

void StoreShardJournal::Reincarnated(uint32_t incarnation) {
  StoreBatch batch;
  batch.DeleteRange(kExtentPrefix, "Hy");
  batch.DeleteRange(kCommitPrefix, "Hd");
  batch.Delete(kNextKey);
  std::string value;
  records::PutBe(value, incarnation, 4);
  batch.Put(kMetaKey, value);
  journal_->Submit(std::move(batch),
                   Logged(absl::StrCat("starting incarnation ", incarnation)));
}

absl::StatusOr<shard::RecoveredShard> RecoverShard(const Store& store, const std::string& dir) {
  bool docks = false;
  for (const char* prefix : {"S", "F", "E"}) {
    TDOCK_RETURN_IF_ERROR(store.Scan(prefix, [&](absl::string_view, absl::string_view) {
      docks = true;
      return absl::OkStatus();
    }));
  }
  if (docks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", dir, "' holds docks (written by a standalone server or a controller), not a "
        "shard's cells: give the shard a data dir of its own"));
  }
  shard::RecoveredShard out;
  auto corrupt = [&dir](absl::string_view what, uint64_t extent) {
    return absl::DataLossError(
        absl::StrCat("'", dir, "': the shard's record of ", what, " ", extent, " is corrupt"));
  };
  TDOCK_RETURN_IF_ERROR(store.Scan(kMetaKey, [&](absl::string_view key, absl::string_view value) {
    uint64_t incarnation = 0;
    records::Reader reader(value);
    if (key.size() != 2 || !reader.Read(incarnation, 4) || !reader.done()) {
      return corrupt("its incarnation", 0);
    }
    out.incarnation = static_cast<uint32_t>(incarnation);
    return absl::OkStatus();
  }));
  TDOCK_RETURN_IF_ERROR(store.Scan(kNextKey, [&](absl::string_view key, absl::string_view value) {
    records::Reader reader(value);
    if (key.size() != 2 || !reader.Read(out.next_id, 8) || !reader.done()) {
      return corrupt("the next extent id", 0);
    }
    return absl::OkStatus();
  }));
  std::map<uint64_t, shard::ShardJournal::Extent> extents;
  TDOCK_RETURN_IF_ERROR(
      store.Scan(kExtentPrefix, [&](absl::string_view key, absl::string_view value) {
        uint64_t id = 0;
        records::Reader name(key.substr(2));
        if (!name.Read(id, 8) || !name.done()) return corrupt("an extent", 0);
        records::Reader reader(value);
        shard::ShardJournal::Extent extent;
        extent.id = id;
        uint64_t dock_bytes = 0;
        uint64_t cells = 0;
        if (!reader.ReadI64(extent.step) || !reader.Read(dock_bytes, 4) ||
            reader.rest().size() < dock_bytes) {
          return corrupt("extent", id);
        }
        extent.dock = std::string(reader.rest().substr(0, dock_bytes));
        reader = records::Reader(reader.rest().substr(dock_bytes));
        if (!reader.Read(cells, 4)) return corrupt("extent", id);
        uint64_t total = 0;
        for (uint64_t c = 0; c < cells; ++c) {
          uint64_t bytes = 0;
          if (!reader.Read(bytes, 8)) return corrupt("extent", id);
          extent.cell_bytes.push_back(bytes);
          total += bytes;
        }
        if (reader.rest().size() != total) return corrupt("extent", id);
        extent.payload = std::string(reader.rest());
        extents.emplace(id, std::move(extent));
        return absl::OkStatus();
      }));
  TDOCK_RETURN_IF_ERROR(
      store.Scan(kCommitPrefix, [&](absl::string_view key, absl::string_view value) {
        uint64_t id = 0;
        int64_t step = 0;
        records::Reader name(key.substr(2));
        records::Reader reader(value);
        if (!name.Read(id, 8) || !reader.ReadI64(step)) return corrupt("a commit", id);
        // A commit whose extent is gone was of a freed extent.
        if (auto it = extents.find(id); it != extents.end()) {
          it->second.committed = true;
          it->second.step = step;
        }
        return absl::OkStatus();
      }));
  if (out.incarnation == 0 && !extents.empty()) {
    return absl::DataLossError(
        absl::StrCat("'", dir, "' holds a shard's cells but not its incarnation"));
  }
  for (auto& [id, extent] : extents) out.extents.push_back(std::move(extent));
  return out;
}

}  // namespace tdock::persist
