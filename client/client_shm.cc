#include "client/client_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"

namespace tdock::internal {
namespace {

std::string ChunkPath(const std::string& prefix, uint64_t chunk) {
  return absl::StrCat(prefix, ".", chunk);
}

}  // namespace

absl::StatusOr<Transport> ParseTransport(const std::string& option) {
  std::string chosen = option;
  const char* source = "ClientOptions::transport";
  if (chosen.empty()) {
    const char* env = std::getenv("TDOCK_TRANSPORT");
    chosen = env != nullptr && *env != '\0' ? env : "auto";
    source = "TDOCK_TRANSPORT";
  }
  if (chosen == "auto") return Transport::kAuto;
  if (chosen == "grpc") return Transport::kGrpc;
  if (chosen == "shm") return Transport::kShm;
  return absl::InvalidArgumentError(
      absl::StrCat(source, " is '", chosen, "'; it is one of auto, grpc, shm"));
}

std::string ShmUnusable(const std::string& prefix) {
  if (prefix.empty()) return "offers no shared memory (start it with --shm_dir)";
  const std::string lock = absl::StrCat(prefix, ".lock");
  const int fd = open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::StrCat("does not share this host's memory (", lock, ": ",
                        std::strerror(errno), ")");
  }
  close(fd);
  return "";
}

ShmShard::~ShmShard() {
  EndSession();
  absl::MutexLock lock(&mu_);
  for (const auto& [chunk, mapped] : maps_) munmap(mapped.first, mapped.second);
}

absl::StatusOr<std::pair<char*, size_t>> ShmShard::Map(uint64_t chunk) {
  absl::MutexLock lock(&mu_);
  if (auto it = maps_.find(chunk); it != maps_.end()) return it->second;
  Purge();
  const std::string path = ChunkPath(prefix_, chunk);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("shared memory ", path, " cannot be opened (",
                                               std::strerror(errno),
                                               "): the shard freed it or restarted"));
  }
  struct stat info;
  void* data = fstat(fd, &info) == 0 && info.st_size > 0
                   // Its page table filled at once: no page fault a page.
                   ? mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_POPULATE, fd, 0)
                   : MAP_FAILED;
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("shared memory ", path, " cannot be mapped: ", std::strerror(error)));
  }
  return maps_[chunk] = {static_cast<char*>(data), static_cast<size_t>(info.st_size)};
}

void ShmShard::Purge() {
  const absl::Time now = absl::Now();
  if (now - purged_ < absl::Seconds(1)) return;
  purged_ = now;
  for (auto it = maps_.begin(); it != maps_.end();) {
    struct stat info;
    if (stat(ChunkPath(prefix_, it->first).c_str(), &info) != 0) {
      munmap(it->second.first, it->second.second);
      it = maps_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status ShmShard::Write(const v1::PrepareResponse& prepared,
                             const std::vector<ByteSpan>& columns) {
  if (prepared.columns_size() != static_cast<int>(columns.size())) {
    return absl::InternalError(absl::StrCat("the shard prepared ", prepared.columns_size(),
                                            " columns, the Put has ", columns.size()));
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    size_t pos = 0;
    for (const v1::ShmRegion& region : prepared.columns(static_cast<int>(c)).regions()) {
      TDOCK_ASSIGN_OR_RETURN(const auto mapped, Map(region.chunk()));
      if (region.offset() + region.bytes() > mapped.second ||
          pos + region.bytes() > columns[c].size()) {
        return absl::InternalError(absl::StrCat(
            "the shard prepared a region past its chunk ", region.chunk(),
            " or past the column's ", columns[c].size(), " bytes"));
      }
      // Mapped chunks stay mapped while in use: Purge runs under mu_ only.
      absl::ReaderMutexLock lock(&mu_);
      std::memcpy(mapped.first + region.offset(), columns[c].data() + pos, region.bytes());
      pos += region.bytes();
    }
    if (pos != columns[c].size()) {
      return absl::InternalError(absl::StrCat("the shard prepared ", pos, " bytes for a column of ",
                                              columns[c].size()));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmShard::CopyOut(uint64_t chunk, uint64_t offset, size_t bytes, char* out) {
  TDOCK_ASSIGN_OR_RETURN(const auto mapped, Map(chunk));
  if (offset + bytes > mapped.second) {
    return absl::InternalError(absl::StrCat("the shard named bytes past the end of chunk ",
                                            chunk, " (", mapped.second, " bytes)"));
  }
  absl::ReaderMutexLock lock(&mu_);
  std::memcpy(out, mapped.first + offset, bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ShmShard::Session(const std::shared_ptr<grpc::Channel>& channel,
                                           const std::string& authorization) {
  absl::MutexLock lock(&session_mu_);
  if (session_ != 0) return session_;
  auto context = std::make_unique<grpc::ClientContext>();
  if (!authorization.empty()) context->AddMetadata("authorization", authorization);
  std::unique_ptr<v1::Shard::Stub> stub = v1::Shard::NewStub(channel);
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> attach =
      stub->Attach(context.get(), v1::AttachRequest());
  v1::AttachEvent event;
  if (!attach->Read(&event)) {
    const grpc::Status status = attach->Finish();
    return FromGrpcStatus(status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                     "its session ended at once")
                                      : status);
  }
  session_ = event.session();
  attach_context_ = std::move(context);
  attach_ = std::move(attach);
  unpins_.clear();  // the pins of an earlier session went with it
  return session_;
}

void ShmShard::EndSession() {
  absl::MutexLock lock(&session_mu_);
  if (attach_ == nullptr) return;
  attach_context_->TryCancel();
  (void)attach_->Finish();
  attach_.reset();
  attach_context_.reset();
  session_ = 0;
  unpins_.clear();
}

void ShmShard::Unpin(uint64_t pin) {
  absl::MutexLock lock(&session_mu_);
  unpins_.push_back(pin);
}

std::pair<uint64_t, std::vector<uint64_t>> ShmShard::TakeSessionUnpins() {
  absl::MutexLock lock(&session_mu_);
  return {session_, std::exchange(unpins_, {})};
}

std::vector<uint64_t> ShmShard::TakeUnpins() {
  absl::MutexLock lock(&session_mu_);
  return std::exchange(unpins_, {});
}

}  // namespace tdock::internal
