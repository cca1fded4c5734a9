#include "server/shard/shm_chunks.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace tdock::shard {
namespace {

constexpr char kLock[] = ".lock";

std::string Errno() { return std::strerror(errno); }

// Removes the files of every prefix in `dir` whose lock no process holds;
// returns how many.
int RemoveAbandoned(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* entry = readdir(listing)) names.emplace_back(entry->d_name);
  closedir(listing);
  int removed = 0;
  for (const std::string& name : names) {
    // A lock file not named yet, of a shard that died before naming it.
    if (absl::StartsWith(name, "tdock-shard") && absl::EndsWith(name, ".new")) {
      const std::string path = absl::StrCat(dir, "/", name);
      const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(path.c_str()) == 0) ++removed;
      if (fd >= 0) close(fd);
      continue;
    }
    if (!absl::StartsWith(name, "tdock-shard") || !absl::EndsWith(name, kLock)) continue;
    const std::string lock = absl::StrCat(dir, "/", name);
    const int fd = open(lock.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    // Held: its shard is alive.
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - std::strlen(kLock));
    for (const std::string& other : names) {
      if (other != name && absl::StartsWith(other, absl::StrCat(prefix, "."))) {
        if (unlink(absl::StrCat(dir, "/", other).c_str()) == 0) ++removed;
      }
    }
    if (unlink(lock.c_str()) == 0) ++removed;
    close(fd);
  }
  return removed;
}

}  // namespace

absl::StatusOr<std::shared_ptr<ShmChunks>> ShmChunks::Open(const std::string& dir,
                                                           uint64_t shard) {
  const int removed = RemoveAbandoned(dir);
  std::random_device random;
  const uint64_t nonce = (uint64_t{random()} << 32) | random();
  const std::string prefix = absl::StrFormat("%s/tdock-shard%d-%016x", dir, shard, nonce);
  const std::string lock = absl::StrCat(prefix, kLock);
  // Locked under another name, then named: a shard starting meanwhile never
  // sees this lock file unheld (and takes it for a dead shard's).
  const std::string unnamed = absl::StrCat(prefix, ".new");
  const int fd = open(unnamed.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--shm_dir '", dir, "': cannot make ", unnamed, ": ", Errno(),
        " (a tmpfs directory this shard can write, or --shm_dir= for none)"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(unnamed.c_str(), lock.c_str()) != 0) {
    const std::string why = Errno();
    close(fd);
    unlink(unnamed.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("--shm_dir '", dir, "': cannot lock ", lock, ": ", why));
  }
  if (removed > 0) {
    TDOCK_LOG(INFO) << "shard " << shard << ": removed " << removed
                    << " shared-memory files of shards gone from " << dir;
  }
  return std::shared_ptr<ShmChunks>(new ShmChunks(prefix, fd, removed));
}

ShmChunks::ShmChunks(std::string prefix, int lock_fd, int removed)
    : prefix_(std::move(prefix)), lock_fd_(lock_fd), removed_at_open_(removed) {}

ShmChunks::~ShmChunks() {
  unlink(absl::StrCat(prefix_, kLock).c_str());
  close(lock_fd_);
}

char* ShmChunks::Allocate(int64_t size) {
  uint64_t number = 0;
  {
    tdock::MutexLock lock(&mu_);
    number = next_++;
  }
  const std::string path = absl::StrCat(prefix_, ".", number);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    TDOCK_LOG(WARNING) << "shared memory: cannot make " << path << ": " << Errno();
    return nullptr;
  }
  // Every page now: a full tmpfs fails here, not as a SIGBUS on first touch.
  const int allocated = posix_fallocate(fd, 0, size);
  void* data = allocated == 0
                   ? mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED,
                          fd, 0)
                   : MAP_FAILED;
  close(fd);
  if (data == MAP_FAILED) {
    TDOCK_LOG(WARNING) << "shared memory: no room for " << size << " bytes in " << path << ": "
                       << (allocated != 0 ? std::strerror(allocated) : Errno());
    unlink(path.c_str());
    return nullptr;
  }
  tdock::MutexLock lock(&mu_);
  chunks_[static_cast<const char*>(data)] = {number, size};
  return static_cast<char*>(data);
}

void ShmChunks::Free(char* data, int64_t size) {
  uint64_t number = 0;
  {
    tdock::MutexLock lock(&mu_);
    auto it = chunks_.find(data);
    if (it == chunks_.end()) return;
    number = it->second.first;
    chunks_.erase(it);
  }
  munmap(data, static_cast<size_t>(size));
  unlink(absl::StrCat(prefix_, ".", number).c_str());
}

std::optional<ShmChunks::Place> ShmChunks::Locate(const char* data) const {
  tdock::MutexLock lock(&mu_);
  auto it = chunks_.upper_bound(data);
  if (it == chunks_.begin()) return std::nullopt;
  --it;
  const uint64_t offset = static_cast<uint64_t>(data - it->first);
  if (offset >= static_cast<uint64_t>(it->second.second)) return std::nullopt;
  return Place{it->second.first, offset, static_cast<uint64_t>(it->second.second)};
}

}  // namespace tdock::shard
