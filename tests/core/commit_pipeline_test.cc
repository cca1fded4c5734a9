// CommitPipeline: a change applies once its record is stored (or applies at
// once, with OK, when the dock has no journal), gets the record's error when
// the store fails, and keeps its owner alive while the record is in flight.
#include "server/dock/commit_pipeline.h"

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

// A journal that holds each record's completion until the test completes it.
class HeldJournal final : public DockJournal {
 public:
  std::vector<int64_t> released;  // the steps whose release was submitted
  std::vector<Done> pending;

  void Put(const PutRecord&, Done done) override { pending.push_back(std::move(done)); }
  void HandedOut(const HandOut&, Done done) override { pending.push_back(std::move(done)); }
  void RoundDelivered(int64_t, int, int64_t, int32_t, uint64_t, const RoundRecord*,
                      Done done) override {
    pending.push_back(std::move(done));
  }
  void LeaseEnded(const LeaseEnd&, Done done) override { pending.push_back(std::move(done)); }
  void Dropped(const DropRecord&, Done done) override { pending.push_back(std::move(done)); }
  void Reserved(const ReservationRecord&, const DropRecord*, Done done) override {
    pending.push_back(std::move(done));
  }
  void Released(int64_t step, Done done) override {
    released.push_back(step);
    pending.push_back(std::move(done));
  }
  void CarryEnded(int64_t, Done done) override { pending.push_back(std::move(done)); }
  void VersionSet(int64_t, Done done) override { pending.push_back(std::move(done)); }
  void SpecChanged(const DockSpec&, Done done) override { pending.push_back(std::move(done)); }
};

void CommitRelease(CommitPipeline& commit, int64_t step, std::optional<absl::Status>* applied) {
  commit.Commit(
      [step](DockJournal& journal, DockJournal::Done stored) {
        journal.Released(step, std::move(stored));
      },
      [applied](absl::Status stored) { *applied = std::move(stored); });
}

TEST(CommitPipelineTest, WithoutAJournalAChangeAppliesBeforeCommitReturns) {
  CommitPipeline commit;
  EXPECT_FALSE(commit.durable());
  std::optional<absl::Status> applied;
  bool stored = false;
  commit.Commit([&](DockJournal&, DockJournal::Done) { stored = true; },
                [&](absl::Status status) { applied = std::move(status); });
  ASSERT_TRUE(applied.has_value()) << "apply ran inside Commit";
  EXPECT_TRUE(applied->ok());
  EXPECT_FALSE(stored) << "nothing to store without a journal";
}

TEST(CommitPipelineTest, WithAJournalAChangeAppliesOnlyOnceItsRecordIsStored) {
  auto journal = std::make_shared<HeldJournal>();
  auto owner = std::make_shared<int>(0);
  CommitPipeline commit;
  commit.Attach(journal, owner);
  EXPECT_TRUE(commit.durable());
  std::optional<absl::Status> applied;
  CommitRelease(commit, 7, &applied);
  EXPECT_EQ(journal->released, std::vector<int64_t>{7});
  EXPECT_FALSE(applied.has_value()) << "applied before its record was stored";
  ASSERT_EQ(journal->pending.size(), 1u);
  std::move(journal->pending[0])(absl::OkStatus());
  ASSERT_TRUE(applied.has_value());
  EXPECT_TRUE(applied->ok());
}

TEST(CommitPipelineTest, AFailedRecordReachesTheChangeToUndoIt) {
  auto journal = std::make_shared<HeldJournal>();
  auto owner = std::make_shared<int>(0);
  CommitPipeline commit;
  commit.Attach(journal, owner);
  std::optional<absl::Status> applied;
  CommitRelease(commit, 3, &applied);
  ASSERT_EQ(journal->pending.size(), 1u);
  std::move(journal->pending[0])(absl::UnavailableError("disk full"));
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(applied->message(), "disk full");
}

TEST(CommitPipelineTest, ARecordInFlightKeepsItsOwnerAlive) {
  auto journal = std::make_shared<HeldJournal>();
  auto owner = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = owner;
  CommitPipeline commit;
  commit.Attach(journal, owner);
  std::optional<absl::Status> applied;
  CommitRelease(commit, 1, &applied);
  owner.reset();
  EXPECT_FALSE(watch.expired()) << "the owner went while its record was in flight";
  std::move(journal->pending[0])(absl::OkStatus());
  journal->pending.clear();
  EXPECT_TRUE(watch.expired()) << "a completed record still holds its owner";
  EXPECT_TRUE(applied.has_value());
}

}  // namespace
}  // namespace tdock::internal
