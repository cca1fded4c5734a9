// The Redis contender: hiredis against a redis-server.
//
// One key per (row, column) holding that cell's bytes ("<shape>:<row>:<col>").
// A Put pass sends one MSET per chunk (every key of the chunk's rows and
// columns, values pointing into the workload's buffers); a Get pass one MGET
// per chunk. Like the other contenders, one call is in flight at a time and
// each call carries a whole chunk. Commands are built in Prepare, outside
// timing.
//
// Two ways to send MSET: "wire" (default) writes it with writev straight
// from the workload's buffers (see redis_wire.h); "hiredis" uses
// redisCommandArgv as is, which copies the command into hiredis's output
// buffer first. MGET (a small command) always goes through redisCommandArgv
// and its reply through hiredis's reader.
#include <hiredis.h>

#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/compare/contender.h"
#include "bench/compare/redis_wire.h"
#include "common/status.h"

namespace tdock::compare {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// One command's arguments.
struct Argv {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  void Add(const char* data, size_t len) {
    args.push_back(data);
    lens.push_back(len);
  }
};

class RedisContender final : public Contender {
 public:
  RedisContender(redisContext* context, bool wire)
      : context_(context), wire_(wire ? std::make_unique<RedisWire>(context) : nullptr) {}
  ~RedisContender() override {
    wire_.reset();
    redisFree(context_);
  }

  std::string name() const override { return "redis"; }

  absl::Status Prepare(const Workload& workload) override {
    workload_ = &workload;
    const Shape& shape = workload.shape();
    keys_.clear();
    keys_.reserve(shape.rows * shape.columns);
    for (int64_t r = 0; r < shape.rows; ++r) {
      for (int64_t c = 0; c < shape.columns; ++c) {
        keys_.push_back(absl::StrCat(shape.name, ":", r, ":", c));
      }
    }
    const size_t n = workload.chunks().size();
    msets_.assign(n, {});
    mgets_.assign(n, {});
    wire_msets_.assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      const Chunk& chunk = workload.chunks()[i];
      msets_[i].Add("MSET", 4);
      mgets_[i].Add("MGET", 4);
      wire_msets_[i].Add(ByteSpan("MSET", 4), /*copy=*/true);
      for (int64_t r = chunk.begin; r < chunk.end; ++r) {
        for (int64_t c = 0; c < shape.columns; ++c) {
          const std::string& key = Key(r, c);
          const ByteSpan cell = workload.Cell(r, c);
          msets_[i].Add(key.data(), key.size());
          msets_[i].Add(cell.data(), cell.size());
          mgets_[i].Add(key.data(), key.size());
          wire_msets_[i].Add(ByteSpan(key.data(), key.size()), /*copy=*/true);
          wire_msets_[i].Add(cell, /*copy=*/false);
        }
      }
      wire_msets_[i].Seal();
    }
    return absl::OkStatus();
  }

  absl::Status Verify() override {
    TDOCK_RETURN_IF_ERROR(PutPass());
    return GetPass(/*check=*/true);
  }

  absl::StatusOr<double> TimePut() override {
    const auto start = std::chrono::steady_clock::now();
    TDOCK_RETURN_IF_ERROR(PutPass());
    return Since(start);
  }

  absl::StatusOr<double> TimeGet() override {
    const auto start = std::chrono::steady_clock::now();
    TDOCK_RETURN_IF_ERROR(GetPass(/*check=*/false));
    return Since(start);
  }

  absl::Status Finish() override {
    // Keys stay until the server stops; the next workload uses other names.
    return absl::OkStatus();
  }

 private:
  const std::string& Key(int64_t row, int64_t c) const {
    return keys_[row * workload_->shape().columns + c];
  }

  absl::StatusOr<Reply> Command(size_t i, bool mset) {
    if (wire_ != nullptr && mset) return wire_->Call(wire_msets_[i]);
    const Argv& argv = mset ? msets_[i] : mgets_[i];
    Reply reply(static_cast<redisReply*>(redisCommandArgv(
        context_, static_cast<int>(argv.args.size()),
        const_cast<const char**>(argv.args.data()), argv.lens.data())));
    if (reply == nullptr) {
      return absl::UnavailableError(absl::StrCat("redis: ", context_->errstr));
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(absl::StrCat("redis: ", std::string(reply->str, reply->len)));
    }
    return reply;
  }

  absl::Status PutPass() {
    for (size_t i = 0; i < msets_.size(); ++i) {
      TDOCK_ASSIGN_OR_RETURN(Reply reply, Command(i, /*mset=*/true));
      if (reply->type != REDIS_REPLY_STATUS) {
        return absl::InternalError("redis MSET: unexpected reply");
      }
    }
    return absl::OkStatus();
  }

  absl::Status GetPass(bool check) {
    const Shape& shape = workload_->shape();
    for (size_t i = 0; i < mgets_.size(); ++i) {
      TDOCK_ASSIGN_OR_RETURN(Reply reply, Command(i, /*mset=*/false));
      const Chunk& chunk = workload_->chunks()[i];
      if (reply->type != REDIS_REPLY_ARRAY ||
          static_cast<int64_t>(reply->elements) != chunk.rows() * shape.columns) {
        return absl::InternalError("redis MGET: unexpected reply");
      }
      for (size_t e = 0; e < reply->elements; ++e) {
        const redisReply* value = reply->element[e];
        if (value->type != REDIS_REPLY_STRING ||
            static_cast<int64_t>(value->len) != shape.row_bytes()) {
          return absl::InternalError("redis MGET: missing or short value");
        }
        if (!check) continue;
        const int64_t row = chunk.begin + static_cast<int64_t>(e) / shape.columns;
        const ByteSpan cell = workload_->Cell(row, static_cast<int64_t>(e) % shape.columns);
        if (std::memcmp(value->str, cell.data(), cell.size()) != 0) {
          return absl::InternalError(
              absl::StrCat("redis MGET: ", Key(row, e % shape.columns), " differs"));
        }
      }
    }
    return absl::OkStatus();
  }

  redisContext* context_;
  std::unique_ptr<RedisWire> wire_;  // null: stock hiredis
  const Workload* workload_ = nullptr;
  std::vector<std::string> keys_;
  std::vector<Argv> msets_;
  std::vector<Argv> mgets_;
  std::vector<WireCommand> wire_msets_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Contender>> MakeRedisContender(
    const std::string& address, bool wire) {
  std::vector<std::string> parts = absl::StrSplit(address, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) {
    return absl::InvalidArgumentError(absl::StrCat("redis address '", address,
                                                   "' is not host:port"));
  }
  redisContext* context = redisConnect(parts[0].c_str(), port);
  if (context == nullptr || context->err != 0) {
    std::string error = context != nullptr ? context->errstr : "out of memory";
    if (context != nullptr) redisFree(context);
    return absl::UnavailableError(absl::StrCat("redis ", address, ": ", error));
  }
  return std::make_unique<RedisContender>(context, wire);
}

}  // namespace tdock::compare
