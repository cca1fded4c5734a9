// RESP framing and writev for the Redis contender.
#include "bench/compare/redis_wire.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock::compare {

void WireCommand::Frame(const std::string& text) {
  if (pieces_.empty() || !pieces_.back().framed) {
    pieces_.push_back({true, frame_.size(), nullptr, 0});
  }
  frame_ += text;
  pieces_.back().len += text.size();
}

void WireCommand::Add(ByteSpan arg, bool copy) {
  ++args_;
  Frame(absl::StrCat("$", arg.size(), "\r\n"));
  if (copy) {
    Frame(std::string(arg.data(), arg.size()));
  } else {
    pieces_.push_back({false, 0, arg.data(), arg.size()});
  }
  Frame("\r\n");
}

void WireCommand::Seal() {
  // The array header goes first: prepend it to the framing.
  const std::string header = absl::StrCat("*", args_, "\r\n");
  frame_.insert(0, header);
  for (Piece& piece : pieces_) {
    if (piece.framed && piece.offset > 0) piece.offset += header.size();
  }
  if (pieces_.empty() || !pieces_.front().framed) {
    pieces_.insert(pieces_.begin(), {true, 0, nullptr, 0});
  }
  pieces_.front().len += header.size();
  iov_.clear();
  for (const Piece& piece : pieces_) {
    const char* data = piece.framed ? frame_.data() + piece.offset : piece.data;
    iov_.push_back({const_cast<char*>(data), piece.len});
  }
}

absl::StatusOr<Reply> RedisWire::Call(const WireCommand& command) {
  // hiredis's output buffer is empty: redisGetReply only reads.
  TDOCK_RETURN_IF_ERROR(WriteAll(command.iov()));
  void* reply = nullptr;
  if (redisGetReply(context_, &reply) != REDIS_OK || reply == nullptr) {
    return absl::UnavailableError(absl::StrCat("redis: ", context_->errstr));
  }
  Reply owned(static_cast<redisReply*>(reply));
  if (owned->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(absl::StrCat("redis: ", std::string(owned->str, owned->len)));
  }
  return owned;
}

absl::Status RedisWire::WriteAll(const std::vector<iovec>& iov) {
  std::vector<iovec> rest = iov;
  size_t first = 0;
  while (first < rest.size()) {
    const int count = static_cast<int>(std::min<size_t>(rest.size() - first, IOV_MAX));
    const ssize_t n = writev(context_->fd, rest.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("redis writev: ", std::strerror(errno)));
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && left >= rest[first].iov_len) left -= rest[first++].iov_len;
    if (left > 0) {
      rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + left;
      rest[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

}  // namespace tdock::compare
