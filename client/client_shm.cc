#include "client/client_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
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
  {
    absl::MutexLock lock(&session_mu_);
    EndSessionLocked();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [chunk, mapped] : maps_) munmap(mapped.first, mapped.second);
}

absl::Status ShmShard::WithChunk(uint64_t chunk,
                                 absl::FunctionRef<absl::Status(char*, size_t)> copy) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto it = maps_.find(chunk); it != maps_.end()) {
      return copy(it->second.first, it->second.second);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (maps_.count(chunk) == 0) {
      Purge();
      const std::string path = ChunkPath(prefix_, chunk);
      const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) {
        return absl::UnavailableError(absl::StrCat("shared memory ", path,
                                                   " cannot be opened (", std::strerror(errno),
                                                   "): the shard freed it or restarted"));
      }
      struct stat info;
      void* data = fstat(fd, &info) == 0 && info.st_size > 0
                       // Its page table filled at once: no page fault a page.
                       ? mmap(nullptr, static_cast<size_t>(info.st_size),
                              PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)
                       : MAP_FAILED;
      const int error = errno;
      close(fd);
      if (data == MAP_FAILED) {
        return absl::UnavailableError(
            absl::StrCat("shared memory ", path, " cannot be mapped: ", std::strerror(error)));
      }
      maps_[chunk] = {static_cast<char*>(data), static_cast<size_t>(info.st_size)};
    }
  }
  // Mapped now, and only Purge (with mu_ held exclusively) unmaps.
  absl::ReaderMutexLock lock(&mu_);
  auto it = maps_.find(chunk);
  if (it == maps_.end()) {
    return absl::UnavailableError(absl::StrCat("shared memory ", ChunkPath(prefix_, chunk),
                                               " was freed by the shard"));
  }
  return copy(it->second.first, it->second.second);
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
  if (prepared.shm_prefix() != prefix_) {
    return absl::UnavailableError(absl::StrCat(
        "the shard's shared memory is ", prepared.shm_prefix(), ", not ", prefix_,
        " as this client listed it: it restarted (listed again by the next call)"));
  }
  if (prepared.columns_size() != static_cast<int>(columns.size())) {
    return absl::InternalError(absl::StrCat("the shard prepared ", prepared.columns_size(),
                                            " columns, the Put has ", columns.size()));
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    size_t pos = 0;
    for (const v1::ShmRegion& region : prepared.columns(static_cast<int>(c)).regions()) {
      TDOCK_RETURN_IF_ERROR(WithChunk(region.chunk(), [&](char* data, size_t size) {
        if (region.offset() + region.bytes() > size || pos + region.bytes() > columns[c].size()) {
          return absl::InternalError(absl::StrCat(
              "the shard prepared a region past its chunk ", region.chunk(),
              " or past the column's ", columns[c].size(), " bytes"));
        }
        std::memcpy(data + region.offset(), columns[c].data() + pos, region.bytes());
        return absl::OkStatus();
      }));
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
  return WithChunk(chunk, [&](char* data, size_t size) {
    if (offset + bytes > size) {
      return absl::InternalError(absl::StrCat("the shard named bytes past the end of chunk ",
                                              chunk, " (", size, " bytes)"));
    }
    std::memcpy(out, data + offset, bytes);
    return absl::OkStatus();
  });
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
  stub_ = std::move(stub);
  authorization_ = authorization;
  return session_;
}

bool ShmShard::SessionLost(const absl::Status& error) {
  return error.code() == absl::StatusCode::kUnavailable ||
         (error.code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(error.message(), "has no session"));
}

void ShmShard::EndSession(uint64_t session) {
  absl::MutexLock lock(&session_mu_);
  if (session_ == session) EndSessionLocked();
}

void ShmShard::EndSessionLocked() {
  if (attach_ == nullptr) return;
  attach_context_->TryCancel();
  (void)attach_->Finish();
  attach_.reset();
  attach_context_.reset();
  session_ = 0;
}

void ShmShard::GiveBack(uint64_t session, std::vector<uint64_t> pins) {
  if (pins.empty()) return;
  // Alive until the answer comes (deleted by its callback).
  struct Call {
    grpc::ClientContext context;
    v1::UnpinRequest request;
    v1::UnpinResponse response;
  };
  auto* call = new Call;
  call->request.set_session(session);
  call->request.mutable_pins()->Assign(pins.begin(), pins.end());
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  absl::MutexLock lock(&session_mu_);
  if (stub_ == nullptr || session_ != session) {
    delete call;  // the session is gone, and its pins with it
    return;
  }
  if (!authorization_.empty()) call->context.AddMetadata("authorization", authorization_);
  // A failure leaves the pins to the session's end.
  stub_->async()->Unpin(&call->context, &call->request, &call->response,
                        [call](grpc::Status) { delete call; });
}

}  // namespace tdock::internal
