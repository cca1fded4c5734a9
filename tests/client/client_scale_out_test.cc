// The C++ client with a controller and two shards: Puts go to the shard of
// the writer's node (TDOCK_NODE); a Get, a Read and a listing of rows whose
// cells are on both shards come back as from a standalone server, each
// column one 64-byte-aligned segment (a uint8 column before an int32 one);
// a controller that lists no shards yet is Unavailable, and listed again;
// a Put to a shard back at another port reaches it there, and one through
// the shared memory of a shard that restarted is refused;
// a Get whose cells cannot be read hands its lease back at once
// (Unavailable), or, without one, is DataLoss naming the rows; a partial
// Get comes without the rows it cannot read, naming them.
// Through shards' shared memory (transport shm), Puts and Gets carry no
// payload over their sockets, and come back the same; shm is refused where
// the memory is not shared, and a transport that is none is refused.
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/grpc_environment.h"
#include "tests/persist/persist_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

class ClientScaleOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options{.role = ServerRole::kController, .listen = "127.0.0.1:0"};
    // A shard shut down stays listed live: its rows are handed out (and
    // cannot be read), however slow the machine.
    options.controller.shard_away_after = absl::Hours(1);
    options.controller.shard_lost_after = absl::Hours(2);
    controller_ = std::make_unique<Server>(options);
    ASSERT_OK(controller_->Start());
    ASSERT_OK_AND_ASSIGN(client_, Client::Connect({.address = Address(),
                                                   .timeout = absl::Seconds(20)}));
  }
  void TearDown() override {
    unsetenv("TDOCK_NODE");
    for (auto& shard : shards_) shard->Shutdown();
    controller_->Shutdown();
    if (!shm_dir_.empty()) std::system(absl::StrCat("rm -rf '", shm_dir_, "'").c_str());
  }
  std::string Address() const { return absl::StrCat("127.0.0.1:", controller_->port()); }
  // With `shm_dir`, their cells in shared memory there.
  void StartShards(const std::string& shm_dir = "") {
    for (uint64_t id : {1, 2}) {
      ServerOptions options{.role = ServerRole::kShard, .listen = "127.0.0.1:0"};
      options.shard.controller = Address();
      options.shard.id = id;
      options.shard.node = absl::StrCat("node-", id);
      options.shard.shm_dir = shm_dir;
      shards_.push_back(std::make_unique<Server>(options));
      ASSERT_OK(shards_.back()->Start());
    }
  }
  // The shards with their cells in shared memory, in a directory of their own.
  void StartShardsInSharedMemory() {
    shm_dir_ = ::testing::TempDir() + "/tdock_client_shm_XXXXXX";
    ASSERT_NE(mkdtemp(shm_dir_.data()), nullptr);
    StartShards(shm_dir_);
  }
  void PartialGetComesWithoutTheRowsItCannotRead(Client& client);

  std::unique_ptr<Server> controller_;
  std::vector<std::unique_ptr<Server>> shards_;
  std::unique_ptr<Client> client_;
  std::string shm_dir_;
};

// Row r: `flag` is r + 1 once (uint8), `ids` is r, r + 1, ... (r + 1 items).
std::vector<int32_t> IdsOf(int64_t r) {
  std::vector<int32_t> ids;
  for (int64_t k = 0; k <= r; ++k) ids.push_back(static_cast<int32_t>(r + k));
  return ids;
}

TEST_F(ClientScaleOutTest, RowsOnBothShardsComeBackAsFromOneServer) {
  DockSpec spec;
  spec.name = "both";
  spec.num_prompts = 4;
  spec.columns = {{"flag", DType::kUint8, {}, 0, false}, {"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"all", {"flag", "ids"}, 4, 1, false, Policy::kFifo, 0}};
  // No shard yet: the client is told, and asks again once they are there.
  ASSERT_OK(client_->CreateDock(spec).status());
  ClientPut first{.dock = "both", .step = 0, .rows = {0}};
  first.columns.push_back(ClientColumn::FromRows<uint8_t>("flag", DType::kUint8, {{1}}));
  first.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {IdsOf(0)}));
  EXPECT_STATUS(client_->Put(first).status(), absl::StatusCode::kUnavailable,
                "lists no shards yet");
  StartShards();
  ASSERT_OK_AND_ASSIGN(std::vector<ShardInfo> shards, client_->ListShards());
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[1].id, 2u);
  EXPECT_EQ(shards[1].node, "node-2");
  EXPECT_NE(shards[1].incarnation, 0u);
  for (int64_t r = 0; r < 4; ++r) {
    setenv("TDOCK_NODE", r % 2 == 0 ? "node-1" : "node-2", 1);
    ClientPut put{.dock = "both", .step = 0, .rows = {r}};
    put.columns.push_back(ClientColumn::FromRows<uint8_t>(
        "flag", DType::kUint8, {{static_cast<uint8_t>(r + 1)}}));
    put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {IdsOf(r)}));
    ASSERT_OK(client_->Put(put).status());
  }
  // A listing's cells and a Read come from the shards.
  ASSERT_OK_AND_ASSIGN(RowListing listing, client_->ListRows("both", 0, {"ids"}));
  ASSERT_EQ(listing.rows.size(), 4u);
  for (const RowState& row : listing.rows) {
    ASSERT_EQ(row.cells.size(), 1u);
    std::vector<int32_t> ids(row.cells[0].second.size() / sizeof(int32_t));
    std::memcpy(ids.data(), row.cells[0].second.data(), row.cells[0].second.size());
    EXPECT_EQ(ids, IdsOf(row.row)) << "row " << row.row;
  }
  ASSERT_OK_AND_ASSIGN(ClientBatch read, client_->Read("both", 0, {3, 0}, {"ids"}));
  EXPECT_EQ(read.Row<int32_t>(*read.column("ids"), 0), IdsOf(3));
  EXPECT_EQ(read.Row<int32_t>(*read.column("ids"), 1), IdsOf(0));
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "both", .consumer = "all"}));
  ASSERT_EQ(batch.rows.size(), 4u);
  EXPECT_FALSE(batch.cell_locations);
  for (const char* name : {"flag", "ids"}) {
    const PackedColumn& column = *batch.column(name);
    ASSERT_EQ(column.segments.size(), 1u) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(column.segments[0].data()) % 64, 0u) << name;
  }
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const int64_t r = batch.rows[i];
    EXPECT_EQ(batch.Row<uint8_t>(*batch.column("flag"), static_cast<int64_t>(i)),
              (std::vector<uint8_t>{static_cast<uint8_t>(r + 1)}));
    EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), static_cast<int64_t>(i)), IdsOf(r));
  }
  // Values reads the aligned ids of every row in place.
  int64_t total = 0;
  for (int32_t v : batch.Values<int32_t>(*batch.column("ids"))) total += v;
  EXPECT_EQ(total, 0 + (1 + 2) + (2 + 3 + 4) + (3 + 4 + 5 + 6));

  // The shards are read all at once; one that does not answer fails the
  // read, named, while the other's answer is in.
  for (int64_t r = 0; r < 2; ++r) {
    setenv("TDOCK_NODE", r == 0 ? "node-1" : "node-2", 1);
    ClientPut put{.dock = "both", .step = 1, .rows = {r}};
    put.columns.push_back(ClientColumn::FromRows<uint8_t>(
        "flag", DType::kUint8, {{static_cast<uint8_t>(r + 1)}}));
    put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {IdsOf(r)}));
    ASSERT_OK(client_->Put(put).status());
  }
  shards_[1]->Shutdown();
  EXPECT_STATUS(client_->Read("both", 1, {0, 1}, {"ids"}).status(),
                absl::StatusCode::kUnavailable, "reading shard 2 at 127.0.0.1:");
  // A Get of those rows hands them out, but cannot read them: without a
  // lease, they are lost to the consumer, named.
  EXPECT_STATUS(client_->Get({.dock = "both", .consumer = "all", .step = 1, .count = 2}).status(),
                absl::StatusCode::kDataLoss,
                "step 1 rows [0, 1] were handed to consumer 'all' but their cells could not "
                "be read");
}

TEST_F(ClientScaleOutTest, AGetWhoseCellsCannotBeReadHandsItsLeaseBackAtOnce) {
  StartShards();
  DockSpec spec;
  spec.name = "leased";
  spec.num_prompts = 2;
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"all", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  spec.consumers[0].lease_ms = 600'000;
  ASSERT_OK(client_->CreateDock(spec).status());
  setenv("TDOCK_NODE", "node-2", 1);
  ClientPut put{.dock = "leased", .step = 0, .rows = {0, 1}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{7}, {8}}));
  ASSERT_OK(client_->Put(put).status());
  shards_[1]->Shutdown();
  EXPECT_STATUS(client_->Get({.dock = "leased", .consumer = "all", .step = 0}).status(),
                absl::StatusCode::kUnavailable,
                "step 0 rows [0, 1] for consumer 'all' could not be read");
  // Handed back at once, not after its 10 minutes: the rows wait for a Get.
  ASSERT_OK_AND_ASSIGN(std::vector<ClientLease> leases, client_->ListLeases("leased", "all"));
  EXPECT_TRUE(leases.empty());
}

// A shard of its own for the restart tests: shard 2 on node-2 (the
// writer's node), with `data_dir` if given, listening on `listen`.
std::unique_ptr<Server> StartShard2(const std::string& controller, const std::string& listen,
                                    const std::string& shm_dir, const std::string& data_dir) {
  ServerOptions options{.role = ServerRole::kShard, .listen = listen};
  options.shard.controller = controller;
  options.shard.id = 2;
  options.shard.node = "node-2";
  options.shard.shm_dir = shm_dir;
  options.persistence.data_dir = data_dir;
  auto shard = std::make_unique<Server>(options);
  EXPECT_OK(shard->Start());
  return shard;
}

// Waits until the controller lists shard 2 as `is` says: a synchronization
// point (it registers once started), not a timing assertion.
void AwaitShard2(Client& client, absl::FunctionRef<bool(const ShardInfo&)> is) {
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  for (;;) {
    ASSERT_LT(absl::Now(), give_up) << "shard 2 is not listed as expected";
    ASSERT_OK_AND_ASSIGN(const std::vector<ShardInfo> shards, client.ListShards());
    if (std::any_of(shards.begin(), shards.end(),
                    [&](const ShardInfo& shard) { return shard.id == 2 && is(shard); })) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

DockSpec OneColumnDock(const std::string& name) {
  DockSpec spec;
  spec.name = name;
  spec.num_prompts = 2;
  spec.steps_in_flight = 2;
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"all", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  return spec;
}

absl::Status PutIds(Client& client, const std::string& dock, int64_t step,
                    std::vector<std::vector<int32_t>> ids) {
  ClientPut put{.dock = dock, .step = step, .rows = {0, 1}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, ids));
  return client.Put(put).status();
}

// A Put to a shard that went away fails (Unavailable) and the client
// forgets its listing: once the shard is back with its data dir at another
// port, the next Put reaches it there (the only shard: nothing goes in
// anywhere else), and the rows written before and after read back.
TEST_F(ClientScaleOutTest, APutReachesAShardBackAtAnotherAddress) {
  const std::string data_dir = persist::TempDir("client_shard_moved");
  std::unique_ptr<Server> shard = StartShard2(Address(), "127.0.0.1:0", "", data_dir);
  setenv("TDOCK_NODE", "node-2", 1);
  ASSERT_OK(client_->CreateDock(OneColumnDock("moved")).status());
  ASSERT_OK(PutIds(*client_, "moved", 0, {{1}, {2}}));
  const std::string before = absl::StrCat("127.0.0.1:", shard->port());
  shard->Shutdown();
  shard.reset();  // its store closed
  EXPECT_EQ(PutIds(*client_, "moved", 1, {{3}, {4}}).code(), absl::StatusCode::kUnavailable);
  shard = StartShard2(Address(), "127.0.0.1:0", "", data_dir);
  const std::string after = absl::StrCat("127.0.0.1:", shard->port());
  ASSERT_NE(after, before);
  AwaitShard2(*client_, [&](const ShardInfo& s) { return s.address == after && !s.away; });
  EXPECT_OK(PutIds(*client_, "moved", 1, {{3}, {4}}));
  for (int64_t step : {0, 1}) {
    ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                         client_->Get({.dock = "moved", .consumer = "all", .step = step}));
    ASSERT_EQ(batch.rows.size(), 2u) << "step " << step;
    for (size_t i = 0; i < batch.rows.size(); ++i) {  // row r of step s holds 2s + r + 1
      EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), static_cast<int64_t>(i)),
                std::vector<int32_t>{static_cast<int32_t>(2 * step + batch.rows[i] + 1)});
    }
  }
  shard->Shutdown();
  persist::RemoveDir(data_dir);
}

// A shard restarted at its address has new shared memory: a Put through
// the memory of the shard as listed before is refused before a byte is
// written (Unavailable, saying it restarted), and the next Put, the shards
// listed again, goes into the new memory and reads back.
TEST_F(ClientScaleOutTest, APutThroughTheMemoryOfAShardThatRestartedIsRefused) {
  shm_dir_ = ::testing::TempDir() + "/tdock_client_shm_XXXXXX";
  ASSERT_NE(mkdtemp(shm_dir_.data()), nullptr);
  std::unique_ptr<Server> shard = StartShard2(Address(), "127.0.0.1:0", shm_dir_, "");
  setenv("TDOCK_NODE", "node-2", 1);
  ASSERT_OK(client_->CreateDock(OneColumnDock("restarted")).status());
  ASSERT_OK(PutIds(*client_, "restarted", 0, {{1}, {2}}));
  const std::string address = absl::StrCat("127.0.0.1:", shard->port());
  ASSERT_OK_AND_ASSIGN(const std::vector<ShardInfo> listed, client_->ListShards());
  const uint32_t incarnation = listed.at(0).incarnation;
  shard->Shutdown();
  shard.reset();
  shard = StartShard2(Address(), address, shm_dir_, "");
  AwaitShard2(*client_, [&](const ShardInfo& s) { return s.incarnation != incarnation; });
  EXPECT_STATUS(PutIds(*client_, "restarted", 1, {{3}, {4}}), absl::StatusCode::kUnavailable,
                "it restarted");
  ASSERT_OK(PutIds(*client_, "restarted", 1, {{3}, {4}}));
  ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                       client_->Get({.dock = "restarted", .consumer = "all", .step = 1}));
  ASSERT_EQ(batch.rows.size(), 2u);
  for (size_t i = 0; i < batch.rows.size(); ++i) {  // row r holds r + 3
    EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), static_cast<int64_t>(i)),
              std::vector<int32_t>{static_cast<int32_t>(batch.rows[i] + 3)});
  }
  shard->Shutdown();
}

// A partial Get (over gRPC, or through the shards' shared memory) of rows
// 0 and 2 on shard 1 and rows 1 and 3 on shard 2, shard 2 shut down: the
// batch holds rows 0 and 2 with their cells, keys, token counts and
// micro-batches narrowed to them, names 1 and 3 missing, and its lease
// covers all four; a partial Get whose every shard failed fails as a Get.
void ClientScaleOutTest::PartialGetComesWithoutTheRowsItCannotRead(Client& client) {
  DockSpec spec;
  spec.name = "partial";
  spec.num_prompts = 4;
  spec.steps_in_flight = 2;
  spec.length_columns = {"ids"};
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  ConsumerSpec all{"all", {"ids"}, 4, 1, false, Policy::kFifo, 0};
  all.lease_ms = 600'000;
  all.micro_batch = MicroBatchOptions{.max_tokens = 4};
  spec.consumers = {all};
  ASSERT_OK(client.CreateDock(spec).status());
  for (int64_t step : {0, 1}) {
    for (int64_t r = 0; r < 4; ++r) {
      if (step == 1 && r % 2 == 0) continue;  // step 1: rows 1 and 3, on shard 2 only
      setenv("TDOCK_NODE", r % 2 == 0 ? "node-1" : "node-2", 1);
      ClientPut put{.dock = "partial", .step = step, .rows = {r},
                    .keys = {absl::StrCat("k", step, "-", r)}};
      put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {IdsOf(r)}));
      ASSERT_OK(client.Put(put).status());
    }
  }
  shards_[1]->Shutdown();
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client.Get({.dock = "partial", .consumer = "all",
                                                      .step = 0, .partial = true}));
  std::vector<int64_t> rows = batch.rows, missing = batch.missing_rows;
  std::sort(rows.begin(), rows.end());
  std::sort(missing.begin(), missing.end());
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(missing, (std::vector<int64_t>{1, 3}));
  ASSERT_EQ(batch.keys.size(), 2u);
  ASSERT_EQ(batch.token_counts.size(), 2u);
  const PackedColumn& ids = *batch.column("ids");
  ASSERT_EQ(ids.rows(), 2);
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const int64_t r = batch.rows[i];
    EXPECT_EQ(batch.Row<int32_t>(ids, static_cast<int64_t>(i)), IdsOf(r)) << "row " << r;
    EXPECT_EQ(batch.keys[i], absl::StrCat("k0-", r));
    EXPECT_EQ(batch.token_counts[i], r + 1);
  }
  // The micro-batches tile the rows kept, each counting its own tokens.
  ASSERT_FALSE(batch.micro_batches.empty());
  int64_t next = 0;
  for (const MicroBatchInfo& mb : batch.micro_batches) {
    EXPECT_EQ(mb.begin, next);
    int64_t tokens = 0;
    for (int64_t i = mb.begin; i < mb.end; ++i) tokens += batch.token_counts[i];
    EXPECT_EQ(mb.tokens, tokens);
    EXPECT_EQ(mb.padded_tokens, mb.padded_len * (mb.end - mb.begin));
    next = mb.end;
  }
  EXPECT_EQ(next, 2);
  ASSERT_NE(batch.lease_id, 0u);
  EXPECT_EQ(*client.Ack("partial", "all", batch.lease_id), 4);
  // Every shard holding step 1's cells failed: the Get fails, its lease back.
  EXPECT_STATUS(client.Get({.dock = "partial", .consumer = "all", .step = 1, .count = 2,
                           .partial = true})
                    .status(),
                absl::StatusCode::kUnavailable,
                "for consumer 'all' could not be read");
  ASSERT_OK_AND_ASSIGN(std::vector<ClientLease> leases, client.ListLeases("partial", "all"));
  EXPECT_TRUE(leases.empty());
}

TEST_F(ClientScaleOutTest, APartialGetComesWithoutTheRowsItCannotRead) {
  StartShards();
  PartialGetComesWithoutTheRowsItCannotRead(*client_);
}

TEST_F(ClientScaleOutTest, APartialGetThroughSharedMemoryComesWithoutTheRowsItCannotRead) {
  StartShardsInSharedMemory();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> shm,
                       Client::Connect({.address = Address(),
                                        .timeout = absl::Seconds(20),
                                        .transport = "auto"}));
  PartialGetComesWithoutTheRowsItCannotRead(*shm);
}

TEST_F(ClientScaleOutTest, ThroughSharedMemoryNoPayloadCrossesASocket) {
  StartShardsInSharedMemory();
  // Messages of 4 KiB at most: 64 KiB rows go only through shared memory.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> shm,
                       Client::Connect({.address = Address(),
                                        .timeout = absl::Seconds(20),
                                        .max_message_bytes = 4096,
                                        .transport = "shm"}));
  DockSpec spec;
  spec.name = "shm";
  spec.num_prompts = 4;
  spec.columns = {{"x", DType::kFloat32, {}, 0, false}};
  spec.consumers = {{"all", {"x"}, 4, 1, false, Policy::kFifo, 0}};
  ASSERT_OK(shm->CreateDock(spec).status());
  const auto row = [](int64_t r) {
    std::vector<float> values(16384);
    for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(r * 100000 + k);
    return values;
  };
  for (int64_t r = 0; r < 4; ++r) {
    setenv("TDOCK_NODE", r < 2 ? "node-1" : "node-2", 1);
    ClientPut put{.dock = "shm", .step = 0, .rows = {r}};
    put.columns.push_back(ClientColumn::FromRows<float>("x", DType::kFloat32, {row(r)}));
    ASSERT_OK(shm->Put(put).status());
  }
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, shm->Get({.dock = "shm", .consumer = "all"}));
  ASSERT_EQ(batch.rows.size(), 4u);
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    EXPECT_EQ(batch.Row<float>(*batch.column("x"), static_cast<int64_t>(i)), row(batch.rows[i]));
  }
  // The same Put over gRPC does not fit the client's messages.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> grpc,
                       Client::Connect({.address = Address(),
                                        .timeout = absl::Seconds(20),
                                        .max_message_bytes = 4096,
                                        .transport = "grpc"}));
  ClientPut put{.dock = "shm", .step = 1, .rows = {0}};
  put.columns.push_back(ClientColumn::FromRows<float>("x", DType::kFloat32, {row(0)}));
  EXPECT_STATUS(grpc->Put(put).status(), absl::StatusCode::kResourceExhausted,
                "exceeds max_message_bytes");
}

TEST_F(ClientScaleOutTest, TransportShmIsRefusedWhereTheMemoryIsNotShared) {
  StartShards();  // no shared memory
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> shm,
                       Client::Connect({.address = Address(),
                                        .timeout = absl::Seconds(20),
                                        .transport = "shm"}));
  DockSpec spec;
  spec.name = "plain";
  spec.num_prompts = 4;
  spec.columns = {{"x", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"all", {"x"}, 4, 1, false, Policy::kFifo, 0}};
  ASSERT_OK(shm->CreateDock(spec).status());
  ClientPut put{.dock = "plain", .step = 0, .rows = {0}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("x", DType::kInt32, {{1}}));
  EXPECT_STATUS(shm->Put(put).status(), absl::StatusCode::kFailedPrecondition,
                "transport 'shm': shard 1 at 127.0.0.1:");
  EXPECT_STATUS(shm->Get({.dock = "plain", .consumer = "all"}).status(),
                absl::StatusCode::kFailedPrecondition, "offers no shared memory");
  EXPECT_STATUS(Client::Connect({.address = Address(), .transport = "tcp"}).status(),
                absl::StatusCode::kInvalidArgument, "ClientOptions::transport is 'tcp'");
}

}  // namespace
}  // namespace tdock
