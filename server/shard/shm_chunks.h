// ShmChunks: a shard's chunks in shared memory, which clients on the same
// host map to write and read cells without a socket (docs/scale-out.md,
// "Same-host shared memory").
//
// Each chunk is a file `<prefix>.<n>` in a tmpfs directory (/dev/shm),
// mode 0600, its pages allocated when it is made (posix_fallocate: a full
// tmpfs is a failed allocation, never a SIGBUS later), unlinked when freed;
// n counts up and is never given twice. `<prefix>` is
// `<dir>/tdock-shard<id>-<random>`; the shard holds an flock on
// `<prefix>.lock` for its life, and a shard starting on the directory
// removes the files of every prefix whose lock nobody holds (a shard that
// was killed). A client tells it shares the shard's memory by opening
// `<prefix>.lock`: the random part is this shard's alone.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<ShmChunks> shm, ShmChunks::Open("/dev/shm", 3));
//   auto pool = std::make_shared<internal::ChunkPool>(4 << 20, 0, shm);
//   std::optional<ShmChunks::Place> at = shm->Locate(cell.data());
//
// Thread safety: thread-safe.
#ifndef TDOCK_SERVER_SHARD_SHM_CHUNKS_H_
#define TDOCK_SERVER_SHARD_SHM_CHUNKS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/dock/arena.h"

namespace tdock::shard {

class ShmChunks final : public internal::ChunkMemory {
 public:
  // Made in `dir` for shard `shard`: FAILED_PRECONDITION naming the
  // directory when it cannot be written or locked.
  static absl::StatusOr<std::shared_ptr<ShmChunks>> Open(const std::string& dir,
                                                         uint64_t shard);
  ~ShmChunks() override;  // removes the lock file (every chunk is freed by then)
  ShmChunks(const ShmChunks&) = delete;
  ShmChunks& operator=(const ShmChunks&) = delete;

  char* Allocate(int64_t size) override;
  void Free(char* data, int64_t size) override;

  // Where a byte of a chunk is: the chunk's number (its file is
  // `<prefix>.<chunk>`), the byte's offset in it, and the chunk's size.
  struct Place {
    uint64_t chunk = 0;
    uint64_t offset = 0;
    uint64_t chunk_bytes = 0;
  };
  // nullopt when `data` is in no chunk of this memory.
  std::optional<Place> Locate(const char* data) const;

  const std::string& prefix() const { return prefix_; }
  // How many files were removed at Open (shards killed before).
  int removed_at_open() const { return removed_at_open_; }

 private:
  ShmChunks(std::string prefix, int lock_fd, int removed);

  const std::string prefix_;
  const int lock_fd_;
  const int removed_at_open_;

  mutable tdock::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  // By first byte: its number and size.
  std::map<const char*, std::pair<uint64_t, int64_t>> chunks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::shard

#endif  // TDOCK_SERVER_SHARD_SHM_CHUNKS_H_
