// Internal to client/: same-host shared memory with a controller's shard
// (docs/scale-out.md, "Same-host shared memory"), for tdock::Client.
//
// A shard started with --shm_dir lists where its chunk files are
// (ShardInfo.shm_prefix); this process shares its memory if it can open
// `<prefix>.lock`. A Put is prepared at the shard (Shard.Prepare), its
// columns' bytes copied into the regions the shard gives (Write), and sent
// without them; a read in this client's session (Shard.Attach) names where
// each cell is, and the client copies the cells out (CopyOut) and gives the
// pin back at once (GiveBack, not waiting for the answer).
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
#include "absl/functional/function_ref.h"
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
  // `session` is gone (the shard unreachable, or it knows it no more): the
  // next read opens another. Nothing if another is current.
  void EndSession(uint64_t session);
  // Gives `pins` of `session` back (Shard.Unpin, its answer not awaited).
  void GiveBack(uint64_t session, std::vector<uint64_t> pins);
  // Whether a read's error means its session is gone.
  static bool SessionLost(const absl::Status& error);

 private:
  // Runs `copy` on chunk `chunk` (mapped when first named; its start and
  // size), under mu_ shared: no Purge unmaps it meanwhile.
  absl::Status WithChunk(uint64_t chunk,
                         absl::FunctionRef<absl::Status(char*, size_t)> copy);
  // Unmaps the chunks the shard freed (their files gone), at most every
  // second; with mu_ held exclusively, no copy is under way.
  void Purge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndSessionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(session_mu_);

  const std::string prefix_;
  absl::Mutex mu_;
  std::map<uint64_t, std::pair<char*, size_t>> maps_ ABSL_GUARDED_BY(mu_);
  absl::Time purged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Mutex session_mu_;
  uint64_t session_ ABSL_GUARDED_BY(session_mu_) = 0;
  std::unique_ptr<grpc::ClientContext> attach_context_ ABSL_GUARDED_BY(session_mu_);
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> attach_ ABSL_GUARDED_BY(session_mu_);
  // Where pins go back: the session's channel and authorization.
  std::unique_ptr<v1::Shard::Stub> stub_ ABSL_GUARDED_BY(session_mu_);
  std::string authorization_ ABSL_GUARDED_BY(session_mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_CLIENT_CLIENT_SHM_H_
