// Concurrency: producers and consumer ranks hammer one dock at once.
//
// Invariant checked: over several steps with steps_in_flight 2, every row of
// every step reaches every consumer (FIFO, RANDOM, whole-group and BALANCED
// with micro-batches) exactly once across all of its ranks,
// never before the columns that consumer needs are ready (a batch holds every
// needed cell of each row it names), and every byte it receives equals what
// the producer wrote. Run at several thread counts, and under ThreadSanitizer
// in the test command.
#include <atomic>
#include <latch>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::OwnedColumn;
using testing::PutSync;
using testing::RowValues;

constexpr int kPrompts = 16;
constexpr int kSamples = 4;
constexpr int kRows = kPrompts * kSamples;
constexpr int kSteps = 6;
const char* const kColumns[] = {"a", "b", "c"};
constexpr int kConsumers = 5;

// Deterministic cell contents: length and values depend on step, row, column.
std::vector<int32_t> Expected(int64_t step, int64_t row, int column) {
  const int len = 1 + static_cast<int>((step * 31 + row * 7 + column * 3) % 40);
  std::vector<int32_t> values(len);
  for (int i = 0; i < len; ++i) {
    values[i] = static_cast<int32_t>(step * 1000003 + row * 1009 + column * 101 + i);
  }
  return values;
}

DockSpec Spec(int ranks) {
  DockSpec spec;
  spec.name = "stress";
  spec.num_prompts = kPrompts;
  spec.n_samples_per_prompt = kSamples;
  spec.steps_in_flight = 2;
  spec.length_columns = {"a"};
  for (const char* name : kColumns) spec.columns.push_back({name, DType::kInt32, {}, 0, false});
  spec.consumers = {
      {"only_a", {"a"}, 4, ranks, false, Policy::kFifo, 0},
      {"a_and_b", {"a", "b"}, 3, ranks, false, Policy::kRandom, 7},
      {"all_groups", {"a", "b", "c"}, 8, ranks, true, Policy::kFifo, 0},
      {"only_c", {"c"}, 5, ranks, false, Policy::kFifo, 0},
      {"balanced", {"a", "c"}, 3, ranks, false, Policy::kBalanced, 0},
  };
  spec.consumers[4].micro_batch = MicroBatchOptions{.max_tokens = 64};
  return spec;
}

// Producer p writes rows r with r % producers == p, one column per Put in
// small batches, column by column so consumers see partial rows.
void Produce(Dock& dock, int p, int producers) {
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int column = 0; column < 3; ++column) {
      std::vector<int64_t> batch;
      for (int64_t row = p; row < kRows; row += producers) {
        batch.push_back(row);
        if (batch.size() == 3 || row + producers >= kRows) {
          std::vector<std::vector<int32_t>> values;
          for (int64_t r : batch) values.push_back(Expected(step, r, column));
          OwnedColumn data = OwnedColumn::Of<int32_t>(kColumns[column], DType::kInt32, values);
          ASSERT_OK(PutSync(dock, step, batch, {data}, absl::Seconds(60)));
          batch.clear();
        }
      }
    }
  }
}

struct Ledger {
  tdock::Mutex mu;
  // seen[consumer][step][row]
  std::vector<std::vector<std::vector<int>>> seen ABSL_GUARDED_BY(mu);
  std::atomic<int64_t> taken[kConsumers] = {0, 0, 0, 0, 0};
  std::atomic<int64_t> mismatches{0};
};

void Consume(Dock& dock, const ConsumerSpec& consumer, int k, int rank, Ledger& ledger) {
  const int64_t total = int64_t{kSteps} * kRows;
  while (ledger.taken[k].load() < total) {
    GetInput in;
    in.consumer = consumer.name;
    in.rank = rank;
    in.wait = absl::Milliseconds(20);
    absl::StatusOr<Batch> got = testing::GetSync(dock, in);
    ASSERT_OK(got);
    const Batch& batch = *got;
    if (batch.rows.empty()) continue;
    ASSERT_EQ(batch.columns.size(), consumer.columns.size());
    for (size_t i = 0; i < batch.rows.size(); ++i) {
      for (size_t c = 0; c < batch.columns.size(); ++c) {
        const int column = batch.columns[c].name[0] - 'a';
        if (RowValues<int32_t>(batch.columns[c], i) !=
            Expected(batch.step, batch.rows[i], column)) {
          ledger.mismatches.fetch_add(1);
        }
      }
    }
    for (const MicroBatchInfo& mb : batch.micro_batches) {
      if (mb.padded_tokens > 64) ledger.mismatches.fetch_add(1);  // over budget
    }
    tdock::MutexLock lock(&ledger.mu);
    for (int64_t row : batch.rows) ++ledger.seen[k][batch.step][row];
    ledger.taken[k].fetch_add(static_cast<int64_t>(batch.rows.size()));
  }
}

class DockConcurrency : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(DockConcurrency, EveryRowReachesEveryConsumerOnceWithItsBytes) {
  const auto [producers, ranks] = GetParam();
  auto created = Dock::Create(Spec(ranks));
  ASSERT_OK(created);
  Dock& dock = **created;
  const DockSpec spec = dock.spec();
  Ledger ledger;
  {
    tdock::MutexLock lock(&ledger.mu);
    ledger.seen.assign(kConsumers, std::vector<std::vector<int>>(kSteps, std::vector<int>(kRows, 0)));
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < kConsumers; ++k) {
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back(Consume, std::ref(dock), std::cref(spec.consumers[k]), k, r,
                           std::ref(ledger));
    }
  }
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back(Produce, std::ref(dock), p, producers);
  }
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(ledger.mismatches.load(), 0);
  tdock::MutexLock lock(&ledger.mu);
  for (int k = 0; k < kConsumers; ++k) {
    for (int s = 0; s < kSteps; ++s) {
      for (int r = 0; r < kRows; ++r) {
        ASSERT_EQ(ledger.seen[k][s][r], 1) << "consumer " << k << " step " << s << " row " << r;
      }
    }
  }
  // Every step was fully consumed, so every step was released.
  EXPECT_TRUE(dock.Stats().steps.empty());
}

INSTANTIATE_TEST_SUITE_P(ThreadCounts, DockConcurrency,
                         ::testing::Values(std::make_pair(1, 1), std::make_pair(4, 2),
                                           std::make_pair(8, 4)));

// A Put that does not wait is refused only for a reason of its own: when a
// concurrent Put starts the step and undoes the start (it could not get
// memory), the others go in rather than failing with "is starting". Each
// round, two Puts too large for the memory left and four small ones race to
// start a step that is not the oldest (the limit holds it back); the small
// ones always succeed, the large ones are always refused for memory.
TEST(DockConcurrencyRaces, PutNeverFailsForAConcurrentStartThatWasUndone) {
  constexpr int kSmall = 4;
  constexpr int kLarge = 2;
  DockSpec spec;
  spec.name = "races";
  spec.num_prompts = kSmall + 2 * kLarge;
  spec.steps_in_flight = 2;
  spec.columns = {{"x", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"c", {"x"}, 4, 1, false, Policy::kFifo, 0}};
  // Room for the oldest step's chunk, the new step's, and one more that a
  // start undone for a moment may still hold; never for the large Puts.
  spec.chunk_bytes = 64 << 10;
  spec.memory_limit_bytes = 192 << 10;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  const OwnedColumn small = OwnedColumn::Of<int32_t>("x", DType::kInt32, {{1, 2, 3}});
  const OwnedColumn large = OwnedColumn::Of<int32_t>(
      "x", DType::kInt32, {std::vector<int32_t>(20000, 4), std::vector<int32_t>(20000, 5)});
  ASSERT_OK(PutSync(*dock, 0, {0}, {small}));  // the oldest step holds a chunk
  for (int64_t step = 1; step < 300; ++step) {
    std::latch start(kSmall + kLarge);
    std::vector<absl::Status> small_puts(kSmall), large_puts(kLarge);
    std::vector<std::thread> threads;
    for (int i = 0; i < kSmall + kLarge; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        if (i < kSmall) {
          small_puts[i] = PutSync(*dock, step, {i}, {small}).status();
        } else {
          const int64_t row = kSmall + 2 * (i - kSmall);
          large_puts[i - kSmall] = PutSync(*dock, step, {row, row + 1}, {large}).status();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    SCOPED_TRACE(absl::StrCat("step ", step));
    for (const absl::Status& put : small_puts) EXPECT_OK(put);
    for (const absl::Status& put : large_puts) {
      EXPECT_STATUS(put, absl::StatusCode::kResourceExhausted, "memory limit");
    }
    ASSERT_OK(dock->ReleaseStep(step - 1));
  }
}

}  // namespace
}  // namespace tdock
