// seal_when.carry: the complete groups beyond a sealed step's target are
// written into the next step (with their keys and versions, each consumer's
// share of them done there if it took it here) instead of being dropped as
// surplus; the sealed step waits for that before it is released.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/dock/journal_hook.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/core/drop_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::Cells;
using testing::GetOf;
using testing::GetSync;
using testing::Iota;
using testing::PutSync;
using testing::Reader;
using testing::RowValues;

constexpr int kCarried = static_cast<int>(DropReason::kCarried);
constexpr int kSurplus = static_cast<int>(DropReason::kSurplus);

// 6 groups of 2 per step, two steps in flight. "scorer" reads prompts row
// by row; "trainer" takes whole groups of prompt and advantage ("adv",
// written only for groups that passed the filter); the step seals at 2
// groups complete for the trainer and carries the other complete ones.
DockSpec CarrySpec(int64_t scorer_lease_ms = 0) {
  DockSpec spec;
  spec.name = "carry";
  spec.num_prompts = 6;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"prompt"};
  spec.columns = {{"prompt", DType::kInt32, {}, 0, false},
                  {"adv", DType::kInt32, {}, 0, false}};
  ConsumerSpec scorer = Reader("scorer", {"prompt"}, 12);
  scorer.lease_ms = scorer_lease_ms;
  spec.consumers = {scorer, Reader("trainer", {"prompt", "adv"}, 2, /*whole_groups=*/true)};
  spec.seal_when = SealWhen{"trainer", 2, /*carry=*/true};
  return spec;
}

std::vector<std::string> KeysOf(int64_t step, const std::vector<int64_t>& rows) {
  std::vector<std::string> keys;
  for (int64_t row : rows) keys.push_back(absl::StrCat("s", step, "r", row));
  return keys;
}

// Prompts of every row of `step`, keyed "s<step>r<row>", at `version`.
void WritePrompts(Dock& dock, int64_t step, int64_t version) {
  const testing::OwnedColumn prompts = Cells("prompt", Iota(0, 12));
  PutInput in;
  in.step = step;
  in.rows = Iota(0, 12);
  in.keys = KeysOf(step, in.rows);
  in.versions = {version};
  in.columns = {prompts.View()};
  ASSERT_OK(PutSync(dock, std::move(in)));
}

// Three groups complete at once (0, 2 and 4): groups 0 and 2 stay, group 4
// is carried into step 1 as its first group, with its keys, versions and
// cells; the scorer, which took it in step 0, has it done in step 1; the
// trainer gets it there. The incomplete groups drop as surplus.
TEST(CarryTest, CompleteSurplusGroupsGoToTheNextStep) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(CarrySpec()));
  ASSERT_OK(dock->SetVersion(3));
  WritePrompts(*dock, 0, 2);
  ASSERT_OK_AND_ASSIGN(Batch scored, GetSync(*dock, GetOf("scorer")));
  ASSERT_EQ(scored.rows, Iota(0, 12));
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 4, 5, 8, 9}, {Cells("adv", {0, 1, 4, 5, 8, 9})}));

  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 2u) << "step 1 started with the carried group";
  EXPECT_TRUE(stats.steps[0].sealed);
  EXPECT_EQ(stats.steps[0].dropped_rows[kSurplus], 6);
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 2);
  EXPECT_FALSE(stats.steps[1].sealed);
  const absl::Status gone = dock->Read(0, {8}, {"prompt"}).status();
  EXPECT_STATUS(gone, absl::StatusCode::kFailedPrecondition, "row 8 was dropped (carried)");

  ASSERT_OK_AND_ASSIGN(Batch moved, dock->Read(1, {0, 1}, {"prompt", "adv"}));
  EXPECT_EQ(moved.keys, KeysOf(0, {8, 9}));
  EXPECT_EQ(moved.versions, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(RowValues<int32_t>(moved.columns[0], 0), std::vector<int32_t>(9, 8));
  EXPECT_EQ(RowValues<int32_t>(moved.columns[1], 1), std::vector<int32_t>(10, 9));
  ASSERT_OK_AND_ASSIGN(Batch by_key, dock->ReadKeys({"s0r8"}, {"prompt"}));
  EXPECT_EQ(by_key.step, 1);

  GetInput scorer1 = GetOf("scorer");
  scorer1.step = 1;
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, scorer1));
  EXPECT_TRUE(none.rows.empty()) << "the scorer took the carried rows in step 0";
  EXPECT_EQ(dock->Stats().steps[1].consumed_rows[0], 0) << "done there, not handed out again";

  ASSERT_OK_AND_ASSIGN(Batch trained0, GetSync(*dock, GetOf("trainer", 4)));
  EXPECT_EQ(trained0.rows, (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_TRUE(trained0.end_of_step);
  ASSERT_OK_AND_ASSIGN(Batch trained1, GetSync(*dock, GetOf("trainer", 2)));
  EXPECT_EQ(trained1.step, 1);
  EXPECT_EQ(trained1.rows, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(trained1.keys, KeysOf(0, {8, 9}));
  stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u) << "step 0 was released once its carry was written";
  EXPECT_EQ(stats.steps[0].step, 1);
}

// Step 2 shares step 0's partition: step 1's carry waits, parked, until
// step 0 is released, and step 1 is not released before it is written.
TEST(CarryTest, ACarryWaitsForTheNextStepsPartition) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(CarrySpec()));
  ASSERT_OK(PutSync(*dock, 0, {0}, {Cells("prompt", {0})}));  // step 0 holds partition 0
  WritePrompts(*dock, 1, 0);
  ASSERT_OK_AND_ASSIGN(Batch scored, GetSync(*dock, [] {
                         GetInput in = GetOf("scorer");
                         in.step = 1;
                         return in;
                       }()));
  ASSERT_OK(PutSync(*dock, 1, Iota(0, 6), {Cells("adv", Iota(0, 6))}));
  DockStats stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 2u);
  EXPECT_EQ(stats.steps[1].dropped_rows[kCarried], 2);
  EXPECT_EQ(stats.parked_puts, 1) << "the carry waits for step 0's partition";

  GetInput trainer1 = GetOf("trainer", 4);
  trainer1.step = 1;
  ASSERT_OK_AND_ASSIGN(Batch trained1, GetSync(*dock, trainer1));
  EXPECT_EQ(trained1.rows, Iota(0, 4));
  EXPECT_TRUE(trained1.end_of_step);
  ASSERT_EQ(dock->Stats().steps.size(), 2u) << "step 1 owes its carry: it stays";
  EXPECT_STATUS(dock->ReleaseStep(1), absl::StatusCode::kFailedPrecondition,
                "step 1 owes the groups its seal carried to step 2");

  ASSERT_OK(dock->ReleaseStep(0));
  stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u) << "the carry went into step 2; step 1 was released";
  EXPECT_EQ(stats.steps[0].step, 2);
  EXPECT_EQ(stats.parked_puts, 0);
  ASSERT_OK_AND_ASSIGN(Batch moved, dock->Read(2, {0, 1}, {"prompt"}));
  EXPECT_EQ(moved.keys, KeysOf(1, {4, 5}));
}

// A next step that takes no new rows (sealed) refuses the carry: the rows
// stay dropped as carried, and the step is released all the same.
TEST(CarryTest, ACarryTheNextStepRefusesEndsWithTheStep) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(CarrySpec()));
  ASSERT_OK(PutSync(*dock, 1, {0}, {Cells("prompt", {0})}));
  ASSERT_OK(dock->Seal(SealInput{1, {}}).status());
  WritePrompts(*dock, 0, 0);
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 6), {Cells("adv", Iota(0, 6))}));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 2);
  EXPECT_EQ(stats.parked_puts, 0);
  ASSERT_OK(GetSync(*dock, GetOf("scorer")).status());
  ASSERT_OK_AND_ASSIGN(Batch trained, GetSync(*dock, GetOf("trainer", 4)));
  EXPECT_TRUE(trained.end_of_step);
  stats = dock->Stats();
  ASSERT_EQ(stats.steps.size(), 1u);
  EXPECT_EQ(stats.steps[0].step, 1) << "step 0 went, its carry refused";
}

// A group a consumer holds under a lease in flight may still come back to
// it in this step (the lease ending unacknowledged): carried, it would count
// as done for that consumer in the next step without having been done. It
// is dropped as surplus instead.
TEST(CarryTest, AGroupUnderALeaseInFlightIsNotCarried) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(CarrySpec(/*scorer_lease_ms=*/600000)));
  WritePrompts(*dock, 0, 0);
  ASSERT_OK_AND_ASSIGN(Batch scored, GetSync(*dock, GetOf("scorer")));
  ASSERT_NE(scored.lease_id, 0u);
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 6), {Cells("adv", Iota(0, 6))}));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 0);
  EXPECT_EQ(stats.steps[0].dropped_rows[kSurplus], 8);
  EXPECT_EQ(stats.steps.size(), 1u) << "nothing carried: step 1 did not start";
}

// carry_columns: a group is carried once its rows have the prompts (a
// finished rollout), advantages or not; they are written in the next step,
// where the trainer waits for their advantages.
TEST(CarryTest, CarryColumnsNameWhatAGroupNeedsToBeCarried) {
  DockSpec spec = CarrySpec();
  spec.seal_when->carry_columns = {"prompt"};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 10), {Cells("prompt", Iota(0, 10))}));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 4), {Cells("adv", Iota(0, 4))}));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 6) << "groups 2-4 had their prompts";
  EXPECT_EQ(stats.steps[0].dropped_rows[kSurplus], 2) << "group 5 had none";
  ASSERT_OK_AND_ASSIGN(Batch moved, dock->Read(1, Iota(0, 6), {"prompt"}));
  EXPECT_EQ(RowValues<int32_t>(moved.columns[0], 5), std::vector<int32_t>(10, 9));
  ASSERT_OK(PutSync(*dock, 1, {0, 1}, {Cells("adv", {0, 1})}));
  GetInput trainer1 = GetOf("trainer", 2);
  trainer1.step = 1;
  ASSERT_OK_AND_ASSIGN(Batch trained1, GetSync(*dock, trainer1));
  EXPECT_EQ(trained1.rows, (std::vector<int64_t>{0, 1}));
}

// A journal whose records complete when the test says, in any order.
class HeldJournal final : public DockJournal {
 public:
  std::vector<std::pair<std::string, Done>> pending;  // kind, completion

  // Completes the oldest pending record of `kind` with `status`.
  void Complete(const std::string& kind, absl::Status status = absl::OkStatus()) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->first != kind) continue;
      Done done = std::move(it->second);
      pending.erase(it);
      std::move(done)(std::move(status));
      return;
    }
    ADD_FAILURE() << "no " << kind << " record is pending";
  }
  void Put(const PutRecord&, Done done) override { Hold("put", std::move(done)); }
  void HandedOut(const HandOut&, Done done) override { Hold("handout", std::move(done)); }
  void RoundDelivered(int64_t, int, int64_t, int32_t, uint64_t, const RoundRecord*,
                      Done done) override {
    Hold("round", std::move(done));
  }
  void LeaseEnded(const LeaseEnd&, Done done) override { Hold("lease", std::move(done)); }
  void Dropped(const DropRecord& drop, Done done) override {
    Hold(drop.seal ? "seal" : "drop", std::move(done));
  }
  void Reserved(const ReservationRecord&, const DropRecord*, Done done) override {
    Hold("reserve", std::move(done));
  }
  void Released(int64_t, Done done) override { Hold("release", std::move(done)); }
  void CarryEnded(int64_t, Done done) override { Hold("carry_ended", std::move(done)); }
  void VersionSet(int64_t, Done done) override { Hold("version", std::move(done)); }
  void SpecChanged(const DockSpec&, Done done) override { Hold("spec", std::move(done)); }

 private:
  void Hold(std::string kind, Done done) { pending.emplace_back(std::move(kind), std::move(done)); }
};

struct JournaledCarry {
  std::shared_ptr<HeldJournal> journal = std::make_shared<HeldJournal>();
  std::unique_ptr<Dock> dock;
  JournaledCarry() {
    absl::StatusOr<DockRecovery> recovery = DockRecovery::Start(CarrySpec());
    EXPECT_OK(recovery.status());
    dock = std::move(*recovery).Finish(journal);
  }
  // Puts and stores it; the Put is answered.
  void PutStored(int64_t step, const std::vector<int64_t>& rows, const std::string& column) {
    const testing::OwnedColumn cells = Cells(column, rows);
    PutInput in;
    in.step = step;
    in.rows = rows;
    in.columns = {cells.View()};
    std::optional<absl::StatusOr<PutResult>> answer;
    dock->Put(std::move(in), [&](absl::StatusOr<PutResult> r) { answer = std::move(r); });
    journal->Complete("put");
    ASSERT_TRUE(answer.has_value());
    ASSERT_OK(answer->status());
  }
  // Puts advantages of `rows` of step 0 and stores the Put; the seal it
  // decides is left to the test, and so is the Put's answer (`adv`).
  void PutAdvantages(const std::vector<int64_t>& rows) {
    advantages = std::make_unique<testing::OwnedColumn>(Cells("adv", rows));
    PutInput in;
    in.step = 0;
    in.rows = rows;
    in.columns = {advantages->View()};
    dock->Put(std::move(in), [this](absl::StatusOr<PutResult> r) { adv = std::move(r); });
    journal->Complete("put");
  }
  // A Get whose hand-out is stored.
  absl::StatusOr<Batch> GetStored(GetInput in) {
    std::optional<absl::StatusOr<Batch>> got;
    dock->Get(std::move(in), [&](absl::StatusOr<Batch> b) { got = std::move(b); });
    journal->Complete("handout");
    if (!got.has_value()) return absl::InternalError("the Get was not answered");
    return *std::move(got);
  }
  std::unique_ptr<testing::OwnedColumn> advantages;
  std::optional<absl::StatusOr<PutResult>> adv;
};

// While the seal that carries group 2 (rows 4 and 5) is being stored, a Get
// does not take its rows: taken in step 0 and not counted as taken, they
// would reach the scorer again in step 1. Once the seal is stored the
// scorer gets them there, once.
TEST(CarryTest, RowsBeingCarriedAreNotHandedOutWhileTheSealIsStored) {
  JournaledCarry carry;
  carry.PutStored(0, Iota(0, 12), "prompt");
  carry.PutAdvantages(Iota(0, 6));  // the seal is decided; its record is held
  ASSERT_FALSE(carry.adv.has_value()) << "answered once the seal it caused is applied";
  ASSERT_OK_AND_ASSIGN(Batch scored, carry.GetStored(GetOf("scorer", 10)));
  EXPECT_EQ(scored.rows, (std::vector<int64_t>{0, 1, 2, 3, 6, 7, 8, 9, 10, 11}));

  carry.journal->Complete("seal");
  ASSERT_TRUE(carry.adv.has_value());
  carry.journal->Complete("put");  // the carry into step 1
  GetInput scorer1 = GetOf("scorer", 2);
  scorer1.step = 1;
  ASSERT_OK_AND_ASSIGN(Batch again, carry.GetStored(scorer1));
  EXPECT_EQ(again.rows, (std::vector<int64_t>{0, 1}));
}

// A seal whose record fails carries nothing: the rows it held for the carry
// are handed out in their step again.
TEST(CarryTest, ASealNotStoredGivesTheRowsItHeldBack) {
  JournaledCarry carry;
  Dock& dock = *carry.dock;
  carry.PutStored(0, Iota(0, 12), "prompt");
  carry.PutAdvantages(Iota(0, 6));
  carry.journal->Complete("seal", absl::UnavailableError("disk full"));
  ASSERT_TRUE(carry.adv.has_value());
  DockStats stats = dock.Stats();
  EXPECT_FALSE(stats.steps[0].sealed);
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 0);
  ASSERT_OK_AND_ASSIGN(Batch scored, carry.GetStored(GetOf("scorer")));
  EXPECT_EQ(scored.rows, Iota(0, 12));
}

// A Drop decided before the seal and stored before it takes its row out of
// the carry: the seal carries the rest of the group, and its consumers'
// counts still reach the step's rows.
TEST(CarryTest, ARowDroppedBeforeTheSealIsStoredIsNotCarried) {
  JournaledCarry carry;
  Dock& dock = *carry.dock;
  carry.PutStored(0, Iota(0, 12), "prompt");
  std::optional<absl::StatusOr<int64_t>> dropped;
  dock.Drop(testing::DropOf(0, {4}, DropReason::kFailed),
            [&](absl::StatusOr<int64_t> d) { dropped = std::move(d); });
  carry.PutAdvantages(Iota(0, 6));  // the seal decides to carry rows 4 and 5
  carry.journal->Complete("drop");  // row 4 goes first
  ASSERT_TRUE(dropped.has_value());
  ASSERT_OK(dropped->status());
  carry.journal->Complete("seal");
  carry.journal->Complete("put");  // the carry: row 5
  DockStats stats = dock.Stats();
  ASSERT_EQ(stats.steps.size(), 2u);
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 1);
  EXPECT_EQ(stats.steps[0].dropped_rows[static_cast<int>(DropReason::kFailed)], 1);
  ASSERT_OK_AND_ASSIGN(Batch moved, dock.Read(1, {0}, {"prompt"}));
  EXPECT_EQ(RowValues<int32_t>(moved.columns[0], 0), std::vector<int32_t>(6, 5));
  ASSERT_OK_AND_ASSIGN(Batch trained, carry.GetStored(GetOf("trainer", 4)));
  EXPECT_EQ(trained.rows, Iota(0, 4));
  EXPECT_TRUE(trained.end_of_step) << "rows 4 and 5 count as done for the trainer";
}

// One Put carries every group, with every cell they have: groups whose rows
// have other columns than the first carried group's stay (surplus), so no
// cell is left behind. Group 2 has advantages, groups 3 and 4 only prompts.
TEST(CarryTest, GroupsWithOtherColumnsThanTheFirstCarriedAreNotCarried) {
  DockSpec spec = CarrySpec();
  spec.seal_when->carry_columns = {"prompt"};
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 10), {Cells("prompt", Iota(0, 10))}));
  ASSERT_OK(PutSync(*dock, 0, {4}, {Cells("adv", {4})}));  // group 2: half its advantages
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3, 5}, {Cells("adv", {0, 1, 2, 3, 5})}));
  DockStats stats = dock->Stats();
  EXPECT_EQ(stats.steps[0].dropped_rows[kCarried], 2) << "group 2, with its advantages";
  EXPECT_EQ(stats.steps[0].dropped_rows[kSurplus], 6) << "groups 3 and 4 lack them; 5 is empty";
  ASSERT_OK_AND_ASSIGN(Batch moved, dock->Read(1, {0, 1}, {"prompt", "adv"}));
  EXPECT_EQ(RowValues<int32_t>(moved.columns[1], 1), std::vector<int32_t>(6, 5));
}

TEST(CarryTest, BadCarrySettingsAreRefusedNamingThem) {
  DockSpec spec = CarrySpec();
  spec.steps_in_flight = 1;
  EXPECT_STATUS(Dock::Create(spec).status(), absl::StatusCode::kInvalidArgument,
                "seal_when.carry needs steps_in_flight >= 2");
  spec = CarrySpec();
  spec.seal_when->carry_columns = {"nope"};
  EXPECT_STATUS(Dock::Create(spec).status(), absl::StatusCode::kInvalidArgument,
                "seal_when.carry_columns names column 'nope'");
  spec = CarrySpec();
  spec.seal_when->carry = false;
  spec.seal_when->carry_columns = {"prompt"};
  EXPECT_STATUS(Dock::Create(spec).status(), absl::StatusCode::kInvalidArgument,
                "seal_when.carry_columns is set but carry is not");
}

TEST(CarryTest, ADropCannotGiveTheCarriedReason) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(CarrySpec()));
  WritePrompts(*dock, 0, 0);
  EXPECT_STATUS(dock->Drop(testing::DropOf(0, {3}, DropReason::kCarried)),
                absl::StatusCode::kInvalidArgument, "reason 'carried' is the server's own");
  EXPECT_EQ(dock->Stats().steps[0].dropped_rows[kCarried], 0);
}

}  // namespace
}  // namespace tdock
