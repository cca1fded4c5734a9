// Leases (consumers with lease_ms > 0): rows handed out stay in flight until
// acknowledged by Ack or by a Put carrying the lease; expired or nacked rows
// are handed out again; every lease ends exactly once.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

constexpr absl::Duration kLongWait = absl::Seconds(10);

// `rows` rows (1 sample per prompt) with columns "prompt" and "score";
// consumer "reader" reads prompts with a lease of `lease_ms`, consumer
// "plain" has no lease.
DockSpec LeaseSpec(int64_t rows, int64_t lease_ms, int64_t dispatch) {
  DockSpec spec;
  spec.name = "leases";
  spec.num_prompts = rows;
  spec.length_columns = {"prompt"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"score", DType::kFloat32, {}, 0, false}};
  ConsumerSpec reader{"reader", {"prompt"}, dispatch, 1, false, Policy::kFifo, 0};
  reader.lease_ms = lease_ms;
  spec.consumers = {reader};
  return spec;
}

OwnedColumn Prompts(int64_t rows) {
  std::vector<std::vector<int32_t>> values;
  for (int64_t r = 0; r < rows; ++r) values.push_back({static_cast<int32_t>(r), 7});
  return OwnedColumn::Of<int32_t>("prompt", DType::kInt32, values);
}

OwnedColumn Scores(const std::vector<int64_t>& rows) {
  std::vector<std::vector<float>> values;
  for (int64_t r : rows) values.push_back({static_cast<float>(r)});
  return OwnedColumn::Of<float>("score", DType::kFloat32, values);
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

std::unique_ptr<Dock> Filled(DockSpec spec, int64_t rows) {
  auto dock = Dock::Create(std::move(spec));
  EXPECT_OK(dock);
  EXPECT_OK(PutSync(**dock, 0, Iota(rows), {Prompts(rows)}));
  return std::move(dock).value();
}

// A filled dock on a manual clock: its leases expire when the test advances
// the clock, never by themselves.
struct Clocked {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<TimerService> timers = std::make_shared<TimerService>(clock);
  std::unique_ptr<Dock> dock;
};
Clocked FilledOnClock(DockSpec spec, int64_t rows) {
  Clocked c;
  auto dock = Dock::Create(std::move(spec), DockLimits{.timers = c.timers, .clock = c.clock});
  EXPECT_OK(dock);
  EXPECT_OK(PutSync(**dock, 0, Iota(rows), {Prompts(rows)}));
  c.dock = std::move(dock).value();
  return c;
}

// Whether the dock has counted `n` expiries of consumer 0 (they are
// processed on the timer thread once the clock has passed the deadline).
bool AwaitExpiries(const Dock& dock, int64_t n) {
  for (int i = 0; i < 1000; ++i) {
    if (dock.Stats().lease_expiries_total[0] >= n) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

std::vector<int64_t> Sorted(std::vector<int64_t> rows) {
  std::sort(rows.begin(), rows.end());
  return rows;
}

// A Get hands out a lease; unacknowledged, the rows come back after it
// expires and go out again under a new lease; the counters say so.
TEST(DockLease, ExpiredRowsAreHandedOutAgain) {
  Clocked c = FilledOnClock(LeaseSpec(4, 30, 4), 4);
  Dock* dock = c.dock.get();
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(first.rows.size(), 4u);
  EXPECT_NE(first.lease_id, 0u);
  EXPECT_EQ(first.lease, absl::Milliseconds(30));
  // In flight: nothing to take now.
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, GetOf("reader")));
  EXPECT_TRUE(none.rows.empty());
  EXPECT_TRUE(none.timed_out);
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.leases_in_flight, std::vector<int64_t>{1});
  EXPECT_EQ(stats.rows_in_flight, std::vector<int64_t>{4});
  // Not a moment before its deadline...
  c.clock->Advance(absl::Milliseconds(29));
  ASSERT_OK_AND_ASSIGN(Batch early, GetSync(*dock, GetOf("reader")));
  EXPECT_TRUE(early.rows.empty());
  // ...but at it: a parked Get gets the rows once they come back.
  c.clock->Advance(absl::Milliseconds(1));
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, GetOf("reader", 0, kLongWait)));
  EXPECT_EQ(Sorted(again.rows), Iota(4));
  EXPECT_NE(again.lease_id, first.lease_id);
  stats = dock->Stats();
  EXPECT_EQ(stats.lease_expiries_total, std::vector<int64_t>{1});
  EXPECT_EQ(stats.rows_returned_total, std::vector<int64_t>{4});
  EXPECT_EQ(stats.leases_in_flight, std::vector<int64_t>{1});
  EXPECT_EQ(stats.steps.size(), 1u);
}

// The step is not released while leased rows are unacknowledged; the Ack
// that settles the last of them releases it; a second Ack is rejected.
TEST(DockLease, AckSettlesRowsAndReleasesTheStep) {
  auto dock = Filled(LeaseSpec(4, 60'000, 2), 4);
  ASSERT_OK_AND_ASSIGN(Batch a, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(Batch b, GetSync(*dock, GetOf("reader")));
  EXPECT_TRUE(b.end_of_step);
  EXPECT_EQ(dock->Stats().steps.size(), 1u);
  EXPECT_EQ(*dock->Ack("reader", a.lease_id), 2);
  EXPECT_EQ(dock->Stats().steps.size(), 1u);
  EXPECT_EQ(*dock->Ack("reader", b.lease_id), 2);
  EXPECT_TRUE(dock->Stats().steps.empty());
  const absl::StatusOr<int64_t> again = dock->Ack("reader", b.lease_id);
  EXPECT_STATUS(again, absl::StatusCode::kFailedPrecondition,
                absl::StrCat("lease ", b.lease_id, " is not in flight: it was "
                                                   "already acknowledged"));
  EXPECT_REFUSED(again, Refusal::kLeaseEnded, DropReason::kUnspecified);
}

// An Ack that comes after its lease expired is refused with
// FAILED_PRECONDITION naming the lease, and does not touch the rows' new
// lease.
TEST(DockLease, LateAckOnExpiredLeaseIsRejected) {
  auto dock = Filled(LeaseSpec(4, 20, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, GetOf("reader", 0, kLongWait)));
  ASSERT_EQ(second.rows.size(), 4u);
  const absl::StatusOr<int64_t> late = dock->Ack("reader", first.lease_id);
  EXPECT_STATUS(late, absl::StatusCode::kFailedPrecondition,
                absl::StrCat("lease ", first.lease_id, " is not in flight: it expired"));
  EXPECT_REFUSED(late, Refusal::kExpired, DropReason::kUnspecified);
  EXPECT_EQ(dock->Stats().leases_in_flight, std::vector<int64_t>{1});
  // The new lease may itself expire before this Ack (20 ms); either way the
  // rows are acknowledged at most once.
  absl::StatusOr<int64_t> acked = dock->Ack("reader", second.lease_id);
  if (!acked.ok()) {
    EXPECT_EQ(acked.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

// Nack hands the rows back at once.
TEST(DockLease, NackReturnsRowsAtOnce) {
  auto dock = Filled(LeaseSpec(4, 60'000, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(*dock->Nack("reader", first.lease_id), 4);
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(Sorted(again.rows), Iota(4));
  EXPECT_TRUE(again.end_of_step);
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.lease_nacks_total, std::vector<int64_t>{1});
  EXPECT_EQ(stats.rows_returned_total, std::vector<int64_t>{4});
  EXPECT_STATUS(dock->Nack("reader", first.lease_id), absl::StatusCode::kFailedPrecondition,
                "returned by Nack");
}

// 8 rows written for a BALANCED consumer over two ranks, leased for 30 ms
// of a manual clock.
Clocked BalancedOverTwoRanks() {
  DockSpec spec = LeaseSpec(8, 30, 2);
  spec.consumers[0].dp_size = 2;
  spec.consumers[0].policy = Policy::kBalanced;
  return FilledOnClock(spec, 8);
}

// A consumer's leases in flight are listed oldest first, with their step,
// rank, round and rows; an acknowledged one is gone from the list.
TEST(DockLease, ListLeasesShowsTheLeasesInFlight) {
  auto dock = Filled(LeaseSpec(4, 60'000, 2), 4);
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> none, dock->ListLeases("reader"));
  EXPECT_TRUE(none.empty());
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> leases, dock->ListLeases("reader"));
  ASSERT_EQ(leases.size(), 2u);
  EXPECT_EQ(leases[0].lease_id, first.lease_id);
  EXPECT_EQ(leases[1].lease_id, second.lease_id);
  EXPECT_EQ(leases[0].step, 0);
  EXPECT_EQ(leases[0].rank, 0);
  EXPECT_EQ(leases[0].round, -1) << "not a balanced share";
  EXPECT_EQ(leases[0].rows, 2);
  EXPECT_GT(leases[0].deadline, absl::Now());
  ASSERT_OK(dock->Ack("reader", first.lease_id));
  ASSERT_OK_AND_ASSIGN(leases, dock->ListLeases("reader"));
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].lease_id, second.lease_id);
}

// NackAll hands back every lease in flight at once, as Nacks: their rows go
// out again at once and the counters say so; with nothing in flight it
// hands back nothing.
TEST(DockLease, NackAllHandsBackEveryLeaseAtOnce) {
  auto dock = Filled(LeaseSpec(4, 60'000, 2), 4);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(Batch second, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(NackAllResult back, dock->NackAll("reader"));
  EXPECT_EQ(back.leases, 2);
  EXPECT_EQ(back.rows, 4);
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> leases, dock->ListLeases("reader"));
  EXPECT_TRUE(leases.empty());
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.lease_nacks_total, std::vector<int64_t>{2});
  EXPECT_EQ(stats.rows_returned_total, std::vector<int64_t>{4});
  EXPECT_STATUS(dock->Ack("reader", first.lease_id), absl::StatusCode::kFailedPrecondition,
                "returned by Nack");
  GetInput all = GetOf("reader", 4);
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, all));
  EXPECT_EQ(Sorted(again.rows), Iota(4));
  ASSERT_OK(dock->Ack("reader", again.lease_id));
  ASSERT_OK_AND_ASSIGN(back, dock->NackAll("reader"));
  EXPECT_EQ(back.leases, 0);
  EXPECT_EQ(back.rows, 0);
}

// NackAll of one rank hands back that rank's shares only; a bad consumer or
// rank names what is wrong and hands back nothing.
TEST(DockLease, NackAllOfOneRankLeavesTheOthers) {
  Clocked c = BalancedOverTwoRanks();
  Dock* dock = c.dock.get();
  GetInput rank1 = GetOf("reader");
  rank1.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, GetOf("reader")));
  ASSERT_OK_AND_ASSIGN(Batch r1, GetSync(*dock, rank1));
  EXPECT_STATUS(dock->NackAll("reader", 2), absl::StatusCode::kInvalidArgument,
                "rank 2 is out of range [0, 2)");
  EXPECT_STATUS(dock->NackAll("nobody"), absl::StatusCode::kNotFound,
                "consumer 'nobody' is unknown");
  ASSERT_EQ(dock->ListLeases("reader")->size(), 2u) << "nothing handed back";
  ASSERT_OK_AND_ASSIGN(NackAllResult back, dock->NackAll("reader", 1));
  EXPECT_EQ(back.leases, 1);
  EXPECT_EQ(back.rows, static_cast<int64_t>(r1.rows.size()));
  ASSERT_OK_AND_ASSIGN(std::vector<LeaseInfo> left, dock->ListLeases("reader"));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].lease_id, r0.lease_id);
  EXPECT_EQ(left[0].round, 0);
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, rank1));
  EXPECT_EQ(again.round, 0) << "the share goes back to its rank";
  EXPECT_EQ(again.rows, r1.rows);
}

// The rows handed out (a counter: it never falls) count every hand-out: a
// Nack does not lower it, and the rows handed out again count again; the
// step's `consumed` counts the rows taken now.
TEST(DockLease, ANackNeverLowersTheRowsHandedOut) {
  auto dock = Filled(LeaseSpec(4, 60'000, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{4});
  ASSERT_OK(dock->Nack("reader", first.lease_id).status());
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{4});
  EXPECT_EQ(stats.steps.at(0).consumed_rows, std::vector<int64_t>{0});
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, GetOf("reader")));
  ASSERT_EQ(again.rows.size(), 4u);
  stats = dock->Stats();
  EXPECT_EQ(stats.rows_handed_out_total, std::vector<int64_t>{8});
  EXPECT_EQ(stats.steps.at(0).consumed_rows, std::vector<int64_t>{4});
}

// The same for a BALANCED share: its lease expires, and the share handed
// to its rank again counts again.
TEST(DockLease, AnExpiredBalancedShareNeverLowersTheRowsHandedOut) {
  Clocked c = BalancedOverTwoRanks();
  Dock* dock = c.dock.get();
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, GetOf("reader")));
  const int64_t share = static_cast<int64_t>(r0.rows.size());
  ASSERT_GT(share, 0);
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{share});
  c.clock->Advance(absl::Milliseconds(30));
  ASSERT_TRUE(AwaitExpiries(*dock, 1));
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{share});
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(again.rows, r0.rows);
  EXPECT_EQ(dock->Stats().rows_handed_out_total, std::vector<int64_t>{2 * share});
}

// Bad Acks name what is wrong and change nothing.
TEST(DockLease, BadAcksNameTheProblemAndChangeNothing) {
  DockSpec spec = LeaseSpec(4, 60'000, 4);
  spec.consumers.push_back({"plain", {"prompt"}, 4, 1, false, Policy::kFifo, 0});
  spec.consumers.push_back({"other", {"prompt"}, 4, 1, false, Policy::kFifo, 0});
  spec.consumers.back().lease_ms = 60'000;
  auto dock = Filled(spec, 4);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  EXPECT_STATUS(dock->Ack("reader", 999), absl::StatusCode::kNotFound,
                "lease 999 was never handed out");
  EXPECT_STATUS(dock->Ack("reader", 0), absl::StatusCode::kNotFound,
                "lease 0 was never handed out");
  EXPECT_STATUS(dock->Ack("other", batch.lease_id), absl::StatusCode::kInvalidArgument,
                "was not handed to consumer 'other'");
  EXPECT_STATUS(dock->Ack("plain", batch.lease_id), absl::StatusCode::kFailedPrecondition,
                "consumer 'plain' has no leases");
  EXPECT_STATUS(dock->Nack("nobody", batch.lease_id), absl::StatusCode::kNotFound,
                "consumer 'nobody' is unknown");
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.leases_in_flight[0], 1);
  EXPECT_EQ(stats.rows_in_flight[0], 4);
  EXPECT_EQ(*dock->Ack("reader", batch.lease_id), 4);
}

// A worker's Put carrying ack_lease writes its results and settles the
// lease in one step; the same lease cannot acknowledge a second Put, which
// then writes nothing.
TEST(DockLease, PutWithAckLeaseSettlesTheLease) {
  DockSpec spec = LeaseSpec(4, 60'000, 2);
  spec.consumers.push_back({"scores", {"score"}, 4, 1, false, Policy::kFifo, 0});
  auto dock = Filled(spec, 4);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  ASSERT_OK(PutSync(*dock, 0, batch.rows, {Scores(batch.rows)}, absl::ZeroDuration(),
                    batch.lease_id));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.leases_in_flight[0], 0);
  EXPECT_EQ(stats.rows_in_flight[0], 0);
  ASSERT_OK_AND_ASSIGN(Batch rest, GetSync(*dock, GetOf("reader")));
  const std::vector<int64_t> rows = rest.rows;
  const absl::Status twice =
      PutSync(*dock, 0, rows, {Scores(rows)}, absl::ZeroDuration(), batch.lease_id).status();
  EXPECT_STATUS(twice, absl::StatusCode::kFailedPrecondition, "nothing was written");
  EXPECT_REFUSED(twice, Refusal::kLeaseEnded, DropReason::kUnspecified);
  EXPECT_EQ(dock->Stats().steps[0].ready_rows[1], 2);  // only the first Put's
  EXPECT_STATUS(PutSync(*dock, 0, rows, {Scores(rows)}, absl::ZeroDuration(), 12345),
                absl::StatusCode::kNotFound, "lease 12345 was never handed out");
  ASSERT_OK(PutSync(*dock, 0, rows, {Scores(rows)}, absl::ZeroDuration(), rest.lease_id));
  EXPECT_EQ(dock->Stats().leases_in_flight[0], 0);
}

// A Put that fails leaves its lease in flight (it can still expire or be
// acknowledged).
TEST(DockLease, FailedPutKeepsTheLease) {
  auto dock = Filled(LeaseSpec(4, 60'000, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  EXPECT_STATUS(PutSync(*dock, 0, {9}, {Scores({9})}, absl::ZeroDuration(), batch.lease_id),
                absl::StatusCode::kInvalidArgument, "row 9");
  EXPECT_EQ(dock->Stats().leases_in_flight[0], 1);
  EXPECT_EQ(*dock->Ack("reader", batch.lease_id), 4);
}

// A Get that names the step waits while the consumer's leased rows are in
// flight (they may come back), and learns the step is over after the Ack.
TEST(DockLease, ExplicitStepWaitsForLeasedRows) {
  auto dock = Filled(LeaseSpec(4, 60'000, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  GetInput in = GetOf("reader");
  in.step = 0;
  ASSERT_OK_AND_ASSIGN(Batch waiting, GetSync(*dock, in));
  EXPECT_TRUE(waiting.timed_out);
  EXPECT_FALSE(waiting.end_of_step);
  ASSERT_OK(dock->Ack("reader", batch.lease_id));
  ASSERT_OK_AND_ASSIGN(Batch over, GetSync(*dock, in));
  EXPECT_TRUE(over.end_of_step);
  EXPECT_TRUE(over.rows.empty());
}

// Releasing a step ends its leases: a later Ack says so.
TEST(DockLease, ReleaseEndsTheStepsLeases) {
  auto dock = Filled(LeaseSpec(4, 60'000, 4), 4);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  ASSERT_OK(dock->ReleaseStep(0));
  EXPECT_STATUS(dock->Ack("reader", batch.lease_id), absl::StatusCode::kFailedPrecondition,
                "its step 0 was released");
  EXPECT_EQ(dock->Stats().leases_in_flight[0], 0);
}

// BALANCED: an expired share goes back to the same rank index, with the
// same rows and round, and no other rank gets it.
TEST(DockLease, BalancedShareReturnsToTheSameRank) {
  Clocked c = BalancedOverTwoRanks();
  Dock* dock = c.dock.get();
  GetInput rank0 = GetOf("reader");
  GetInput rank1 = GetOf("reader");
  rank1.rank = 1;
  ASSERT_OK_AND_ASSIGN(Batch r0, GetSync(*dock, rank0));
  ASSERT_OK_AND_ASSIGN(Batch r1, GetSync(*dock, rank1));
  EXPECT_EQ(r0.round, 0);
  ASSERT_OK(dock->Ack("reader", r1.lease_id));
  // Rank 1 goes on to round 1, never to rank 0's share.
  ASSERT_OK_AND_ASSIGN(Batch r1_next, GetSync(*dock, rank1));
  EXPECT_EQ(r1_next.round, 1);
  ASSERT_OK(dock->Ack("reader", r1_next.lease_id));
  // Rank 0's lease expires: its next Get (rank 0 restarted) is round 0 again.
  c.clock->Advance(absl::Milliseconds(30));
  ASSERT_TRUE(AwaitExpiries(*dock, 1));
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, rank0));
  EXPECT_EQ(again.round, 0);
  EXPECT_EQ(again.rows, r0.rows);
  EXPECT_NE(again.lease_id, r0.lease_id);
  EXPECT_EQ(dock->Stats().lease_expiries_total[0], 1);
}

// BALANCED: asking for a round again replaces the rank's lease on it; the
// old lease is then refused.
TEST(DockLease, BalancedRefetchSupersedesTheLease) {
  DockSpec spec = LeaseSpec(8, 60'000, 2);
  spec.consumers[0].dp_size = 2;
  spec.consumers[0].policy = Policy::kBalanced;
  auto dock = Filled(spec, 8);
  GetInput in = GetOf("reader");
  ASSERT_OK_AND_ASSIGN(Batch first, GetSync(*dock, in));
  in.step = 0;
  in.round = 0;
  ASSERT_OK_AND_ASSIGN(Batch again, GetSync(*dock, in));
  EXPECT_EQ(again.rows, first.rows);
  EXPECT_EQ(dock->Stats().leases_in_flight[0], 1);
  EXPECT_EQ(dock->Stats().rows_in_flight[0], 2);
  EXPECT_STATUS(dock->Ack("reader", first.lease_id), absl::StatusCode::kFailedPrecondition,
                "asked for round 0 of step 0 again");
  EXPECT_EQ(*dock->Ack("reader", again.lease_id), 2);
}

// Workers race: each Get's lease is acknowledged, nacked or left to expire
// at random; in the end every row is acknowledged exactly once and the step
// is released. (Run under ThreadSanitizer in the test command.)
TEST(DockLeaseConcurrency, EveryRowAcknowledgedExactlyOnce) {
  constexpr int64_t kRows = 256;
  auto dock = Filled(LeaseSpec(kRows, 5, 8), kRows);
  std::mutex mu;
  std::vector<int> acked(kRows, 0);
  std::atomic<int64_t> total{0};
  auto worker = [&](int seed) {
    std::mt19937 rng(seed);
    while (total.load() < kRows) {
      absl::StatusOr<Batch> batch = GetSync(*dock, GetOf("reader", 0, absl::Milliseconds(50)));
      ASSERT_OK(batch);
      if (batch->rows.empty()) {
        if (batch->end_of_step && dock->Stats().steps.empty()) return;
        continue;
      }
      switch (rng() % 4) {
        case 0:
          (void)dock->Nack("reader", batch->lease_id);
          break;
        case 1:
          break;  // let it expire
        default: {
          absl::StatusOr<int64_t> rows = dock->Ack("reader", batch->lease_id);
          if (rows.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t r : batch->rows) ++acked[r];
            total += *rows;
          } else {
            EXPECT_EQ(rows.status().code(), absl::StatusCode::kFailedPrecondition);
          }
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t + 1);
  for (auto& t : threads) t.join();
  EXPECT_EQ(acked, std::vector<int>(kRows, 1));
  EXPECT_TRUE(dock->Stats().steps.empty());
}

}  // namespace
}  // namespace tdock
