// A dock that holds where each cell is instead of the cell (DockLimits::cells
// = CellForm::kLocations, the controller's dock): CellLocation records and
// their checks (common/cell_location.h), LocationCellStore, and a dock over
// it deciding by the cells' real lengths (token counts, balanced rounds,
// response bounds) exactly as a dock holding the bytes does, while its
// batches, reads and listings carry the locations; a lost shard's rows are
// dropped, an away shard's held back.
#include "server/dock/location_cell_store.h"

#include <future>
#include <numeric>
#include <string>
#include <vector>

#include "common/cell_location.h"
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

// A column of locations: row i has lengths[i] items of item_bytes bytes, on
// shard `shard`, in extent 100 + i.
OwnedColumn Locations(const std::string& name, DType dtype, const std::vector<int64_t>& lengths,
                      int64_t item_bytes, uint64_t shard = 1) {
  OwnedColumn column{name, dtype, {0}, {}};
  for (size_t i = 0; i < lengths.size(); ++i) {
    column.offsets.push_back(column.offsets.back() + lengths[i]);
    column.bytes += EncodeCellLocation(
        {shard, 100 + i, 8 * i, static_cast<uint64_t>(lengths[i] * item_bytes)});
  }
  return column;
}

std::vector<CellLocation> LocationsOf(const PackedColumn& column) {
  std::vector<CellLocation> out;
  char record[kCellLocationBytes];
  for (int64_t i = 0; i < column.rows(); ++i) {
    CopyFromSegments(column.segments, i * kCellLocationBytes, kCellLocationBytes, record);
    out.push_back(*DecodeCellLocation(ByteSpan(record, sizeof(record))));
  }
  return out;
}

TEST(CellLocation, EncodesAsThirtyTwoLittleEndianBytes) {
  const CellLocation where{0x0102, 7, 1ull << 40, 4096};
  const std::string record = EncodeCellLocation(where);
  ASSERT_EQ(static_cast<int64_t>(record.size()), kCellLocationBytes);
  EXPECT_EQ(record[0], 0x02);
  EXPECT_EQ(record[1], 0x01);
  EXPECT_EQ(record[8], 7);
  EXPECT_EQ(record[16 + 5], 1);
  ASSERT_OK_AND_ASSIGN(CellLocation back, DecodeCellLocation(record));
  EXPECT_EQ(back, where);
  EXPECT_STATUS(DecodeCellLocation(ByteSpan(record.data(), 31)),
                absl::StatusCode::kInvalidArgument, "is 32 bytes, not 31");
}

TEST(CellLocation, ValidateCellsChecksOffsetsRecordsAndEachRowsBytes) {
  const OwnedColumn good = Locations("x", DType::kFloat32, {3, 0, 5}, 4);
  EXPECT_OK(ValidateCells(CellForm::kLocations, good.View(), 3, 4));
  // The same column read as bytes is not whole: 96 bytes for 8 items.
  EXPECT_STATUS(ValidateCells(CellForm::kBytes, good.View(), 3, 4),
                absl::StatusCode::kInvalidArgument, "8 items of 4 bytes, but the data holds 96");

  OwnedColumn short_data = good;
  short_data.bytes.resize(64);
  EXPECT_STATUS(ValidateCells(CellForm::kLocations, short_data.View(), 3, 4),
                absl::StatusCode::kInvalidArgument,
                "column 'x': 3 rows want 96 bytes of cell locations (32 a row), the data holds 64");

  OwnedColumn wrong_bytes = Locations("x", DType::kFloat32, {3, 0, 5}, 4);
  wrong_bytes.offsets = {0, 3, 0 + 3, 9};  // row 2 now says 6 items, its location 20 bytes
  EXPECT_STATUS(ValidateCells(CellForm::kLocations, wrong_bytes.View(), 3, 4),
                absl::StatusCode::kInvalidArgument,
                "row 2 has 6 items of 4 bytes, but its location says 20 bytes");

  OwnedColumn bad_offsets = good;
  bad_offsets.offsets = {0, 3, 2, 8};
  EXPECT_STATUS(ValidateCells(CellForm::kLocations, bad_offsets.View(), 3, 4),
                absl::StatusCode::kInvalidArgument, "offsets[2] = 2 is less than offsets[1] = 3");
}

TEST(CellLocation, StoredCellItemsReadsTheLengthOfEitherForm) {
  EXPECT_EQ(StoredCellBytes(CellForm::kBytes, 5, 4), 20);
  EXPECT_EQ(StoredCellBytes(CellForm::kLocations, 5, 4), kCellLocationBytes);
  EXPECT_EQ(*StoredCellItems(CellForm::kBytes, ByteSpan("12345678", 8), 4), 2);
  EXPECT_STATUS(StoredCellItems(CellForm::kBytes, ByteSpan("123456", 6), 4),
                absl::StatusCode::kDataLoss, "not whole items of 4");
  const std::string record = EncodeCellLocation({1, 2, 3, 40});
  EXPECT_EQ(*StoredCellItems(CellForm::kLocations, record, 4), 10);
  EXPECT_STATUS(StoredCellItems(CellForm::kLocations, record, 3), absl::StatusCode::kDataLoss,
                "40 bytes is not whole items of 3");
  EXPECT_STATUS(StoredCellItems(CellForm::kLocations, ByteSpan("1234", 4), 4),
                absl::StatusCode::kDataLoss, "is 32 bytes, not 4");
}

// LocationCellStore keeps the records, gives each cell its real length, and
// reads a Put's column back as one segment of its records.
TEST(LocationCellStore, KeepsRecordsWithTheCellsRealLengths) {
  internal::LocationCellStore store(4096);
  std::shared_ptr<internal::StepCells> cells = store.OpenStep();
  EXPECT_EQ(cells->used_bytes(), 0);
  const OwnedColumn column = Locations("x", DType::kFloat32, {3, 0, 5}, 4, 9);
  std::vector<const internal::CellBlock*> blocks;
  const PackedColumn view = column.View();
  ASSERT_TRUE(cells->Write({&view, 1}, {int64_t{4}}, false, blocks));
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0][0].length, 3);
  EXPECT_EQ(blocks[0][1].length, 0);
  EXPECT_EQ(blocks[0][2].length, 5);
  EXPECT_GT(cells->used_bytes(), 0);
  EXPECT_EQ(store.limit_bytes(), 0);

  std::vector<std::atomic<const internal::CellBlock*>> slots(3);
  for (int r = 0; r < 3; ++r) slots[r].store(&blocks[0][r]);
  PackedColumn read;
  const std::vector<int64_t> rows = {2, 0, 1};
  cells->Read(slots.data(), rows, 4, read);
  EXPECT_EQ(read.offsets, (std::vector<int64_t>{0, 5, 8, 8}));
  const std::vector<CellLocation> got = LocationsOf(read);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], (CellLocation{9, 102, 16, 20}));
  EXPECT_EQ(got[1], (CellLocation{9, 100, 0, 12}));
  EXPECT_EQ(got[2], (CellLocation{9, 101, 8, 0}));
  // Rows 0 and 1 are adjacent: rows 2, 0, 1 are two segments.
  EXPECT_EQ(read.segments.size(), 2u);
  ASSERT_OK_AND_ASSIGN(CellLocation one,
                       DecodeCellLocation(cells->Bytes(blocks[0][2], 4)));
  EXPECT_EQ(one, (CellLocation{9, 102, 16, 20}));
}

DockSpec BalancedSpec() {
  DockSpec spec;
  spec.name = "controller";
  spec.num_prompts = 8;
  spec.n_samples_per_prompt = 1;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 0, false}, {"logp", DType::kFloat32, {}, 0, false}};
  ConsumerSpec actor{"actor", {"tokens", "logp"}, 4, 2, false, Policy::kBalanced, 0};
  actor.micro_batch = MicroBatchOptions{.max_tokens = 12, .round_to = 2, .padded = true};
  spec.consumers = {actor};
  return spec;
}

const std::vector<int64_t> kLengths = {7, 6, 8, 5, 1, 3, 8, 6};

OwnedColumn Tokens(const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int32_t>> rows;
  for (int64_t len : lengths) rows.push_back(std::vector<int32_t>(len, 1));
  return OwnedColumn::Of<int32_t>("tokens", DType::kInt32, rows);
}

OwnedColumn Logp(const std::vector<int64_t>& lengths) {
  std::vector<std::vector<float>> rows;
  for (int64_t len : lengths) rows.push_back(std::vector<float>(len, 0.5f));
  return OwnedColumn::Of<float>("logp", DType::kFloat32, rows);
}

std::unique_ptr<Dock> MakeDock(CellForm form, int64_t max_batch_bytes = 0,
                               DockSpec spec = BalancedSpec()) {
  DockLimits limits;
  limits.cells = form;
  limits.max_batch_bytes = max_batch_bytes;
  auto dock = Dock::Create(std::move(spec), limits);
  EXPECT_OK(dock);
  return std::move(dock).value();
}

std::vector<int64_t> AllRows() {
  std::vector<int64_t> rows(kLengths.size());
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

// Both ranks' first round from a dock holding bytes and one holding
// locations of the same lengths: the same rows, token counts, micro-batches
// and balance; the location dock's columns are the Put's locations.
TEST(LocationDock, FormsTheSameBalancedRoundsAsABytesDock) {
  std::unique_ptr<Dock> bytes_dock = MakeDock(CellForm::kBytes);
  std::unique_ptr<Dock> location_dock = MakeDock(CellForm::kLocations);
  ASSERT_OK(PutSync(*bytes_dock, 0, AllRows(), {Tokens(kLengths), Logp(kLengths)}));
  const OwnedColumn tokens = Locations("tokens", DType::kInt32, kLengths, 4, 1);
  const OwnedColumn logp = Locations("logp", DType::kFloat32, kLengths, 4, 2);
  ASSERT_OK_AND_ASSIGN(PutResult put, PutSync(*location_dock, 0, AllRows(), {tokens, logp}));
  // A Put's bytes are those its locations name.
  EXPECT_EQ(put.bytes, 2 * 4 * std::accumulate(kLengths.begin(), kLengths.end(), int64_t{0}));

  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    GetInput in = GetOf("actor");
    in.rank = rank;
    ASSERT_OK_AND_ASSIGN(Batch from_bytes, GetSync(*bytes_dock, in));
    ASSERT_OK_AND_ASSIGN(Batch from_locations, GetSync(*location_dock, in));
    EXPECT_TRUE(from_locations.cell_locations);
    EXPECT_FALSE(from_bytes.cell_locations);
    BatchMeta meta = from_locations;
    meta.cell_locations = false;
    EXPECT_EQ(meta, static_cast<const BatchMeta&>(from_bytes));
    ASSERT_FALSE(from_locations.rows.empty());
    ASSERT_EQ(from_locations.columns.size(), 2u);
    for (size_t c = 0; c < 2; ++c) {
      const PackedColumn& column = from_locations.columns[c];
      EXPECT_EQ(column.offsets, from_bytes.columns[c].offsets);
      const std::vector<CellLocation> got = LocationsOf(column);
      ASSERT_EQ(got.size(), from_locations.rows.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const int64_t row = from_locations.rows[i];
        EXPECT_EQ(got[i], (CellLocation{c + 1, 100 + static_cast<uint64_t>(row),
                                        8 * static_cast<uint64_t>(row),
                                        static_cast<uint64_t>(kLengths[row] * 4)}));
      }
    }
  }
}

// A Put whose locations disagree with its lengths is refused, naming the
// row, and writes nothing; so is a Put of bytes to a location dock.
TEST(LocationDock, RefusesLocationsThatDisagreeWithTheirLengths) {
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations);
  OwnedColumn tokens = Locations("tokens", DType::kInt32, {7, 6}, 4);
  tokens.offsets = {0, 7, 14};
  EXPECT_STATUS(PutSync(*dock, 0, {0, 1}, {tokens}), absl::StatusCode::kInvalidArgument,
                "dock 'controller' step 0: column 'tokens': row 1 has 7 items of 4 bytes, but "
                "its location says 24 bytes");
  EXPECT_STATUS(PutSync(*dock, 0, {0, 1}, {Tokens({7, 6})}), absl::StatusCode::kInvalidArgument,
                "2 rows want 64 bytes of cell locations (32 a row), the data holds 52");
  const DockStats stats = dock->Stats();
  EXPECT_TRUE(stats.steps.empty());
  EXPECT_EQ(stats.rows_written_total, (std::vector<int64_t>{0, 0}));
}

// A controller's dock cannot carry rows into the next step: their cells
// would stay with the sealed step's, which its shard frees.
TEST(LocationDock, RefusesSealWhenCarry) {
  DockSpec spec = BalancedSpec();
  spec.steps_in_flight = 2;
  spec.seal_when = SealWhen{.consumer = "actor", .groups = 4, .carry = true};
  DockLimits limits;
  limits.cells = CellForm::kLocations;
  EXPECT_STATUS(Dock::Create(spec, limits), absl::StatusCode::kInvalidArgument,
                "seal_when.carry needs the cells in the dock");
  limits.cells = CellForm::kBytes;
  EXPECT_OK(Dock::Create(spec, limits));
}

// Read and ListRows of a location dock give each cell's location.
TEST(LocationDock, ReadsAndListingsGiveLocations) {
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations);
  const OwnedColumn tokens = Locations("tokens", DType::kInt32, kLengths, 4, 3);
  ASSERT_OK(PutSync(*dock, 0, AllRows(), {tokens}));
  ASSERT_OK_AND_ASSIGN(Batch read, dock->Read(0, {5, 2}, {"tokens"}));
  EXPECT_EQ(read.columns[0].offsets, (std::vector<int64_t>{0, 3, 11}));
  EXPECT_EQ(LocationsOf(read.columns[0]),
            (std::vector<CellLocation>{{3, 105, 40, 12}, {3, 102, 16, 32}}));
  const std::vector<std::string> columns = {"tokens"};
  ASSERT_OK_AND_ASSIGN(RowListing listing, dock->ListRows(0, columns));
  ASSERT_EQ(listing.rows.size(), kLengths.size());
  for (const RowState& row : listing.rows) {
    ASSERT_EQ(row.cells.size(), 1u);
    ASSERT_OK_AND_ASSIGN(CellLocation where, DecodeCellLocation(row.cells[0].second));
    EXPECT_EQ(where, (CellLocation{3, 100 + static_cast<uint64_t>(row.row),
                                   8 * static_cast<uint64_t>(row.row),
                                   static_cast<uint64_t>(kLengths[row.row] * 4)}));
  }
}

// A shard declared lost: every live row with a cell there is dropped as
// "lost" (its whole group when a consumer takes whole groups), the rest are
// served; a dock holding bytes drops nothing.
TEST(LocationDock, DropLostDropsTheRowsWithACellOnTheShard) {
  DockSpec spec = BalancedSpec();
  spec.n_samples_per_prompt = 2;
  spec.num_prompts = 4;
  spec.consumers = {ConsumerSpec{"groups", {"tokens"}, 8, 1, /*whole_groups=*/true,
                                 Policy::kFifo, 0}};
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations, 0, spec);
  // Rows 0-3 on shard 1; rows 4-7 have tokens on shard 1 but logp of row 5
  // on shard 2 (group 2: rows 4, 5).
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3, 4, 5, 6, 7},
                    {Locations("tokens", DType::kInt32, kLengths, 4, 1)}));
  ASSERT_OK(PutSync(*dock, 0, {5}, {Locations("logp", DType::kFloat32, {6}, 4, 2)}));
  // Another incarnation of shard 2 (extents with other high bits) held none.
  std::promise<absl::StatusOr<int64_t>> other;
  dock->DropLost(2, 7, [&other](absl::StatusOr<int64_t> rows) { other.set_value(rows); });
  EXPECT_EQ(*other.get_future().get(), 0);
  std::promise<absl::StatusOr<int64_t>> dropped;
  dock->DropLost(2, 0, [&dropped](absl::StatusOr<int64_t> rows) { dropped.set_value(rows); });
  ASSERT_OK_AND_ASSIGN(int64_t rows, dropped.get_future().get());
  EXPECT_EQ(rows, 2) << "row 5 and its group's other row, 4";
  EXPECT_EQ(dock->Stats().steps[0].dropped_rows[static_cast<int>(DropReason::kLost)], 2);
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("groups")));
  EXPECT_EQ(batch.rows, (std::vector<int64_t>{0, 1, 2, 3, 6, 7}));
  std::promise<absl::StatusOr<int64_t>> again;
  dock->DropLost(2, 0, [&again](absl::StatusOr<int64_t> rows) { again.set_value(rows); });
  EXPECT_EQ(*again.get_future().get(), 0) << "nothing left there";

  std::unique_ptr<Dock> bytes = MakeDock(CellForm::kBytes, 0, spec);
  ASSERT_OK(PutSync(*bytes, 0, AllRows(), {Tokens(kLengths)}));
  std::promise<absl::StatusOr<int64_t>> none;
  bytes->DropLost(1, 0, [&none](absl::StatusOr<int64_t> rows) { none.set_value(rows); });
  EXPECT_EQ(*none.get_future().get(), 0);
  // Nobody may give the server's own reason.
  EXPECT_STATUS(dock->Drop(DropInput{0, {0}, {}, DropReason::kLost}),
                absl::StatusCode::kInvalidArgument, "reason 'lost' is the server's own");
}

// A Put sent again with its put_id after its rows were dropped as lost (its
// shard died after the controller stored it, before the writer heard the
// answer) is not answered as stored: DATA_LOSS names the rows, whether the
// Put named its rows or its keys; a Put whose rows are on a shard that
// lives is replayed as always.
TEST(LocationDock, APutSentAgainAfterItsRowsWereLostIsNotReplayed) {
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations);
  std::vector<OwnedColumn> columns;  // outlive the Puts
  columns.reserve(8);
  // `column` of rows of lengths 2 (rows empty: those with `keys`) on `shard`.
  auto put = [&columns](const std::string& column, std::vector<int64_t> rows, uint64_t shard,
                        uint64_t put_id, std::vector<std::string> keys = {}) {
    PutInput in;
    const size_t n = rows.empty() ? keys.size() : rows.size();
    in.rows = std::move(rows);
    in.keys = std::move(keys);
    in.put_id = put_id;
    const DType dtype = column == "tokens" ? DType::kInt32 : DType::kFloat32;
    columns.push_back(Locations(column, dtype, std::vector<int64_t>(n, 2), 4, shard));
    in.columns.push_back(columns.back().View());
    return in;
  };
  ASSERT_OK(PutSync(*dock, put("tokens", {0, 1}, 1, 11)).status());
  ASSERT_OK(PutSync(*dock, put("tokens", {2, 3}, 2, 12)).status());
  // Rows 4, 5 by their keys: their tokens on shard 2, their logp on shard 1.
  ASSERT_OK(PutSync(*dock, put("tokens", {4, 5}, 2, 0, {"a", "b"})).status());
  ASSERT_OK(PutSync(*dock, put("logp", {}, 1, 13, {"a", "b"})).status());
  std::promise<absl::StatusOr<int64_t>> dropped;
  dock->DropLost(2, 0, [&dropped](absl::StatusOr<int64_t> rows) { dropped.set_value(rows); });
  ASSERT_OK_AND_ASSIGN(int64_t rows, dropped.get_future().get());
  EXPECT_EQ(rows, 4);

  ASSERT_OK_AND_ASSIGN(PutResult kept, PutSync(*dock, put("tokens", {0, 1}, 1, 11)));
  EXPECT_TRUE(kept.replayed);
  EXPECT_STATUS(PutSync(*dock, put("tokens", {2, 3}, 2, 12)).status(),
                absl::StatusCode::kDataLoss,
                "dock 'controller' step 0: the Put with put_id 12 was stored, but rows 2, 3 "
                "were dropped as lost since");
  EXPECT_STATUS(PutSync(*dock, put("logp", {}, 1, 13, {"a", "b"})).status(),
                absl::StatusCode::kDataLoss, "put_id 13 was stored, but rows 4, 5");
}

// A shard away: the rows with a cell on it (that incarnation's) are held
// back from hand-outs, a whole group with one of them too, while the others
// are served; let go, a parked Get takes them. The shard incarnations
// holding live rows are named.
TEST(LocationDock, HoldShardsHoldsBackTheRowsOnAShardThatIsAway) {
  DockSpec spec = BalancedSpec();
  spec.n_samples_per_prompt = 2;
  spec.num_prompts = 4;
  spec.consumers = {ConsumerSpec{"rows", {"tokens"}, 1, 1, false, Policy::kFifo, 0},
                    ConsumerSpec{"groups", {"tokens"}, 2, 1, /*whole_groups=*/true,
                                 Policy::kFifo, 0}};
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations, 0, spec);
  // Rows 0-4 on shard 1 (incarnation 0); rows 5-7 on shard 2, incarnation 9.
  ASSERT_OK(PutSync(*dock, 0, {0, 1, 2, 3, 4},
                    {Locations("tokens", DType::kInt32, {7, 6, 8, 5, 1}, 4, 1)}));
  OwnedColumn on_two{"tokens", DType::kInt32, {0}, {}};
  for (uint64_t i = 0; i < 3; ++i) {
    on_two.offsets.push_back(on_two.offsets.back() + 2);
    on_two.bytes += EncodeCellLocation({2, (uint64_t{9} << 32) + i, 8 * i, 8});
  }
  ASSERT_OK(PutSync(*dock, 0, {5, 6, 7}, {on_two}));
  EXPECT_EQ(dock->ShardsOfLiveRows(),
            (std::vector<ShardIncarnation>{{1, 0}, {2, 9}}));

  dock->HoldShards({{2, 9}});
  ASSERT_OK_AND_ASSIGN(Batch rows, GetSync(*dock, GetOf("rows", 5)));
  EXPECT_EQ(rows.rows, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_OK_AND_ASSIGN(Batch none, GetSync(*dock, GetOf("rows", 1)));
  EXPECT_TRUE(none.rows.empty()) << "rows 5-7 wait";
  ASSERT_OK_AND_ASSIGN(Batch groups, GetSync(*dock, GetOf("groups", 4)));
  EXPECT_EQ(groups.rows, (std::vector<int64_t>{0, 1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(Batch no_group, GetSync(*dock, GetOf("groups", 2)));
  EXPECT_TRUE(no_group.rows.empty()) << "group 2 (rows 4, 5) waits for row 5";
  EXPECT_EQ(dock->Stats().steps[0].available_rows, (std::vector<int64_t>{0, 0}));
  // Another incarnation of shard 2 holds none of them.
  dock->HoldShards({{2, 8}});
  ASSERT_OK_AND_ASSIGN(Batch other, GetSync(*dock, GetOf("groups", 4)));
  EXPECT_EQ(other.rows, (std::vector<int64_t>{4, 5, 6, 7}));

  dock->HoldShards({{2, 0}});  // any incarnation
  std::promise<absl::StatusOr<Batch>> parked;
  dock->Get(GetOf("rows", 3, absl::Minutes(5)),
            [&parked](absl::StatusOr<Batch> batch) { parked.set_value(std::move(batch)); });
  dock->HoldShards({});  // back
  ASSERT_OK_AND_ASSIGN(Batch back, parked.get_future().get());
  EXPECT_EQ(back.rows, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_TRUE(back.end_of_step);

  // A dock holding bytes ignores holds and names no shard.
  std::unique_ptr<Dock> bytes = MakeDock(CellForm::kBytes, 0, spec);
  ASSERT_OK(PutSync(*bytes, 0, AllRows(), {Tokens(kLengths)}));
  bytes->HoldShards({{1, 0}});
  EXPECT_TRUE(bytes->ShardsOfLiveRows().empty());
  ASSERT_OK_AND_ASSIGN(Batch all, GetSync(*bytes, GetOf("rows", 8)));
  EXPECT_EQ(all.rows.size(), 8u);
}

// A location dock bounds a response by what it carries, the locations: rows
// whose bytes are far over the bound are handed out, 32 bytes a cell.
TEST(LocationDock, BoundsResponsesByTheLocationsTheyCarry) {
  constexpr int64_t kMaxBatch = 1 << 20;
  DockSpec spec = BalancedSpec();
  spec.consumers = {{"reader", {"tokens", "logp"}, 4, 1, false, Policy::kFifo, 0}};
  std::unique_ptr<Dock> dock = MakeDock(CellForm::kLocations, kMaxBatch, spec);
  const std::vector<int64_t> long_rows(8, 1 << 20);  // 4 MiB a cell
  const OwnedColumn tokens = Locations("tokens", DType::kInt32, long_rows, 4);
  const OwnedColumn logp = Locations("logp", DType::kFloat32, long_rows, 4);
  ASSERT_OK(PutSync(*dock, 0, AllRows(), {tokens, logp}));
  ASSERT_OK_AND_ASSIGN(Batch batch, GetSync(*dock, GetOf("reader")));
  EXPECT_EQ(batch.rows.size(), 4u);
  EXPECT_EQ(batch.payload_bytes(), 4 * 2 * kCellLocationBytes);
  // The same cells as bytes could never be carried.
  std::unique_ptr<Dock> bytes_dock = MakeDock(CellForm::kBytes, kMaxBatch, spec);
  const std::vector<int64_t> short_rows(8, 1);
  std::vector<int64_t> lengths = short_rows;
  lengths[0] = 1 << 20;
  EXPECT_STATUS(PutSync(*bytes_dock, 0, AllRows(), {Tokens(lengths), Logp(short_rows)}),
                absl::StatusCode::kInvalidArgument, "more than one response");
}

}  // namespace
}  // namespace tdock
