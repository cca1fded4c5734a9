// KeyIndex on its own: a key names one row; an insert of several keys is all
// or nothing; forgetting a row's key leaves the same key given to another row
// since; Reset makes the index exactly what recovery found; ForgetRows and
// ForgetStep erase the keys a step's RowIndex gives its rows.
#include "server/dock/key_index.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tdock::internal {
namespace {

using RowRef = KeyIndex::RowRef;

TEST(KeyIndex, FindsTheRowThatHasAKey) {
  KeyIndex index;
  EXPECT_FALSE(index.Find("a").has_value());
  ASSERT_FALSE(index.Insert({{"a", {3, 7}}, {"b", {3, 8}}}).has_value());
  ASSERT_TRUE(index.Find("a").has_value());
  EXPECT_EQ(*index.Find("a"), (RowRef{3, 7}));
  EXPECT_EQ(*index.Find("b"), (RowRef{3, 8}));
  EXPECT_EQ(index.size(), 2u);
}

TEST(KeyIndex, AnInsertWithATakenKeyChangesNothingAndNamesIt) {
  KeyIndex index;
  ASSERT_FALSE(index.Insert({{"a", {0, 1}}}).has_value());
  const std::optional<KeyIndex::Taken> taken = index.Insert({{"b", {1, 0}}, {"a", {1, 1}}});
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->index, 1u);
  EXPECT_EQ(taken->holder, (RowRef{0, 1}));
  EXPECT_FALSE(index.Find("b").has_value()) << "a refused insert added a key";
  EXPECT_EQ(*index.Find("a"), (RowRef{0, 1}));
  const std::optional<KeyIndex::Taken> asked = index.FindTaken({"c", "a"});
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->index, 1u);
  EXPECT_FALSE(index.FindTaken({"c", "d"}).has_value());
}

TEST(KeyIndex, ForgettingARowsKeyLeavesItToAnotherRow) {
  KeyIndex index;
  ASSERT_FALSE(index.Insert({{"a", {0, 1}}}).has_value());
  index.Forget({{"a", {0, 1}}});
  EXPECT_FALSE(index.Find("a").has_value());
  // The key is given to row 2 of step 1; a late forget of its old row is a
  // no-op.
  ASSERT_FALSE(index.Insert({{"a", {1, 2}}}).has_value());
  index.Forget({{"a", {0, 1}}, {"unknown", {0, 3}}});
  ASSERT_TRUE(index.Find("a").has_value());
  EXPECT_EQ(*index.Find("a"), (RowRef{1, 2}));
}

TEST(KeyIndex, ResetHoldsExactlyWhatItIsGiven) {
  KeyIndex index;
  ASSERT_FALSE(index.Insert({{"old", {0, 0}}}).has_value());
  index.Reset({{"a", {4, 0}}, {"b", {5, 1}}});
  EXPECT_FALSE(index.Find("old").has_value());
  EXPECT_EQ(*index.Find("b"), (RowRef{5, 1}));
  EXPECT_EQ(index.size(), 2u);
}

// Two writers give the same new keys at once, each to a row of its own
// step: every key ends up with exactly one of them. Run under
// ThreadSanitizer in the sanitizer lane.
TEST(KeyIndex, ConcurrentInsertsOfOneKeyGiveItToOneRow) {
  constexpr int kKeys = 2000;
  KeyIndex index;
  std::atomic<int> won[2] = {0, 0};
  auto writer = [&](int64_t step) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = absl::StrCat("uid-", k);
      if (!index.Insert({{key, {step, k}}}).has_value()) won[step].fetch_add(1);
    }
  };
  std::thread a(writer, 0);
  std::thread b(writer, 1);
  a.join();
  b.join();
  EXPECT_EQ(won[0].load() + won[1].load(), kKeys);
  EXPECT_EQ(index.size(), static_cast<size_t>(kKeys));
}

TEST(KeyIndex, ForgettingRowsOrAStepErasesTheKeysTheirRowIndexGives) {
  RowIndex rows(8);
  {
    tdock::MutexLock commit(&rows.mu());
    rows.SetKey(1, "a");
    rows.SetKey(2, "b");
    rows.SetKey(5, "c");
  }
  KeyIndex index;
  ASSERT_FALSE(index.Insert({{"a", {4, 1}}, {"b", {4, 2}}, {"c", {4, 5}}}).has_value());
  tdock::Mutex dock_mu;  // the dock's, held as a dock holds it
  tdock::ReaderMutexLock lock(&dock_mu);
  index.ForgetRows(dock_mu, 4, rows, {1, 3});  // row 3 has no key
  EXPECT_FALSE(index.Find("a").has_value());
  EXPECT_TRUE(index.Find("b").has_value());
  // A key given since to a row of another step stays.
  index.Forget({{"b", {4, 2}}});
  ASSERT_FALSE(index.Insert({{"b", {5, 0}}}).has_value());
  index.ForgetStep(dock_mu, 4, rows, 8);
  EXPECT_EQ(*index.Find("b"), (RowRef{5, 0}));
  EXPECT_FALSE(index.Find("c").has_value());
  EXPECT_EQ(index.size(), 1u);
  // A step none of whose rows ever had a key forgets nothing.
  index.ForgetStep(dock_mu, 5, RowIndex(8), 8);
  EXPECT_EQ(index.size(), 1u);
}

}  // namespace
}  // namespace tdock::internal
