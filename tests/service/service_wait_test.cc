// Long-poll Gets over the wire: timing out, waking on a Put, the RPC deadline,
// client cancellation and server shutdown each end a parked Get exactly once
// and leave no waiter behind.
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

// A Get with wait 0 and nothing available returns at once with timed_out
// set and no rows.
TEST_F(ServiceTest, GetWithoutWaitTimesOutWhenNothingAvailable) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 2, 0)));
  EXPECT_TRUE(got.timed_out());
  EXPECT_EQ(got.rows_size(), 0);
  EXPECT_EQ(Waiters("grpo", "actor"), 0);
}

// A Get that parks is woken by a Put from another thread and returns the
// rows that Put wrote.
TEST_F(ServiceTest, ParkedGetWakesOnPut) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  std::future<absl::StatusOr<v1::GetResponse>> parked = std::async(
      std::launch::async, [this] { return Get(GetFor("actor", 2, 20000)); });
  ASSERT_TRUE(AwaitWaiters("grpo", "actor", 1));

  std::thread producer([this] { EXPECT_OK(Put(FullStepPut())); });
  absl::StatusOr<v1::GetResponse> got = parked.get();
  producer.join();
  ASSERT_OK(got);
  EXPECT_FALSE(got->timed_out());
  EXPECT_EQ(got->rows_size(), 2);
  EXPECT_EQ(got->columns_size(), 2);
  EXPECT_EQ(Waiters("grpo", "actor"), 0);
}

// A Get whose wait outlasts the client's deadline ends DEADLINE_EXCEEDED,
// and the server cancels its waiter: the waiter count returns to 0 and the
// rows stay available to the next Get.
TEST_F(ServiceTest, DeadlineEndsParkedGetAndReleasesWaiter) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  auto context = Context(absl::Milliseconds(300));
  v1::GetResponse response;
  const grpc::Status status =
      stub_->Get(context.get(), GetFor("actor", 2, 60000), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(AwaitWaiters("grpo", "actor", 0));

  ASSERT_OK(Put(FullStepPut()));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 2, 0)));
  EXPECT_EQ(got.rows_size(), 2);
}

// ClientContext::TryCancel on a parked Get ends it CANCELLED and removes its
// waiter; the consumer's rows are not claimed by the cancelled call.
TEST_F(ServiceTest, CancelledGetRemovesWaiter) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  auto context = Context();
  std::future<grpc::Status> parked =
      std::async(std::launch::async, [this, &context] {
        v1::GetResponse response;
        return stub_->Get(context.get(), GetFor("actor", 4, 60000), &response);
      });
  ASSERT_TRUE(AwaitWaiters("grpo", "actor", 1));
  context->TryCancel();
  EXPECT_EQ(parked.get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(AwaitWaiters("grpo", "actor", 0));

  ASSERT_OK(Put(FullStepPut()));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 4, 0)));
  EXPECT_EQ(got.rows_size(), 4);
}

// Many parked Gets of two consumers, half cancelled by deadline, half woken
// by Puts: every call ends, and no waiter is left.
TEST_F(ServiceTest, ManyParkedGetsAllEnd) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  constexpr int kCalls = 8;
  std::vector<std::future<grpc::StatusCode>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::async(std::launch::async, [this, i] {
      auto context =
          Context(i % 2 == 0 ? absl::Milliseconds(200) : absl::Seconds(30));
      v1::GetResponse response;
      const char* consumer = i % 2 == 0 ? "reward" : "actor";
      return stub_->Get(context.get(), GetFor(consumer, 2, 60000), &response)
          .error_code();
    }));
  }
  // The deadline calls (reward) end on their own; the actor calls are
  // served by two full steps (4 Gets of 2 rows).
  ASSERT_TRUE(AwaitWaiters("grpo", "actor", kCalls / 2));
  ASSERT_OK(Put(FullStepPut(0)));
  ASSERT_OK(Put(FullStepPut(1)));
  int ok = 0, deadline = 0;
  for (auto& call : calls) {
    const grpc::StatusCode code = call.get();
    if (code == grpc::StatusCode::OK) ++ok;
    if (code == grpc::StatusCode::DEADLINE_EXCEEDED) ++deadline;
  }
  EXPECT_EQ(ok, kCalls / 2);
  EXPECT_EQ(deadline, kCalls / 2);
  EXPECT_TRUE(AwaitWaiters("grpo", "actor", 0));
  EXPECT_TRUE(AwaitWaiters("grpo", "reward", 0));
}

// Invariant: when client deadlines race with Puts that serve the parked
// Gets (the dock's callback and the reactor's OnCancel running at the same
// time), every call ends exactly once, no row is delivered twice, and no
// waiter is left behind. Deadlines are drawn from a seeded generator; run at
// 1, 2 and 4 client threads.
TEST_F(ServiceTest, DeadlinesRacingWithPuts) {
  v1::DockSpec spec = GrpoSpec();
  spec.set_name("race");
  spec.set_num_prompts(48);
  spec.set_n_samples_per_prompt(1);
  spec.mutable_consumers(0)->set_dispatch_size(1);
  ASSERT_OK(CreateDock(spec));
  int64_t next_row = 0;
  std::set<int64_t> delivered;
  for (int threads : {1, 2, 4}) {
    std::mutex mu;
    std::vector<std::thread> clients;
    for (int t = 0; t < threads; ++t) {
      clients.emplace_back([&, t] {
        std::mt19937 rng(1000 * threads + t);
        for (int i = 0; i < 16 / threads; ++i) {
          v1::GetRequest get = GetFor("actor", 1, 60000);
          get.set_dock("race");
          auto context = Context(absl::Milliseconds(1 + rng() % 8));
          v1::GetResponse response;
          const grpc::Status status = stub_->Get(context.get(), get, &response);
          ASSERT_TRUE(status.ok() || status.error_code() ==
                                         grpc::StatusCode::DEADLINE_EXCEEDED)
              << status.error_message();
          std::lock_guard<std::mutex> lock(mu);
          for (int64_t row : response.rows()) {
            EXPECT_TRUE(delivered.insert(row).second) << "row " << row;
          }
        }
      });
    }
    for (int i = 0; i < 16; ++i, ++next_row) {
      v1::PutRequest put;
      put.set_dock("race");
      put.add_rows(next_row);
      *put.add_columns() = Int32Column("prompt_ids", {{1, 2}});
      *put.add_columns() = Int32Column("response_ids", {{3}});
      ASSERT_OK(Put(put));
    }
    for (std::thread& client : clients) client.join();
    EXPECT_TRUE(AwaitWaiters("race", "actor", 0)) << threads << " threads";
  }
}

// A Put that waits for a busy partition (step 2 while step 0 holds partition
// 0) with a wait longer than the client's deadline ends by the deadline, is
// no longer parked, and is not applied when the partition frees up later.
TEST_F(ServiceTest, PutParkedPastDeadlineIsNeverApplied) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  ASSERT_OK(Put(FullStepPut(0)));
  v1::PutRequest late = FullStepPut(2);
  late.set_wait_ms(60000);
  v1::PutResponse response;
  const grpc::Status status =
      stub_->Put(Context(absl::Milliseconds(300)).get(), late, &response);
  EXPECT_TRUE(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
              status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
      << status.error_code() << " " << status.error_message();

  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  int64_t parked = -1;
  while (absl::Now() < give_up) {
    absl::StatusOr<v1::GetDockStatusResponse> dock = Status("grpo");
    ASSERT_OK(dock);
    parked = dock->parked_puts();
    if (parked == 0) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(parked, 0);

  v1::ReleaseStepRequest release;
  release.set_dock("grpo");
  release.set_step(0);
  v1::ReleaseStepResponse released;
  ASSERT_TRUE(stub_->ReleaseStep(Context().get(), release, &released).ok());
  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse after, Status("grpo"));
  EXPECT_EQ(after.steps_size(), 0);
}

// Shutdown completes a parked Get with UNAVAILABLE instead of letting it hold
// the shutdown for its whole wait, and Wait returns afterwards.
TEST_F(ServiceTest, ShutdownCompletesParkedGetWithUnavailable) {
  ASSERT_OK(CreateDock(GrpoSpec()));
  std::future<grpc::Status> parked = std::async(std::launch::async, [this] {
    v1::GetResponse response;
    return stub_->Get(Context().get(), GetFor("actor", 2, 60000), &response);
  });
  ASSERT_TRUE(AwaitWaiters("grpo", "actor", 1));
  server_->Shutdown();
  server_->Wait();
  const grpc::Status status = parked.get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  server_->Shutdown();  // idempotent
}

}  // namespace
}  // namespace tdock::service_testing
