// libFuzzer target over the request decoding and validation path: bytes of a
// PutRequest through the bulk framing (proto/tdock/v1/bulk.h), split in two
// segments, into a Dock (then a Get and
// a Read of what it holds), and bytes of a CreateDockRequest or a YAML spec
// through the spec conversions and validation into Dock::Create. The first
// byte picks the path. Built with -fsanitize=fuzzer,address,undefined by
// scripts/test.sh (build-fuzz/), which runs it for a bounded time over the
// seed corpus in tests/fuzz/corpus.
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/spec_yaml.h"
#include "proto/tdock/v1/bulk.h"
#include "proto/tdock/v1/convert.h"
#include "server/dock/dock.h"
#include "tdock/v1/dock.pb.h"

namespace tdock {
namespace {

// Specs the fuzzer may create: small enough that each input runs fast.
constexpr int64_t kMaxFuzzCells = int64_t{1} << 16;
constexpr int64_t kMaxFuzzBytes = int64_t{64} << 20;

// The dock Put inputs go to: 4 prompts x 2 samples, two steps in flight, a
// balanced consumer with micro-batches, a leased one and a whole-group one;
// a Put may add columns (up to the dock's bound on them).
Dock& TargetDock() {
  static Dock* dock = [] {
    absl::StatusOr<std::vector<DockSpec>> specs = ParseSpecsYaml(R"(
name: fuzz
num_prompts: 4
n_samples_per_prompt: 2
steps_in_flight: 2
length_columns: [ids]
add_columns_on_write: true
columns:
  ids:   {dtype: int32, max_len: 64}
  score: {dtype: float32}
  logp:  {dtype: bfloat16, inner_shape: [2]}
  text:  {dtype: bytes, rewritable: true}
consumers:
  plain:    {columns: [ids]}
  balanced: {columns: [ids, score], dp_size: 2, dispatch_size: 2, policy: balanced,
             micro_batch: {max_tokens: 64, round_to: 2}}
  leased:   {columns: [ids], lease_ms: 1, policy: random, seed: 3}
  groups:   {columns: [ids, text], whole_groups: true, dispatch_size: 4}
)");
    return Dock::Create(specs.value().front()).value().release();
  }();
  return *dock;
}

void PutBytes(const uint8_t* data, size_t size) {
  const ByteSpan bytes(reinterpret_cast<const char*>(data), size);
  const ByteSpan segments[] = {bytes.first(size / 3), bytes.subspan(size / 3)};
  absl::StatusOr<bulk::Decoded<v1::PutRequest>> message = bulk::DecodePut(segments);
  if (!message.ok()) return;
  Dock& dock = TargetDock();
  PutInput input;
  input.step = message->header.step() % 4;  // keep to a few steps so they get released
  input.rows.assign(message->header.rows().begin(), message->header.rows().end());
  input.columns = std::move(message->columns);
  input.ack_lease = message->header.ack_lease();
  for (const v1::ColumnSpec& column : message->header.new_columns()) {
    absl::StatusOr<ColumnSpec> spec = FromProto(column);
    if (!spec.ok()) return;
    input.new_columns.push_back(*std::move(spec));
  }
  std::promise<void> put_done;
  dock.Put(std::move(input), [&](absl::StatusOr<PutResult>) { put_done.set_value(); });
  put_done.get_future().wait();
  for (const char* consumer : {"plain", "balanced", "leased", "groups"}) {
    GetInput get;
    get.consumer = consumer;
    get.rank = static_cast<int32_t>(size % 2);
    std::promise<absl::StatusOr<Batch>> got;
    dock.Get(std::move(get), [&](absl::StatusOr<Batch> b) { got.set_value(std::move(b)); });
    absl::StatusOr<Batch> batch = got.get_future().get();
    if (batch.ok() && batch->lease_id != 0 && size % 3 == 0) {
      (void)dock.Nack(consumer, batch->lease_id);
    }
  }
  for (const StepStats& step : dock.Stats().steps) {
    (void)dock.Read(step.step, {0, 1, 7}, {});
    if (size % 5 == 0) (void)dock.ReleaseStep(step.step);
  }
  const DockStats stats = dock.Stats();
  if (stats.steps.size() == 2) (void)dock.ReleaseStep(stats.steps.front().step);
}

void CreateFrom(DockSpec spec) {
  if (spec.preallocate_bytes > kMaxFuzzBytes) return;
  absl::StatusOr<DockSpec> normalized = NormalizeSpec(spec);
  if (!normalized.ok() ||
      normalized->rows_per_step() * static_cast<int64_t>(normalized->columns.size()) *
              normalized->steps_in_flight > kMaxFuzzCells) {
    return;
  }
  (void)Dock::Create(std::move(spec));
}

void CreateDockBytes(const uint8_t* data, size_t size) {
  v1::CreateDockRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<DockSpec> spec = FromProto(request.spec());
  if (spec.ok()) CreateFrom(*std::move(spec));
}

void YamlBytes(const uint8_t* data, size_t size) {
  absl::StatusOr<std::vector<DockSpec>> specs =
      ParseSpecsYaml(std::string(reinterpret_cast<const char*>(data), size));
  if (!specs.ok()) return;
  for (DockSpec& spec : *specs) CreateFrom(std::move(spec));
}

}  // namespace
}  // namespace tdock

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0: tdock::PutBytes(data + 1, size - 1); break;
    case 1: tdock::CreateDockBytes(data + 1, size - 1); break;
    default: tdock::YamlBytes(data + 1, size - 1); break;
  }
  return 0;
}
