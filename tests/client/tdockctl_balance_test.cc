// `tdockctl balance` as users run it: the real binary, JSON lines on stdin,
// one JSON answer per line on stdout. Checks the design docs' worked examples,
// the shape of each op's answer, and that a bad line is answered with an
// error while the lines after it are still planned.
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace tdock {
namespace {

using Json = nlohmann::json;

struct BalanceRun {
  int exit_code = -1;
  std::vector<Json> lines;  // stdout, one parsed JSON value per line
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `tdockctl balance` with `input` on stdin.
BalanceRun RunBalance(const std::string& input) {
  std::string pattern = ::testing::TempDir() + "/tdockctl_balance_XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string in = pattern + "/in", out = pattern + "/out", err = pattern + "/err";
  std::ofstream(in) << input;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string command = "balance";
  std::vector<char*> argv = {const_cast<char*>(TDOCK_CTL_BIN), command.data(), nullptr};
  BalanceRun result;
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, TDOCK_CTL_BIN, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(spawned, 0);
  if (spawned == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  for (absl::string_view line : absl::StrSplit(ReadFile(out), '\n', absl::SkipEmpty())) {
    Json json = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(json.is_discarded()) << line;
    result.lines.push_back(std::move(json));
  }
  result.err = ReadFile(err);
  std::system(("rm -rf '" + pattern + "'").c_str());
  return result;
}

// Runs one request expected to succeed and returns its answer.
Json Plan(const std::string& request) {
  const BalanceRun run = RunBalance(request + "\n");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.lines.size(), 1u);
  if (run.lines.size() != 1) return Json();
  EXPECT_FALSE(run.lines[0].contains("error")) << run.lines[0];
  EXPECT_TRUE(run.lines[0]["time_us"].is_number()) << run.lines[0];
  return run.lines[0];
}

std::vector<int> Sorted(std::vector<int> rows) {
  std::sort(rows.begin(), rows.end());
  return rows;
}

// verl's example: [100, 900, 50, 950, 400, 600] under 2000 tokens, BALANCED,
// gives two micro-batches of 1500 tokens, {1, 5} first (heavier by Σ L²).
TEST(TdockctlBalance, MicroBatchesWorkedExample) {
  const Json answer = Plan(
      R"({"op":"micro_batches","lengths":[100,900,50,950,400,600],"max_tokens":2000,)"
      R"("planner":"balanced"})");
  const Json& mbs = answer["micro_batches"];
  ASSERT_EQ(mbs.size(), 2u) << answer;
  EXPECT_EQ(mbs[0]["rows"], Json::parse("[1, 5]"));
  EXPECT_EQ(mbs[1]["rows"], Json::parse("[0, 2, 3, 4]"));
  for (const Json& mb : mbs) {
    EXPECT_EQ(mb["tokens"], 1500);
    EXPECT_EQ(mb["padded_tokens"], 1500);  // packed counting: no padding
  }
  EXPECT_EQ(mbs[0]["padded_len"], 900);
  EXPECT_EQ(mbs[1]["padded_len"], 950);
}

// [7,6,8,5,1,3,8,6] over dp 2: both ranks carry 22 tokens in 4 rows (dealing
// sorted rows round-robin would give 20 and 24), every row exactly once.
TEST(TdockctlBalance, DispatchWorkedExampleBalancesRanks) {
  const std::vector<int> lengths = {7, 6, 8, 5, 1, 3, 8, 6};
  const Json answer = Plan(R"({"op":"dispatch","lengths":[7,6,8,5,1,3,8,6],"dp_size":2})");
  ASSERT_EQ(answer["ranks"].size(), 2u) << answer;
  std::vector<int> all;
  for (const Json& rank : answer["ranks"]) {
    const std::vector<int> rows = rank["rows"].get<std::vector<int>>();
    EXPECT_EQ(rows.size(), 4u);
    int tokens = 0;
    for (int row : rows) tokens += lengths[row];
    EXPECT_EQ(tokens, 22);
    EXPECT_EQ(rank["tokens"], 22);
    EXPECT_TRUE(rank["micro_batches"].empty());
    all.insert(all.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(Sorted(all), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(answer["stats"]["rank_tokens"]["max_over_mean"], 1.0);
  EXPECT_EQ(answer["stats"]["tokens"], 44);
}

// The same rows with padded micro-batches of at most 12 tokens (round_to 2,
// PACKED): every micro-batch holds its budget, each rank's rows run
// micro-batch after micro-batch, and the round's padded total is at most the
// docs' 56 (against 80 for padding all eight rows to 10).
TEST(TdockctlBalance, DispatchPlansPaddedMicroBatches) {
  const Json answer = Plan(
      R"({"op":"dispatch","lengths":[7,6,8,5,1,3,8,6],"dp_size":2,"micro_batch":)"
      R"({"max_tokens":12,"round_to":2,"padded":true,"planner":"packed"}})");
  int64_t padded = 0;
  for (const Json& rank : answer["ranks"]) {
    std::vector<int> joined;
    for (const Json& mb : rank["micro_batches"]) {
      EXPECT_LE(mb["padded_tokens"].get<int64_t>(), 12) << mb;
      EXPECT_EQ(mb["padded_len"].get<int64_t>() % 2, 0) << mb;
      EXPECT_EQ(mb["padded_tokens"].get<int64_t>(),
                mb["padded_len"].get<int64_t>() * static_cast<int64_t>(mb["rows"].size()));
      padded += mb["padded_tokens"].get<int64_t>();
      for (const Json& row : mb["rows"]) joined.push_back(row.get<int>());
    }
    EXPECT_EQ(joined, rank["rows"].get<std::vector<int>>());
  }
  EXPECT_EQ(answer["stats"]["padded_tokens"], padded);
  EXPECT_LE(padded, 56);
  EXPECT_EQ(answer["stats"]["tokens"], 44);
  // same_count_across_ranks defaults to true.
  EXPECT_EQ(answer["ranks"][0]["micro_batches"].size(), answer["ranks"][1]["micro_batches"].size());
}

// partition: k parts of equal size; costs are the parts' cost sums under the
// cost model, max_over_mean their max over their mean.
TEST(TdockctlBalance, PartitionAnswersPartsAndCosts) {
  const std::vector<double> lengths = {10, 1, 7, 3, 9, 2, 4, 4, 6};
  const Json answer = Plan(
      R"({"op":"partition","lengths":[10,1,7,3,9,2,4,4,6],"k":3,"cost":{"a":1,"b":0.5},)"
      R"("algorithm":"greedy"})");
  ASSERT_EQ(answer["partitions"].size(), 3u) << answer;
  ASSERT_EQ(answer["costs"].size(), 3u);
  std::vector<int> all;
  double max = 0, sum = 0;
  for (size_t p = 0; p < 3; ++p) {
    const std::vector<int> rows = answer["partitions"][p].get<std::vector<int>>();
    EXPECT_EQ(rows.size(), 3u);
    double cost = 0;
    for (int row : rows) cost += lengths[row] + 0.5 * lengths[row] * lengths[row];
    EXPECT_DOUBLE_EQ(answer["costs"][p].get<double>(), cost);
    max = std::max(max, cost);
    sum += cost;
    all.insert(all.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(Sorted(all), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_DOUBLE_EQ(answer["max_over_mean"].get<double>(), max / (sum / 3));
}

// A bad line is answered with an error naming the line and the key at fault;
// the lines after it (past a blank line) are still planned; exit status 1.
TEST(TdockctlBalance, ErrorLineThenGoodLine) {
  const BalanceRun run = RunBalance(
      "{\"op\":\"partition\",\"lengths\":[7,6,-8],\"k\":2}\n"
      "\n"
      "{\"op\":\"partition\",\"lengths\":[7,6,8,5],\"k\":2}\n"
      "{\"op\":\"micro_batches\",\"lengths\":[100,900],\"max_tokens\":800}\n"
      "not json\n"
      "{\"op\":\"dispatch\",\"lengths\":[1,2],\"dp_size\":2,\"micro_batch\":{\"round_to\":2}}\n"
      "{\"op\":\"partition\",\"lengths\":[4,4],\"k\":2}\n");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  ASSERT_EQ(run.lines.size(), 6u);
  EXPECT_EQ(run.lines[0]["error"],
            "line 1: partition: 'lengths'[2] must be an integer >= 0, got -8");
  const Json& good = run.lines[1];
  ASSERT_FALSE(good.contains("error")) << good;
  EXPECT_EQ(good["costs"], Json::parse("[13.0, 13.0]"));
  EXPECT_EQ(good["max_over_mean"], 1.0);
  // A row over the budget is named with its length and the budget.
  EXPECT_NE(run.lines[2]["error"].get<std::string>().find("line 4: micro_batches: row 1"),
            std::string::npos) << run.lines[2];
  EXPECT_NE(run.lines[2]["error"].get<std::string>().find("800"), std::string::npos);
  EXPECT_NE(run.lines[3]["error"].get<std::string>().find("line 5: not valid JSON"),
            std::string::npos) << run.lines[3];
  EXPECT_EQ(run.lines[4]["error"], "line 6: dispatch: missing key 'micro_batch.max_tokens'");
  EXPECT_EQ(run.lines[5]["partitions"], Json::parse("[[0], [1]]"));
}

// Unknown ops, unknown keys and wrong types are refused by name.
TEST(TdockctlBalance, RefusesUnknownKeysAndTypes) {
  const BalanceRun run = RunBalance(
      "{\"op\":\"shuffle\"}\n"
      "{\"op\":\"partition\",\"lengths\":[1],\"k\":1,\"kk\":true}\n"
      "{\"op\":\"partition\",\"lengths\":[1],\"k\":1,\"algorithm\":\"best\"}\n"
      "{\"op\":\"dispatch\",\"lengths\":[1,2,3],\"dp_size\":2,\"group_size\":2}\n");
  EXPECT_EQ(run.exit_code, 1);
  ASSERT_EQ(run.lines.size(), 4u);
  EXPECT_NE(run.lines[0]["error"].get<std::string>().find("'op' must be one of"),
            std::string::npos) << run.lines[0];
  EXPECT_NE(run.lines[1]["error"].get<std::string>().find("unknown key 'kk'"), std::string::npos)
      << run.lines[1];
  EXPECT_NE(run.lines[2]["error"].get<std::string>().find("'algorithm' must be one of"),
            std::string::npos) << run.lines[2];
  EXPECT_NE(run.lines[3]["error"].get<std::string>().find("multiple of group_size"),
            std::string::npos) << run.lines[3];
}

}  // namespace
}  // namespace tdock
