// Columns added at run time: a new field (reward extras, teacher log-probs)
// joins a live dock with no cell written; Puts write it in live steps too and
// consumers added later need it, while the consumers there before go on as
// they were. Bad additions name what is wrong and change nothing. A listing
// of rows carries the cells of the columns it names (per-row tags).
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "gtest/gtest.h"
#include "server/dock/dock.h"
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
using testing::OwnedColumn;
using testing::PutSync;
using testing::Reader;
using testing::RowValues;

ColumnSpec Float(std::string name) { return {std::move(name), DType::kFloat32, {1}, 0, false}; }

OwnedColumn Scores(const std::string& name, const std::vector<int64_t>& rows) {
  std::vector<std::vector<float>> values;
  for (int64_t r : rows) values.push_back({static_cast<float>(r) / 2});
  return OwnedColumn::Of<float>(name, DType::kFloat32, values);
}

TEST(ColumnsTest, AddedColumnIsWrittenAndReadInLiveSteps) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  EXPECT_STATUS(PutSync(*dock, 0, Iota(0, 8), {Scores("teacher", Iota(0, 8))}),
                absl::StatusCode::kInvalidArgument, "column 'teacher' is unknown");

  ASSERT_OK_AND_ASSIGN(ColumnSpec added, dock->AddColumn(Float("teacher")));
  EXPECT_EQ(added.name, "teacher");
  EXPECT_EQ(dock->spec().columns.back(), added);
  ASSERT_OK(dock->AddConsumer(Reader("distill", {"prompt", "teacher"}, 8)));
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, GetOf("distill")));
  EXPECT_TRUE(none.rows.empty()) << "no teacher cell is written yet";
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Scores("teacher", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("distill")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
  ASSERT_EQ(batch.columns.size(), 2u);
  EXPECT_EQ(RowValues<float>(batch.columns[1], 3), std::vector<float>{1.5f});
  const DockStats stats = dock->Stats();
  EXPECT_EQ(stats.columns, (std::vector<std::string>{"prompt", "response", "teacher"}));
  EXPECT_EQ(stats.steps.at(0).ready_rows, (std::vector<int64_t>{8, 0, 8}));

  // The actor, there before, needs only the prompt: it is served as before,
  // and a later step's partition has the column as well.
  ASSERT_OK_AND_ASSIGN(Batch actor, GetSync(*dock, GetOf("actor")));
  EXPECT_EQ(actor.rows, Iota(0, 8));
  EXPECT_TRUE(dock->Stats().steps.empty());
  ASSERT_OK(PutSync(*dock, 1, Iota(0, 8), {Scores("teacher", Iota(0, 8))}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(1, {7}, {"teacher"}));
  EXPECT_EQ(RowValues<float>(read.columns[0], 0), std::vector<float>{3.5f});
}

TEST(ColumnsTest, BadAdditionsChangeNothing) {
  DockLimits limits;
  limits.max_columns = 3;
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)}), limits));
  const DockSpec before = dock->spec();
  EXPECT_STATUS(dock->AddColumn(Float("prompt")), absl::StatusCode::kAlreadyExists,
                "column 'prompt' already exists");
  EXPECT_STATUS(dock->AddColumn(Float("bad name!")), absl::StatusCode::kInvalidArgument,
                "column name");
  ColumnSpec no_dtype = Float("extra");
  no_dtype.dtype = DType::kUnspecified;
  EXPECT_STATUS(dock->AddColumn(no_dtype), absl::StatusCode::kInvalidArgument, "'extra'");
  ColumnSpec negative = Float("extra");
  negative.max_len = -1;
  EXPECT_STATUS(dock->AddColumn(negative), absl::StatusCode::kInvalidArgument,
                "max_len -1 is negative");
  ColumnSpec state = Float("extra");
  state.added = true;
  EXPECT_STATUS(dock->AddColumn(state), absl::StatusCode::kInvalidArgument,
                "column 'extra' sets added");
  EXPECT_EQ(dock->spec(), before);
  ASSERT_OK_AND_ASSIGN(ColumnSpec added, dock->AddColumn(Float("extra")));
  EXPECT_TRUE(added.added);
  EXPECT_STATUS(dock->AddColumn(Float("more")), absl::StatusCode::kResourceExhausted,
                "the dock has 3 columns, the most it can hold");
  // A bad column is named as bad, full dock or not.
  negative.name = "other";
  EXPECT_STATUS(dock->AddColumn(negative), absl::StatusCode::kInvalidArgument, "is negative");
  EXPECT_EQ(dock->spec().columns.size(), 3u);
}

// A dock whose spec sets add_columns_on_write adds the columns a Put writes
// that it lacks before the Put (as AddColumn does): from the Put's own
// definition (new_columns), else from the column's name and dtype.
//
// The Put views `columns`: they must outlive it.
PutInput PutOf(int64_t step, const std::vector<int64_t>& rows,
               const std::vector<OwnedColumn>& columns, std::vector<ColumnSpec> adding = {}) {
  PutInput in;
  in.step = step;
  in.rows = rows;
  for (const OwnedColumn& c : columns) in.columns.push_back(c.View());
  in.new_columns = std::move(adding);
  return in;
}

DockSpec OnWrite(std::vector<ConsumerSpec> consumers) {
  DockSpec spec = DropSpec(std::move(consumers));
  spec.steps_in_flight = 2;
  spec.add_columns_on_write = true;
  return spec;
}

TEST(ColumnsTest, PutAddsTheColumnsItWritesOnWrite) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(OnWrite({Reader("actor", {"prompt"}, 8)})));
  ASSERT_OK(PutSync(*dock, PutOf(0, Iota(0, 8),
                                 {Cells("prompt", Iota(0, 8)), Scores("teacher", Iota(0, 8)),
                                  Cells("mask", Iota(0, 8))},
                                 {Float("teacher")})));
  const DockSpec spec = dock->spec();
  ASSERT_EQ(spec.columns.size(), 4u);
  // Added in the order the Put names them, as AddColumn adds them.
  EXPECT_EQ(spec.columns[2].name, "teacher");
  EXPECT_EQ(spec.columns[2].inner_shape, (std::vector<int64_t>{1}));
  EXPECT_TRUE(spec.columns[2].added);
  EXPECT_EQ(spec.columns[3].name, "mask");
  EXPECT_EQ(spec.columns[3].dtype, DType::kInt32);
  EXPECT_TRUE(spec.columns[3].inner_shape.empty()) << "no definition: name and dtype only";
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {3}, {"teacher", "mask"}));
  EXPECT_EQ(RowValues<float>(read.columns[0], 0), std::vector<float>{1.5f});
  EXPECT_EQ(RowValues<int32_t>(read.columns[1], 0), (std::vector<int32_t>{3, 3, 3, 3}));
  // A later Put of a column the dock has writes it as defined; a definition
  // it sends for it is not used.
  ColumnSpec other = Float("teacher");
  other.inner_shape = {};
  ASSERT_OK(PutSync(*dock, PutOf(1, {0}, {Scores("teacher", {0})}, {other})));
  EXPECT_EQ(dock->spec().columns[2].inner_shape, (std::vector<int64_t>{1}));
  ASSERT_OK(dock->AddConsumer(Reader("distill", {"prompt", "teacher"}, 8)));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("distill")));
  EXPECT_EQ(batch.rows, Iota(0, 8));
}

TEST(ColumnsTest, BadColumnsOnWriteChangeNothing) {
  // A dock whose spec does not set add_columns_on_write adds nothing.
  ASSERT_OK_AND_ASSIGN(auto fixed, Dock::Create(DropSpec({Reader("actor", {"prompt"}, 8)})));
  EXPECT_STATUS(PutSync(*fixed, PutOf(0, {0}, {Scores("teacher", {0})})),
                absl::StatusCode::kInvalidArgument,
                "column 'teacher' is unknown (the dock's spec does not set add_columns_on_write)");
  EXPECT_STATUS(PutSync(*fixed, PutOf(0, {0}, {Cells("prompt", {0})}, {Float("prompt")})),
                absl::StatusCode::kInvalidArgument, "the dock adds no columns on write");
  EXPECT_EQ(fixed->spec().columns.size(), 2u);

  DockLimits limits;
  limits.max_columns = 3;
  ASSERT_OK_AND_ASSIGN(auto dock,
                       Dock::Create(OnWrite({Reader("actor", {"prompt"}, 8)}), limits));
  const DockSpec before = dock->spec();
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Cells("prompt", {0})}, {Float("teacher")})),
                absl::StatusCode::kInvalidArgument,
                "new_columns[0] defines column 'teacher', which the Put does not write");
  EXPECT_STATUS(
      PutSync(*dock, PutOf(0, {0}, {Scores("teacher", {0})}, {Float("teacher"), Float("teacher")})),
      absl::StatusCode::kInvalidArgument, "new_columns defines column 'teacher' twice");
  ColumnSpec ints = Float("teacher");
  ints.dtype = DType::kInt32;
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Scores("teacher", {0})}, {ints})),
                absl::StatusCode::kInvalidArgument,
                "defines column 'teacher' as int32; the Put writes it as float32");
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Scores("bad name!", {0})})),
                absl::StatusCode::kInvalidArgument, "column name");
  ColumnSpec state = Float("teacher");
  state.added = true;
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Scores("teacher", {0})}, {state})),
                absl::StatusCode::kInvalidArgument, "column 'teacher' sets added");
  // The Put's own faults, found before any column is added: a row out of
  // range, cells that do not fit the definition.
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {9}, {Scores("teacher", {9})})),
                absl::StatusCode::kInvalidArgument, "row 9 is out of range");
  ColumnSpec pairs = Float("teacher");
  pairs.inner_shape = {2};
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Scores("teacher", {0})}, {pairs})),
                absl::StatusCode::kInvalidArgument, "1 items of 8 bytes, but the data holds 4");
  // Two to add, room for one: neither is added.
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {0}, {Scores("teacher", {0}), Scores("critic", {0})})),
                absl::StatusCode::kResourceExhausted,
                "the dock has 2 columns and holds at most 3; 2 to add");
  EXPECT_EQ(dock->spec(), before);
  EXPECT_TRUE(dock->Stats().steps.empty()) << "no step was started";
  // Refused for its step or rows as they are: a cell written, a row
  // dropped, a released step, new rows of a sealed step.
  ASSERT_OK(PutSync(*dock, 0, Iota(0, 8), {Cells("prompt", Iota(0, 8))}));
  EXPECT_STATUS(PutSync(*dock, PutOf(0, {1}, {Cells("prompt", {1}), Scores("teacher", {1})})),
                absl::StatusCode::kAlreadyExists, "is already written");
  ASSERT_OK(dock->Drop({0, {2}, {}, DropReason::kFiltered}).status());
  EXPECT_REFUSED(PutSync(*dock, PutOf(0, {2}, {Scores("teacher", {2})})), Refusal::kDropped,
                 DropReason::kFiltered);
  ASSERT_OK(dock->ReleaseStep(0));
  EXPECT_REFUSED(PutSync(*dock, PutOf(0, {3}, {Scores("teacher", {3})})), Refusal::kReleased,
                 DropReason::kUnspecified);
  ASSERT_OK(PutSync(*dock, 1, {0}, {Cells("prompt", {0})}));
  ASSERT_OK(dock->Seal({1, {}}).status());
  const std::vector<OwnedColumn> teacher = {Scores("teacher", {0, 1})};
  PutInput append = PutOf(1, {}, teacher);
  append.new_rows = 2;
  EXPECT_REFUSED(PutSync(*dock, std::move(append)), Refusal::kSealed, DropReason::kUnspecified);
  EXPECT_EQ(dock->spec(), before);
  ASSERT_OK(PutSync(*dock, PutOf(1, {0}, {Scores("teacher", {0})})));
  EXPECT_EQ(dock->spec().columns.size(), 3u);
}

// A Put that adds columns runs again from the start once they are added:
// rows named by keys are looked up then (a key's row made meanwhile is
// written into, not asked for again), appends and reservations alike.
TEST(ColumnsTest, PutsAddingColumnsNameTheirRowsAsOthersDo) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(OnWrite({Reader("actor", {"prompt"}, 8)})));
  const std::vector<OwnedColumn> prompt = {Cells("prompt", {0})};
  PutInput keyed = PutOf(0, {}, prompt);
  keyed.keys = {"k0"};
  ASSERT_OK_AND_ASSIGN(PutResult first, PutSync(*dock, std::move(keyed)));
  ASSERT_EQ(first.assigned.size(), 1u);
  const std::vector<OwnedColumn> teacher = {Scores("teacher", {0})};
  PutInput again = PutOf(0, {}, teacher);
  again.keys = {"k0"};
  ASSERT_OK(PutSync(*dock, std::move(again)));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, first.assigned, {"teacher"}));
  EXPECT_EQ(read.keys, (std::vector<std::string>{"k0"}));

  const std::vector<OwnedColumn> critic = {Cells("prompt", {0, 1}), Scores("critic", {0, 1})};
  PutInput append = PutOf(0, {}, critic);
  append.new_rows = 2;
  ASSERT_OK_AND_ASSIGN(PutResult appended, PutSync(*dock, std::move(append)));
  EXPECT_EQ(appended.assigned.size(), 2u);
  ASSERT_OK_AND_ASSIGN(Reservation reserved, dock->Reserve({.rows = 2, .deadline = absl::Seconds(60)}));
  const std::vector<OwnedColumn> judge = {Cells("prompt", {0, 1}), Scores("judge", {0, 1})};
  PutInput in = PutOf(reserved.step, {}, judge);
  in.reservation = reserved.id;
  ASSERT_OK(PutSync(*dock, std::move(in)));
  EXPECT_EQ(dock->spec().columns.size(), 5u);
}

OwnedColumn Tags(const std::vector<std::string>& tags) {
  std::vector<std::vector<char>> rows;
  for (const std::string& tag : tags) rows.emplace_back(tag.begin(), tag.end());
  return OwnedColumn::Of<char>("tag", DType::kBytes, rows);
}

// ListRows carries, row by row, the written cells of the columns it names:
// per-row tags (a rewritable json column) as they are now, scores; rows
// without a cell carry none. A column unknown or named twice, or cells past
// what one answer carries, are refused.
TEST(ColumnsTest, ListRowsCarriesTheCellsOfTheColumnsItNames) {
  DockSpec spec = DropSpec({Reader("actor", {"prompt"}, 8)});
  ColumnSpec tag{"tag", DType::kBytes, {}, 0, /*rewritable=*/true};
  tag.encoding = ColumnEncoding::kJson;
  spec.columns.push_back(tag);
  spec.columns.push_back(Float("score"));
  DockLimits limits;
  limits.max_batch_bytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec, limits));
  ASSERT_OK(PutSync(*dock, 0, {0, 2}, {Tags({R"({"a":1})", R"({"b":2})"})}));
  ASSERT_OK(PutSync(*dock, 0, {0}, {Tags({R"({"a":3})"})}));  // rewritten
  ASSERT_OK(PutSync(*dock, 0, {2, 3}, {Scores("score", {2, 3})}));
  const std::vector<std::string> columns = {"tag", "score"};
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0, columns));
  ASSERT_EQ(listing.rows.size(), 8u);
  using Cells = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(listing.rows[0].cells, (Cells{{"tag", R"({"a":3})"}}));
  EXPECT_TRUE(listing.rows[1].cells.empty());
  const float one = 1.0f;
  const float one_and_half = 1.5f;
  EXPECT_EQ(listing.rows[2].cells,
            (Cells{{"tag", R"({"b":2})"},
                   {"score", std::string(reinterpret_cast<const char*>(&one), 4)}}));
  EXPECT_EQ(listing.rows[3].cells,
            (Cells{{"score", std::string(reinterpret_cast<const char*>(&one_and_half), 4)}}));
  ASSERT_OK_AND_ASSIGN(RowListing plain, dock->ListRows(0));
  EXPECT_TRUE(plain.rows[0].cells.empty()) << "no columns named, no cells";

  const std::vector<std::string> unknown = {"tags"};
  EXPECT_STATUS(dock->ListRows(0, unknown), absl::StatusCode::kInvalidArgument,
                "ListRows of column 'tags', which is unknown");
  const std::vector<std::string> twice = {"tag", "tag"};
  EXPECT_STATUS(dock->ListRows(0, twice), absl::StatusCode::kInvalidArgument,
                "ListRows names column 'tag' twice");

  DockLimits small;
  small.max_batch_bytes = 100'000;  // a Get's answer carries about 64 KiB more than its cells
  spec.name = "small";
  ASSERT_OK_AND_ASSIGN(auto tight, Dock::Create(spec, small));
  const std::string long_tag = absl::StrCat(R"({"a":")", std::string(60'000, 'x'), R"("})");
  ASSERT_OK(PutSync(*tight, 0, {0, 1}, {Tags({long_tag, long_tag})}));
  EXPECT_STATUS(tight->ListRows(0, columns), absl::StatusCode::kResourceExhausted,
                "more than one answer carries");
}

// Under ThreadSanitizer: Puts from several producers write the same new
// column at once; it is added once and every Put is stored.
TEST(ColumnsConcurrency, PutsAddingTheSameColumnRace) {
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(OnWrite({Reader("reader", {"prompt"}, 8)})));
  std::vector<std::thread> producers;
  for (int64_t row = 0; row < 8; ++row) {
    producers.emplace_back([&, row] {
      ASSERT_OK(PutSync(*dock, PutOf(0, {row}, {Scores("teacher", {row})}, {Float("teacher")})));
    });
  }
  for (std::thread& t : producers) t.join();
  EXPECT_EQ(dock->spec().columns.size(), 3u);
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, Iota(0, 8), {"teacher"}));
  for (int64_t row = 0; row < 8; ++row) {
    EXPECT_EQ(RowValues<float>(read.columns[0], row),
              std::vector<float>{static_cast<float>(row) / 2});
  }
}

// Under ThreadSanitizer: columns are added while a producer writes steps and
// a reader takes them; each new column is written into the live steps as soon
// as it exists. The reader gets every row of every step once.
TEST(ColumnsConcurrency, AdditionsRaceWithPutsAndGets) {
  constexpr int64_t kSteps = 30;
  constexpr int kAdded = 12;
  DockSpec spec = DropSpec({Reader("reader", {"prompt"}, 3)});
  spec.steps_in_flight = 2;
  ASSERT_OK_AND_ASSIGN(auto dock, Dock::Create(spec));
  std::atomic<int> added{0};
  std::thread adder([&] {
    for (int c = 0; c < kAdded; ++c) {
      ASSERT_OK(dock->AddColumn(Float("extra" + std::to_string(c))));
      added = c + 1;
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::thread producer([&] {
    for (int64_t step = 0; step < kSteps; ++step) {
      ASSERT_OK(PutSync(*dock, step, Iota(0, 8), {Cells("prompt", Iota(0, 8))}, kLongWait));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      // Write the newest column into the step just started (the reader may
      // have released it already: then the Put finds it released).
      const int c = added.load() - 1;
      if (c < 0) continue;
      absl::StatusOr<PutResult> put =
          PutSync(*dock, step, Iota(0, 8), {Scores("extra" + std::to_string(c), Iota(0, 8))});
      if (!put.ok()) {
        EXPECT_EQ(put.status().code(), absl::StatusCode::kFailedPrecondition) << put.status();
      }
    }
  });
  std::vector<std::vector<int64_t>> got(kSteps);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (;;) {
      GetInput in = GetOf("reader", 0, kLongWait);
      in.step = step;
      ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, in));
      got[step].insert(got[step].end(), batch.rows.begin(), batch.rows.end());
      if (batch.end_of_step) break;
    }
  }
  adder.join();
  producer.join();
  for (int64_t step = 0; step < kSteps; ++step) EXPECT_EQ(got[step], Iota(0, 8)) << step;
  EXPECT_EQ(dock->spec().columns.size(), 2u + kAdded);
}

}  // namespace
}  // namespace tdock
