// Internal to client/: same-host shared memory with a controller's shard
// (docs/scale-out.md, "Same-host shared memory"), for tdock::Client.
//
// A shard started with --shm_dir lists where its chunk files are
// (ShardInfo.shm_prefix); this process shares its memory if it can open
// `<prefix>.lock`. A Put is prepared at the shard (Shard.Prepare), its
// columns' bytes copied into the regions the shard gives (Write), and sent
// without them; a read in this client's session (Shard.Attach) names where
// each cell is, and the client copies the cells out (CopyOut) and gives the
// pin back with its next read of the shard (TakeUnpins).
//
// Thread safety: thread-safe.
#ifndef TDOCK_CLIENT_CLIENT_SHM_H_
#define TDOCK_CLIENT_CLIENT_SHM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/packed.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"
#include "tdock/v1/dock.grpc.pb.h"

namespace tdock::internal {

enum class Transport { kAuto, kGrpc, kShm };
// ClientOptions::transport: "auto", "grpc" or "shm"; empty: TDOCK_TRANSPORT,
// else auto. INVALID_ARGUMENT naming where a bad one came from.
absl::StatusOr<Transport> ParseTransport(const std::string& option);

// Why this process cannot share the memory of the shard whose chunks are
// at `prefix`; empty when it can.
std::string ShmUnusable(const std::string& prefix);

class ShmShard final {
 public:
  explicit ShmShard(std::string prefix) : prefix_(std::move(prefix)) {}
  ~ShmShard();  // ends the session, unmaps the chunks
  ShmShard(const ShmShard&) = delete;
  ShmShard& operator=(const ShmShard&) = delete;

  // Copies each column's bytes into the regions the shard prepared for it.
  absl::Status Write(const v1::PrepareResponse& prepared, const std::vector<ByteSpan>& columns);
  // Copies the `bytes` bytes at `offset` of chunk `chunk` to `out`.
  absl::Status CopyOut(uint64_t chunk, uint64_t offset, size_t bytes, char* out);

  // This client's session with the shard (opened on `channel` with
  // `authorization` when first asked), which holds the pins of its reads.
  absl::StatusOr<uint64_t> Session(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::string& authorization);
  // The session is gone (a read failed): the next read opens another.
  void EndSession();
  // A pin to give back, and those to give back now.
  void Unpin(uint64_t pin);
  std::vector<uint64_t> TakeUnpins();
  // The session (0: none) and the pins of it to give back now (taken).
  std::pair<uint64_t, std::vector<uint64_t>> TakeSessionUnpins();

 private:
  // Chunk `chunk`, mapped when first named.
  absl::StatusOr<std::pair<char*, size_t>> Map(uint64_t chunk);
  // Unmaps the chunks the shard freed (their files gone), at most every
  // second. REQUIRES: no copy in or out is under way (mu_ held).
  void Purge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string prefix_;
  absl::Mutex mu_;
  std::map<uint64_t, std::pair<char*, size_t>> maps_ ABSL_GUARDED_BY(mu_);
  absl::Time purged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Mutex session_mu_;
  uint64_t session_ ABSL_GUARDED_BY(session_mu_) = 0;
  std::unique_ptr<grpc::ClientContext> attach_context_ ABSL_GUARDED_BY(session_mu_);
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> attach_ ABSL_GUARDED_BY(session_mu_);
  std::vector<uint64_t> unpins_ ABSL_GUARDED_BY(session_mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_CLIENT_CLIENT_SHM_H_
