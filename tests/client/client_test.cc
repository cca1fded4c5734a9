// tdock::Client against an in-process server on loopback: every method, the
// round trip of column values per dtype, a large borrowed Put, and errors that
// arrive with the server's code and message.
#include "client/client.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/grpc_environment.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

ColumnSpec Column(std::string name, DType dtype) {
  ColumnSpec column;
  column.name = std::move(name);
  column.dtype = dtype;
  return column;
}

ConsumerSpec Consumer(std::string name, std::vector<std::string> columns) {
  ConsumerSpec consumer;
  consumer.name = std::move(name);
  consumer.columns = std::move(columns);
  return consumer;
}

// 2 prompts x 2 samples = 4 rows per step; one column per dtype under test.
DockSpec TestSpec(const std::string& name) {
  DockSpec spec;
  spec.name = name;
  spec.num_prompts = 2;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 2;
  spec.length_columns = {"ids"};
  spec.columns = {Column("ids", DType::kInt32), Column("score", DType::kFloat32),
                  Column("logp", DType::kBFloat16), Column("text", DType::kBytes)};
  spec.consumers = {Consumer("actor", {"ids", "score", "logp", "text"}),
                    Consumer("sampler", {"ids"})};
  return spec;
}

// Values written by PutAll, by row.
const std::vector<std::vector<int32_t>> kIds = {{1, 2, 3}, {4}, {5, 6}, {-7, 8, 9, 2147483647}};
const std::vector<std::vector<float>> kScores = {{0.5f}, {-1.25f}, {3e8f}, {1e-30f}};
// bfloat16 bit patterns: 1.0, -2.0, 0.1 (rounded), smallest subnormal; row 2 empty.
const std::vector<std::vector<uint16_t>> kLogp = {{0x3F80, 0xC000}, {0x3DCD}, {}, {0x0001}};
const std::vector<std::string> kText = {"hello", "", std::string("a\0b", 3), "tdock"};

ClientColumn TextColumn() {
  std::vector<std::vector<char>> rows;
  for (const std::string& text : kText) rows.emplace_back(text.begin(), text.end());
  return ClientColumn::FromRows<char>("text", DType::kBytes, rows);
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
    ASSERT_OK(server_->Start());
    ASSERT_OK_AND_ASSIGN(
        client_, Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
  }
  void TearDown() override { server_->Shutdown(); }

  absl::Status PutAll(const std::string& dock, int64_t step) {
    ClientPut put{.dock = dock, .step = step, .rows = {0, 1, 2, 3}};
    put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, kIds));
    put.columns.push_back(ClientColumn::FromRows<float>("score", DType::kFloat32, kScores));
    put.columns.push_back(ClientColumn::FromRows<uint16_t>("logp", DType::kBFloat16, kLogp));
    put.columns.push_back(TextColumn());
    return client_->Put(put).status();
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// The standard health service reports SERVING for a running server.
TEST_F(ClientTest, HealthIsServing) { EXPECT_OK(client_->Health()); }

// Create returns the normalized spec; List and Status show the dock; Delete
// removes it.
TEST_F(ClientTest, CreateListStatusDelete) {
  ASSERT_OK_AND_ASSIGN(DockSpec created, client_->CreateDock(TestSpec("d")));
  EXPECT_EQ(created.name, "d");
  ASSERT_EQ(created.consumers.size(), 2u);
  EXPECT_EQ(created.consumers[0].dispatch_size, 4);  // default: rows_per_step / dp_size
  EXPECT_EQ(created.consumers[0].dp_size, 1);

  ASSERT_OK_AND_ASSIGN(std::vector<DockSummaryInfo> docks, client_->ListDocks());
  ASSERT_EQ(docks.size(), 1u);
  EXPECT_EQ(docks[0].name, "d");
  EXPECT_EQ(docks[0].rows_per_step, 4);
  EXPECT_EQ(docks[0].steps_in_flight, 2);

  ASSERT_OK_AND_ASSIGN(DockStatusInfo status, client_->GetDockStatus("d"));
  EXPECT_EQ(status.spec.name, "d");
  ASSERT_EQ(status.spec.columns.size(), 4u);
  EXPECT_EQ(status.spec.columns[2].name, "logp");
  EXPECT_EQ(status.spec.columns[2].dtype, DType::kBFloat16);

  EXPECT_OK(client_->DeleteDock("d"));
  ASSERT_OK_AND_ASSIGN(docks, client_->ListDocks());
  EXPECT_TRUE(docks.empty());
}

// One multi-column Put, then a Get returns every value as written, for int32,
// float32, bfloat16 and bytes, with each column contiguous and 64-byte aligned.
TEST_F(ClientTest, PutThenGetReturnsSameValues) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ASSERT_OK(PutAll("d", 0));
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "d", .consumer = "actor"}));
  EXPECT_EQ(batch.step, 0);
  EXPECT_TRUE(batch.end_of_step);
  EXPECT_FALSE(batch.timed_out);
  ASSERT_EQ(batch.rows.size(), 4u);
  ASSERT_EQ(batch.token_counts.size(), 4u);
  for (const char* name : {"ids", "score", "logp", "text"}) {
    const PackedColumn* column = batch.column(name);
    ASSERT_NE(column, nullptr) << name;
    ASSERT_EQ(column->rows(), 4) << name;
    ASSERT_EQ(column->segments.size(), 1u) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(column->segments[0].data()) % 64, 0u) << name;
  }
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const int64_t row = batch.rows[i];
    ASSERT_GE(row, 0);
    ASSERT_LT(row, 4);
    EXPECT_EQ(batch.token_counts[i], static_cast<int64_t>(kIds[row].size()));
    EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), i), kIds[row]);
    EXPECT_EQ(batch.Row<float>(*batch.column("score"), i), kScores[row]);
    EXPECT_EQ(batch.Row<uint16_t>(*batch.column("logp"), i), kLogp[row]);
    const std::vector<char> text = batch.Row<char>(*batch.column("text"), i);
    EXPECT_EQ(std::string(text.begin(), text.end()), kText[row]);
  }
}

// A Put sent again with its put_id gets the stored Put's answer, replayed,
// and writes nothing (its rows are not refused as written).
TEST_F(ClientTest, APutSentAgainWithItsIdIsReplayed) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ClientPut put{.dock = "d", .step = 0, .rows = {0, 1}, .put_id = 0xfeed};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {kIds[0], kIds[1]}));
  ASSERT_OK_AND_ASSIGN(PutAck first, client_->Put(put));
  EXPECT_FALSE(first.replayed);
  ASSERT_OK_AND_ASSIGN(PutAck again, client_->Put(put));
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.rows, 2);
  EXPECT_EQ(again.bytes, first.bytes);
  put.put_id = 0;  // without one, the same Put is refused: its cells are written
  EXPECT_STATUS(client_->Put(put).status(), absl::StatusCode::kAlreadyExists,
                "is already written");
}

// Columns put by separate calls are served together once all are ready; the
// batch stays valid after the client that fetched it is gone.
TEST_F(ClientTest, SeparatePutsPerColumn) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ClientPut ids{.dock = "d", .step = 0, .rows = {0, 1, 2, 3}};
  ids.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, kIds));
  ASSERT_OK_AND_ASSIGN(PutAck ack, client_->Put(ids));
  EXPECT_EQ(ack.rows, 4);
  ASSERT_OK_AND_ASSIGN(ClientBatch early,
                       client_->Get({.dock = "d", .consumer = "actor", .wait = absl::ZeroDuration()}));
  EXPECT_TRUE(early.rows.empty());  // score, logp and text are missing

  ClientPut rest{.dock = "d", .step = 0, .rows = {3, 2, 1, 0}};
  std::vector<std::vector<float>> scores(kScores.rbegin(), kScores.rend());
  std::vector<std::vector<uint16_t>> logp(kLogp.rbegin(), kLogp.rend());
  rest.columns.push_back(ClientColumn::FromRows<float>("score", DType::kFloat32, scores));
  rest.columns.push_back(ClientColumn::FromRows<uint16_t>("logp", DType::kBFloat16, logp));
  ASSERT_OK(client_->Put(rest).status());
  ClientPut text{.dock = "d", .step = 0, .rows = {0, 1, 2, 3}};
  text.columns.push_back(TextColumn());
  ASSERT_OK(client_->Put(text).status());

  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "d", .consumer = "actor"}));
  client_.reset();
  ASSERT_EQ(batch.rows.size(), 4u);
  ClientBatch copy = batch;  // shares the buffer
  batch = ClientBatch();
  for (size_t i = 0; i < copy.rows.size(); ++i) {
    const int64_t row = copy.rows[i];
    EXPECT_EQ(copy.Row<float>(*copy.column("score"), i), kScores[row]);
    EXPECT_EQ(copy.Row<uint16_t>(*copy.column("logp"), i), kLogp[row]);
  }
}

// Sample claims rows and returns token counts but no payload; Read returns
// payload without claiming.
TEST_F(ClientTest, SampleAndRead) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ASSERT_OK(PutAll("d", 0));
  ASSERT_OK_AND_ASSIGN(ClientBatch sampled,
                       client_->Sample({.dock = "d", .consumer = "sampler", .count = 2}));
  EXPECT_EQ(sampled.step, 0);
  ASSERT_EQ(sampled.rows.size(), 2u);
  EXPECT_TRUE(sampled.columns.empty());
  for (size_t i = 0; i < sampled.rows.size(); ++i) {
    EXPECT_EQ(sampled.token_counts[i], static_cast<int64_t>(kIds[sampled.rows[i]].size()));
  }

  ASSERT_OK_AND_ASSIGN(ClientBatch read, client_->Read("d", 0, {3, 0}, {"ids", "text"}));
  ASSERT_EQ(read.rows, (std::vector<int64_t>{3, 0}));
  ASSERT_EQ(read.columns.size(), 2u);
  EXPECT_EQ(read.Row<int32_t>(*read.column("ids"), 0), kIds[3]);
  EXPECT_EQ(read.Row<int32_t>(*read.column("ids"), 1), kIds[0]);
  EXPECT_EQ(read.Values<int32_t>(*read.column("ids")).size(), kIds[3].size() + kIds[0].size());
  const std::vector<char> text = read.Row<char>(*read.column("text"), 0);
  EXPECT_EQ(std::string(text.begin(), text.end()), kText[3]);

  // Read claimed nothing: actor still gets all four rows.
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "d", .consumer = "actor"}));
  EXPECT_EQ(batch.rows.size(), 4u);
}

// A dock with add_columns_on_write takes a Put of a column it lacks, with
// the definition the Put sends (new_columns) over the wire; a definition the
// server cannot read is named, nothing added.
TEST_F(ClientTest, PutAddsColumnsOnWrite) {
  DockSpec spec = TestSpec("d");
  spec.add_columns_on_write = true;
  ASSERT_OK(client_->CreateDock(spec).status());
  ClientPut put{.dock = "d", .step = 0, .rows = {0, 1}};
  put.columns.push_back(
      ClientColumn::FromRows<float>("pair", DType::kFloat32, {{1.f, 2.f}, {3.f, 4.f}}));
  ColumnSpec pair = Column("pair", DType::kFloat32);
  pair.max_len = 2;
  put.new_columns = {pair};
  ClientPut bad = put;
  bad.new_columns[0].encoding = static_cast<ColumnEncoding>(99);
  EXPECT_STATUS(client_->Put(bad), absl::StatusCode::kInvalidArgument,
                "Put on dock 'd': new_columns[0]: ColumnSpec (pair).encoding: unknown");
  ASSERT_OK_AND_ASSIGN(DockStatusInfo before, client_->GetDockStatus("d"));
  EXPECT_EQ(before.spec.columns.size(), 4u);
  ASSERT_OK(client_->Put(put).status());
  ASSERT_OK_AND_ASSIGN(DockStatusInfo after, client_->GetDockStatus("d"));
  ASSERT_EQ(after.spec.columns.size(), 5u);
  EXPECT_EQ(after.spec.columns[4].max_len, 2);
  ASSERT_OK_AND_ASSIGN(ClientBatch read, client_->Read("d", 0, {1}, {"pair"}));
  EXPECT_EQ(read.Row<float>(*read.column("pair"), 0), (std::vector<float>{3.f, 4.f}));
  // A listing carries the cells of the columns it names, over the wire too.
  ASSERT_OK_AND_ASSIGN(RowListing listing, client_->ListRows("d", 0, {"pair"}));
  const float cell[] = {3.f, 4.f};
  ASSERT_EQ(listing.rows[1].cells.size(), 1u);
  EXPECT_EQ(listing.rows[1].cells[0],
            std::make_pair(std::string("pair"),
                           std::string(reinterpret_cast<const char*>(cell), sizeof(cell))));
  EXPECT_TRUE(listing.rows[2].cells.empty());
}

// AddConsumer returns the consumer with defaults filled in; the new consumer
// can read rows already written.
TEST_F(ClientTest, AddConsumerThenGet) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ASSERT_OK(PutAll("d", 0));
  ASSERT_OK_AND_ASSIGN(ConsumerSpec critic,
                       client_->AddConsumer("d", Consumer("critic", {"score"})));
  EXPECT_EQ(critic.name, "critic");
  EXPECT_EQ(critic.dispatch_size, 4);
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "d", .consumer = "critic"}));
  ASSERT_EQ(batch.columns.size(), 1u);
  EXPECT_EQ(batch.columns[0].name, "score");
  EXPECT_EQ(batch.rows.size(), 4u);
}

// ReleaseStep frees the step: status no longer lists it as live.
TEST_F(ClientTest, ReleaseStep) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ASSERT_OK(PutAll("d", 0));
  ASSERT_OK_AND_ASSIGN(DockStatusInfo before, client_->GetDockStatus("d"));
  ASSERT_EQ(before.steps.size(), 1u);
  EXPECT_EQ(before.steps[0].step, 0);
  EXPECT_OK(client_->ReleaseStep("d", 0));
  ASSERT_OK_AND_ASSIGN(DockStatusInfo after, client_->GetDockStatus("d"));
  EXPECT_TRUE(after.steps.empty());
}

// A Get that finds nothing within its wait says timed_out instead of failing.
TEST_F(ClientTest, GetTimesOutWithoutRows) {
  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ASSERT_OK_AND_ASSIGN(
      ClientBatch batch,
      client_->Get({.dock = "d", .consumer = "actor", .wait = absl::Milliseconds(20)}));
  EXPECT_TRUE(batch.timed_out);
  EXPECT_TRUE(batch.rows.empty());
}

// A Put that borrows a 4 MiB caller buffer (ClientColumn::View) round-trips
// byte for byte.
TEST_F(ClientTest, LargeBorrowedPut) {
  DockSpec spec = TestSpec("big");
  spec.columns.push_back(Column("hidden", DType::kFloat32));
  spec.consumers = {Consumer("trainer", {"hidden"})};
  ASSERT_OK(client_->CreateDock(spec).status());
  constexpr int64_t kPerRow = 1 << 18;  // 1 MiB of float32 per row
  std::vector<float> data(4 * kPerRow);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : data) x = dist(rng);
  ClientPut put{.dock = "big", .step = 0, .rows = {0, 1, 2, 3}};
  put.columns.push_back(ClientColumn::View(
      "hidden", DType::kFloat32, {0, kPerRow, 2 * kPerRow, 3 * kPerRow, 4 * kPerRow},
      ByteSpan(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float))));
  ASSERT_OK_AND_ASSIGN(PutAck ack, client_->Put(put));
  EXPECT_EQ(ack.rows, 4);
  EXPECT_EQ(ack.bytes, static_cast<int64_t>(data.size() * sizeof(float)));

  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client_->Get({.dock = "big", .consumer = "trainer"}));
  ASSERT_EQ(batch.rows.size(), 4u);
  const absl::Span<const float> values = batch.Values<float>(*batch.column("hidden"));
  ASSERT_EQ(values.size(), data.size());
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const int64_t row = batch.rows[i];
    EXPECT_EQ(std::memcmp(values.data() + i * kPerRow, data.data() + row * kPerRow,
                          kPerRow * sizeof(float)),
              0)
        << "row " << row;
  }
}

// A Get of three 2 MiB columns arrives in three parts (GetStream); each
// column comes back whole and exact, and a copy of the batch keeps every
// part's buffer alive after the original is gone.
TEST_F(ClientTest, GetInPartsKeepsEveryColumn) {
  DockSpec spec = TestSpec("parts");
  const std::vector<std::string> names = {"h0", "h1", "h2"};
  for (const std::string& name : names) spec.columns.push_back(Column(name, DType::kFloat32));
  spec.consumers = {Consumer("trainer", names)};
  ASSERT_OK(client_->CreateDock(spec).status());
  constexpr int64_t kPerRow = 1 << 17;  // 512 KiB of float32 per row
  std::vector<std::vector<float>> data(names.size(), std::vector<float>(4 * kPerRow));
  ClientPut put{.dock = "parts", .step = 0, .rows = {0, 1, 2, 3}};
  for (size_t c = 0; c < names.size(); ++c) {
    for (size_t i = 0; i < data[c].size(); ++i) data[c][i] = static_cast<float>(c * 7 + i % 1000);
    put.columns.push_back(ClientColumn::View(
        names[c], DType::kFloat32, {0, kPerRow, 2 * kPerRow, 3 * kPerRow, 4 * kPerRow},
        ByteSpan(reinterpret_cast<const char*>(data[c].data()),
                 data[c].size() * sizeof(float))));
  }
  ASSERT_OK(client_->Put(put).status());

  ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                       client_->Get({.dock = "parts", .consumer = "trainer"}));
  ClientBatch copy = batch;
  batch = ClientBatch();
  ASSERT_EQ(copy.rows.size(), 4u);
  ASSERT_EQ(copy.columns.size(), names.size());
  for (size_t c = 0; c < names.size(); ++c) {
    EXPECT_EQ(copy.columns[c].name, names[c]);
    const absl::Span<const float> values = copy.Values<float>(copy.columns[c]);
    ASSERT_EQ(values.size(), data[c].size());
    for (size_t i = 0; i < copy.rows.size(); ++i) {
      const int64_t row = copy.rows[i];
      EXPECT_EQ(std::memcmp(values.data() + i * kPerRow, data[c].data() + row * kPerRow,
                            kPerRow * sizeof(float)),
                0)
          << names[c] << " row " << row;
    }
  }
}

// One client shared by threads: each thread puts its own rows (borrowed from
// its own buffer) concurrently; the step then holds every thread's values.
TEST_F(ClientTest, ConcurrentPutsThroughOneClient) {
  DockSpec spec = TestSpec("c");
  spec.num_prompts = 8;  // 16 rows
  spec.consumers = {Consumer("ids_reader", {"ids"})};
  ASSERT_OK(client_->CreateDock(spec).status());
  const int thread_counts[] = {2, 4, 8};
  for (int64_t step = 0; step < 3; ++step) {  // steps start in order
    const int threads = thread_counts[step];
    std::vector<std::thread> workers;
    std::vector<absl::Status> results(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::vector<int64_t> rows;
        std::vector<int32_t> values;
        for (int64_t row = t; row < 16; row += threads) {
          rows.push_back(row);
          values.push_back(static_cast<int32_t>(row * 100 + step));
        }
        std::vector<int64_t> offsets(rows.size() + 1);
        for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<int64_t>(i);
        ClientPut put{.dock = "c", .step = step, .rows = rows};
        put.columns.push_back(ClientColumn::View(
            "ids", DType::kInt32, offsets,
            ByteSpan(reinterpret_cast<const char*>(values.data()), values.size() * 4)));
        results[t] = client_->Put(put).status();
      });
    }
    for (std::thread& worker : workers) worker.join();
    for (const absl::Status& result : results) ASSERT_OK(result);
    ASSERT_OK_AND_ASSIGN(ClientBatch batch,
                         client_->Read("c", step, {0, 5, 15}, {"ids"}));
    ASSERT_EQ(batch.rows, (std::vector<int64_t>{0, 5, 15}));
    for (size_t i = 0; i < batch.rows.size(); ++i) {
      EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), i),
                std::vector<int32_t>{static_cast<int32_t>(batch.rows[i] * 100 + step)});
    }
    ASSERT_OK(client_->ReleaseStep("c", step));
  }
}

// Errors arrive with the server's code and message unchanged.
TEST_F(ClientTest, ErrorsKeepServerCodeAndMessage) {
  const absl::Status server_side = server_->registry().Find("nope").status();
  ASSERT_EQ(server_side.code(), absl::StatusCode::kNotFound);
  const absl::Status client_side = client_->GetDockStatus("nope").status();
  EXPECT_EQ(client_side.code(), server_side.code());
  EXPECT_EQ(client_side.message(), server_side.message());
  EXPECT_STATUS(client_->Get({.dock = "nope", .consumer = "actor"}), absl::StatusCode::kNotFound,
                "nope");

  ASSERT_OK(client_->CreateDock(TestSpec("d")).status());
  ClientPut put{.dock = "d", .step = 0, .rows = {0}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("no_such_column", DType::kInt32, {{1}}));
  EXPECT_STATUS(client_->Put(put), absl::StatusCode::kInvalidArgument, "no_such_column");
  EXPECT_STATUS(client_->Get({.dock = "d", .consumer = "ghost"}), absl::StatusCode::kNotFound,
                "ghost");
  DockSpec other = TestSpec("d");
  other.num_prompts = 3;
  EXPECT_STATUS(client_->CreateDock(other), absl::StatusCode::kAlreadyExists, "d");
}

// Connect rejects bad options; a server that is gone reports UNAVAILABLE.
TEST(ClientConnectTest, BadOptionsAndNoServer) {
  EXPECT_STATUS(Client::Connect({.address = ""}), absl::StatusCode::kInvalidArgument, "address");
  EXPECT_STATUS(Client::Connect({.address = "127.0.0.1:1", .timeout = absl::ZeroDuration()}),
                absl::StatusCode::kInvalidArgument, "timeout");
  Server server(ServerOptions{.listen = "127.0.0.1:0"});
  ASSERT_OK(server.Start());
  const std::string address = absl::StrCat("127.0.0.1:", server.port());
  server.Shutdown();
  ASSERT_OK_AND_ASSIGN(auto client,
                       Client::Connect({.address = address, .timeout = absl::Seconds(5)}));
  EXPECT_EQ(client->Health().code(), absl::StatusCode::kUnavailable);
  EXPECT_STATUS(Client::Connect({.address = address, .connect_timeout = absl::ZeroDuration()}),
                absl::StatusCode::kInvalidArgument, "connect_timeout must be positive");
  EXPECT_STATUS(
      Client::Connect({.address = address, .max_reconnect_backoff = absl::Milliseconds(-1)}),
      absl::StatusCode::kInvalidArgument, "max_reconnect_backoff must be positive");
}

// A Client keeps calling a server that is away until its reconnect backoff
// is seconds long; the server comes back on the same port. A new Client made
// with the same options connects on a connection of its own (gRPC shares
// connections between channels to one target unless told not to; shared, the
// new Client's first call waits for the old connection's next attempt, which
// this test cannot time) and is served.
TEST(ClientConnectTest, ANewClientConnectsWhileAnotherBacksOff) {
  Server first(ServerOptions{.listen = "127.0.0.1:0"});
  ASSERT_OK(first.Start());
  const std::string address = absl::StrCat("127.0.0.1:", first.port());
  first.Shutdown();
  const ClientOptions options{.address = address,
                              .timeout = absl::Seconds(10),
                              .max_reconnect_backoff = absl::Seconds(5)};
  ASSERT_OK_AND_ASSIGN(auto waiting, Client::Connect(options));
  // The backoff grows toward 5 s (gRPC's default, without the setting, grows
  // from 1 s by 1.6x: past 4 s by then).
  const absl::Time until = absl::Now() + absl::Milliseconds(6500);
  while (absl::Now() < until) {
    EXPECT_EQ(waiting->Health().code(), absl::StatusCode::kUnavailable);
    absl::SleepFor(absl::Milliseconds(50));
  }
  Server restarted(ServerOptions{.listen = address});
  ASSERT_OK(restarted.Start());
  ASSERT_OK_AND_ASSIGN(auto fresh, Client::Connect(options));
  EXPECT_OK(fresh->Health());
  restarted.Shutdown();
}

}  // namespace
}  // namespace tdock
