// tdock_compare: moves the same chunks of float32 rows through tdock (C++
// client), Redis (hiredis) and a plain gRPC unary service, and writes one JSON
// line per timed pass. bench/compare/run.sh starts the servers, runs this and
// the Python side, and turns the lines into a report.
//
//   tdock_compare --tdock=HOST:PORT --redis=HOST:PORT --grpc=HOST:PORT
//       [--shapes=small,medium] [--chunk_rows=64] [--passes=5] [--out=F.jsonl]
//   tdock_compare --serve_baseline [--shapes=...] [--chunk_rows=...]
//       serves the plain gRPC service on 127.0.0.1 (a free port, printed as
//       "baseline-server listening on HOST:PORT") until SIGTERM or SIGINT.
//
// Per shape: each contender runs one verified pass (every byte read back is
// compared with what was written), then `passes` timed passes in which the
// contenders take turns (tdock, redis, grpc; Put then Get each), so that all
// of them see the same machine load. A contender whose address is empty is
// skipped.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/baseline_server.h"
#include "bench/compare/contender.h"
#include "bench/compare/grpc_contender.h"
#include "bench/compare/workload.h"
#include "common/status.h"

ABSL_FLAG(std::string, tdock, "", "tdock-server address; empty: skip tdock");
ABSL_FLAG(std::string, redis, "", "redis-server address; empty: skip Redis");
ABSL_FLAG(std::string, redis_io, "wire",
          "wire: writev and 1 MiB reads around hiredis's reader; hiredis: "
          "stock redisCommandArgv");
ABSL_FLAG(std::string, grpc, "", "plain gRPC server address; empty: skip it");
ABSL_FLAG(std::string, shapes, "small,medium", "shapes to run, in order");
ABSL_FLAG(int64_t, chunk_rows, 64, "rows per call (all columns)");
ABSL_FLAG(int32_t, passes, 5, "timed passes per shape and contender");
ABSL_FLAG(std::string, out, "", "JSON lines file to append samples to");
ABSL_FLAG(bool, serve_baseline, false, "serve the plain gRPC service instead");

namespace tdock::compare {
namespace {

absl::StatusOr<std::vector<std::unique_ptr<Workload>>> MakeWorkloads() {
  std::vector<std::unique_ptr<Workload>> workloads;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    TDOCK_ASSIGN_OR_RETURN(Shape shape, ShapeByName(std::string(name)));
    TDOCK_ASSIGN_OR_RETURN(auto workload,
                           Workload::Make(shape, absl::GetFlag(FLAGS_chunk_rows)));
    workloads.push_back(std::move(workload));
  }
  return workloads;
}

absl::Status ServeBaseline() {
  // Blocked before gRPC starts its threads, so only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int64_t largest = 0;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    TDOCK_ASSIGN_OR_RETURN(Shape shape, ShapeByName(std::string(name)));
    largest = std::max(largest, absl::GetFlag(FLAGS_chunk_rows) * shape.columns *
                                    shape.row_bytes());
  }
  std::unique_ptr<Buffer> payload = BaselinePayload(largest);
  TDOCK_ASSIGN_OR_RETURN(
      auto server, bench::BaselineServer::Start(payload->span(0, payload->size()), 1 << 30));
  std::printf("baseline-server listening on 127.0.0.1:%d\n", server->port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  return absl::OkStatus();
}

struct Sink {
  std::FILE* file = nullptr;

  void Sample(const Contender& contender, const Workload& workload,
              const char* direction, int pass, double seconds) {
    const int64_t bytes = workload.shape().pass_bytes();
    std::fprintf(stderr, "  %-6s %-6s %s pass %d: %7.3f s  %6.2f GB/s\n",
                 workload.shape().name.c_str(), contender.name().c_str(), direction,
                 pass, seconds, bytes / seconds / 1e9);
    if (file == nullptr) return;
    std::fprintf(file,
                 "{\"client\": \"cpp\", \"contender\": \"%s\", \"shape\": \"%s\", "
                 "\"direction\": \"%s\", \"pass\": %d, \"bytes\": %lld, "
                 "\"chunk_rows\": %lld, \"seconds\": %.6f}\n",
                 contender.name().c_str(), workload.shape().name.c_str(), direction,
                 pass, static_cast<long long>(bytes),
                 static_cast<long long>(workload.chunks().front().rows()), seconds);
    std::fflush(file);
  }
};

absl::Status RunShape(const Workload& workload,
                      const std::vector<std::unique_ptr<Contender>>& contenders,
                      int passes, Sink& sink) {
  for (const auto& contender : contenders) {
    TDOCK_RETURN_IF_ERROR(contender->Prepare(workload));
    TDOCK_RETURN_IF_ERROR(contender->Verify());
    std::fprintf(stderr, "  %-6s %-6s verified %lld bytes each way\n",
                 workload.shape().name.c_str(), contender->name().c_str(),
                 static_cast<long long>(workload.shape().pass_bytes()));
  }
  for (int pass = 1; pass <= passes; ++pass) {
    for (const auto& contender : contenders) {
      TDOCK_ASSIGN_OR_RETURN(double put, contender->TimePut());
      sink.Sample(*contender, workload, "put", pass, put);
      TDOCK_ASSIGN_OR_RETURN(double get, contender->TimeGet());
      sink.Sample(*contender, workload, "get", pass, get);
    }
  }
  for (const auto& contender : contenders) TDOCK_RETURN_IF_ERROR(contender->Finish());
  return absl::OkStatus();
}

absl::Status Run() {
  if (absl::GetFlag(FLAGS_serve_baseline)) return ServeBaseline();
  std::vector<std::unique_ptr<Contender>> contenders;
  if (!absl::GetFlag(FLAGS_tdock).empty()) {
    TDOCK_ASSIGN_OR_RETURN(auto c, MakeTdockContender(absl::GetFlag(FLAGS_tdock)));
    contenders.push_back(std::move(c));
  }
  if (!absl::GetFlag(FLAGS_redis).empty()) {
    const std::string io = absl::GetFlag(FLAGS_redis_io);
    if (io != "wire" && io != "hiredis") {
      return absl::InvalidArgumentError("--redis_io must be wire or hiredis");
    }
    TDOCK_ASSIGN_OR_RETURN(auto c,
                           MakeRedisContender(absl::GetFlag(FLAGS_redis), io == "wire"));
    contenders.push_back(std::move(c));
  }
  if (!absl::GetFlag(FLAGS_grpc).empty()) {
    TDOCK_ASSIGN_OR_RETURN(auto c, MakeGrpcContender(absl::GetFlag(FLAGS_grpc)));
    contenders.push_back(std::move(c));
  }
  if (contenders.empty()) {
    return absl::InvalidArgumentError("no contender: give --tdock, --redis or --grpc");
  }
  Sink sink;
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty() && (sink.file = std::fopen(out.c_str(), "a")) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open ", out));
  }
  absl::Status status = absl::OkStatus();
  TDOCK_ASSIGN_OR_RETURN(auto workloads, MakeWorkloads());
  for (const auto& workload : workloads) {
    status = RunShape(*workload, contenders, absl::GetFlag(FLAGS_passes), sink);
    if (!status.ok()) break;
  }
  if (sink.file != nullptr) std::fclose(sink.file);
  return status;
}

}  // namespace
}  // namespace tdock::compare

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = tdock::compare::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "tdock_compare: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
