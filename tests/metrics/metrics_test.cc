// Metrics: the dock collector over fake snapshots, the call and serve
// metrics through a registry without HTTP, and a real server's /metrics
// endpoint over HTTP after real traffic.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/metrics/dock_collector.h"
#include "server/metrics/rpc_metrics.h"
#include "server/metrics/serve_metrics.h"
#include "server/metrics/server_metrics.h"
#include "server/server.h"
#include "tests/grpc_environment.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using Labels = std::map<std::string, std::string>;

// The value of the sample `name{labels...}` in Prometheus text (labels in
// any order, all of them); nullopt when there is no such sample.
std::optional<double> Sample(const std::string& text, const std::string& name,
                             const Labels& labels) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    const std::string metric = line.substr(0, std::min(brace, space));
    if (metric != name) continue;
    Labels found;
    if (brace != std::string::npos) {
      const std::string body = line.substr(brace + 1, line.rfind('}') - brace - 1);
      for (absl::string_view pair : absl::StrSplit(body, ',', absl::SkipEmpty())) {
        const size_t eq = pair.find('=');
        found[std::string(pair.substr(0, eq))] =
            std::string(pair.substr(eq + 2, pair.size() - eq - 3));
      }
    }
    if (found != labels) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(space + 1), &value)) return value;
  }
  return std::nullopt;
}

std::string Serialize(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

DockStats FakeDock() {
  DockStats stats;
  stats.name = "grpo";
  stats.rows_per_step = 8;
  stats.columns = {"prompt", "response"};
  stats.consumers = {"reward", "actor"};
  stats.steps = {{3, 1, {8, 5}, {4, 0}, {1, 5}}, {4, 0, {2, 0}, {0, 0}, {0, 0}}};
  stats.waiters = {0, 2};
  stats.parked_puts = 1;
  stats.arena_bytes_used = 1000;
  stats.arena_bytes_reserved = 4096;
  stats.memory_limit_bytes = 1 << 20;
  stats.rows_written_total = {34, 29};
  stats.rows_handed_out_total = {28, 24};
  return stats;
}

// Every family of the collector, with its labels, from the snapshots the
// source gives; a dock without live steps has no oldest step.
TEST(DockCollector, SamplesFromFakeSnapshots) {
  DockStats idle;
  idle.name = "idle";
  idle.columns = {"x"};
  idle.rows_written_total = {0};
  DockCollector collector([&] { return std::vector<DockStats>{FakeDock(), idle}; });
  const std::string text = Serialize(collector);
  EXPECT_EQ(Sample(text, "tdock_docks", {}), 2);
  EXPECT_EQ(Sample(text, "tdock_dock_rows_per_step", {{"dock", "grpo"}}), 8);
  EXPECT_EQ(Sample(text, "tdock_steps_live", {{"dock", "grpo"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_steps_live", {{"dock", "idle"}}), 0);
  EXPECT_EQ(Sample(text, "tdock_oldest_live_step", {{"dock", "grpo"}}), 3);
  EXPECT_EQ(Sample(text, "tdock_oldest_live_step", {{"dock", "idle"}}), std::nullopt);
  EXPECT_EQ(Sample(text, "tdock_rows_ready",
                   {{"dock", "grpo"}, {"step", "3"}, {"column", "response"}}), 5);
  EXPECT_EQ(Sample(text, "tdock_rows_ready",
                   {{"dock", "grpo"}, {"step", "4"}, {"column", "prompt"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_rows_consumed",
                   {{"dock", "grpo"}, {"step", "3"}, {"consumer", "reward"}}), 4);
  EXPECT_EQ(Sample(text, "tdock_rows_available",
                   {{"dock", "grpo"}, {"step", "3"}, {"consumer", "actor"}}), 5);
  EXPECT_EQ(Sample(text, "tdock_rows_written_total",
                   {{"dock", "grpo"}, {"column", "prompt"}}), 34);
  EXPECT_EQ(Sample(text, "tdock_rows_handed_out_total",
                   {{"dock", "grpo"}, {"consumer", "actor"}}), 24);
  EXPECT_EQ(Sample(text, "tdock_arena_bytes_used", {{"dock", "grpo"}}), 1000);
  EXPECT_EQ(Sample(text, "tdock_arena_bytes_reserved", {{"dock", "grpo"}}), 4096);
  EXPECT_EQ(Sample(text, "tdock_memory_limit_bytes", {{"dock", "grpo"}}), 1 << 20);
  EXPECT_EQ(Sample(text, "tdock_parked_gets", {{"dock", "grpo"}, {"consumer", "actor"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_parked_puts", {{"dock", "grpo"}}), 1);
  EXPECT_NE(text.find("# TYPE tdock_rows_written_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE tdock_rows_ready gauge"), std::string::npos);
}

// Calls are counted by method and code; latency and bytes by method; other
// services keep their full name.
TEST(RpcMetrics, RecordsByMethodAndCode) {
  prometheus::Registry registry;
  RpcMetrics rpc(registry);
  rpc.Record("/tdock.v1.Dock/Get", 0, absl::Milliseconds(3), 100, 5000);
  rpc.Record("/tdock.v1.Dock/Get", 5, absl::Milliseconds(1), 90, 0);
  rpc.Record("/tdock.v1.Dock/Get", 0, absl::Seconds(2), 100, 7000);
  rpc.Record("/grpc.health.v1.Health/Check", 0, absl::Microseconds(50), 0, 2);
  const std::string text = Serialize(registry);
  EXPECT_EQ(Sample(text, "tdock_requests_total", {{"method", "Get"}, {"code", "OK"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_requests_total", {{"method", "Get"}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_requests_total",
                   {{"method", "grpc.health.v1.Health/Check"}, {"code", "OK"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_request_duration_seconds_count", {{"method", "Get"}}), 3);
  EXPECT_NEAR(*Sample(text, "tdock_request_duration_seconds_sum", {{"method", "Get"}}),
              2.004, 1e-9);
  EXPECT_EQ(Sample(text, "tdock_request_duration_seconds_bucket",
                   {{"method", "Get"}, {"le", "0.004"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_received_bytes_total", {{"method", "Get"}}), 290);
  EXPECT_EQ(Sample(text, "tdock_sent_bytes_total", {{"method", "Get"}}), 12000);
  // The Dock service's methods exist from the start, before any call.
  EXPECT_EQ(Sample(text, "tdock_request_duration_seconds_count", {{"method", "Put"}}), 0);
}

// Wait time per consumer; balance series only for consumers that have
// rounds or micro-batches, a round counted once (at rank 0's share).
TEST(ServeMetrics, WaitAndBalancePerConsumer) {
  prometheus::Registry registry;
  ServeMetrics serve(registry);
  BalanceStats round;
  round.rank_cost = {90, 110, 100};
  round.micro_batches = 4;
  round.padding_ratio = 1.25;
  ServedGet get{.dock = "grpo", .consumer = "actor", .rank = 0, .step = 0,
                .round = 0, .rows = 8, .waited = absl::Milliseconds(40),
                .balance = &round};
  serve.OnGetServed(get);
  get.rank = 1;
  serve.OnGetServed(get);  // the same round: not counted again
  serve.OnGetServed({.dock = "grpo", .consumer = "reward", .rows = 4,
                     .waited = absl::ZeroDuration()});
  const std::string text = Serialize(registry);
  const Labels actor{{"dock", "grpo"}, {"consumer", "actor"}};
  const Labels reward{{"dock", "grpo"}, {"consumer", "reward"}};
  EXPECT_EQ(Sample(text, "tdock_get_wait_seconds_count", actor), 2);
  EXPECT_EQ(Sample(text, "tdock_get_wait_seconds_count", reward), 1);
  EXPECT_NEAR(*Sample(text, "tdock_last_round_rank_imbalance_ratio", actor), 1.1, 1e-12);
  EXPECT_EQ(Sample(text, "tdock_round_rank_imbalance_ratio_count", actor), 1);
  EXPECT_EQ(Sample(text, "tdock_last_round_padding_ratio", actor), 1.25);
  EXPECT_EQ(Sample(text, "tdock_round_padding_ratio_count", actor), 1);
  EXPECT_EQ(Sample(text, "tdock_last_round_padding_ratio", reward), std::nullopt);
}

// An endpoint that cannot bind fails Create naming the address; a malformed
// address is refused before trying.
TEST(ServerMetrics, BadEndpointsAreErrors) {
  DockRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto first, ServerMetrics::Create(&registry, {.listen = "127.0.0.1:0"}));
  EXPECT_STATUS(ServerMetrics::Create(&registry, {.listen = first->address()}),
                absl::StatusCode::kUnavailable, first->address());
  EXPECT_STATUS(ServerMetrics::Create(&registry, {.listen = "localhost"}),
                absl::StatusCode::kInvalidArgument, "not host:port");
  ASSERT_OK_AND_ASSIGN(auto none, ServerMetrics::Create(&registry, {.listen = ""}));
  EXPECT_EQ(none->address(), "");
  EXPECT_EQ(Sample(none->Scrape(), "tdock_docks", {}), 0);
}

// GET http://address/metrics over a plain socket; the body.
std::string HttpGet(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string request = absl::StrCat(
      "GET /metrics HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// A consumer with a staleness bound: the histogram holds the staleness of
// the rows handed to it, the counter the rows it passed over.
TEST(ServerMetrics, StalenessOfRowsHandedOutAndPassedOver) {
  Server server(ServerOptions{.listen = "127.0.0.1:0", .metrics_listen = "127.0.0.1:0"});
  ASSERT_OK(server.Start());
  ASSERT_OK_AND_ASSIGN(
      auto client, Client::Connect({.address = absl::StrCat("127.0.0.1:", server.port())}));
  DockSpec spec;
  spec.name = "s";
  spec.num_prompts = 3;
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"actor", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  spec.consumers[0].max_staleness = 1;
  ASSERT_OK(client->CreateDock(spec));
  ASSERT_OK(client->SetVersion("s", 1));
  ClientPut put{.dock = "s", .step = 0, .rows = {0, 1, 2}};
  put.versions = {1, 0, 0};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{1}, {2}, {3}}));
  ASSERT_OK(client->Put(put));
  ASSERT_OK_AND_ASSIGN(ClientBatch first, client->Get({.dock = "s", .consumer = "actor"}));
  EXPECT_EQ(first.rows, (std::vector<int64_t>{1, 2})) << "the oldest first";
  ASSERT_OK(client->SetVersion("s", 3));  // row 0 (version 1) is now 2 versions old
  ASSERT_OK_AND_ASSIGN(ClientBatch none, client->Get({.dock = "s", .consumer = "actor",
                                                      .wait = absl::ZeroDuration()}));
  EXPECT_TRUE(none.rows.empty());

  const std::string text = HttpGet(server.metrics()->address());
  const Labels actor{{"dock", "s"}, {"consumer", "actor"}};
  EXPECT_EQ(Sample(text, "tdock_handed_out_staleness_count", actor), 2);
  EXPECT_EQ(Sample(text, "tdock_handed_out_staleness_sum", actor), 2);
  EXPECT_EQ(Sample(text, "tdock_handed_out_staleness_bucket",
                   {{"dock", "s"}, {"consumer", "actor"}, {"le", "0"}}), 0);
  EXPECT_EQ(Sample(text, "tdock_handed_out_staleness_bucket",
                   {{"dock", "s"}, {"consumer", "actor"}, {"le", "1"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_handed_out_staleness_bucket",
                   {{"dock", "s"}, {"consumer", "actor"}, {"le", "+Inf"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_rows_stale_total", actor), 1);
  server.Shutdown();
}

// A real server with real traffic: the scrape shows what was written and
// handed out, the calls by method and code, the wait, and process metrics.
TEST(ServerMetrics, EndpointShowsRealTraffic) {
  Server server(ServerOptions{.listen = "127.0.0.1:0", .metrics_listen = "127.0.0.1:0"});
  ASSERT_OK(server.Start());
  ASSERT_NE(server.metrics(), nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto client, Client::Connect({.address = absl::StrCat("127.0.0.1:", server.port())}));
  DockSpec spec;
  spec.name = "m";
  spec.num_prompts = 4;
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"actor", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  ASSERT_OK(client->CreateDock(spec));
  ClientPut put{.dock = "m", .step = 0, .rows = {0, 1, 2}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{1}, {2, 3}, {4}}));
  ASSERT_OK(client->Put(put));
  ASSERT_OK(client->Get({.dock = "m", .consumer = "actor", .wait = absl::Seconds(5)}));
  EXPECT_FALSE(client->Get({.dock = "m", .consumer = "nobody"}).ok());
  ASSERT_OK(client->Drop("m", 0, {3}, {}, DropReason::kFailed));
  ASSERT_OK(client->Seal("m", 0));
  ASSERT_OK(client->SetVersion("m", 4));

  const std::string text = HttpGet(server.metrics()->address());
  ASSERT_FALSE(text.empty()) << "no answer from " << server.metrics()->address();
  EXPECT_EQ(Sample(text, "tdock_rows_written_total", {{"dock", "m"}, {"column", "ids"}}), 3);
  EXPECT_EQ(Sample(text, "tdock_rows_handed_out_total", {{"dock", "m"}, {"consumer", "actor"}}), 2);
  EXPECT_EQ(Sample(text, "tdock_rows_available",
                   {{"dock", "m"}, {"step", "0"}, {"consumer", "actor"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_rows_dropped_total", {{"dock", "m"}, {"reason", "failed"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_rows_dropped_total", {{"dock", "m"}, {"reason", "filtered"}}), 0);
  EXPECT_EQ(Sample(text, "tdock_steps_sealed", {{"dock", "m"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_requests_total", {{"method", "Put"}, {"code", "OK"}}), 1);
  // The client's Gets are GetStream calls.
  EXPECT_EQ(Sample(text, "tdock_requests_total", {{"method", "GetStream"}, {"code", "OK"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_requests_total",
                   {{"method", "GetStream"}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_GT(*Sample(text, "tdock_received_bytes_total", {{"method", "Put"}}), 16);
  // Control calls count their request bytes too: dock "m" (3 bytes), rows {3}
  // (3), reason (2); step 0 is not sent.
  EXPECT_EQ(Sample(text, "tdock_received_bytes_total", {{"method", "Drop"}}), 8);
  EXPECT_EQ(Sample(text, "tdock_dock_version", {{"dock", "m"}}), 4);
  EXPECT_GT(*Sample(text, "tdock_sent_bytes_total", {{"method", "GetStream"}}), 8);
  EXPECT_EQ(Sample(text, "tdock_get_wait_seconds_count", {{"dock", "m"}, {"consumer", "actor"}}), 1);
  EXPECT_EQ(Sample(text, "tdock_build_info", {{"version", "0.1.0"}}), 1);
  EXPECT_GT(*Sample(text, "tdock_process_resident_memory_bytes", {}), 1 << 20);
  EXPECT_GT(*Sample(text, "tdock_process_open_fds", {}), 2);
  server.Shutdown();
}

}  // namespace
}  // namespace tdock
