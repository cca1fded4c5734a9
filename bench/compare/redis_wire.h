// Redis commands written straight to a hiredis connection's socket.
//
// Stock hiredis (redisCommandArgv) formats a command into one new buffer,
// appends it to its output buffer and, after each partial write, moves the
// unwritten rest to the front: for a 20 MB MSET that costs more than Redis
// itself takes to store it. WireCommand holds a command's RESP framing, built
// once, and borrows its large arguments; RedisWire writes it with writev (no
// copy on the client) and reads the reply with hiredis as usual.
//
// Thread safety: one thread uses a RedisWire. It borrows the context.
#ifndef TDOCK_BENCH_COMPARE_REDIS_WIRE_H_
#define TDOCK_BENCH_COMPARE_REDIS_WIRE_H_

#include <hiredis.h>
#include <sys/uio.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/packed.h"

namespace tdock::compare {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One command in RESP: framing text plus borrowed argument bytes.
class WireCommand final {
 public:
  // Adds an argument: `copy` ones go into the framing, others are borrowed
  // (they must outlive the command).
  void Add(ByteSpan arg, bool copy);
  // Finishes the command; iov() is valid until the command is changed.
  void Seal();
  const std::vector<iovec>& iov() const { return iov_; }

 private:
  struct Piece {
    bool framed;       // in frame_ (offset) or borrowed (pointer)
    size_t offset;     // into frame_
    const char* data;  // borrowed
    size_t len;
  };
  void Frame(const std::string& text);

  int args_ = 0;
  std::string frame_;
  std::vector<Piece> pieces_;
  std::vector<iovec> iov_;
};

class RedisWire final {
 public:
  explicit RedisWire(redisContext* context) : context_(context) {}

  // Writes the command and reads its reply (an error reply is an error).
  absl::StatusOr<Reply> Call(const WireCommand& command);

 private:
  absl::Status WriteAll(const std::vector<iovec>& iov);

  redisContext* context_;
};

}  // namespace tdock::compare

#endif  // TDOCK_BENCH_COMPARE_REDIS_WIRE_H_
