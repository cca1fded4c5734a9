// ConsumerTable on its own: a plan per consumer of the spec, added ones
// appended with their counters and totals; the spec replaced only with the
// same consumers; the spec changes taken one at a time by the worker the
// first Enqueue chose, until the queue runs empty; one spec recorded at a
// time, with the consumer being added visible meanwhile; the released
// totals summing each released step's hand-outs per consumer; Find, FindLeasing
// and Gone refuse an unknown, removed or lease-less consumer by name; a
// plan's oldest version follows its bound; the admission bound is the
// smallest of the consumers that hold steps; the staleness counters count rows
// with a version into the histogram's buckets.
#include "server/dock/consumer_table.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

DockSpec TwoConsumers() {
  DockSpec spec;
  spec.name = "d";
  spec.columns = {{"ids"}, {"score"}};
  ConsumerSpec reader;
  reader.name = "reader";
  reader.columns = {"ids"};
  ConsumerSpec scorer;
  scorer.name = "scorer";
  scorer.columns = {"score", "ids"};
  scorer.optional = true;
  spec.consumers = {reader, scorer};
  return spec;
}

class ConsumerTableTest : public ::testing::Test {
 protected:
  tdock::Mutex mu_;
  ConsumerTable table_{&mu_, TwoConsumers()};

  SpecChange Named(SpecChange::Kind kind, const std::string& name) {
    SpecChange change;
    change.kind = kind;
    change.consumer.name = name;
    return change;
  }
};

TEST_F(ConsumerTableTest, EachConsumerOfTheSpecHasItsPlan) {
  tdock::ReaderMutexLock lock(&mu_);
  ASSERT_EQ(table_.plans(mu_).size(), 2u);
  EXPECT_EQ(table_.plan(mu_, 1).index, 1);
  EXPECT_EQ(table_.plan(mu_, 1).name, "scorer");
  EXPECT_EQ(table_.plan(mu_, 1).columns, (std::vector<int>{1, 0}));
  EXPECT_TRUE(table_.plan(mu_, 1).optional);
  EXPECT_FALSE(table_.plan(mu_, 1).holds_steps()) << "optional, not joined";
  EXPECT_EQ(table_.IndexOf(mu_, "scorer"), 1);
  EXPECT_EQ(table_.IndexOf(mu_, "nobody"), -1);
  EXPECT_EQ(table_.released_handed_total(mu_), (std::vector<int64_t>{0, 0}));
}

TEST_F(ConsumerTableTest, AnAddedConsumerIsAppendedWithItsCountersAndTotals) {
  tdock::MutexLock lock(&mu_);
  ConsumerSpec late;
  late.name = "late";
  late.columns = {"score"};
  const ConsumerPlan& plan = table_.Add(mu_, late);
  EXPECT_EQ(plan.index, 2);
  EXPECT_EQ(plan.columns, std::vector<int>{1});
  EXPECT_EQ(table_.spec(mu_).consumers.back().name, "late");
  EXPECT_EQ(table_.IndexOf(mu_, "late"), 2);
  EXPECT_EQ(table_.released_handed_total(mu_).size(), 3u);
  table_.staleness(mu_, 2).count.fetch_add(1);
  EXPECT_EQ(table_.staleness(mu_, 2).count.load(), 1) << "its own counters";
  EXPECT_EQ(table_.staleness(mu_, 0).count.load(), 0);
}

TEST_F(ConsumerTableTest, AConsumersLifeChangesInItsPlan) {
  tdock::MutexLock lock(&mu_);
  table_.life(mu_, 1).joined = true;
  EXPECT_TRUE(table_.plan(mu_, 1).holds_steps());
  table_.life(mu_, 0).removed = true;
  EXPECT_FALSE(table_.plan(mu_, 0).holds_steps());
  EXPECT_EQ(table_.IndexOf(mu_, "reader"), 0) << "a removed consumer keeps its index";
}

TEST_F(ConsumerTableTest, FindRefusesUnknownRemovedAndLeaselessConsumersByName) {
  tdock::MutexLock lock(&mu_);
  ASSERT_TRUE(table_.Find(mu_, "scorer").ok());
  EXPECT_EQ(*table_.Find(mu_, "scorer"), 1);
  const absl::Status unknown = table_.Find(mu_, "nobody").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "dock 'd': consumer 'nobody' is unknown");
  const absl::Status leaseless = table_.FindLeasing(mu_, "reader").status();
  EXPECT_EQ(leaseless.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(leaseless.message().find("consumer 'reader' has no leases"), std::string::npos);
  ConsumerSpec leasing;
  leasing.name = "leasing";
  leasing.columns = {"ids"};
  leasing.lease_ms = 1000;
  table_.Add(mu_, leasing);
  EXPECT_EQ(*table_.FindLeasing(mu_, "leasing"), 2);

  EXPECT_TRUE(table_.Gone(mu_, table_.plan(mu_, 0)).ok());
  DockSpec next = table_.spec(mu_);
  next.consumers[0].removed = true;
  table_.Replace(mu_, next);
  table_.life(mu_, 0).removed = true;
  EXPECT_EQ(table_.Find(mu_, "reader").status().message(),
            "dock 'd': consumer 'reader' was removed");
  EXPECT_EQ(table_.Gone(mu_, table_.plan(mu_, 0)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Gone(mu_, table_.plan(mu_, 0)).message(),
            "dock 'd': consumer 'reader' was removed");
  // A new consumer of the same name is another one: the old plan stays gone.
  ConsumerSpec again;
  again.name = "reader";
  again.columns = {"ids"};
  table_.Add(mu_, again);
  EXPECT_EQ(*table_.Find(mu_, "reader"), 3);
  EXPECT_EQ(table_.Gone(mu_, table_.plan(mu_, 0)).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table_.Gone(mu_, table_.plan(mu_, 3)).ok());
  // An optional consumer whose join's record failed: that failure.
  EXPECT_TRUE(table_.Gone(mu_, table_.plan(mu_, 1)).ok());
  table_.life(mu_, 1).join_failed = absl::UnavailableError("join not stored");
  EXPECT_EQ(table_.Gone(mu_, table_.plan(mu_, 1)).message(), "join not stored");
}

TEST_F(ConsumerTableTest, TheAdmissionBoundIsTheSmallestOfTheConsumersThatHoldSteps) {
  tdock::MutexLock lock(&mu_);
  std::string consumer;
  EXPECT_FALSE(table_.AdmissionBound(mu_, &consumer).has_value());
  ConsumerSpec loose, tight;
  loose.name = "loose";
  loose.columns = {"ids"};
  loose.max_staleness = 4;
  tight = loose;
  tight.name = "tight";
  tight.max_staleness = 1;
  tight.optional = true;  // not joined: holds no step
  table_.Add(mu_, loose);
  table_.Add(mu_, tight);
  EXPECT_EQ(table_.AdmissionBound(mu_, &consumer), std::optional<int64_t>(4));
  EXPECT_EQ(consumer, "loose");
  table_.life(mu_, 3).joined = true;
  EXPECT_EQ(table_.AdmissionBound(mu_, &consumer), std::optional<int64_t>(1));
  EXPECT_EQ(consumer, "tight");
}

TEST(ConsumerPlanTest, TheOldestVersionFollowsTheBound) {
  ConsumerPlan plan;
  EXPECT_EQ(plan.min_version(10), kNoVersion) << "no bound";
  plan.max_staleness = 2;
  EXPECT_EQ(plan.min_version(10), 8);
  EXPECT_EQ(plan.min_version(2), kNoVersion) << "no version is under 0";
}

TEST(StalenessCountersTest, RowsWithAVersionAreCountedIntoBuckets) {
  RowIndex index(4);
  StalenessCounters counters;
  counters.Count(5, index, {0, 1});
  EXPECT_EQ(counters.Snapshot().count, 0) << "no row of the step has a version";
  {
    tdock::MutexLock commit(&index.mu());
    index.LowerVersion(0, 5);
    index.LowerVersion(1, 3);
    index.LowerVersion(2, 7);  // newer than `now`: staleness 0
  }
  counters.Count(5, index, {0, 1, 2, 3});  // row 3 has none
  const StalenessStats stats = counters.Snapshot();
  EXPECT_EQ(stats.count, 3);
  EXPECT_EQ(stats.sum, 2);
  int64_t in_buckets = 0;
  for (int64_t b : stats.buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 3);
  EXPECT_EQ(stats.buckets[0], 2) << "staleness 0 is in the first bucket";
}

TEST_F(ConsumerTableTest, AReplacedSpecKeepsTheConsumers) {
  tdock::MutexLock lock(&mu_);
  DockSpec next = table_.spec(mu_);
  next.consumers[1].joined = true;
  next.columns.push_back({"note"});
  table_.Replace(mu_, next);
  EXPECT_TRUE(table_.spec(mu_).consumers[1].joined);
  EXPECT_EQ(table_.spec(mu_).columns.size(), 3u);
  DockSpec fewer = next;
  fewer.consumers.pop_back();
  EXPECT_DEATH(table_.Replace(mu_, fewer), "a replaced spec has 1 consumers, not 2");
}

TEST_F(ConsumerTableTest, ChangesAreTakenOneAtATimeByOneWorkerInTheOrderAsked) {
  tdock::MutexLock lock(&mu_);
  EXPECT_TRUE(table_.Enqueue(mu_, Named(SpecChange::Kind::kRemove, "reader")))
      << "the first change's caller works through the queue";
  EXPECT_FALSE(table_.Enqueue(mu_, Named(SpecChange::Kind::kJoin, "scorer")))
      << "the worker goes on to it";
  SpecChange* first = table_.Next(mu_);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->consumer.name, "reader");
  EXPECT_EQ(table_.Next(mu_), first) << "still first until taken";
  EXPECT_EQ(table_.Pop(mu_).consumer.name, "reader");
  ASSERT_NE(table_.Next(mu_), nullptr);
  EXPECT_EQ(table_.Pop(mu_).kind, SpecChange::Kind::kJoin);
  EXPECT_EQ(table_.Next(mu_), nullptr) << "empty: the worker stops";
  EXPECT_TRUE(table_.Enqueue(mu_, Named(SpecChange::Kind::kRemove, "scorer")))
      << "and the next change's caller becomes the worker";
}

TEST_F(ConsumerTableTest, AConsumerBeingAddedIsVisibleWhileItsSpecIsRecorded) {
  tdock::MutexLock lock(&mu_);
  EXPECT_EQ(table_.recording_consumer(mu_), nullptr);
  DockSpec next = table_.spec(mu_);
  ConsumerSpec late;
  late.name = "late";
  late.columns = {"score"};
  next.consumers.push_back(late);
  table_.StartRecording(mu_, next, 2);
  ASSERT_NE(table_.recording_consumer(mu_), nullptr);
  EXPECT_EQ(table_.recording_consumer(mu_)->name, "late");
  ASSERT_NE(table_.recording_plan(mu_), nullptr);
  EXPECT_EQ(table_.recording_plan(mu_)->index, 2);
  EXPECT_EQ(table_.plans(mu_).size(), 2u) << "not a consumer until applied";
  EXPECT_DEATH(table_.StartRecording(mu_, next, -1), "two specs recorded at once");
  EXPECT_EQ(table_.EndRecording(mu_).consumers.size(), 3u);
  EXPECT_EQ(table_.recording_consumer(mu_), nullptr);
  EXPECT_EQ(table_.recording_plan(mu_), nullptr);
  EXPECT_DEATH(table_.EndRecording(mu_), "no spec is being recorded");
}

TEST_F(ConsumerTableTest, AReleasedStepsHandOutsJoinTheTotals) {
  Partition part(&mu_, 0, 4, 1, 2, {{}, {}});
  tdock::MutexLock lock(&mu_);
  part.consumer(mu_, 0).handed_total.store(3);
  part.consumer(mu_, 1).handed_total.store(1);
  table_.AddReleased(mu_, part);
  table_.AddReleased(mu_, part);
  EXPECT_EQ(table_.released_handed_total(mu_), (std::vector<int64_t>{6, 2}));
}

TEST_F(ConsumerTableTest, ItChecksItIsGivenItsDocksMutex) {
  tdock::Mutex other;
  tdock::ReaderMutexLock lock(&other);
  EXPECT_DEATH((void)table_.spec(other), "not its dock's mutex");
}

}  // namespace
}  // namespace tdock::internal
