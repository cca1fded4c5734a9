#include "server/service/callback_queue_keeper.h"

#include <utility>
#include <vector>

#include "grpc/grpc.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace tdock::internal {
namespace {

std::shared_ptr<grpc::Channel> LameChannel() {
  grpc_channel* lame = grpc_lame_client_channel_create(
      "tdock-callback-queue-keeper", GRPC_STATUS_UNAVAILABLE, "keeps the callback queue polling");
  return grpc::CreateChannelInternal("", lame, {});
}

// One call's state, freed by its completion.
struct TickCall {
  TickCall() {
    const grpc::Slice empty;
    request = grpc::ByteBuffer(&empty, 1);  // a message must have a buffer
  }
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
};

}  // namespace

CallbackQueueKeeper::GrpcLibrary::GrpcLibrary() { grpc_init(); }
CallbackQueueKeeper::GrpcLibrary::~GrpcLibrary() { grpc_shutdown(); }

CallbackQueueKeeper::CallbackQueueKeeper(absl::Duration period)
    : period_(period),
      channel_(LameChannel()),
      state_(std::make_shared<State>()),
      thread_([this] { Run(); }) {}

CallbackQueueKeeper::~CallbackQueueKeeper() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  thread_.join();
  // The completion runs on a queue thread: the channel stays until it ran.
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &state_->in_flight));
}

int64_t CallbackQueueKeeper::ticks() const {
  absl::MutexLock lock(&state_->mu);
  return state_->ticks;
}

void CallbackQueueKeeper::Run() {
  for (;;) {
    {
      State& s = *state_;
      absl::MutexLock lock(&s.mu);
      if (s.mu.AwaitWithTimeout(absl::Condition(&s.stop), period_)) return;
      // One at a time: a tick not yet completed is enough.
      if (s.in_flight > 0) continue;
      ++s.in_flight;
    }
    Tick();
  }
}

void CallbackQueueKeeper::Tick() {
  auto* call = new TickCall;
  grpc::GenericStub stub(channel_);
  stub.UnaryCall(&call->context, "/tdock.internal.Keeper/Tick", grpc::StubOptions(),
                 &call->request, &call->response, [state = state_, call](grpc::Status) {
                   delete call;
                   absl::MutexLock lock(&state->mu);
                   --state->in_flight;
                   ++state->ticks;
                 });
}

}  // namespace tdock::internal
