// StepRing on its own: which step a partition is free for, holds, or makes
// wait; a release being recorded counts as released to new work but still
// holds the step; the live steps in ascending order; the front step (the
// oldest not released); the totals of the released steps.
#include "server/dock/step_ring.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/dock/local_cell_store.h"

namespace tdock::internal {
namespace {

using State = StepRing::StepState;

class StepRingTest : public ::testing::Test {
 protected:
  // Two steps in flight of 4 rows in groups of 2, one column, one consumer.
  StepRing ring_{&mu_, 2, 4, 2, 1, {{}}, 1};
  tdock::Mutex mu_;

  void Activate(int64_t step) {
    tdock::MutexLock lock(&mu_);
    ring_.Of(step).Activate(mu_, step,
                            LocalCellStore(4096, 0).OpenStep());
  }
  State Classify(int64_t step) {
    tdock::ReaderMutexLock lock(&mu_);
    return ring_.Classify(mu_, step);
  }
  bool Holds(int64_t step) {
    tdock::ReaderMutexLock lock(&mu_);
    return ring_.Holds(mu_, step);
  }
  int64_t BlockingStep(int64_t step) {
    tdock::ReaderMutexLock lock(&mu_);
    return ring_.BlockingStep(mu_, step);
  }
  std::vector<int64_t> Live() {
    tdock::ReaderMutexLock lock(&mu_);
    return ring_.LiveSteps(mu_);
  }
};

TEST_F(StepRingTest, StepsTakeTheirPartitionInOrder) {
  EXPECT_EQ(ring_.steps_in_flight(), 2);
  EXPECT_EQ(&ring_.Of(0), &ring_.Of(2));
  EXPECT_NE(&ring_.Of(0), &ring_.Of(1));
  EXPECT_EQ(Classify(0), State::kFree);
  EXPECT_EQ(Classify(1), State::kFree);
  EXPECT_EQ(Classify(2), State::kBlocked) << "step 2 waits for step 0";
  EXPECT_EQ(BlockingStep(2), 0);
  Activate(0);
  EXPECT_EQ(Classify(0), State::kLive);
  EXPECT_TRUE(Holds(0));
  EXPECT_EQ(Classify(2), State::kBlocked);
  EXPECT_EQ(BlockingStep(4), 0);
  EXPECT_EQ(Live(), std::vector<int64_t>{0});
}

TEST_F(StepRingTest, AReleaseBeingRecordedStillHoldsItsStep) {
  Activate(0);
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(0).set_releasing(mu_, true);
  }
  EXPECT_EQ(Classify(0), State::kReleased) << "no new work while its release is recorded";
  EXPECT_TRUE(Holds(0)) << "the record may fail";
  EXPECT_EQ(Classify(2), State::kBlocked);
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(0).set_releasing(mu_, false);  // the record failed
  }
  EXPECT_EQ(Classify(0), State::kLive);
}

TEST_F(StepRingTest, AReleasedStepFreesItsPartitionForTheStepAfterIt) {
  Activate(1);
  Activate(0);
  EXPECT_EQ(Live(), (std::vector<int64_t>{0, 1}));
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(0).Release(mu_);
  }
  EXPECT_EQ(Classify(0), State::kReleased);
  EXPECT_FALSE(Holds(0));
  EXPECT_EQ(Classify(2), State::kFree);
  EXPECT_EQ(Classify(4), State::kBlocked) << "step 4 waits for step 2";
  EXPECT_EQ(BlockingStep(4), 2);
  Activate(2);
  EXPECT_EQ(Live(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Classify(0), State::kReleased) << "an older step than the partition holds";
}

TEST_F(StepRingTest, TheFrontIsTheOldestStepNotReleased) {
  auto front = [&] {
    tdock::ReaderMutexLock lock(&mu_);
    return ring_.FrontStep(mu_);
  };
  EXPECT_EQ(front(), 0) << "nothing started";
  Activate(1);
  EXPECT_EQ(front(), 0) << "step 0's partition is free for it";
  Activate(0);
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(0).Release(mu_);
  }
  EXPECT_EQ(front(), 1);
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(1).Release(mu_);
  }
  EXPECT_EQ(front(), 2) << "the next step a free partition takes";
}

TEST_F(StepRingTest, EachReleasedStepJoinsTheTotalsOnce) {
  Activate(0);
  Activate(1);
  {
    tdock::MutexLock lock(&mu_);
    ring_.Of(0).column(0).ready.Set(0);
    ring_.Of(0).column(0).ready.Set(3);
    ring_.Of(1).column(0).ready.Set(1);
    ASSERT_TRUE(ring_.Of(0).MarkDropped(mu_, 2, DropReason::kFiltered));
    ring_.CountReleased(mu_, ring_.Of(0), 1);
    ring_.Of(0).Release(mu_);
    ring_.CountReleased(mu_, ring_.Of(1), 1);
    ring_.Of(1).Release(mu_);
  }
  tdock::ReaderMutexLock lock(&mu_);
  EXPECT_EQ(ring_.ReleasedReadyRows(mu_, 1), std::vector<int64_t>{3});
  EXPECT_EQ(ring_.ReleasedReadyRows(mu_, 2), (std::vector<int64_t>{3, 0}))
      << "a column added later has none yet";
  EXPECT_EQ(ring_.released_dropped_rows(mu_)[static_cast<int>(DropReason::kFiltered)], 1);
}

}  // namespace
}  // namespace tdock::internal
