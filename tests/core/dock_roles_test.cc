// Roles at run time: a removed consumer no longer holds any step and its
// calls fail naming the removal; an optional consumer holds no step until its
// first Get, and every step not released by then from that Get on. Bad input
// changes nothing.
#include <atomic>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "server/dock/registry.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::DropSpec;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::kLongWait;
using testing::PutSync;
using testing::Reader;

ConsumerSpec Optional(ConsumerSpec consumer) {
  consumer.optional = true;
  return consumer;
}

// Writes every row of `step` (8 rows of "prompt").
void Fill(Dock& dock, int64_t step) {
  ASSERT_OK(PutSync(dock, step, Iota(0, 8), {Cells("prompt", Iota(0, 8))}, kLongWait));
}

std::vector<int64_t> LiveSteps(const Dock& dock) {
  std::vector<int64_t> steps;
  for (const StepStats& step : dock.Stats().steps) steps.push_back(step.step);
  return steps;
}

// A step the actor is done with is held by the reference consumer until the
// reference consumer is removed; then it is released at once, and the
// removed consumer's Gets and Acks fail saying so.
TEST(RolesTest, RemovedConsumerReleasesItsStepsAndItsCallsFail) {
  ConsumerSpec ref = Reader("ref", {"prompt"}, 8);
  ref.lease_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8), ref})));
  Fill(*dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch leased, GetSync(*dock, GetOf("ref", 2)));
  ASSERT_EQ(leased.rows.size(), 2u);
  ASSERT_OK_AND_ASSIGN(Batch all, GetSync(*dock, GetOf("actor")));
  EXPECT_TRUE(all.end_of_step);
  EXPECT_EQ(LiveSteps(*dock), std::vector<int64_t>{0}) << "ref still holds step 0";

  ASSERT_OK_AND_ASSIGN(ConsumerSpec removed, dock->RemoveConsumer("ref"));
  EXPECT_TRUE(removed.removed);
  EXPECT_TRUE(LiveSteps(*dock).empty()) << "nobody left holds step 0";
  EXPECT_STATUS(GetSync(*dock, GetOf("ref")).status(), absl::StatusCode::kNotFound,
                "consumer 'ref' was removed");
  EXPECT_STATUS(dock->Ack("ref", leased.lease_id).status(), absl::StatusCode::kNotFound,
                "was removed");


  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.consumers, std::vector<std::string>{"actor"}) << "status omits it";
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{8});
  ASSERT_EQ(dock->spec().consumers.size(), 2u) << "the spec keeps it, marked removed";
  EXPECT_TRUE(dock->spec().consumers[1].removed);
  EXPECT_EQ(dock->spec().ConsumerIndex("ref"), -1);
}

// No Put acknowledges a removed consumer's lease; nothing is written.
TEST(RolesTest, PutDoesNotAcknowledgeARemovedConsumersLease) {
  ConsumerSpec ref = Reader("ref", {"prompt"}, 2);
  ref.lease_ms = 60'000;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8), ref})));
  Fill(*dock, 0);
  ASSERT_OK_AND_ASSIGN(Batch leased, GetSync(*dock, GetOf("ref")));
  ASSERT_OK(dock->RemoveConsumer("ref"));
  EXPECT_STATUS(testing::PutSync(*dock, 0, leased.rows, {Cells("response", leased.rows)},
                                 absl::ZeroDuration(), leased.lease_id),
                absl::StatusCode::kNotFound, "ack_lease: dock 'drops': consumer 'ref' was removed");
  EXPECT_EQ(dock->Stats().steps.at(0).ready_rows, (std::vector<int64_t>{8, 0}));
}

// A Get of the consumer parked when it is removed ends with NOT_FOUND.
TEST(RolesTest, ParkedGetOfRemovedConsumerEnds) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8),
                                                         Reader("ref", {"prompt"}, 8)})));
  std::promise<absl::StatusOr<Batch>> parked;
  dock->Get(GetOf("ref", 0, kLongWait),
            [&](absl::StatusOr<Batch> batch) { parked.set_value(std::move(batch)); });
  ASSERT_OK(dock->RemoveConsumer("ref"));
  absl::StatusOr<Batch> got = parked.get_future().get();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
}

// The name of a removed consumer is free: a consumer added under it starts
// afresh and sees every row of the live steps.
TEST(RolesTest, NameOfRemovedConsumerCanBeTakenAgain) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8),
                                                         Reader("ref", {"prompt"}, 4)})));
  Fill(*dock, 0);
  ASSERT_OK(GetSync(*dock, GetOf("ref")));
  ASSERT_OK(dock->RemoveConsumer("ref"));
  ASSERT_OK(dock->AddConsumer(Reader("ref", {"prompt"}, 8)));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("ref")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  EXPECT_EQ(dock->Stats().consumers, (std::vector<std::string>{"actor", "ref"}));
  EXPECT_EQ(dock->spec().consumers.size(), 3u);
  EXPECT_EQ(dock->spec().ConsumerIndex("ref"), 2);
}

// With every consumer removed no step is released by itself (as with none).
TEST(RolesTest, StepsStayWhenNoConsumerIsLeft) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)})));
  Fill(*dock, 0);
  ASSERT_OK(dock->RemoveConsumer("actor"));
  EXPECT_EQ(LiveSteps(*dock), std::vector<int64_t>{0});
  ASSERT_OK(dock->ReleaseStep(0));
}

// Bad removals name what is wrong and change nothing.
TEST(RolesTest, BadRemovalsChangeNothing) {
  DockSpec spec = DropSpec({Reader("actor", {"prompt"}, 8, true), Reader("ref", {"prompt"}, 8)});
  spec.seal_when = SealWhen{"actor", 2};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  const DockSpec before = dock->spec();
  EXPECT_STATUS(dock->RemoveConsumer("critic").status(), absl::StatusCode::kNotFound,
                "'critic' is unknown");
  EXPECT_STATUS(dock->RemoveConsumer("").status(), absl::StatusCode::kInvalidArgument,
                "consumer name is empty");
  EXPECT_STATUS(dock->RemoveConsumer("actor").status(), absl::StatusCode::kFailedPrecondition,
                "seal_when");
  EXPECT_EQ(dock->spec(), before);
  ASSERT_OK(dock->RemoveConsumer("ref"));
  EXPECT_STATUS(dock->RemoveConsumer("ref").status(), absl::StatusCode::kNotFound,
                "'ref' was removed");

  // The server's state cannot come from a user's spec.
  ConsumerSpec state = Reader("critic", {"prompt"}, 8);
  state.removed = true;
  EXPECT_STATUS(dock->AddConsumer(state).status(), absl::StatusCode::kInvalidArgument,
                "sets removed");
  state.removed = false;
  state.joined = true;
  EXPECT_EQ(dock->AddConsumer(state).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dock->spec().ConsumerIndex("critic"), -1);
}

// An optional consumer that has made no Get holds nothing: the actor's last
// Get releases the step. From its first Get on (even one that returns
// nothing) it holds every step not yet released.
TEST(RolesTest, OptionalConsumerHoldsStepsFromItsFirstGet) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8),
                                                         Optional(Reader("ref", {"prompt"}, 8))})));
  Fill(*dock, 0);
  ASSERT_OK(GetSync(*dock, GetOf("actor")));
  EXPECT_TRUE(LiveSteps(*dock).empty()) << "ref has not joined: step 0 is released";
  EXPECT_FALSE(dock->spec().consumers[1].joined);

  ASSERT_OK_AND_ASSIGN(Batch nothing, GetSync(*dock, GetOf("ref")));
  EXPECT_TRUE(nothing.rows.empty());
  EXPECT_TRUE(dock->spec().consumers[1].joined);
  Fill(*dock, 1);
  ASSERT_OK(GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(LiveSteps(*dock), std::vector<int64_t>{1}) << "ref holds step 1 now";
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("ref")));
  EXPECT_EQ(batch.step, 1);
  EXPECT_EQ(batch.rows, Iota(0, 8));
  EXPECT_TRUE(LiveSteps(*dock).empty());
}

// A dock whose only consumers are optional and not joined keeps its steps.
TEST(RolesTest, UnjoinedOptionalConsumersAloneHoldNothingAndReleaseNothing) {
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Optional(Reader("ref", {"prompt"}, 8))})));
  Fill(*dock, 0);
  EXPECT_EQ(LiveSteps(*dock), std::vector<int64_t>{0});
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("ref")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  EXPECT_TRUE(LiveSteps(*dock).empty());
}

// A CreateDock of the spec the dock was created with finds the dock, whatever
// consumers and columns were added, removed or joined since.
TEST(RolesTest, CreateOfTheOriginalSpecFindsTheChangedDock) {
  const DockSpec spec = DropSpec({Reader("actor", {"prompt"}, 8), Reader("ref", {"prompt"}, 8),
                                  Optional(Reader("metrics", {"prompt"}, 8))});
  DockRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto dock, registry.Create(spec));
  ASSERT_OK(dock->AddConsumer(Reader("critic", {"prompt"}, 8)));
  ASSERT_OK(dock->AddColumn({"values", DType::kFloat32, {1}, 0, false}));
  ASSERT_OK(dock->RemoveConsumer("ref"));
  ASSERT_OK(GetSync(*dock, GetOf("metrics")));
  ASSERT_TRUE(dock->spec().consumers[2].joined);
  ASSERT_OK_AND_ASSIGN(auto again, registry.Create(spec));
  EXPECT_EQ(again.get(), dock.get());
  DockSpec other = spec;
  other.consumers.pop_back();
  EXPECT_STATUS(registry.Create(other).status(), absl::StatusCode::kAlreadyExists,
                "different spec");
}

// CreateDock refuses specs that set the server's state.
TEST(RolesTest, CreateRefusesServerState) {
  ConsumerSpec joined = Reader("ref", {"prompt"}, 8);
  joined.joined = true;
  EXPECT_STATUS(DockRegistry().Create(DropSpec({joined})).status(),
                absl::StatusCode::kInvalidArgument, "consumer 'ref' sets joined");
}

// Under ThreadSanitizer: an optional consumer joins while a producer writes
// steps and the actor takes them, and the ref consumer is removed meanwhile.
// The optional consumer gets every row of every step from the first it took
// a row of, each once; every step is released in the end.
TEST(RolesConcurrency, JoinsAndRemovalsRaceWithTheRing) {
  constexpr int64_t kSteps = 40;
  DockSpec spec = DropSpec({Reader("actor", {"prompt"}, 4), Reader("ref", {"prompt"}, 4),
                            Optional(Reader("metrics", {"prompt"}, 3))});
  spec.steps_in_flight = 3;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::atomic<bool> produced{false};
  std::atomic<int64_t> written{0};
  std::thread producer([&] {
    for (int64_t step = 0; step < kSteps; ++step) {
      Fill(*dock, step);
      written = step + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    produced = true;
  });
  auto drain = [&](const std::string& consumer, std::map<int64_t, std::multiset<int64_t>>* got) {
    for (;;) {
      absl::StatusOr<Batch> batch = GetSync(*dock, GetOf(consumer, 0, absl::Milliseconds(20)));
      if (!batch.ok()) return batch.status();
      if (got != nullptr && !batch->rows.empty()) {
        (*got)[batch->step].insert(batch->rows.begin(), batch->rows.end());
      }
      if (produced && batch->timed_out && LiveSteps(*dock).empty()) return absl::OkStatus();
    }
  };
  auto until_written = [&](int64_t steps) {
    while (written < steps) std::this_thread::sleep_for(std::chrono::microseconds(100));
  };
  std::map<int64_t, std::multiset<int64_t>> metrics;
  auto actor = std::async(std::launch::async, drain, "actor", nullptr);
  auto ref = std::async(std::launch::async, drain, "ref", nullptr);
  until_written(10);
  auto joiner = std::async(std::launch::async, drain, "metrics", &metrics);
  until_written(20);
  ASSERT_OK(dock->RemoveConsumer("ref"));
  producer.join();
  EXPECT_OK(actor.get());
  absl::Status ref_end = ref.get();
  EXPECT_EQ(ref_end.code(), absl::StatusCode::kNotFound) << ref_end;
  EXPECT_OK(joiner.get());
  EXPECT_TRUE(LiveSteps(*dock).empty());
  ASSERT_FALSE(metrics.empty());
  const int64_t first = metrics.begin()->first;
  for (int64_t step = first; step < kSteps; ++step) {
    const std::multiset<int64_t>& rows = metrics[step];
    EXPECT_EQ(std::vector<int64_t>(rows.begin(), rows.end()), Iota(0, 8)) << "step " << step;
  }
}

}  // namespace
}  // namespace tdock
