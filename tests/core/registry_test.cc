// DockRegistry: idempotent creation by spec, lookup and deletion; a
// deletion takes effect only once it is recorded.
#include "server/dock/registry.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

DockSpec Spec() {
  DockSpec spec;
  spec.name = "reg";
  spec.num_prompts = 4;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}};
  ConsumerSpec actor{"actor", {"tokens"}, 0, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 8};
  spec.consumers = {actor};
  return spec;
}

// Creating again with the same spec returns the same dock; with any field
// different (here only the micro-batch budget) it is refused.
TEST(DockRegistry, CreateIsIdempotentOnlyForTheSameSpec) {
  DockRegistry registry;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> first, registry.Create(Spec()));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> again, registry.Create(Spec()));
  EXPECT_EQ(first, again);
  DockSpec other = Spec();
  other.consumers[0].micro_batch->max_tokens = 4096;
  EXPECT_STATUS(registry.Create(other), absl::StatusCode::kAlreadyExists,
                "dock 'reg' already exists with a different spec");
}

// The comparison is against the spec the dock was created with, so adding a
// consumer does not make the original spec "different".
TEST(DockRegistry, AddedConsumerDoesNotBreakIdempotence) {
  DockRegistry registry;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, registry.Create(Spec()));
  ASSERT_OK(dock->AddConsumer({"critic", {"tokens"}, 0, 1, false, Policy::kFifo, 0}));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> again, registry.Create(Spec()));
  EXPECT_EQ(dock, again);
}

// One change to a spec, named for the test's output.
struct SpecChange {
  std::string field;
  std::function<void(DockSpec&)> change;
};

// Two columns, two consumers (one BALANCED with a micro-batch plan and a
// lease, one FIFO) and every dock field set, so each field can be changed.
DockSpec FullSpec() {
  DockSpec spec;
  spec.name = "full";
  spec.num_prompts = 4;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false},
                  {"score", DType::kFloat32, {2}, 0, false},
                  {"uid", DType::kBytes, {}, 0, false}};
  ConsumerSpec actor{"actor", {"tokens"}, 0, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 64};
  actor.lease_ms = 1000;
  spec.consumers = {actor, {"critic", {"tokens"}, 0, 1, false, Policy::kFifo, 0}};
  spec.preallocate_bytes = 1 << 20;
  spec.memory_limit_bytes = 64 << 20;
  spec.seal_when = SealWhen{"actor", 2};
  return spec;
}

// Every field of a spec, changed in turn (to another valid value).
std::vector<SpecChange> EveryFieldChanged() {
  auto actor = [](DockSpec& s) -> ConsumerSpec& { return s.consumers[0]; };
  auto budget = [](DockSpec& s) -> MicroBatchOptions& { return *s.consumers[0].micro_batch; };
  return {
      {"num_prompts", [](DockSpec& s) { s.num_prompts = 8; }},
      {"n_samples_per_prompt", [](DockSpec& s) { s.n_samples_per_prompt = 1; }},
      {"steps_in_flight", [](DockSpec& s) { s.steps_in_flight = 3; }},
      {"length_columns", [](DockSpec& s) { s.length_columns = {"tokens", "score"}; }},
      {"preallocate_bytes", [](DockSpec& s) { s.preallocate_bytes = 2 << 20; }},
      {"memory_limit_bytes", [](DockSpec& s) { s.memory_limit_bytes = 32 << 20; }},
      {"chunk_bytes", [](DockSpec& s) { s.chunk_bytes = 1 << 20; }},
      {"seal_when consumer", [](DockSpec& s) { s.seal_when->consumer = "critic"; }},
      {"seal_when groups", [](DockSpec& s) { s.seal_when->groups = 3; }},
      {"seal_when unset", [](DockSpec& s) { s.seal_when.reset(); }},
      {"retain_steps", [](DockSpec& s) { s.retain_steps = true; }},
      {"add_columns_on_write", [](DockSpec& s) { s.add_columns_on_write = true; }},
      {"columns (one more)",
       [](DockSpec& s) { s.columns.push_back({"extra", DType::kInt64, {}, 0, false}); }},
      {"column name", [](DockSpec& s) { s.columns[1].name = "reward"; }},
      {"column dtype", [](DockSpec& s) { s.columns[1].dtype = DType::kFloat64; }},
      {"column inner_shape", [](DockSpec& s) { s.columns[1].inner_shape = {3}; }},
      {"column max_len", [](DockSpec& s) { s.columns[1].max_len = 16; }},
      {"column rewritable", [](DockSpec& s) { s.columns[1].rewritable = true; }},
      {"column encoding", [](DockSpec& s) { s.columns[2].encoding = ColumnEncoding::kUtf8; }},
      {"consumers (one more)",
       [](DockSpec& s) { s.consumers.push_back({"ref", {"tokens"}, 0, 1, false, Policy::kFifo, 0}); }},
      {"consumer name", [](DockSpec& s) { s.consumers[1].name = "value"; }},
      {"consumer columns", [](DockSpec& s) { s.consumers[1].columns = {"tokens", "score"}; }},
      {"dispatch_size", [=](DockSpec& s) { actor(s).dispatch_size = 2; }},
      {"replicas", [=](DockSpec& s) { actor(s).replicas = 2; }},
      {"dp_size", [=](DockSpec& s) { actor(s).dp_size = 4; }},
      {"whole_groups", [=](DockSpec& s) { actor(s).whole_groups = true; }},
      {"policy", [=](DockSpec& s) { actor(s).policy = Policy::kRandom; }},
      {"seed", [=](DockSpec& s) { actor(s).seed = 7; }},
      {"cost.a", [=](DockSpec& s) { actor(s).cost.a = 2; }},
      {"cost.b", [=](DockSpec& s) { actor(s).cost.b = 0.5; }},
      {"micro_batch (unset)", [=](DockSpec& s) { actor(s).micro_batch.reset(); }},
      {"micro_batch.max_tokens", [=](DockSpec& s) { budget(s).max_tokens = 128; }},
      {"micro_batch.max_rows", [=](DockSpec& s) { budget(s).max_rows = 3; }},
      {"micro_batch.round_to", [=](DockSpec& s) { budget(s).round_to = 2; }},
      {"micro_batch.count_multiple", [=](DockSpec& s) { budget(s).count_multiple = 2; }},
      {"micro_batch.min_count", [=](DockSpec& s) { budget(s).min_count = 1; }},
      {"micro_batch.padded", [=](DockSpec& s) { budget(s).padded = true; }},
      {"micro_batch.planner",
       [=](DockSpec& s) { budget(s).planner = MicroBatchPlanner::kPacked; }},
      {"micro_batch.order",
       [=](DockSpec& s) { budget(s).order = MicroBatchOrder::kSmallestAtEnds; }},
      {"same_count_across_ranks",
       [=](DockSpec& s) { actor(s).same_count_across_ranks = false; }},
      {"lease_ms", [=](DockSpec& s) { actor(s).lease_ms = 2000; }},
  };
}

// CreateDock of an existing name is the existing dock only for an equal
// spec: each field changed in turn (every one valid on its own, as a
// creation under another name shows) is ALREADY_EXISTS. Spelling a default
// out (dispatch_size, chunk_bytes) is the same spec.
TEST(DockRegistry, EveryFieldOfTheSpecCounts) {
  DockRegistry registry;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, registry.Create(FullSpec()));
  DockSpec spelled = FullSpec();
  spelled.consumers[0].dispatch_size = 4;
  spelled.chunk_bytes = DockSpec::kDefaultChunkBytes;
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> same, registry.Create(spelled));
  EXPECT_EQ(same, dock);
  for (const SpecChange& change : EveryFieldChanged()) {
    SCOPED_TRACE(change.field);
    DockSpec changed = FullSpec();
    change.change(changed);
    EXPECT_STATUS(registry.Create(changed), absl::StatusCode::kAlreadyExists,
                  "dock 'full' already exists with a different spec");
    changed.name = "other";
    EXPECT_OK(registry.Create(changed));
    ASSERT_OK(registry.Delete("other"));
  }
}

// Find and Delete name the dock when it does not exist; List is by name.
TEST(DockRegistry, FindListDelete) {
  DockRegistry registry;
  EXPECT_STATUS(registry.Find("reg"), absl::StatusCode::kNotFound, "dock 'reg' does not exist");
  ASSERT_OK(registry.Create(Spec()));
  DockSpec b = Spec();
  b.name = "a_first";
  ASSERT_OK(registry.Create(b));
  std::vector<std::shared_ptr<Dock>> docks = registry.List();
  ASSERT_EQ(docks.size(), 2u);
  EXPECT_EQ(docks[0]->name(), "a_first");
  ASSERT_OK(registry.Delete("reg"));
  EXPECT_STATUS(registry.Delete("reg"), absl::StatusCode::kNotFound, "reg");
  registry.Shutdown();
  EXPECT_STATUS(registry.Create(Spec()), absl::StatusCode::kUnavailable, "shutting down");
}

// Hooks whose deletion records the test answers by hand.
class HeldDeletions final : public RegistryHooks {
 public:
  std::shared_ptr<DockJournal> NewJournal(const std::string&) override { return nullptr; }
  void Created(const DockSpec&, StatusCallback done) override {
    std::move(done)(absl::OkStatus());
  }
  void Deleted(const std::string&, StatusCallback done) override { held = std::move(done); }
  StatusCallback held;
};

// While its deletion is recorded the dock is not found and its name can be
// neither deleted nor created again; a deletion whose record fails leaves
// the dock serving as it was, and answers UNAVAILABLE.
TEST(DockRegistry, ADeletionTakesEffectOnlyOnceRecorded) {
  HeldDeletions hooks;
  DockRegistry registry;
  registry.SetHooks(&hooks);
  ASSERT_OK(registry.Create(Spec()));
  std::optional<absl::Status> answer;
  registry.Delete("reg", [&](absl::Status s) { answer = std::move(s); });
  ASSERT_TRUE(hooks.held);
  EXPECT_FALSE(answer.has_value());
  EXPECT_STATUS(registry.Find("reg"), absl::StatusCode::kNotFound, "dock 'reg' is being deleted");
  EXPECT_TRUE(registry.List().empty());
  EXPECT_STATUS(registry.Delete("reg"), absl::StatusCode::kAborted, "is being deleted");
  std::optional<absl::StatusOr<std::shared_ptr<Dock>>> created;
  registry.Create(Spec(), [&](absl::StatusOr<std::shared_ptr<Dock>> d) { created = std::move(d); });
  ASSERT_TRUE(created.has_value());
  EXPECT_STATUS(*created, absl::StatusCode::kAborted, "dock 'reg' is being deleted");

  std::move(hooks.held)(absl::UnavailableError("disk full"));
  ASSERT_TRUE(answer.has_value());
  EXPECT_STATUS(*answer, absl::StatusCode::kUnavailable,
                "dock 'reg': deletion not stored (disk full)");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, registry.Find("reg"));
  EXPECT_EQ(dock->spec().name, "reg") << "still there, and serving";

  answer.reset();
  registry.Delete("reg", [&](absl::Status s) { answer = std::move(s); });
  std::move(hooks.held)(absl::OkStatus());
  ASSERT_TRUE(answer.has_value());
  ASSERT_OK(*answer);
  EXPECT_STATUS(registry.Find("reg"), absl::StatusCode::kNotFound, "dock 'reg' does not exist");
  registry.Shutdown();
}

}  // namespace
}  // namespace tdock
