// Server lifecycle: options validation, docks created at start-up, port
// selection, a taken port, and idempotent shutdown.
#include <thread>

#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

DockSpec CoreSpec(const std::string& name) {
  absl::StatusOr<DockSpec> spec = FromProto(GrpoSpec());
  EXPECT_OK(spec);
  spec->name = name;
  return *spec;
}

// Validate accepts the defaults and rejects each bad field with a message
// naming it.
TEST(ServerOptions, Validate) {
  EXPECT_OK(ServerOptions().Validate());
  ServerOptions options;
  options.listen = "localhost";
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "localhost");
  options.listen = "127.0.0.1:70000";
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "70000");
  options = ServerOptions();
  options.max_message_mb = 0;
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "max_message_mb");
  options.max_message_mb = 4096;
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "max_message_mb");
  options = ServerOptions();
  options.shutdown_grace = absl::Seconds(-1);
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "shutdown_grace");
  options = ServerOptions();
  options.docks = {CoreSpec("a"), CoreSpec("a")};
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument, "'a'");
  options.docks = {CoreSpec("a")};
  options.docks[0].num_prompts = 0;
  EXPECT_STATUS(options.Validate(), absl::StatusCode::kInvalidArgument,
                "num_prompts");
}

// Start creates the configured docks; port 0 binds a free port that
// serves them.
TEST(Server, StartCreatesConfiguredDocks) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.docks = {CoreSpec("first"), CoreSpec("second")};
  Server server(std::move(options));
  ASSERT_OK(server.Start());
  EXPECT_GT(server.port(), 0);
  EXPECT_OK(server.registry().Find("first"));
  EXPECT_OK(server.registry().Find("second"));
  EXPECT_STATUS(server.Start(), absl::StatusCode::kFailedPrecondition,
                "already");
  server.Shutdown();
}

// A second server on a port already taken fails to start with UNAVAILABLE
// naming the address (no silent port sharing).
TEST(Server, TakenPortFails) {
  ServerOptions first_options;
  first_options.listen = "127.0.0.1:0";
  Server first(std::move(first_options));
  ASSERT_OK(first.Start());
  ServerOptions second_options;
  const std::string address = absl::StrCat("127.0.0.1:", first.port());
  second_options.listen = address;
  Server second(std::move(second_options));
  EXPECT_STATUS(second.Start(), absl::StatusCode::kUnavailable, address);
}

// Shutdown is idempotent, may race with itself, and releases Wait; a server
// never started shuts down at once.
TEST(Server, ShutdownIdempotentAndReleasesWait) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  Server server(std::move(options));
  ASSERT_OK(server.Start());
  std::thread waiter([&server] { server.Wait(); });
  std::thread a([&server] { server.Shutdown(); });
  std::thread b([&server] { server.Shutdown(); });
  a.join();
  b.join();
  waiter.join();
  server.Shutdown();
  EXPECT_STATUS(server.Start(), absl::StatusCode::kFailedPrecondition,
                "shut down");

  Server idle(ServerOptions{});
  idle.Shutdown();
  idle.Wait();
}

}  // namespace
}  // namespace tdock::service_testing
