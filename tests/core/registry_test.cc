// DockRegistry: idempotent creation by spec, lookup and deletion.
#include "server/dock/registry.h"

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

}  // namespace
}  // namespace tdock
