// The tdockctl binary against an in-process server: create from YAML, put
// from JSON files, get --json checked against what was put, status, release,
// list, delete, health, and its exit codes for failed calls and usage errors.
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/test_util.h"

extern char** environ;

namespace tdock {
namespace {

using Json = nlohmann::json;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

constexpr char kSpecYaml[] = R"(name: ctl
num_prompts: 2
n_samples_per_prompt: 2
length_columns: [ids]
columns:
  ids:   {dtype: int32}
  score: {dtype: float32}
  logp:  {dtype: bfloat16}
  half:  {dtype: float16}
  text:  {dtype: bytes}
consumers:
  actor: {columns: [ids, score, logp, half, text], max_staleness: 3}
)";

class TdockctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.listen = "127.0.0.1:0"});
    ASSERT_OK(server_->Start());
    address_ = absl::StrCat("127.0.0.1:", server_->port());
    std::string pattern = ::testing::TempDir() + "/tdockctl_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    server_->Shutdown();
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Runs tdockctl with `args` (and --server after them); captures its output.
  RunResult Run(std::vector<std::string> args, bool with_server = true) {
    if (with_server) args.push_back("--server=" + address_);
    const std::string out = Path("stdout"), err = Path("stderr");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<char*> argv = {const_cast<char*>(TDOCK_CTL_BIN)};
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    RunResult result;
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, TDOCK_CTL_BIN, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return result;
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  // Runs a command expected to succeed with --json and parses its output.
  Json RunJson(std::vector<std::string> args) {
    args.push_back("--json");
    const RunResult result = Run(std::move(args));
    EXPECT_EQ(result.exit_code, 0) << result.err;
    Json json = Json::parse(result.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(json.is_discarded()) << result.out;
    return json;
  }

  void CreateDock() {
    WriteFile(Path("spec.yaml"), kSpecYaml);
    const Json created = RunJson({"create", "--spec", Path("spec.yaml")});
    ASSERT_TRUE(created.contains("created")) << created;
    ASSERT_EQ(created["created"].size(), 1u);
    EXPECT_EQ(created["created"][0]["name"], "ctl");
  }

  // Writes each column's rows to NAME.json and puts rows 0..3 of step 0.
  void PutRows() {
    WriteFile(Path("ids.json"), "[[1, 2, 3], [4], [5, 6], [-7, 8, 9, 2147483647]]");
    WriteFile(Path("score.json"), "[[0.5], [-1.25], [2], [\"inf\"]]");
    // 0.1 is not representable: bfloat16 rounds it to 0.10009765625,
    // float16 to 0.0999755859375; 65504 is float16's largest finite value.
    WriteFile(Path("logp.json"), "[[1, -2], [0.1], [], [3.0e38]]");
    WriteFile(Path("half.json"), "[[0.1], [65504], [-0.5, 2.0], [6.0e-8]]");
    WriteFile(Path("text.json"), R"(["hello", "", "a b", "tdock"])");
    const Json put = RunJson({"put", "ctl", "--step", "0", "--rows", "0,1-3",
                              "--column", "ids=" + Path("ids.json"),
                              "--column=score=" + Path("score.json"),
                              "--column", "logp=" + Path("logp.json"),
                              "--column", "half=" + Path("half.json"),
                              "--column", "text=" + Path("text.json")});
    EXPECT_EQ(put["rows"], 4);
  }

  std::unique_ptr<Server> server_;
  std::string address_;
  std::string dir_;
};

// Create from YAML, put from JSON files, get --json: every value comes back
// as put, converted to the column's dtype.
TEST_F(TdockctlTest, CreatePutGetRoundTrip) {
  CreateDock();
  PutRows();
  const Json batch = RunJson({"get", "ctl", "actor", "--wait_ms=1000"});
  EXPECT_EQ(batch["step"], 0);
  EXPECT_EQ(batch["end_of_step"], true);
  EXPECT_EQ(batch["timed_out"], false);
  ASSERT_EQ(batch["rows"], Json::parse("[0, 1, 2, 3]"));
  EXPECT_EQ(batch["token_counts"], Json::parse("[3, 1, 2, 4]"));
  const Json& columns = batch["columns"];
  EXPECT_EQ(columns["ids"], Json::parse("[[1, 2, 3], [4], [5, 6], [-7, 8, 9, 2147483647]]"));
  EXPECT_EQ(columns["score"], Json::parse(R"([[0.5], [-1.25], [2.0], ["inf"]])"));
  EXPECT_EQ(columns["logp"][0], Json::parse("[1.0, -2.0]"));
  EXPECT_EQ(columns["logp"][1][0].get<double>(), 0.10009765625);
  EXPECT_TRUE(columns["logp"][2].empty());
  EXPECT_EQ(columns["logp"][3][0].get<double>(), 226.0 / 128 * std::ldexp(1.0, 127));  // nearest
  EXPECT_EQ(columns["half"][0][0].get<double>(), 0.0999755859375);
  EXPECT_EQ(columns["half"][1][0].get<double>(), 65504.0);
  EXPECT_EQ(columns["half"][2], Json::parse("[-0.5, 2.0]"));
  EXPECT_EQ(columns["half"][3][0].get<double>(), std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(columns["text"], Json::parse(R"(["hello", "", "a b", "tdock"])"));
}

// Text output of get names the step, the rows and each column's values.
TEST_F(TdockctlTest, GetPrintsText) {
  CreateDock();
  PutRows();
  const RunResult result = Run({"get", "ctl", "actor"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("step 0: 4 rows, end of step"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("row 3: [-7, 8, 9, 2147483647]"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("row 0: \"hello\""), std::string::npos) << result.out;
}

// status shows readiness per column; release frees the step.
TEST_F(TdockctlTest, StatusAndRelease) {
  CreateDock();
  PutRows();
  Json status = RunJson({"status", "ctl"});
  EXPECT_EQ(status["spec"]["name"], "ctl");
  EXPECT_EQ(status["spec"]["columns"]["logp"]["dtype"], "bfloat16");
  ASSERT_EQ(status["steps"].size(), 1u);
  EXPECT_EQ(status["steps"][0]["ready"]["ids"], 4);
  const RunResult text = Run({"status", "ctl"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("dock ctl: 2 prompts x 2 samples = 4 rows/step"), std::string::npos)
      << text.out;

  // The dock's policy version: set, shown, and refused going back.
  EXPECT_EQ(status["version"], 0);
  EXPECT_EQ(RunJson({"set-version", "ctl", "3"})["version"], 3);
  EXPECT_EQ(RunJson({"status", "ctl"})["version"], 3);
  // The staleness bound and what it saw: the rows carry no version.
  const Json bounded = RunJson({"status", "ctl"});
  EXPECT_EQ(bounded["spec"]["consumers"]["actor"]["max_staleness"], 3);
  EXPECT_EQ(bounded["spec"]["consumers"]["actor"]["stale"], "leave");
  EXPECT_EQ(bounded["staleness"]["actor"]["stale_rows"], 0);
  EXPECT_EQ(bounded["staleness"]["actor"]["versioned_rows"], 0);
  const RunResult described = Run({"status", "ctl"});
  EXPECT_NE(described.out.find("max_staleness 3 stale leave"), std::string::npos)
      << described.out;

  const RunResult back = Run({"set-version", "ctl", "2"});
  EXPECT_EQ(back.exit_code, 1);
  EXPECT_NE(back.err.find("a version only advances"), std::string::npos) << back.err;

  const Json released = RunJson({"release", "ctl", "0"});
  EXPECT_EQ(released["released"], true);
  status = RunJson({"status", "ctl"});
  EXPECT_TRUE(status["steps"].empty()) << status;

  // Reserve rows for the dock's version, then write them naming the
  // reservation; bad flags exit 2, a refused reservation 1.
  const Json reserved = RunJson({"reserve", "ctl", "--count", "2", "--deadline_ms", "60000"});
  EXPECT_EQ(reserved["timed_out"], false) << reserved;
  EXPECT_EQ(reserved["version"], 3);
  const int64_t step = reserved["step"];
  const std::vector<int64_t> rows = reserved["rows"];
  ASSERT_EQ(rows.size(), 2u);
  WriteFile(Path("ids2.json"), "[[1], [2]]");
  const Json put = RunJson({"put", "ctl", "--step", absl::StrCat(step), "--rows",
                            absl::StrCat(rows[0], ",", rows[1]), "--column",
                            "ids=" + Path("ids2.json"), "--reservation",
                            absl::StrCat(static_cast<uint64_t>(reserved["reservation"]))});
  EXPECT_EQ(put["rows"], 2) << put;
  EXPECT_EQ(RunJson({"status", "ctl"})["reservations"]["live"], 1);
  EXPECT_EQ(Run({"reserve", "ctl", "--count", "2", "--group_sizes", "1"}).exit_code, 2);
  const RunResult newer = Run({"reserve", "ctl", "--count", "2", "--version", "4"});
  EXPECT_EQ(newer.exit_code, 1);
  EXPECT_NE(newer.err.find("version 4 is newer than the dock's version 3"), std::string::npos)
      << newer.err;
}

// drop and seal: the step's status shows the seal and the drops by reason,
// a Get no longer sees the dropped rows; bad flags exit 2, a refused call 1.
TEST_F(TdockctlTest, DropSealAndStatus) {
  CreateDock();
  PutRows();
  const Json dropped = RunJson({"drop", "ctl", "0", "--groups", "1", "--reason", "filtered"});
  EXPECT_EQ(dropped["dropped_rows"], 2);
  EXPECT_EQ(RunJson({"seal", "ctl", "0", "--required", "ids,score"})["dropped_rows"], 0);
  const Json status = RunJson({"status", "ctl"});
  EXPECT_EQ(status["steps"][0]["sealed"], true);
  EXPECT_EQ(status["steps"][0]["dropped"], Json::parse(R"({"filtered": 2})"));
  EXPECT_EQ(status["dropped_total"], Json::parse(R"({"filtered": 2})"));
  const RunResult text = Run({"status", "ctl"});
  EXPECT_NE(text.out.find("(partition 0, sealed)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("; dropped filtered 2"), std::string::npos) << text.out;
  EXPECT_EQ(RunJson({"get", "ctl", "actor"})["rows"], Json::parse("[0, 1]"));

  EXPECT_EQ(Run({"drop", "ctl", "0", "--rows", "0"}).exit_code, 2);  // no --reason
  const RunResult reason = Run({"drop", "ctl", "0", "--rows", "0", "--reason", "nope"});
  EXPECT_EQ(reason.exit_code, 2);
  EXPECT_NE(reason.err.find("--reason 'nope' is not one of filtered"), std::string::npos)
      << reason.err;
  EXPECT_EQ(Run({"drop", "ctl", "0", "--reason", "failed"}).exit_code, 2);
  const RunResult released = Run({"drop", "ctl", "0", "--rows", "0", "--reason", "failed"});
  EXPECT_EQ(released.exit_code, 1);
  EXPECT_NE(released.err.find("FAILED_PRECONDITION: dock 'ctl' step 0 is released"),
            std::string::npos)
      << released.err;
  EXPECT_NE(released.err.find("(refused: released)\n"), std::string::npos)
      << "the refusal ends the line: " << released.err;
}

// drop with an empty --rows (and --groups) drops nothing: 0 rows, exit 0,
// the step untouched; a bad reason is still a usage error.
TEST_F(TdockctlTest, DropOfNoRowsAnswersZero) {
  CreateDock();
  PutRows();
  const Json none = RunJson({"drop", "ctl", "0", "--rows", "", "--reason", "failed"});
  EXPECT_EQ(none["dropped_rows"], 0) << none;
  EXPECT_EQ(RunJson({"drop", "ctl", "0", "--rows=", "--groups=", "--reason", "failed"})
                ["dropped_rows"], 0);
  EXPECT_EQ(Run({"drop", "ctl", "0", "--rows", "", "--reason", "nope"}).exit_code, 2);
  EXPECT_TRUE(RunJson({"status", "ctl"})["dropped_total"].empty());
  EXPECT_EQ(RunJson({"get", "ctl", "actor"})["rows"], Json::parse("[0, 1, 2, 3]"));
}

// list, health and delete.
TEST_F(TdockctlTest, ListHealthDelete) {
  CreateDock();
  Json list = RunJson({"list"});
  ASSERT_EQ(list["docks"].size(), 1u);
  EXPECT_EQ(list["docks"][0]["name"], "ctl");
  EXPECT_EQ(list["docks"][0]["rows_per_step"], 4);
  EXPECT_EQ(RunJson({"health"})["status"], "SERVING");
  EXPECT_EQ(RunJson({"delete", "ctl"})["deleted"], true);
  list = RunJson({"list"});
  EXPECT_TRUE(list["docks"].empty());
}

// A failed call exits 1 with the server's code and message on stderr.
TEST_F(TdockctlTest, ServerErrorExitsOne) {
  const RunResult result = Run({"status", "missing_dock"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(result.out.empty()) << result.out;
  const std::string message(server_->registry().Find("missing_dock").status().message());
  EXPECT_NE(result.err.find(absl::StrCat("NOT_FOUND: ", message)), std::string::npos)
      << result.err;
}

// Bad input files exit 1 naming the file, column, row and what is wrong; the
// dock is left unchanged.
TEST_F(TdockctlTest, BadInputFilesExitOne) {
  CreateDock();
  WriteFile(Path("broken.json"), "[[1, 2], [3");
  RunResult result = Run({"put", "ctl", "--step", "0", "--rows", "0,1",
                          "--column", "ids=" + Path("broken.json")});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("broken.json' is not valid JSON"), std::string::npos) << result.err;

  WriteFile(Path("big.json"), "[[1], [2147483648]]");
  result = Run({"put", "ctl", "--step", "0", "--rows", "0,1", "--column", "ids=" + Path("big.json")});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("(column 'ids'), row 1: element 0: value 2147483648 is out of range"),
            std::string::npos)
      << result.err;

  result = Run({"put", "ctl", "--step", "0", "--rows", "0,1", "--column", "nope=" + Path("big.json")});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("has no column 'nope'"), std::string::npos) << result.err;
  EXPECT_TRUE(RunJson({"status", "ctl"})["steps"].empty());
}

constexpr char kBalancedYaml[] = R"(name: bal
num_prompts: 8
n_samples_per_prompt: 1
length_columns: [ids]
columns:
  ids: {dtype: int32}
consumers:
  actor:
    columns: [ids]
    dispatch_size: 4
    dp_size: 2
    policy: balanced
    cost: {a: 1, b: 0}
    micro_batch: {max_tokens: 12, round_to: 2, padded: true, planner: packed}
)";

// A BALANCED consumer through tdockctl: get --json carries the round, the
// micro-batches (rows, tokens, padded length) and the round's balance stats;
// --round 0 asks for the same share again; the text output shows the plan.
TEST_F(TdockctlTest, GetBalancedRoundShowsPlan) {
  WriteFile(Path("bal.yaml"), kBalancedYaml);
  const Json created = RunJson({"create", "--spec", Path("bal.yaml")});
  ASSERT_EQ(created["created"][0]["consumers"]["actor"]["policy"], "balanced") << created;
  EXPECT_EQ(created["created"][0]["consumers"]["actor"]["micro_batch"]["max_tokens"], 12);
  // Lengths 7, 6, 8, 5, 1, 3, 8, 6: the design docs' worked example.
  WriteFile(Path("ids.json"), "[[1,1,1,1,1,1,1], [2,2,2,2,2,2], [3,3,3,3,3,3,3,3], "
                              "[4,4,4,4,4], [5], [6,6,6], [7,7,7,7,7,7,7,7], [8,8,8,8,8,8]]");
  RunJson({"put", "bal", "--step", "0", "--rows", "0-7", "--column", "ids=" + Path("ids.json")});

  const Json first = RunJson({"get", "bal", "actor", "--rank", "0"});
  EXPECT_EQ(first["round"], 0);
  int tokens = 0;
  for (const Json& count : first["token_counts"]) tokens += count.get<int>();
  EXPECT_EQ(tokens, 22);
  ASSERT_FALSE(first["micro_batches"].empty()) << first;
  Json joined = Json::array();
  for (const Json& mb : first["micro_batches"]) {
    EXPECT_LE(mb["padded_tokens"].get<int>(), 12) << mb;
    for (const Json& row : mb["rows"]) joined.push_back(row);
  }
  EXPECT_EQ(joined, first["rows"]);
  EXPECT_EQ(first["balance"]["rank_tokens"]["max"], 22.0) << first;
  EXPECT_EQ(first["balance"]["tokens"], 44);

  const Json again = RunJson({"get", "bal", "actor", "--rank", "0", "--step", "0", "--round", "0"});
  EXPECT_EQ(again["rows"], first["rows"]);
  EXPECT_EQ(again["micro_batches"], first["micro_batches"]);
  EXPECT_EQ(again["columns"], first["columns"]);

  const RunResult text = Run({"get", "bal", "actor", "--rank", "1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("round:        0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("micro-batches: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("balance: rank tokens min 22 max 22 mean 22"), std::string::npos)
      << text.out;
  EXPECT_EQ(Run({"get", "bal", "actor", "--round", "-1"}).exit_code, 2);
}

// A consumer with lease_ms: get shows the lease, status counts it, ack
// completes it, a second ack fails with the server's FAILED_PRECONDITION
// naming the lease, nack of a lease never handed out is NOT_FOUND, and a
// LEASE that is not a positive integer is a usage error.
TEST_F(TdockctlTest, AckAndNackLeases) {
  WriteFile(Path("spec.yaml"), absl::StrCat(kSpecYaml, "  worker: {columns: [ids], lease_ms: 60000}\n"));
  RunJson({"create", "--spec", Path("spec.yaml")});
  PutRows();
  const Json batch = RunJson({"get", "ctl", "worker"});
  const uint64_t lease = batch["lease_id"].get<uint64_t>();
  EXPECT_NE(lease, 0u);
  EXPECT_EQ(batch["lease_ms"], 60000);
  Json status = RunJson({"status", "ctl"});
  EXPECT_EQ(status["spec"]["consumers"]["worker"]["lease_ms"], 60000);
  EXPECT_EQ(status["leases"]["worker"]["rows_in_flight"], 4);
  const RunResult text = Run({"status", "ctl"});
  EXPECT_NE(text.out.find("leases of worker: 1 in flight (4 rows)"), std::string::npos)
      << text.out;
  const Json acked = RunJson({"ack", "ctl", "worker", absl::StrCat(lease)});
  EXPECT_EQ(acked["acknowledged_rows"], 4);
  const RunResult again = Run({"ack", "ctl", "worker", absl::StrCat(lease)});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find(absl::StrCat("FAILED_PRECONDITION: dock 'ctl': lease ", lease,
                                        " is not in flight: it was already acknowledged")),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("(refused: lease_ended)\n"), std::string::npos) << again.err;
  const RunResult unknown = Run({"nack", "ctl", "worker", "999"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND: dock 'ctl': lease 999 was never handed out"),
            std::string::npos)
      << unknown.err;
  EXPECT_EQ(Run({"ack", "ctl", "worker", "x"}).exit_code, 2);
  EXPECT_EQ(Run({"ack", "ctl", "worker", "0"}).exit_code, 2);
  EXPECT_EQ(Run({"ack", "ctl", "worker"}).exit_code, 2);
}

// leases lists a consumer's leases in flight; nack-all hands them back (the
// rows go out again); a rank out of range is the server's INVALID_ARGUMENT.
TEST_F(TdockctlTest, ListAndNackAllLeases) {
  WriteFile(Path("spec.yaml"),
            absl::StrCat(kSpecYaml, "  worker: {columns: [ids], lease_ms: 60000}\n"));
  RunJson({"create", "--spec", Path("spec.yaml")});
  PutRows();
  EXPECT_NE(Run({"leases", "ctl", "worker"}).out.find("no leases of worker in flight"),
            std::string::npos);
  const Json batch = RunJson({"get", "ctl", "worker"});
  const uint64_t lease = batch["lease_id"].get<uint64_t>();
  const Json listed = RunJson({"leases", "ctl", "worker"});
  ASSERT_EQ(listed["leases"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["leases"][0]["lease"], lease);
  EXPECT_EQ(listed["leases"][0]["rows"], 4);
  EXPECT_EQ(listed["leases"][0]["step"], 0);
  const RunResult text = Run({"leases", "ctl", "worker"});
  EXPECT_NE(text.out.find(absl::StrCat("lease ", lease, ": step 0 rank 0, 4 rows")),
            std::string::npos)
      << text.out;
  const RunResult bad = Run({"nack-all", "ctl", "worker", "--rank", "3"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("INVALID_ARGUMENT: dock 'ctl': consumer 'worker': rank 3 is out of range"),
            std::string::npos)
      << bad.err;
  const Json back = RunJson({"nack-all", "ctl", "worker"});
  EXPECT_EQ(back["leases"], 1);
  EXPECT_EQ(back["returned_rows"], 4);
  EXPECT_TRUE(RunJson({"leases", "ctl", "worker"})["leases"].empty());
  EXPECT_EQ(RunJson({"get", "ctl", "worker"})["rows"].size(), 4u) << "handed out again";
}

// Usage errors exit 2 with the usage text on stderr and call nothing.
TEST_F(TdockctlTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"frobnicate"},
           {"get", "ctl"},
           {"put", "ctl", "--step", "0", "--rows", "0"},
           {"put", "ctl", "--step", "x", "--rows", "0", "--column", "a=b"},
           {"list", "--rank", "1"},
           {"status", "ctl", "--timeout_ms"}}) {
    const RunResult result = Run(args, /*with_server=*/false);
    EXPECT_EQ(result.exit_code, 2) << args[0];
    EXPECT_NE(result.err.find("usage: tdockctl"), std::string::npos) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
  const RunResult help = Run({"--help"}, /*with_server=*/false);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: tdockctl"), std::string::npos);
}

}  // namespace
}  // namespace tdock
