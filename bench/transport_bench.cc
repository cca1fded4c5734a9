// Put and Get throughput of tdock over loopback gRPC, against plain gRPC
// unary calls that carry the same bytes in one protobuf `bytes` field.
//
//   put/tdock/tokens:<L>     Client::Put of one batch (256 rows × L int32
//                            tokens as one packed column, borrowed from a
//                            prepared buffer with ClientColumn::View) into a
//                            fresh step; the step is released on the server
//                            with timing paused.
//   put/baseline/tokens:<L>  Baseline.Send of the same bytes in Blob.data. The
//                            Blob is built once, outside the loop, so only
//                            serialization and transfer are timed.
//   get/tdock/tokens:<L>     Client::Get of a whole fresh step (256 rows),
//                            written through the core with timing paused; the
//                            Get ends the step for the only consumer, which
//                            releases it. The received batch is freed inside
//                            the timed region.
//   get/baseline/tokens:<L>  Baseline.Fetch returning the same bytes in
//                            Blob.data (the service copies them into the
//                            response, as a protobuf service must).
//
// L = 1024, 4096, 16384, 32768, i.e. 1, 4, 16, 32 MiB per call. Sizes are
// registered interleaved (tdock, then baseline, per size and direction) so
// both sides of a ratio run under the same machine load. bytes_per_second is
// payload (token) bytes per second of wall time. Before timing, each benchmark
// makes one call whose data it checks end to end.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/transport_env.h"
#include "common/malloc_tuning.h"
#include "common/status.h"
#include "benchmark/benchmark.h"
#include "grpcpp/client_context.h"

namespace tdock::bench {
namespace {

TransportEnv* g_env = nullptr;

void Fail(benchmark::State& state, const absl::Status& status) {
  state.SkipWithError(status.ToString().c_str());
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view call) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(call, ": ", status.error_message()));
}

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

void Finish(benchmark::State& state, int64_t tokens) {
  const int64_t bytes = static_cast<int64_t>(g_env->Payload(tokens).size());
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["batch_mib"] = static_cast<double>(bytes) / (1 << 20);
}

// Puts a batch into a fresh step, reads it back from the core, releases it.
absl::Status CheckPut(Dock& dock, ClientPut& put, int64_t tokens) {
  put.step = g_env->NextStep(put.dock);
  absl::StatusOr<PutAck> ack = g_env->client().Put(put);
  if (!ack.ok()) return ack.status();
  std::vector<int64_t> rows(kRows);
  for (int64_t i = 0; i < kRows; ++i) rows[i] = i;
  absl::StatusOr<Batch> stored = dock.Read(put.step, rows, {kColumn});
  if (!stored.ok()) return stored.status();
  if (stored->columns.size() != 1) return absl::InternalError("Read returned no column");
  absl::Status same = g_env->Verify(stored->columns[0], tokens);
  absl::Status released = dock.ReleaseStep(put.step);
  return same.ok() ? released : same;
}

void BM_TdockPut(benchmark::State& state, int64_t tokens) {
  const std::string name = TransportEnv::PutDock(tokens);
  absl::StatusOr<std::shared_ptr<Dock>> dock = g_env->FindDock(name);
  if (!dock.ok()) return Fail(state, dock.status());
  ClientPut put;
  put.dock = name;
  for (int64_t i = 0; i < kRows; ++i) put.rows.push_back(i);
  put.columns.push_back(ClientColumn::View(kColumn, DType::kInt32,
                                           TransportEnv::Offsets(tokens),
                                           g_env->Payload(tokens)));
  if (absl::Status checked = CheckPut(**dock, put, tokens); !checked.ok()) {
    return Fail(state, checked);
  }
  for (auto _ : state) {
    put.step = g_env->NextStep(name);
    absl::StatusOr<PutAck> ack = g_env->client().Put(put);
    state.PauseTiming();
    absl::Status status = ack.ok() ? (*dock)->ReleaseStep(put.step) : ack.status();
    if (status.ok() && ack->rows != kRows) {
      status = absl::InternalError(absl::StrCat("Put wrote ", ack->rows, " rows"));
    }
    state.ResumeTiming();
    if (!status.ok()) {
      Fail(state, status);
      break;
    }
  }
  Finish(state, tokens);
}

// Fills a fresh step through the core and Gets it whole over the wire.
absl::StatusOr<ClientBatch> FillAndGet(Dock& dock, ClientGet& get, int64_t tokens,
                                       benchmark::State* timed) {
  if (timed != nullptr) timed->PauseTiming();
  get.step = g_env->NextStep(get.dock);
  absl::Status filled = g_env->FillStep(dock, *get.step, tokens);
  if (timed != nullptr) timed->ResumeTiming();
  if (!filled.ok()) return filled;
  absl::StatusOr<ClientBatch> batch = g_env->client().Get(get);
  if (batch.ok() && (batch->rows.size() != kRows || !batch->end_of_step)) {
    return absl::InternalError(absl::StrCat("Get of step ", *get.step, " returned ",
                                            batch->rows.size(), " rows"));
  }
  return batch;
}

void BM_TdockGet(benchmark::State& state, int64_t tokens) {
  const std::string name = TransportEnv::GetDock(tokens);
  absl::StatusOr<std::shared_ptr<Dock>> dock = g_env->FindDock(name);
  if (!dock.ok()) return Fail(state, dock.status());
  ClientGet get;
  get.dock = name;
  get.consumer = kConsumer;
  get.count = kRows;
  get.wait = absl::Seconds(10);
  {
    absl::StatusOr<ClientBatch> batch = FillAndGet(**dock, get, tokens, nullptr);
    absl::Status checked = batch.ok() ? (batch->columns.size() == 1
                                             ? g_env->Verify(batch->columns[0], tokens)
                                             : absl::InternalError("Get returned no column"))
                                      : batch.status();
    if (!checked.ok()) return Fail(state, checked);
  }
  for (auto _ : state) {
    absl::StatusOr<ClientBatch> batch = FillAndGet(**dock, get, tokens, &state);
    if (!batch.ok()) {
      Fail(state, batch.status());
      break;
    }
  }
  Finish(state, tokens);
}

void BM_BaselineSend(benchmark::State& state, int64_t tokens) {
  const ByteSpan payload = g_env->Payload(tokens);
  Blob blob;
  blob.set_data(payload.data(), payload.size());
  {
    blob.set_want_checksum(true);
    grpc::ClientContext context;
    SetDeadline(context);
    Ack ack;
    absl::Status status = FromGrpc(g_env->baseline().Send(&context, blob, &ack), "Send");
    if (status.ok() && (ack.bytes() != static_cast<int64_t>(payload.size()) ||
                        ack.checksum() != Checksum(payload))) {
      status = absl::InternalError("Send: the server received other bytes");
    }
    if (!status.ok()) return Fail(state, status);
    blob.set_want_checksum(false);
  }
  for (auto _ : state) {
    grpc::ClientContext context;
    SetDeadline(context);
    Ack ack;
    absl::Status status = FromGrpc(g_env->baseline().Send(&context, blob, &ack), "Send");
    if (status.ok() && ack.bytes() != static_cast<int64_t>(payload.size())) {
      status = absl::InternalError(absl::StrCat("Send: server got ", ack.bytes(), " bytes"));
    }
    if (!status.ok()) {
      Fail(state, status);
      break;
    }
  }
  Finish(state, tokens);
}

// One Fetch; with `check`, compares the received bytes with `expected`.
absl::Status FetchOnce(const FetchRequest& request, ByteSpan expected, bool check) {
  grpc::ClientContext context;
  SetDeadline(context);
  Blob blob;
  TDOCK_RETURN_IF_ERROR(FromGrpc(g_env->baseline().Fetch(&context, request, &blob), "Fetch"));
  if (blob.data().size() != expected.size()) {
    return absl::InternalError(absl::StrCat("Fetch returned ", blob.data().size(),
                                            " bytes, expected ", expected.size()));
  }
  if (check && std::memcmp(blob.data().data(), expected.data(), expected.size()) != 0) {
    return absl::InternalError("Fetch returned other bytes than the payload");
  }
  return absl::OkStatus();
}

void BM_BaselineFetch(benchmark::State& state, int64_t tokens) {
  const ByteSpan payload = g_env->Payload(tokens);
  FetchRequest request;
  request.set_bytes(static_cast<int64_t>(payload.size()));
  if (absl::Status checked = FetchOnce(request, payload, true); !checked.ok()) {
    return Fail(state, checked);
  }
  for (auto _ : state) {
    if (absl::Status status = FetchOnce(request, payload, false); !status.ok()) {
      Fail(state, status);
      break;
    }
  }
  Finish(state, tokens);
}

void Register(const std::vector<int64_t>& sizes) {
  using Fn = void (*)(benchmark::State&, int64_t);
  const std::pair<const char*, Fn> kinds[] = {
      {"put/tdock", &BM_TdockPut},
      {"put/baseline", &BM_BaselineSend},
      {"get/tdock", &BM_TdockGet},
      {"get/baseline", &BM_BaselineFetch},
  };
  for (int64_t tokens : sizes) {
    for (const auto& [kind, fn] : kinds) {
      const std::string name = absl::StrCat(kind, "/tokens:", tokens);
      benchmark::RegisterBenchmark(name.c_str(), fn, tokens)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace tdock::bench

int main(int argc, char** argv) {
  tdock::TuneMallocForLargeMessages();  // as tdock-server does
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const std::vector<int64_t> sizes = {1024, 4096, 16384, 32768};
  absl::StatusOr<std::unique_ptr<tdock::bench::TransportEnv>> env =
      tdock::bench::TransportEnv::Start(sizes);
  if (!env.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", env.status().ToString().c_str());
    return 1;
  }
  tdock::bench::g_env = env->get();
  tdock::bench::Register(sizes);
  benchmark::RunSpecifiedBenchmarks();
  tdock::bench::g_env = nullptr;
  env->reset();
  benchmark::Shutdown();
  return 0;
}
