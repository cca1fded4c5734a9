// tdock::Client with a controller (docs/scale-out.md): its shards, listed
// with ListShards when data first moves (a standalone server answers
// UNIMPLEMENTED: no shards); a Put to the shard on this node or one a hash
// picks (client_cells.cc reads cells back).
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "client/channel.h"
#include "client/client_impl.h"
#include "common/status.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {
namespace {

std::string LocalNode() {
  if (const char* node = std::getenv("TDOCK_NODE"); node != nullptr && *node != '\0') {
    return node;
  }
  char host[256] = {};
  return gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string();
}

}  // namespace

absl::StatusOr<Client::Impl::Shards> Client::Impl::ListShards(bool refresh) const {
  {
    absl::MutexLock lock(&shards_mu_);
    if (shards_.has_value() && !refresh) return *shards_;
  }
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListShardsResponse listing;
  const grpc::Status status = stub->ListShards(&context, v1::ListShardsRequest(), &listing);
  Shards listed;
  if (status.error_code() != grpc::StatusCode::UNIMPLEMENTED) {  // else: standalone
    TDOCK_RETURN_IF_ERROR(FromGrpcStatus(status));
    if (listing.shards().empty()) {  // asked again next time
      return absl::UnavailableError(absl::StrCat(
          "the controller at ", options.address, " lists no shards yet: start them "
          "(tdock-server --role=shard --controller=", options.address, ")"));
    }
    for (const v1::ShardInfo& info : listing.shards()) {
      ClientOptions to_shard = options;
      to_shard.address = info.address();
      TDOCK_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> shard_channel,
                             OpenChannel(to_shard));
      auto shard = std::make_shared<Shard>();
      shard->id = info.id();
      shard->address = info.address();
      shard->node = info.node();
      shard->away = info.state() == v1::SHARD_AWAY;
      shard->put_stub =
          std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PutResponse>>(
              shard_channel);
      shard->read_stub =
          std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer>>(
              shard_channel);
      shard->prepare_stub =
          std::make_unique<grpc::TemplatedGenericStub<grpc::ByteBuffer, v1::PrepareResponse>>(
              shard_channel);
      shard->shm_unusable = internal::ShmUnusable(info.shm_prefix());
      if (transport != internal::Transport::kGrpc && shard->shm_unusable.empty()) {
        // The same shard (its prefix) keeps its mappings and session.
        std::shared_ptr<internal::ShmShard> known;
        {
          absl::MutexLock lock(&shards_mu_);
          if (shards_.has_value()) {
            for (const auto& former : *shards_) {
              if (former->shm != nullptr && former->id == info.id() &&
                  former->shm_prefix == info.shm_prefix()) {
                known = former->shm;
              }
            }
          }
        }
        shard->shm = known != nullptr ? known
                                      : std::make_shared<internal::ShmShard>(info.shm_prefix());
      }
      shard->shm_prefix = info.shm_prefix();
      shard->channel = std::move(shard_channel);
      listed.push_back(std::move(shard));
    }
  }
  absl::MutexLock lock(&shards_mu_);
  shards_ = listed;
  return listed;
}

const Client::Impl::Shard& Client::Impl::ShardForPut(const Shards& shards,
                                                     const ClientPut& put) {
  const std::string node = LocalNode();
  for (const auto& shard : shards) {
    if (shard->node == node && !shard->away) return *shard;
  }
  const std::string first = !put.rows.empty()   ? absl::StrCat(put.rows.front())
                            : !put.keys.empty() ? put.keys.front()
                                                : std::string();
  const size_t hash = absl::HashOf(put.dock, put.step, first);
  std::vector<const Shard*> live;
  for (const auto& shard : shards) {
    if (!shard->away) live.push_back(shard.get());
  }
  if (live.empty()) return *shards[hash % shards.size()];
  return *live[hash % live.size()];
}

void Client::Impl::ForgetShards() const {
  absl::MutexLock lock(&shards_mu_);
  shards_.reset();
}

absl::StatusOr<std::shared_ptr<const Client::Impl::Shard>> Client::Impl::ShardAt(
    const Shards& shards, const ClientPut& put) const {
  if (put.shard_address.empty() || shards.empty()) return nullptr;  // placed, or standalone
  auto named = [&put](const Shards& listed) -> std::shared_ptr<const Shard> {
    for (const auto& shard : listed) {
      if (shard->address == put.shard_address && shard->shm_prefix == put.shard_shm_prefix) {
        return shard;
      }
    }
    return nullptr;
  };
  if (std::shared_ptr<const Shard> shard = named(shards); shard != nullptr) return shard;
  TDOCK_ASSIGN_OR_RETURN(const Shards listed, ListShards(/*refresh=*/true));
  if (std::shared_ptr<const Shard> shard = named(listed); shard != nullptr) return shard;
  return absl::UnavailableError(absl::StrCat(
      "put into dock '", put.dock, "': the controller at ", options.address,
      " lists no shard at ", put.shard_address, " with shared memory '", put.shard_shm_prefix,
      "' (a shard listing older than the controller's: list them again)"));
}

absl::Status Client::Impl::CheckTransport(const Shards& shards) const {
  if (transport != internal::Transport::kShm) return absl::OkStatus();
  if (shards.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transport 'shm': ", options.address, " is a standalone server; shared memory is a "
        "shard's (tdock-server --role=shard --shm_dir=/dev/shm)"));
  }
  for (const auto& shard : shards) {
    if (!shard->shm_unusable.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "transport 'shm': shard ", shard->id, " at ", shard->address, " (node ", shard->node,
          ") ", shard->shm_unusable, "; use transport 'auto' or 'grpc' for shards on other "
          "hosts"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tdock
