// CallbackQueueKeeper: keeps one of gRPC's callback-queue threads polling,
// so that a call arriving after an idle second is read at once.
//
// gRPC 1.51 on Linux (the epoll1 and poll engines cannot run callbacks in the
// background) serves every callback-API method from one process-wide
// completion queue driven by threads of its own (CallbackAlternativeCQ in
// src/cpp/common/completion_queue_cc.cc; clamp(cores / 2, 2, 16) of them).
// Each waits for an event with a 1 s deadline and, when that passes with no
// event, sleeps 100 ms before it waits again. They are the server's pollers
// too: while all of them sleep nobody reads the sockets, and a call that
// arrives then waits, unread, up to 100 ms. They fall asleep together after
// about a second without calls, just when a rollout producer that writes each
// row as it is generated sends its next one (bench/idle_put.py). A Put shows
// it more than a status call: it is answered later, from the dock's thread,
// which wakes a second queue thread that then times out with the first.
//
// The keeper completes one event on that queue every `period` (well under
// 1 s): a callback-API call on a lame channel, which fails at once without a
// socket, a server, a metric or a log line. The queue thread that takes the
// event waits again with a fresh 1 s deadline, so at every moment one of them
// has taken an event less than `period` ago and is polling. It costs
// 1 / `period` empty completions a second on one thread of its own.
//
// Thread safety: constructed and destroyed on one thread; the destructor stops
// the ticks and waits for the one in flight. ticks() may be called from any
// thread.
#ifndef TDOCK_SERVER_SERVICE_CALLBACK_QUEUE_KEEPER_H_
#define TDOCK_SERVER_SERVICE_CALLBACK_QUEUE_KEEPER_H_

#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace tdock::internal {

class CallbackQueueKeeper final {
 public:
  // Default: every 250 ms (a queue thread's deadline is 1 s).
  explicit CallbackQueueKeeper(absl::Duration period = absl::Milliseconds(250));
  ~CallbackQueueKeeper();
  CallbackQueueKeeper(const CallbackQueueKeeper&) = delete;
  CallbackQueueKeeper& operator=(const CallbackQueueKeeper&) = delete;

  // Events completed on the queue so far.
  int64_t ticks() const;

 private:
  // Shared with the completions, which may run until just after the
  // destructor has seen the last one end.
  struct State {
    absl::Mutex mu;
    bool stop ABSL_GUARDED_BY(mu) = false;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    int64_t ticks ABSL_GUARDED_BY(mu) = 0;
  };
  void Run();
  void Tick();

  // gRPC's library, initialized while the keeper lives (first member).
  struct GrpcLibrary {
    GrpcLibrary();
    ~GrpcLibrary();
  };
  const GrpcLibrary library_;
  const absl::Duration period_;
  const std::shared_ptr<grpc::Channel> channel_;  // lame: every call fails at once
  const std::shared_ptr<State> state_;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_SERVICE_CALLBACK_QUEUE_KEEPER_H_
