// TLS, mutual TLS and the bearer token between tdock::Client and an
// in-process server, with a throwaway PKI made by
// tests/security/make_test_certs.sh for each test suite run.
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/grpc_environment.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

constexpr char kToken[] = "s3cret-token-0123456789";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = ::testing::TempDir() + "/tdock_pki_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = new std::string(pattern);
    ASSERT_EQ(std::system(absl::StrCat("bash ", TDOCK_MAKE_CERTS, " '", *dir_, "'").c_str()), 0);
    std::ofstream(Path("token")) << kToken << "\n";
    std::ofstream(Path("empty_token")) << "  \n";
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf '", *dir_, "'").c_str());
    delete dir_;
  }
  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  absl::Status StartServer(SecurityOptions security) {
    server_ = std::make_unique<Server>(
        ServerOptions{.listen = "127.0.0.1:0", .security = std::move(security)});
    return server_->Start();
  }
  SecurityOptions Tls() const {
    return {.tls_cert = Path("server.pem"), .tls_key = Path("server.key")};
  }
  ClientTls TrustingCa(const std::string& ca = "ca.pem") const {
    return {.enabled = true, .ca_file = Path(ca)};
  }
  // A client call that needs the Dock service: ListDocks.
  absl::Status Call(ClientTls tls, std::string token = "") {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(
        {.address = absl::StrCat("127.0.0.1:", server_->port()),
         .token = std::move(token),
         .tls = std::move(tls),
         .timeout = absl::Seconds(5)});
    if (!client.ok()) return client.status();
    return (*client)->ListDocks().status();
  }

  static std::string* dir_;
  std::unique_ptr<Server> server_;
};

std::string* SecurityTest::dir_ = nullptr;

// TLS: a client trusting the test CA gets through; a plaintext client and a
// client trusting another CA do not.
TEST_F(SecurityTest, TlsServerTalksOnlyToTlsClientsTrustingItsCa) {
  ASSERT_OK(StartServer(Tls()));
  EXPECT_OK(Call(TrustingCa()));
  EXPECT_EQ(Call({}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call(TrustingCa("other_ca.pem")).code(), absl::StatusCode::kUnavailable);
}

// Mutual TLS: clients without a certificate, or with one signed by another
// CA, are refused; a certificate signed by --tls_client_ca gets through.
TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutTheRightCertificate) {
  SecurityOptions security = Tls();
  security.tls_client_ca = Path("ca.pem");
  ASSERT_OK(StartServer(security));
  EXPECT_EQ(Call(TrustingCa()).code(), absl::StatusCode::kUnavailable);
  ClientTls other = TrustingCa();
  other.cert_file = Path("other_client.pem");
  other.key_file = Path("other_client.key");
  EXPECT_EQ(Call(other).code(), absl::StatusCode::kUnavailable);
  ClientTls good = TrustingCa();
  good.cert_file = Path("client.pem");
  good.key_file = Path("client.key");
  EXPECT_OK(Call(good));
}

// The bearer token: missing or wrong is UNAUTHENTICATED with a message that
// repeats neither token; the right one gets through; the health service
// needs none; TDOCK_TOKEN is used when no token is given.
TEST_F(SecurityTest, BearerTokenIsRequiredExceptForHealth) {
  ASSERT_OK(StartServer({.auth_token_file = Path("token")}));
  const absl::Status missing = Call({});
  EXPECT_STATUS(missing, absl::StatusCode::kUnauthenticated, "needs a bearer token");
  const absl::Status wrong = Call({}, "s3cret-token-012345678X");
  EXPECT_STATUS(wrong, absl::StatusCode::kUnauthenticated, "is not this server's");
  for (const absl::Status& s : {missing, wrong}) {
    EXPECT_EQ(std::string(s.message()).find("s3cret"), std::string::npos) << s;
  }
  EXPECT_EQ(Call({}, std::string(kToken) + "x").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Call({}, "s3cret").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_OK(Call({}, kToken));

  ASSERT_OK_AND_ASSIGN(auto anonymous,
                       Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port())}));
  EXPECT_OK(anonymous->Health());

  setenv("TDOCK_TOKEN", kToken, 1);
  EXPECT_OK(Call({}));
  unsetenv("TDOCK_TOKEN");
}

// TLS and the token together.
TEST_F(SecurityTest, TlsWithToken) {
  SecurityOptions security = Tls();
  security.auth_token_file = Path("token");
  ASSERT_OK(StartServer(security));
  EXPECT_EQ(Call(TrustingCa()).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_OK(Call(TrustingCa(), kToken));
}

// A controller and a shard that both want TLS and the token: the shard
// reaches its controller over TLS with the token (--controller_ca), and a
// client's Put through the shard and Get of its cells go over TLS too.
TEST_F(SecurityTest, AShardAndItsControllerSpeakTlsWithTheToken) {
  SecurityOptions security = Tls();
  security.auth_token_file = Path("token");
  server_ = std::make_unique<Server>(ServerOptions{
      .role = ServerRole::kController, .listen = "127.0.0.1:0", .security = security});
  ASSERT_OK(server_->Start());
  ServerOptions shard_options{.role = ServerRole::kShard, .listen = "127.0.0.1:0",
                              .security = security};
  shard_options.shard.controller = absl::StrCat("127.0.0.1:", server_->port());
  shard_options.shard.id = 1;
  shard_options.shard.controller_ca = Path("ca.pem");
  Server shard(shard_options);
  ASSERT_OK(shard.Start());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                       Client::Connect({.address = absl::StrCat("127.0.0.1:", server_->port()),
                                        .token = kToken,
                                        .tls = TrustingCa(),
                                        .timeout = absl::Seconds(10)}));
  DockSpec spec;
  spec.name = "tls";
  spec.num_prompts = 2;
  spec.columns = {{"ids", DType::kInt32, {}, 0, false}};
  spec.consumers = {{"reader", {"ids"}, 2, 1, false, Policy::kFifo, 0}};
  ASSERT_OK(client->CreateDock(spec).status());
  ClientPut put{.dock = "tls", .step = 0, .rows = {0, 1}};
  put.columns.push_back(ClientColumn::FromRows<int32_t>("ids", DType::kInt32, {{1, 2}, {3}}));
  ASSERT_OK(client->Put(put).status());
  ASSERT_OK_AND_ASSIGN(ClientBatch batch, client->Get({.dock = "tls", .consumer = "reader"}));
  ASSERT_EQ(batch.rows.size(), 2u);
  EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), 0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(batch.Row<int32_t>(*batch.column("ids"), 1), (std::vector<int32_t>{3}));
  shard.Shutdown();
}

// Bad settings fail start-up with INVALID_ARGUMENT naming the flag (and the
// file), and bad client settings fail Connect.
TEST_F(SecurityTest, BadSettingsAreNamed) {
  EXPECT_STATUS(StartServer({.tls_cert = Path("server.pem")}),
                absl::StatusCode::kInvalidArgument, "--tls_cert and --tls_key go together");
  EXPECT_STATUS(StartServer({.tls_client_ca = Path("ca.pem")}),
                absl::StatusCode::kInvalidArgument, "--tls_client_ca");
  EXPECT_STATUS(StartServer({.tls_cert = Path("nope.pem"), .tls_key = Path("server.key")}),
                absl::StatusCode::kInvalidArgument,
                absl::StrCat("--tls_cert: cannot open '", Path("nope.pem"), "'"));
  EXPECT_STATUS(StartServer({.auth_token_file = Path("empty_token")}),
                absl::StatusCode::kInvalidArgument, "--auth_token_file");
  server_.reset();
  EXPECT_STATUS(Client::Connect({.tls = {.enabled = true, .ca_file = Path("nope.pem")}}),
                absl::StatusCode::kInvalidArgument, "client TLS: cannot open");
  EXPECT_STATUS(Client::Connect({.tls = {.enabled = true, .cert_file = Path("client.pem")}}),
                absl::StatusCode::kInvalidArgument, "needs both cert_file and key_file");
  EXPECT_STATUS(Client::Connect({.tls = {.ca_file = Path("ca.pem")}}),
                absl::StatusCode::kInvalidArgument, "TLS is not enabled");
}

}  // namespace
}  // namespace tdock
