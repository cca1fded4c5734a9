// A controller and two shards in this process, over loopback: shards
// register and are listed; a Put through a shard is stored at the controller
// as its cells' locations and the cells stay on the shard; a Get from the
// controller carries the locations, which each shard reads back byte for
// byte; refusals are specific (bytes Put to the controller, locations Put to
// a standalone server or to a shard, a read at the wrong shard, a held shard
// id) and a refused Put leaves no readable cell; a released step's cells
// stay readable at its shard for the read grace, then are freed; a shard
// not heard from for long is declared lost and its rows dropped as lost; a
// Put whose commit was never answered retires once the restarted
// controller says no live step holds it.
#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/cell_location.h"
#include "gtest/gtest.h"
#include "server/metrics/server_metrics.h"
#include "server/shard/shard_store.h"
#include "tests/persist/persist_test_util.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

class ScaleOutTest : public ServiceTest {
 protected:
  void Configure(ServerOptions& options) override {
    options.role = ServerRole::kController;
    // The tests watch the shards themselves (Server::WatchShards), at the
    // times they choose.
    options.controller.shard_check = absl::Hours(1);
  }

  void SetUp() override {
    ServiceTest::SetUp();
    ASSERT_OK(CreateDock(GrpoSpec()));
    for (uint64_t id : {1, 2}) {
      ServerOptions options;
      options.role = ServerRole::kShard;
      options.listen = "127.0.0.1:0";
      options.shutdown_grace = absl::Seconds(5);
      options.shard.controller = absl::StrCat("127.0.0.1:", server_->port());
      options.shard.id = id;
      options.shard.node = absl::StrCat("node-", id);
      options.shard.release_sync = absl::Milliseconds(20);
      options.shard.read_grace = ReadGrace();
      ConfigureShard(options);
      auto shard = std::make_unique<Server>(options);
      ASSERT_OK(shard->Start());
      shard_stubs_[id] = v1::Shard::NewStub(grpc::CreateChannel(
          absl::StrCat("127.0.0.1:", shard->port()), grpc::InsecureChannelCredentials()));
      options.listen = absl::StrCat("127.0.0.1:", shard->port());  // for a restart
      shard_options_.push_back(std::move(options));
      shards_.push_back(std::move(shard));
    }
  }

  virtual absl::Duration ReadGrace() const { return absl::Hours(1); }
  virtual void ConfigureShard(ServerOptions& options) {}

  // Step 1 starts (a row put through `shard`), so the controller's oldest
  // live step passes 0; returns once `shard` has learnt that step 0 was
  // released (it refuses a Put of it itself, where before the controller
  // did): a synchronization point, not a timing assertion.
  void StartStepOneAndWaitForTheRelease(uint64_t shard) {
    v1::PutRequest next;
    next.set_dock("grpo");
    next.set_step(1);
    next.add_rows(0);
    *next.add_columns() = Int32Column("prompt_ids", {{1}});
    ASSERT_OK(ShardPut(shard, next).status());
    v1::PutRequest late = next;
    late.set_step(0);
    late.set_rows(0, 3);
    absl::Status put = absl::OkStatus();
    for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
         !absl::StrContains(put.message(), "takes no Put of it") && absl::Now() < give_up;
         absl::SleepFor(absl::Milliseconds(5))) {
      put = ShardPut(shard, late).status();
    }
    EXPECT_STATUS(put, absl::StatusCode::kFailedPrecondition,
                  absl::StrCat("dock 'grpo' step 0 was released: shard ", shard));
  }

  // Releases step 0 at the controller, at once (as handing out its last
  // rows does), and waits for `shard` to learn it.
  void ReleaseStepZero(uint64_t shard) {
    ReleaseAtController(0);
    StartStepOneAndWaitForTheRelease(shard);
  }

  // Releases `step` of dock grpo at the controller (ReleaseStep).
  void ReleaseAtController(int64_t step) {
    v1::ReleaseStepRequest release;
    release.set_dock("grpo");
    release.set_step(step);
    v1::ReleaseStepResponse released;
    ASSERT_TRUE(stub_->ReleaseStep(Context().get(), release, &released).ok());
  }

  void TearDown() override {
    for (auto& shard : shards_) shard->Shutdown();
    ServiceTest::TearDown();
  }

  absl::StatusOr<v1::PutResponse> ShardPut(uint64_t shard, const v1::PutRequest& put) {
    v1::PutResponse response;
    const grpc::Status status = shard_stubs_[shard]->Put(Context().get(), put, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  absl::StatusOr<v1::GetResponse> ReadCells(uint64_t shard, const v1::ReadCellsRequest& read) {
    v1::GetResponse response;
    const grpc::Status status = shard_stubs_[shard]->ReadCells(Context().get(), read, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }

  // Rows 0, 1 of step 0 (prompt_ids, response_ids, rewards) through shard 1,
  // rows 2, 3 through shard 2.
  void PutStepZero() {
    for (uint64_t shard : {1, 2}) {
      const int first = shard == 1 ? 0 : 2;
      v1::PutRequest put = TwoRowsPut(first);
      v1::PackedColumn rewards = Int32Column("rewards", {{first}, {first + 1}});
      rewards.set_dtype(v1::FLOAT32);
      *put.add_columns() = rewards;
      ASSERT_OK_AND_ASSIGN(v1::PutResponse answer, ShardPut(shard, put));
      EXPECT_EQ(answer.rows(), 2);
      EXPECT_EQ(answer.step(), 0);
    }
  }

  // Rows `first` and `first + 1` of step 0 (prompt_ids, response_ids as
  // FullStepPut has them).
  static v1::PutRequest TwoRowsPut(int first) {
    const v1::PutRequest full = FullStepPut();
    v1::PutRequest put;
    put.set_dock("grpo");
    for (int row = first; row < first + 2; ++row) put.add_rows(row);
    for (const v1::PackedColumn& column : full.columns()) {
      std::vector<std::vector<int32_t>> cells;
      for (int row = first; row < first + 2; ++row) {
        const std::string bytes = CellBytes(column, row, 4);
        std::vector<int32_t> cell(bytes.size() / 4);
        std::memcpy(cell.data(), bytes.data(), bytes.size());
        cells.push_back(cell);
      }
      *put.add_columns() = Int32Column(column.name(), cells);
    }
    return put;
  }

  // Waits until shard `id` registered after `after`: a synchronization
  // point, not a timing assertion (shards register every 20 ms here).
  void WaitUntilHeardFrom(uint64_t id, absl::Time after) {
    const shard::ShardTable& table = *server_->shard_table();
    for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
         table.LastSeen(id).value_or(absl::InfinitePast()) <= after && absl::Now() < give_up;
         absl::SleepFor(absl::Milliseconds(5))) {
    }
    ASSERT_GT(table.LastSeen(id).value_or(absl::InfinitePast()), after);
  }

  // The rows of `step` dropped as lost at the controller, once the drop
  // is applied (or -1 after a minute).
  int64_t LostRowsOnceThereAre(int64_t want) {
    auto dock = server_->registry().Find("grpo");
    EXPECT_TRUE(dock.ok());
    if (!dock.ok()) return -1;
    auto lost_rows = [&dock] {
      for (const StepStats& step : (*dock)->Stats().steps) {
        if (step.step == 0) return step.dropped_rows[static_cast<int>(DropReason::kLost)];
      }
      return int64_t{-1};
    };
    for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
         lost_rows() != want && absl::Now() < give_up; absl::SleepFor(absl::Milliseconds(5))) {
    }
    return lost_rows();
  }

  // The rows of a Get.
  static std::vector<int64_t> RowsOf(const v1::GetResponse& batch) {
    return std::vector<int64_t>(batch.rows().begin(), batch.rows().end());
  }

  // Shuts shard `id` down and starts it again, as it was configured, on
  // its port.
  void RestartShard(uint64_t id) {
    std::unique_ptr<Server>& shard = shards_[id - 1];
    shard->Shutdown();
    shard = std::make_unique<Server>(shard_options_[id - 1]);
    ASSERT_OK(shard->Start());
  }

  std::vector<std::unique_ptr<Server>> shards_;  // shard id - 1
  std::vector<ServerOptions> shard_options_;     // as each was started
  std::map<uint64_t, std::unique_ptr<v1::Shard::Stub>> shard_stubs_;
};

// A controller with a data dir, restarted on its port while its shards run.
class ScaleOutRestartTest : public ScaleOutTest {
 protected:
  void Configure(ServerOptions& options) override {
    ScaleOutTest::Configure(options);
    if (data_dir_.empty()) data_dir_ = persist::TempDir("scale_out_restart");
    options.persistence.data_dir = data_dir_;
  }

  void TearDown() override {
    ScaleOutTest::TearDown();
    persist::RemoveDir(data_dir_);
  }

  // Shuts the controller down and starts it again from its data dir.
  void RestartController() {
    const int port = server_->port();
    server_->Shutdown();
    ServerOptions options;
    options.listen = absl::StrCat("127.0.0.1:", port);
    options.shutdown_grace = absl::Seconds(5);
    Configure(options);
    server_ = std::make_unique<Server>(std::move(options));
    ASSERT_OK(server_->Start());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Dock::NewStub(channel_);
  }

  std::string data_dir_;
};

// The value of `series` (its name and labels) in a server's metrics.
double MetricValue(const Server& server, const std::string& series) {
  const std::string text = "\n" + server.metrics()->Scrape();
  const size_t at = text.find("\n" + series + " ");  // a sample's line, not a # HELP line
  EXPECT_NE(at, std::string::npos) << series;
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

// tdock_payload_bytes_total{direction} in a server's metrics.
double PayloadBytes(const Server& server, const std::string& direction) {
  return MetricValue(server,
                     absl::StrCat("tdock_payload_bytes_total{direction=\"", direction, "\"}"));
}

std::vector<CellLocation> LocationsOf(const v1::PackedColumn& column) {
  std::vector<CellLocation> out;
  for (size_t at = 0; at < column.data().size(); at += kCellLocationBytes) {
    out.push_back(*DecodeCellLocation(ByteSpan(column.data().data() + at, kCellLocationBytes)));
  }
  return out;
}

// A request for the cells of `rows` (positions in `column`) at one shard.
v1::ReadCellsRequest ReadOf(const v1::PackedColumn& column, const std::vector<int>& rows) {
  v1::ReadCellsRequest read;
  read.set_dock("grpo");
  v1::PackedColumn* asked = read.add_columns();
  asked->set_name(column.name());
  asked->set_dtype(column.dtype());
  asked->add_offsets(0);
  for (int i : rows) {
    asked->add_offsets(asked->offsets(asked->offsets_size() - 1) + column.offsets(i + 1) -
                       column.offsets(i));
    asked->mutable_data()->append(column.data(), i * kCellLocationBytes, kCellLocationBytes);
  }
  return read;
}

TEST_F(ScaleOutTest, ShardsRegisterAndAreListed) {
  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  ASSERT_EQ(listing.shards_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(listing.shards(i).id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(listing.shards(i).address(), absl::StrCat("127.0.0.1:", shards_[i]->port()));
    EXPECT_EQ(listing.shards(i).node(), absl::StrCat("node-", i + 1));
  }
  // Another shard under a held id is refused.
  v1::RegisterShardRequest again;
  again.mutable_shard()->set_id(2);
  again.mutable_shard()->set_address("127.0.0.9:1");
  v1::RegisterShardResponse registered;
  EXPECT_STATUS(FromGrpcStatus(stub_->RegisterShard(Context().get(), again, &registered)),
                absl::StatusCode::kAlreadyExists, "shard id 2 is held by the shard at");
}

TEST_F(ScaleOutTest, AGetCarriesLocationsThatTheShardsReadBack) {
  PutStepZero();
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  ASSERT_EQ(batch.rows_size(), 4);
  EXPECT_TRUE(batch.cell_locations());
  EXPECT_EQ(batch.token_counts(0), 3);  // lengths, as a standalone server counts them
  const v1::PutRequest full = FullStepPut();
  for (const v1::PackedColumn& column : batch.columns()) {
    SCOPED_TRACE(column.name());
    const std::vector<CellLocation> where = LocationsOf(column);
    ASSERT_EQ(where.size(), 4u);
    std::map<uint64_t, std::vector<int>> by_shard;
    for (int i = 0; i < 4; ++i) by_shard[where[i].shard].push_back(i);
    ASSERT_EQ(by_shard.size(), 2u);
    for (const auto& [shard, positions] : by_shard) {
      ASSERT_OK_AND_ASSIGN(v1::GetResponse cells, ReadCells(shard, ReadOf(column, positions)));
      ASSERT_EQ(cells.columns_size(), 1);
      const v1::PackedColumn& got = cells.columns(0);
      for (size_t k = 0; k < positions.size(); ++k) {
        const int64_t row = batch.rows(positions[k]);
        EXPECT_EQ(shard, row < 2 ? 1u : 2u) << "row " << row;
        if (column.name() == "rewards") {
          int32_t value = 0;
          std::memcpy(&value, got.data().data() + got.offsets(k) * 4, 4);
          EXPECT_EQ(value, row);
        } else {
          const v1::PackedColumn& put = full.columns(column.name() == "prompt_ids" ? 0 : 1);
          EXPECT_EQ(CellBytes(got, static_cast<int>(k), 4),
                    CellBytes(put, static_cast<int>(row), 4))
              << "row " << row;
        }
      }
    }
    // The wrong shard refuses, naming the location.
    const uint64_t other = where[0].shard == 1 ? 2 : 1;
    EXPECT_STATUS(ReadCells(other, ReadOf(column, {0})), absl::StatusCode::kNotFound,
                  absl::StrCat("this is shard ", other));
  }
  // No payload crossed the controller; the shards took in every cell byte
  // (prompt_ids 40, response_ids 80, rewards 16) and sent each out once.
  EXPECT_EQ(PayloadBytes(*server_, "in"), 0);
  EXPECT_EQ(PayloadBytes(*server_, "out"), 0);
  EXPECT_EQ(PayloadBytes(*shards_[0], "in") + PayloadBytes(*shards_[1], "in"), 136);
  EXPECT_EQ(PayloadBytes(*shards_[0], "out") + PayloadBytes(*shards_[1], "out"), 136);
}

TEST_F(ScaleOutTest, PutsThatDoNotBelongAreRefused) {
  // Bytes to the controller.
  ExpectRejected([&] { return Put(FullStepPut()); }, absl::StatusCode::kFailedPrecondition,
                 {"this server is a controller", "Put to a shard"});
  // Locations to a shard.
  v1::PutRequest locations = FullStepPut();
  locations.set_cell_locations(true);
  EXPECT_STATUS(ShardPut(1, locations).status(), absl::StatusCode::kInvalidArgument,
                "a shard takes cells, not cell_locations");
  // A Put the controller refuses comes back as it refused it.
  v1::PutRequest out_of_range = FullStepPut();
  out_of_range.set_rows(3, 9);
  EXPECT_STATUS(ShardPut(1, out_of_range).status(), absl::StatusCode::kInvalidArgument,
                "row 9");
  // A dock the controller lacks.
  v1::PutRequest unknown = FullStepPut();
  unknown.set_dock("nope");
  EXPECT_STATUS(ShardPut(1, unknown).status(), absl::StatusCode::kNotFound, "nope");
  ASSERT_OK_AND_ASSIGN(v1::GetDockStatusResponse status, Status("grpo"));
  for (const v1::StepStatus& step : status.steps()) {
    for (const v1::ColumnCount& ready : step.ready()) EXPECT_EQ(ready.rows(), 0);
  }
}

TEST_F(ScaleOutTest, AStandaloneServerTakesNoLocationsAndListsNoShards) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  Server standalone(std::move(options));
  ASSERT_OK(standalone.Start());
  auto stub = v1::Dock::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", standalone.port()), grpc::InsecureChannelCredentials()));
  v1::CreateDockRequest create;
  *create.mutable_spec() = GrpoSpec();
  v1::CreateDockResponse created;
  ASSERT_TRUE(stub->CreateDock(Context().get(), create, &created).ok());
  v1::PutRequest locations = FullStepPut();
  locations.set_cell_locations(true);
  v1::PutResponse put;
  EXPECT_STATUS(FromGrpcStatus(stub->Put(Context().get(), locations, &put)),
                absl::StatusCode::kInvalidArgument, "this server is standalone");
  v1::ListShardsResponse listing;
  EXPECT_STATUS(FromGrpcStatus(stub->ListShards(Context().get(), {}, &listing)),
                absl::StatusCode::kUnimplemented, "not a controller");
  standalone.Shutdown();
}

// A shard gone for good: not heard from for shard_lost_after, it is
// declared lost; the rows with a cell on it are dropped as lost, its id is
// free again, and the other shard's rows are served.
TEST_F(ScaleOutTest, AShardNotHeardFromIsDeclaredLostAndItsRowsAreDropped) {
  PutStepZero();  // rows 0, 1 on shard 1; rows 2, 3 on shard 2
  shards_[1]->Shutdown();
  const absl::Time gone = shard::ShardTable::Now();
  // Shard 1 registers again after that, shard 2 no more.
  WaitUntilHeardFrom(1, gone);
  ASSERT_LT(*server_->shard_table()->LastSeen(2), gone);
  const absl::Duration after = ServerOptions().controller.shard_lost_after;
  const std::vector<shard::ShardEntry> lost = server_->WatchShards(gone + after);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, 2u);
  EXPECT_TRUE(server_->WatchShards(gone + after).empty()) << "declared once";

  // The drop is recorded and applied after WatchShards returns.
  EXPECT_EQ(LostRowsOnceThereAre(2), 2);
  EXPECT_EQ(MetricValue(*server_, "tdock_shards_lost_total"), 1);
  // As of then shard 1 looked away too; now it is not: its rows are let go.
  server_->WatchShards(shard::ShardTable::Now());

  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  ASSERT_EQ(listing.shards_size(), 1);
  EXPECT_EQ(listing.shards(0).id(), 1u);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  EXPECT_EQ(std::vector<int64_t>(batch.rows().begin(), batch.rows().end()),
            (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(batch.end_of_step());
  for (const CellLocation& where : LocationsOf(batch.columns(0))) EXPECT_EQ(where.shard, 1u);
  // Its id is free: another shard may take it.
  v1::RegisterShardRequest again;
  again.mutable_shard()->set_id(2);
  again.mutable_shard()->set_address("127.0.0.9:1");
  v1::RegisterShardResponse registered;
  EXPECT_TRUE(stub_->RegisterShard(Context().get(), again, &registered).ok());
}

// A shard that registers with another incarnation restarted without its
// cells: the rows with a cell of its former incarnation are dropped as
// lost at once.
TEST_F(ScaleOutTest, AShardThatRestartedLosesTheRowsOfItsFormerIncarnation) {
  PutStepZero();  // rows 0, 1 on shard 1; rows 2, 3 on shard 2
  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  v1::RegisterShardRequest restarted;
  *restarted.mutable_shard() = listing.shards(0);
  ASSERT_EQ(restarted.shard().id(), 1u);
  ASSERT_NE(restarted.shard().incarnation(), 0u);
  restarted.mutable_shard()->set_incarnation(restarted.shard().incarnation() + 1);
  v1::RegisterShardResponse registered;
  ASSERT_TRUE(stub_->RegisterShard(Context().get(), restarted, &registered).ok());
  EXPECT_EQ(LostRowsOnceThereAre(2), 2);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  EXPECT_EQ(std::vector<int64_t>(batch.rows().begin(), batch.rows().end()),
            (std::vector<int64_t>{2, 3}));
}

// A shard not heard from for shard_away_after is away: its rows are held
// back (nobody is handed rows whose cells cannot be read) while the others
// are handed out, and the listing says so; heard from again, its rows are
// let go. A listed shard says how much memory its cells take.
TEST_F(ScaleOutTest, AnAwayShardsRowsWaitUntilItIsHeardFromAgain) {
  PutStepZero();  // rows 0, 1 on shard 1; rows 2, 3 on shard 2
  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  ASSERT_EQ(listing.shards_size(), 2);
  shards_[1]->Shutdown();
  const absl::Time gone = shard::ShardTable::Now();
  WaitUntilHeardFrom(1, gone + absl::Milliseconds(50));
  // As of just past shard 2's bound (shard 1 was heard from since).
  const absl::Duration away = ServerOptions().controller.shard_away_after;
  const absl::Time at = gone + away + absl::Milliseconds(10);
  EXPECT_TRUE(server_->WatchShards(at).empty()) << "away is not lost";
  v1::ListShardsResponse held;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &held).ok());
  ASSERT_EQ(held.shards_size(), 2);
  EXPECT_EQ(held.shards(0).state(), v1::SHARD_LIVE);
  EXPECT_EQ(held.shards(1).state(), v1::SHARD_AWAY) << "as its rows are held";

  ASSERT_OK_AND_ASSIGN(v1::GetResponse four, Get(GetFor("reward", 4, 0)));
  EXPECT_EQ(four.rows_size(), 0) << "rows 2, 3 wait for shard 2";
  ASSERT_OK_AND_ASSIGN(v1::GetResponse two, Get(GetFor("reward", 2, 0)));
  EXPECT_EQ(RowsOf(two), (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse none, Get(GetFor("reward", 2, 0)));
  EXPECT_EQ(none.rows_size(), 0);

  // Shard 2 is heard from again (the registration it last sent).
  v1::RegisterShardRequest again;
  *again.mutable_shard() = listing.shards(1);
  ASSERT_EQ(again.shard().id(), 2u);
  v1::RegisterShardResponse registered;
  ASSERT_TRUE(stub_->RegisterShard(Context().get(), again, &registered).ok());
  server_->WatchShards(shard::ShardTable::Now());
  ASSERT_OK_AND_ASSIGN(v1::GetResponse back, Get(GetFor("reward", 2, 0)));
  EXPECT_EQ(RowsOf(back), (std::vector<int64_t>{2, 3}));

  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  ASSERT_EQ(listing.shards_size(), 2);
  EXPECT_EQ(listing.shards(0).state(), v1::SHARD_LIVE);
  EXPECT_GT(listing.shards(0).memory_bytes(), 0u) << "shard 1 holds cells";
}

// A restarted controller expects the shard incarnations its recovered rows
// have cells on: their rows wait until each registers again. A shard that
// died while the controller was down never does: after shard_lost_after it
// is declared lost and its rows are dropped as lost.
TEST_F(ScaleOutRestartTest, ARestartedControllerWaitsForItsShardsAndLosesOneThatIsGone) {
  PutStepZero();  // rows 0, 1 on shard 1; rows 2, 3 on shard 2
  shards_[1]->Shutdown();
  RestartController();
  const absl::Time started = shard::ShardTable::Now();
  WaitUntilHeardFrom(1, started + absl::Milliseconds(50));
  // Let go once its registration is through (a wait, not a timing assertion).
  ASSERT_OK_AND_ASSIGN(v1::GetResponse two, Get(GetFor("reward", 2, 60'000)));
  EXPECT_EQ(RowsOf(two), (std::vector<int64_t>{0, 1})) << "shard 1 is back";
  ASSERT_OK_AND_ASSIGN(v1::GetResponse none, Get(GetFor("reward", 2, 0)));
  EXPECT_EQ(none.rows_size(), 0) << "rows 2, 3 wait for shard 2";

  const absl::Duration after = ServerOptions().controller.shard_lost_after;
  const std::vector<shard::ShardEntry> lost =
      server_->WatchShards(started + after + absl::Milliseconds(10));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, 2u);
  EXPECT_NE(lost[0].incarnation, 0u);
  EXPECT_EQ(LostRowsOnceThereAre(2), 2);
  EXPECT_EQ(MetricValue(*server_, "tdock_shards_lost_total"), 1);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse end, Get(GetFor("reward", 2, 0)));
  EXPECT_EQ(end.rows_size(), 0);
}

// A Put whose commit the shard never heard answered (the controller down)
// stays staged at the shard, unresolved; once the restarted controller has
// the shard reconcile, which says no live step holds it, its cells retire
// (freed after the read grace), while the stored Put's are kept and read.
TEST_F(ScaleOutRestartTest, APutWhoseCommitWasNeverAnsweredRetiresOnceTheControllerSaysSo) {
  ASSERT_OK(ShardPut(1, TwoRowsPut(0)).status());
  const shard::ShardStore& store = *shards_[0]->shard_store();
  ASSERT_EQ(store.GetInventory().held.size(), 1u);
  server_->Shutdown();
  const absl::Status unanswered = ShardPut(1, TwoRowsPut(2)).status();
  EXPECT_TRUE(unanswered.code() == absl::StatusCode::kUnavailable ||
              unanswered.code() == absl::StatusCode::kDeadlineExceeded)
      << unanswered;
  const shard::ShardStore::Inventory staged = store.GetInventory();
  ASSERT_EQ(staged.held.size(), 2u);
  EXPECT_EQ(staged.unresolved, (std::vector<uint64_t>{staged.held[1]}));
  RestartController();
  // The shard registers again and reconciles (a wait, not a timing assertion).
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       store.HasUnresolved() && absl::Now() < give_up; absl::SleepFor(absl::Milliseconds(5))) {
  }
  EXPECT_FALSE(store.HasUnresolved());
  const shard::ShardStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.committed_puts, 1);
  EXPECT_EQ(stats.staged_puts, 0);
  EXPECT_GT(stats.retired_bytes, 0) << "the unanswered Put's cells retired";
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("actor", 2, 20'000)));
  EXPECT_EQ(RowsOf(batch), (std::vector<int64_t>{0, 1}));
  ASSERT_OK_AND_ASSIGN(v1::GetResponse cells,
                       ReadCells(1, ReadOf(batch.columns(0), {0, 1})));
  EXPECT_EQ(CellBytes(cells.columns(0), 1, 4), CellBytes(FullStepPut().columns(0), 1, 4));
}

// A shard incarnation declared lost stays lost: a Put of cells there is
// refused at the controller, and the shard, refused when it registers
// again, drops its cells and comes back as a new incarnation, whose Puts
// are stored.
TEST_F(ScaleOutTest, AnIncarnationDeclaredLostStaysLostAndItsShardComesBackAsANewOne) {
  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  const uint32_t first = listing.shards(0).incarnation();
  // Shard 1 is declared lost by a registration in its name as another
  // incarnation (as a restart would be).
  v1::RegisterShardRequest other;
  *other.mutable_shard() = listing.shards(0);
  other.mutable_shard()->set_incarnation(first + 1);
  v1::RegisterShardResponse registered;
  ASSERT_TRUE(stub_->RegisterShard(Context().get(), other, &registered).ok());
  // Cells of the lost incarnation, put to the controller as a shard would.
  v1::PutRequest put;
  put.set_dock("grpo");
  put.set_cell_locations(true);
  put.add_rows(0);
  v1::PackedColumn* prompt = put.add_columns();
  prompt->set_name("prompt_ids");
  prompt->set_dtype(v1::INT32);
  prompt->add_offsets(0);
  prompt->add_offsets(1);
  *prompt->mutable_data() = EncodeCellLocation({1, (uint64_t{first} << 32) | 77, 0, 4});
  ExpectRejected([&] { return Put(put); }, absl::StatusCode::kFailedPrecondition,
                 {"shard 1 incarnation", "which was declared lost"});
  // The shard is refused at its next registration and comes back anew (a
  // synchronization point, not a timing assertion).
  uint32_t now = first;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       (now == first || now == first + 1) && absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(5))) {
    ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
    now = listing.shards(0).incarnation();
  }
  ASSERT_NE(now, first);
  ASSERT_NE(now, first + 1);
  v1::PutRequest fresh;
  fresh.set_dock("grpo");
  fresh.add_rows(1);
  *fresh.add_columns() = Int32Column("prompt_ids", {{5}});
  ASSERT_OK(ShardPut(1, fresh).status());
}

// A Put sent again with its put_id, through another shard, is answered as
// the stored one was (replayed) and the other shard's copy is not used:
// the rows' cells stay where the first Put left them.
TEST_F(ScaleOutTest, APutSentAgainWithItsIdThroughAnotherShardIsReplayed) {
  v1::PutRequest put;
  put.set_dock("grpo");
  put.set_new_rows(2);
  put.set_put_id(0x5eed);
  *put.add_columns() = Int32Column("prompt_ids", {{1, 2}, {3}});
  *put.add_columns() = Int32Column("response_ids", {{4}, {5, 6, 7}});
  ASSERT_OK_AND_ASSIGN(v1::PutResponse first, ShardPut(1, put));
  EXPECT_FALSE(first.replayed());
  ASSERT_OK_AND_ASSIGN(v1::PutResponse again, ShardPut(2, put));
  EXPECT_TRUE(again.replayed());
  EXPECT_EQ(std::vector<int64_t>(again.assigned().begin(), again.assigned().end()),
            std::vector<int64_t>(first.assigned().begin(), first.assigned().end()));
  EXPECT_EQ(again.bytes(), first.bytes());
  v1::ReadRequest read;
  read.set_dock("grpo");
  read.set_step(0);
  read.mutable_rows()->Assign(first.assigned().begin(), first.assigned().end());
  read.add_columns("response_ids");
  v1::GetResponse located;
  ASSERT_TRUE(stub_->Read(Context().get(), read, &located).ok());
  for (const CellLocation& where : LocationsOf(located.columns(0))) EXPECT_EQ(where.shard, 1u);
  ASSERT_OK_AND_ASSIGN(v1::GetResponse cells, ReadCells(1, ReadOf(located.columns(0), {0, 1})));
  EXPECT_EQ(CellBytes(cells.columns(0), 1, 4), CellBytes(put.columns(1), 1, 4));
  // Shard 2 took in no payload for it: its copy was dropped, not counted.
  EXPECT_EQ(PayloadBytes(*shards_[1], "in"), 0);
}

// The crash point between the controller storing a Put and its shard
// answering: the shard restarts (another incarnation), so the Put's rows are
// dropped as lost; its writer, never answered, sends it again with its
// put_id through another shard and is told DATA_LOSS naming the rows, not
// that it was stored.
TEST_F(ScaleOutTest, APutSentAgainAfterItsShardRestartedIsNotAnsweredAsStored) {
  v1::PutRequest put;
  put.set_dock("grpo");
  put.set_new_rows(2);
  put.set_put_id(0x1057);
  *put.add_columns() = Int32Column("prompt_ids", {{1, 2}, {3}});
  ASSERT_OK_AND_ASSIGN(v1::PutResponse first, ShardPut(1, put));
  v1::ListShardsResponse listing;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &listing).ok());
  v1::RegisterShardRequest restarted;
  *restarted.mutable_shard() = listing.shards(0);
  restarted.mutable_shard()->set_incarnation(restarted.shard().incarnation() + 1);
  v1::RegisterShardResponse registered;
  ASSERT_TRUE(stub_->RegisterShard(Context().get(), restarted, &registered).ok());
  EXPECT_EQ(LostRowsOnceThereAre(2), 2);
  EXPECT_STATUS(ShardPut(2, put).status(), absl::StatusCode::kDataLoss,
                absl::StrCat("the Put with put_id ", 0x1057, " was stored, but rows ",
                             absl::StrJoin(first.assigned(), ", "), " were dropped as lost"));
}

// Shards of 8 KiB at most, in chunks of 4 KiB.
class ScaleOutMemoryTest : public ScaleOutTest {
 protected:
  void ConfigureShard(ServerOptions& options) override {
    options.shard.chunk_bytes = 4096;
    options.shard.memory_limit_bytes = 8192;
  }
};

// A Put short of memory at its shard waits there (up to its wait_ms; with
// none it is refused at once) and goes in once its step is the dock's
// oldest live one, past the limit: the step that must end first always can.
TEST_F(ScaleOutMemoryTest, APutShortOfMemoryWaitsAtItsShardUntilItsStepIsTheOldest) {
  v1::PutRequest small;  // the shard holds cells of the dock
  small.set_dock("grpo");
  small.add_rows(0);
  *small.add_columns() = Int32Column("prompt_ids", {{1}});
  ASSERT_OK(ShardPut(1, small).status());
  v1::PutRequest big = small;  // 16 KiB of step 1
  big.set_step(1);
  big.clear_columns();
  *big.add_columns() = Int32Column("prompt_ids", {std::vector<int32_t>(4096, 7)});
  EXPECT_STATUS(ShardPut(1, big).status(), absl::StatusCode::kResourceExhausted,
                "shard 1 has no room for 1 columns of dock 'grpo' step 1 under its memory "
                "limit of 8192 bytes");
  big.set_wait_ms(60'000);
  absl::StatusOr<v1::PutResponse> waited;
  std::thread writer([&] { waited = ShardPut(1, big); });
  // Step 0 released: step 1 is the oldest live step once the shard learns it.
  ReleaseAtController(0);
  writer.join();
  ASSERT_OK(waited.status());
  EXPECT_EQ(waited->step(), 1);
  EXPECT_EQ(waited->rows(), 1);
}

// The controller releases a step once its last rows are handed out (here,
// at once, by ReleaseStep); a consumer without a lease reads their cells
// after that: the shard keeps them readable for the grace.
TEST_F(ScaleOutTest, AReleasedStepsCellsStayReadableAtItsShardForTheGrace) {
  PutStepZero();
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  const v1::PackedColumn& column = batch.columns(0);
  const uint64_t shard = LocationsOf(column)[0].shard;
  ReleaseStepZero(shard);
  ASSERT_EQ(column.name(), "prompt_ids");
  ASSERT_OK_AND_ASSIGN(v1::GetResponse cells, ReadCells(shard, ReadOf(column, {0})));
  EXPECT_EQ(CellBytes(cells.columns(0), 0, 4), CellBytes(FullStepPut().columns(0), batch.rows(0), 4));
}

class ScaleOutNoGraceTest : public ScaleOutTest {
 protected:
  absl::Duration ReadGrace() const override { return absl::ZeroDuration(); }
};

TEST_F(ScaleOutNoGraceTest, AReleasedStepsCellsAreFreedAtItsShard) {
  PutStepZero();
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  const v1::PackedColumn& column = batch.columns(0);
  const uint64_t shard = LocationsOf(column)[0].shard;
  ASSERT_OK(ReadCells(shard, ReadOf(column, {0})).status());
  ReleaseStepZero(shard);
  EXPECT_STATUS(ReadCells(shard, ReadOf(column, {0})).status(), absl::StatusCode::kNotFound,
                "holds no such extent");
}

// A Put naming a reservation, its step unset, is stored at the
// reservation's step and its cells are read back from the shard.
TEST_F(ScaleOutTest, APutOfAReservationGoesToItsStep) {
  // Step 0 is taken by rows put without a reservation; the reservation of
  // the next rows may be of step 0 or 1: the shard learns which.
  v1::ReserveRequest reserve;
  reserve.set_dock("grpo");
  reserve.set_rows(2);
  reserve.set_deadline_ms(600'000);
  v1::ReserveResponse reserved;
  ASSERT_TRUE(stub_->Reserve(Context().get(), reserve, &reserved).ok());
  ASSERT_FALSE(reserved.timed_out());
  v1::PutRequest put;
  put.set_dock("grpo");
  put.set_reservation(reserved.reservation());
  *put.add_columns() = Int32Column("prompt_ids", {{1, 2}, {3}});
  *put.add_columns() = Int32Column("response_ids", {{4}, {5, 6, 7}});
  ASSERT_OK_AND_ASSIGN(v1::PutResponse answer, ShardPut(2, put));
  EXPECT_EQ(answer.step(), reserved.step());
  EXPECT_EQ(answer.rows(), 2);
  v1::ReadRequest read;
  read.set_dock("grpo");
  read.set_step(reserved.step());
  read.mutable_rows()->Assign(reserved.rows().begin(), reserved.rows().end());
  read.add_columns("response_ids");
  v1::GetResponse located;
  ASSERT_TRUE(stub_->Read(Context().get(), read, &located).ok());
  ASSERT_TRUE(located.cell_locations());
  ASSERT_OK_AND_ASSIGN(v1::GetResponse cells, ReadCells(2, ReadOf(located.columns(0), {0, 1})));
  EXPECT_EQ(CellBytes(cells.columns(0), 0, 4), CellBytes(put.columns(1), 0, 4));
  EXPECT_EQ(CellBytes(cells.columns(0), 1, 4), CellBytes(put.columns(1), 1, 4));
}

// Shards that never ask the controller which steps it released: they hear
// of it only through its step feed.
class ScaleOutFeedTest : public ScaleOutTest {
 protected:
  absl::Duration ReadGrace() const override { return absl::ZeroDuration(); }
  void ConfigureShard(ServerOptions& options) override {
    options.shard.release_sync = absl::Hours(1);
  }

  // Waits until `series` of `server` reads `value`: a synchronization
  // point, not a timing assertion.
  static void AwaitMetric(const Server& server, const std::string& series, double value) {
    for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
         MetricValue(server, series) != value && absl::Now() < give_up;
         absl::SleepFor(absl::Milliseconds(5))) {
    }
    ASSERT_EQ(MetricValue(server, series), value) << series;
  }
};

// A Put of a step the controller does not admit yet (its partition holds an
// older step) waits at its shard, and nothing of it reaches the controller;
// it goes in once the feed says the older step was released, which also
// retires that step's cells at the shard. With no wait it goes to the
// controller, which refuses it as always.
TEST_F(ScaleOutFeedTest, APutOfAStepNotYetAdmittedWaitsAtItsShardUntilTheFeedAdmitsIt) {
  AwaitMetric(*shards_[0], "tdock_shard_step_feed_up", 1);
  v1::PutRequest first;  // step 0 starts in partition 0
  first.set_dock("grpo");
  first.add_rows(0);
  *first.add_columns() = Int32Column("prompt_ids", {{1}});
  ASSERT_OK(ShardPut(1, first).status());
  v1::PutRequest later = first;  // step 2: partition 0 again
  later.set_step(2);
  EXPECT_STATUS(ShardPut(1, later).status(), absl::StatusCode::kResourceExhausted,
                "step 2 waits for step 0");
  later.set_wait_ms(600'000);
  std::atomic<bool> answered = false;
  absl::StatusOr<v1::PutResponse> waited;
  std::thread writer([&] {
    waited = ShardPut(1, later);
    answered = true;
  });
  AwaitMetric(*shards_[0], "tdock_shard_put_waits_total{reason=\"admission\"}", 1);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<Dock> dock, server_->registry().Find("grpo"));
  EXPECT_EQ(dock->Stats().parked_puts, 0);  // it waits at the shard
  EXPECT_FALSE(answered);  // nothing can answer it before the release
  ReleaseAtController(0);
  writer.join();
  ASSERT_OK(waited.status());
  EXPECT_EQ(waited->step(), 2);
  EXPECT_EQ(waited->rows(), 1);
  // The shard retired step 0 when the feed admitted step 2.
  EXPECT_STATUS(ShardPut(1, first).status(), absl::StatusCode::kFailedPrecondition,
                "dock 'grpo' step 0 was released: shard 1 takes no Put of it");
}

// A dock deleted at the controller is forgotten at its shards, told by the
// feed: its cells go, and so do the steps it released there, so a dock made
// anew under its name takes Puts of them again.
TEST_F(ScaleOutFeedTest, ADeletedDocksCellsGoFromItsShardsAndItsNameCanBeMadeAnew) {
  AwaitMetric(*shards_[1], "tdock_shard_step_feed_up", 1);
  PutStepZero();
  v1::PutRequest next;  // step 1, row 0, through shard 2
  next.set_dock("grpo");
  next.set_step(1);
  next.add_rows(0);
  *next.add_columns() = Int32Column("prompt_ids", {{5}});
  ASSERT_OK(ShardPut(2, next).status());
  ReleaseAtController(0);
  v1::GetResponse located;
  {
    v1::ReadRequest read;
    read.set_dock("grpo");
    read.set_step(1);
    read.add_rows(0);
    read.add_columns("prompt_ids");
    ASSERT_TRUE(stub_->Read(Context().get(), read, &located).ok());
  }
  ASSERT_OK(ReadCells(2, ReadOf(located.columns(0), {0})).status());
  v1::DeleteDockRequest remove;
  remove.set_dock("grpo");
  v1::DeleteDockResponse removed;
  ASSERT_TRUE(stub_->DeleteDock(Context().get(), remove, &removed).ok());
  absl::Status read = absl::OkStatus();
  for (const absl::Time give_up = absl::Now() + absl::Seconds(60);
       read.ok() && absl::Now() < give_up; absl::SleepFor(absl::Milliseconds(5))) {
    read = ReadCells(2, ReadOf(located.columns(0), {0})).status();
  }
  EXPECT_STATUS(read, absl::StatusCode::kNotFound, "holds no such extent");
  ASSERT_OK(CreateDock(GrpoSpec()));
  PutStepZero();  // step 0, released in the old dock, is the new one's first
}

// Shards with a data dir each.
class ScaleOutDurableTest : public ScaleOutTest {
 protected:
  void ConfigureShard(ServerOptions& options) override {
    const std::string dir = persist::TempDir(absl::StrCat("durable_shard_", options.shard.id));
    options.persistence.data_dir = dir;
    dirs_.push_back(dir);
  }

  void TearDown() override {
    ScaleOutTest::TearDown();
    for (const std::string& dir : dirs_) persist::RemoveDir(dir);
  }

  std::vector<std::string> dirs_;
};

// A shard restarted with its data dir comes back as the same incarnation
// with every cell it held: the controller loses no row, and a batch's
// cells read back as they were written, from both shards.
TEST_F(ScaleOutDurableTest, AShardRestartedWithItsDataDirKeepsItsCellsAndNothingIsLost) {
  PutStepZero();  // rows 0, 1 on shard 1; rows 2, 3 on shard 2
  v1::ListShardsResponse before;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &before).ok());
  const absl::Time restarted = shard::ShardTable::Now();
  RestartShard(1);
  WaitUntilHeardFrom(1, restarted);
  v1::ListShardsResponse after;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &after).ok());
  ASSERT_EQ(after.shards_size(), 2);
  EXPECT_EQ(after.shards(0).incarnation(), before.shards(0).incarnation());
  ASSERT_OK_AND_ASSIGN(v1::GetResponse batch, Get(GetFor("reward", 4, 0)));
  ASSERT_EQ(batch.rows_size(), 4);  // none was dropped as lost
  for (int c = 0; c < batch.columns_size(); ++c) {
    const v1::PackedColumn& column = batch.columns(c);
    const std::vector<CellLocation> where = LocationsOf(column);
    for (int i = 0; i < batch.rows_size(); ++i) {
      ASSERT_OK_AND_ASSIGN(v1::GetResponse cells, ReadCells(where[i].shard, ReadOf(column, {i})));
      const v1::PutRequest full = FullStepPut();
      for (const v1::PackedColumn& written : full.columns()) {
        if (written.name() == column.name()) {
          EXPECT_EQ(CellBytes(cells.columns(0), 0, 4), CellBytes(written, batch.rows(i), 4))
              << column.name() << " row " << batch.rows(i);
        }
      }
    }
  }
}

// A shard down, data dir and all, for longer than the controller waits is
// declared lost; started again, it is refused as that incarnation, empties
// its data dir and serves as a new one.
TEST_F(ScaleOutDurableTest, AShardDeclaredLostWhileDownStartsAgainAsANewIncarnation) {
  PutStepZero();  // rows 2, 3 on shard 2
  v1::ListShardsResponse before;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &before).ok());
  shards_[1]->Shutdown();
  const absl::Time gone = shard::ShardTable::Now();
  WaitUntilHeardFrom(1, gone);
  const std::vector<shard::ShardEntry> lost =
      server_->WatchShards(gone + ServerOptions().controller.shard_lost_after);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(LostRowsOnceThereAre(2), 2);
  RestartShard(2);
  v1::ListShardsResponse after;
  ASSERT_TRUE(stub_->ListShards(Context().get(), {}, &after).ok());
  ASSERT_EQ(after.shards_size(), 2);
  EXPECT_EQ(after.shards(1).id(), 2u);
  EXPECT_NE(after.shards(1).incarnation(), before.shards(1).incarnation());
  v1::PutRequest next;  // the new incarnation takes Puts
  next.set_dock("grpo");
  next.set_step(1);
  next.add_rows(0);
  *next.add_columns() = Int32Column("prompt_ids", {{5}});
  ASSERT_OK(ShardPut(2, next).status());
}

// A controller that cannot listen fails to start, and goes, cleanly.
TEST(ServerRoles, AControllerThatCannotListenFailsToStart) {
  ServerOptions first;
  first.role = ServerRole::kController;
  first.listen = "127.0.0.1:0";
  Server holder(first);
  ASSERT_OK(holder.Start());
  ServerOptions second = first;
  second.listen = absl::StrCat("127.0.0.1:", holder.port());
  {
    Server taken(second);
    EXPECT_STATUS(taken.Start(), absl::StatusCode::kUnavailable, "cannot listen");
    EXPECT_TRUE(taken.WatchShards(shard::ShardTable::Now()).empty());
  }
  holder.Shutdown();
}

TEST(ServerRoles, ShardOptionsAreCheckedAndOnlyForShards) {
  ServerOptions options;
  options.shard.controller = "127.0.0.1:1";
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "are for --role=shard; this server's role is standalone");
  options = ServerOptions();
  options.role = ServerRole::kShard;
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument, "needs --controller");
  options.shard.controller = "127.0.0.1:1";
  EXPECT_OK(options.Validate());  // the id from the node's name
  EXPECT_EQ(ShardIdOfNode("node-a"), ShardIdOfNode("node-a"));
  EXPECT_NE(ShardIdOfNode("node-a"), ShardIdOfNode("node-b"));
  EXPECT_LT(ShardIdOfNode("node-a"), uint64_t{1} << 53);
  options.shard.id = 3;
  EXPECT_OK(options.Validate());
  ServerOptions lost;
  lost.controller.shard_lost_after = absl::ZeroDuration();
  EXPECT_STATUS(lost.Validate(), absl::StatusCode::kInvalidArgument,
                "--shard_lost_after_ms must be positive, got 0");
  options.shard.read_grace = absl::Milliseconds(-1);
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "--shard_read_grace_ms must be >= 0, got -1");
  options.shard.read_grace = absl::ZeroDuration();
  EXPECT_OK(options.Validate());
  options.persistence.data_dir = "/tmp/x";
  EXPECT_OK(options.Validate());  // its cells, recorded
  options.persistence.durability = persist::Durability::kAsync;
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "--durability=async with --role=shard");
  ServerRole role;
  EXPECT_TRUE(ParseServerRole("controller", &role));
  EXPECT_EQ(role, ServerRole::kController);
  EXPECT_FALSE(ParseServerRole("primary", &role));
}

}  // namespace
}  // namespace tdock::service_testing
