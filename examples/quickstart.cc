// tdock quickstart: a GRPO-shaped pipeline against a running tdock-server.
//
//   tdock-server --config examples/quickstart.yaml &
//   tdock_quickstart --server 127.0.0.1:50051
//
// One rollout thread writes prompts, then responses of long-tail lengths, for
// a few steps. Meanwhile worker threads pull from the dock with long-polling
// Gets: `reward` scores whole prompt groups and writes `rewards` back; the
// `actor_logprob` data-parallel ranks write `old_log_prob`; `actor_update`
// takes rows once every column is there. All share one Client. Each worker
// checks the bytes it received against what the rollout wrote; at the end
// every row must have reached every consumer exactly once and the dock must
// have released every step. Exit status 0 means all of that held.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/status.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "tdock-server, HOST:PORT");
ABSL_FLAG(std::string, dock, "quickstart", "dock from the server's --config");
ABSL_FLAG(int64_t, steps, 2, "training steps to run");
ABSL_FLAG(uint64_t, seed, 1, "seed of the generated prompts and responses");

namespace {

using tdock::Client;
using tdock::ClientBatch;
using tdock::ClientColumn;
using tdock::DType;
using Tokens = std::vector<int32_t>;

// The data the rollout writes, generated up front from the seed so that every
// worker can check what it receives. Constant after construction.
struct Workload {
  std::string dock;
  int64_t steps = 0;
  int64_t rows = 0;           // rows per step
  int32_t samples = 1;        // rows per prompt group
  int32_t logprob_ranks = 1;  // dp_size of actor_logprob
  std::vector<std::vector<Tokens>> prompts;    // [step][row]
  std::vector<std::vector<Tokens>> responses;  // [step][row]
};

Workload MakeWorkload(const tdock::DockSpec& spec, int64_t steps,
                      uint64_t seed) {
  Workload w;
  w.dock = spec.name;
  w.steps = steps;
  w.rows = spec.rows_per_step();
  w.samples = spec.n_samples_per_prompt;
  const int i = spec.ConsumerIndex("actor_logprob");
  w.logprob_ranks = i < 0 ? 1 : spec.consumers[i].dp_size;
  std::mt19937_64 rng(seed);
  auto tokens = [&rng](int64_t n) {
    Tokens out(n);
    for (int32_t& t : out) t = static_cast<int32_t>(rng() % 32000);
    return out;
  };
  std::lognormal_distribution<double> response_len(4.0, 1.0);  // long tail
  for (int64_t s = 0; s < steps; ++s) {
    w.prompts.emplace_back(w.rows);
    w.responses.emplace_back(w.rows);
    for (int64_t r = 0; r < w.rows; ++r) {
      // One prompt per group, shared by the group's rows.
      w.prompts[s][r] = r % w.samples == 0 ? tokens(8 + rng() % 56)
                                           : w.prompts[s][r - 1];
      w.responses[s][r] = tokens(std::clamp<int64_t>(
          static_cast<int64_t>(response_len(rng)), 1, 1024));
    }
  }
  return w;
}

// A toy reward (the share of even token ids) and toy per-token log-probs.
std::vector<float> Reward(const Tokens& response) {
  const auto even = std::count_if(response.begin(), response.end(),
                                  [](int32_t t) { return t % 2 == 0; });
  return {static_cast<float>(even) / static_cast<float>(response.size())};
}
std::vector<float> LogProbs(const Tokens& response) {
  std::vector<float> out;
  for (int32_t t : response) out.push_back(-static_cast<float>(t % 97) / 97);
  return out;
}

// What each role received, per step. Thread-safe.
class Tally {
 public:
  void Record(const std::string& consumer, int rank, const ClientBatch& b) {
    absl::MutexLock lock(&mu_);
    const std::string role = absl::StrCat(consumer, "/", rank);
    Stats& st = stats_[{b.step, role}];
    st.rows += static_cast<int64_t>(b.rows.size());
    for (int64_t tokens : b.token_counts) st.tokens += tokens;
    if (!b.rows.empty()) st.batches += 1;
    st.end_of_step = st.end_of_step || b.end_of_step;
    for (int64_t row : b.rows) ++seen_[{consumer, b.step, row}];
    if (b.end_of_step) {
      absl::PrintF("step %d %-15s end_of_step after %d batches\n", b.step,
                   role, st.batches);
    }
  }

  void Print() const {
    absl::MutexLock lock(&mu_);
    absl::PrintF("%-4s %-15s %5s %7s %7s %s\n", "step", "role", "rows",
                 "tokens", "batches", "end_of_step");
    for (const auto& [key, st] : stats_) {
      absl::PrintF("%-4d %-15s %5d %7d %7d %s\n", key.first, key.second,
                   st.rows, st.tokens, st.batches,
                   st.end_of_step ? "yes" : "no");
    }
  }

  // OK when every row of every step reached each consumer exactly once.
  absl::Status CheckExactlyOnce(const std::vector<std::string>& consumers,
                                const Workload& w) const {
    absl::MutexLock lock(&mu_);
    for (const std::string& c : consumers) {
      for (int64_t s = 0; s < w.steps; ++s) {
        for (int64_t r = 0; r < w.rows; ++r) {
          const auto it = seen_.find({c, s, r});
          const int n = it == seen_.end() ? 0 : it->second;
          if (n != 1) {
            return absl::InternalError(absl::StrCat(
                "consumer ", c, " got step ", s, " row ", r, " ", n, " times"));
          }
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Stats {
    int64_t rows = 0, tokens = 0, batches = 0;
    bool end_of_step = false;
  };
  mutable absl::Mutex mu_;
  std::map<std::pair<int64_t, std::string>, Stats> stats_ ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, int64_t, int64_t>, int> seen_
      ABSL_GUARDED_BY(mu_);
};

// Checks that position i of the batch holds `want` in `column`.
template <typename T>
absl::Status Expect(const ClientBatch& b, const std::string& column, size_t i,
                    const std::vector<T>& want) {
  const tdock::PackedColumn* col = b.column(column);
  if (col == nullptr || b.Row<T>(*col, static_cast<int64_t>(i)) != want) {
    return absl::DataLossError(absl::StrCat(
        "step ", b.step, " row ", b.rows[i], " column ", column,
        col == nullptr ? " is missing" : " differs from what was written"));
  }
  return absl::OkStatus();
}

// Writes one column of some rows of a step.
absl::Status PutColumn(Client& client, const std::string& dock, int64_t step,
                       std::vector<int64_t> rows, ClientColumn column) {
  tdock::ClientPut put;
  put.dock = dock;
  put.step = step;
  put.rows = std::move(rows);
  put.columns.push_back(std::move(column));
  return client.Put(put).status();
}

// The rollout: per step, all prompts at once, then the responses of one prompt
// group at a time in a shuffled order, as generation finishes them.
absl::Status Rollout(Client& client, const Workload& w) {
  std::mt19937_64 rng(7);
  for (int64_t s = 0; s < w.steps; ++s) {
    std::vector<int64_t> rows(w.rows);
    for (int64_t r = 0; r < w.rows; ++r) rows[r] = r;
    TDOCK_RETURN_IF_ERROR(PutColumn(
        client, w.dock, s, rows,
        ClientColumn::FromRows("prompt_ids", DType::kInt32, w.prompts[s])));

    std::vector<int64_t> groups(w.rows / w.samples);
    for (size_t g = 0; g < groups.size(); ++g) groups[g] = g;
    std::shuffle(groups.begin(), groups.end(), rng);
    for (int64_t g : groups) {
      const auto first = w.responses[s].begin() + g * w.samples;
      std::vector<Tokens> cells(first, first + w.samples);
      TDOCK_RETURN_IF_ERROR(PutColumn(
          client, w.dock, s,
          std::vector<int64_t>(rows.begin() + g * w.samples,
                               rows.begin() + (g + 1) * w.samples),
          ClientColumn::FromRows("response_ids", DType::kInt32, cells)));
    }
  }
  return absl::OkStatus();
}

using Handler = std::function<absl::Status(const ClientBatch&)>;

// One consumer rank's share of one step: long-poll Gets until end_of_step.
// The Get that takes a step's last rows says end_of_step; the other ranks of
// a data-parallel consumer learn it from their next Get for that step, which
// returns an empty end_of_step batch (also once the dock has released it).
absl::Status DrainStep(Client& client, const tdock::ClientGet& get,
                       Tally& tally, const std::atomic<bool>& stop,
                       const Handler& handle) {
  for (int idle_polls = 0; !stop.load();) {
    absl::StatusOr<ClientBatch> batch = client.Get(get);
    TDOCK_RETURN_IF_ERROR(batch.status());
    if (batch->timed_out) {  // nothing ready yet: poll again, within a bound
      if (++idle_polls == 15) {
        return absl::DeadlineExceededError(
            absl::StrCat("no rows of step ", *get.step, " for 30 s"));
      }
      continue;
    }
    idle_polls = 0;
    TDOCK_RETURN_IF_ERROR(handle(*batch));
    tally.Record(get.consumer, get.rank, *batch);
    if (batch->end_of_step) break;
  }
  return absl::OkStatus();
}

// A worker: one consumer rank, step after step.
absl::Status Work(Client& client, const Workload& w, Tally& tally,
                  const std::atomic<bool>& stop, const std::string& consumer,
                  int rank, const Handler& handle) {
  tdock::ClientGet get;
  get.dock = w.dock;
  get.consumer = consumer;
  get.rank = rank;
  get.wait = absl::Seconds(2);  // long-poll bound of one Get
  for (int64_t s = 0; s < w.steps; ++s) {
    get.step = s;  // a step not started yet is waited for
    TDOCK_RETURN_IF_ERROR(DrainStep(client, get, tally, stop, handle));
  }
  return absl::OkStatus();
}

// Checks the rollout's columns at position i of a batch.
absl::Status CheckRollout(const ClientBatch& b, const Workload& w, size_t i) {
  TDOCK_RETURN_IF_ERROR(
      Expect(b, "prompt_ids", i, w.prompts[b.step][b.rows[i]]));
  return Expect(b, "response_ids", i, w.responses[b.step][b.rows[i]]);
}

// reward and actor_logprob: check what the rollout wrote, score each response
// and write the scores back into `column` for the roles downstream.
using Score = std::vector<float> (*)(const Tokens&);
Handler ScoreRole(Client& client, const Workload& w, std::string column,
                  Score score) {
  return [&client, &w, column, score](const ClientBatch& b) -> absl::Status {
    std::vector<std::vector<float>> scores;
    for (size_t i = 0; i < b.rows.size(); ++i) {
      TDOCK_RETURN_IF_ERROR(CheckRollout(b, w, i));
      scores.push_back(score(w.responses[b.step][b.rows[i]]));
    }
    if (b.rows.empty()) return absl::OkStatus();
    return PutColumn(client, w.dock, b.step, b.rows,
                     ClientColumn::FromRows(column, DType::kFloat32, scores));
  };
}

// actor_update: checks every column the other roles wrote.
Handler UpdateRole(const Workload& w) {
  return [&w](const ClientBatch& b) -> absl::Status {
    for (size_t i = 0; i < b.rows.size(); ++i) {
      const Tokens& response = w.responses[b.step][b.rows[i]];
      TDOCK_RETURN_IF_ERROR(CheckRollout(b, w, i));
      TDOCK_RETURN_IF_ERROR(Expect(b, "rewards", i, Reward(response)));
      TDOCK_RETURN_IF_ERROR(Expect(b, "old_log_prob", i, LogProbs(response)));
    }
    return absl::OkStatus();
  };
}

// Runs the rollout and one thread per consumer rank until every step is
// drained; returns the first failing role's error.
absl::Status RunPipeline(Client& client, const Workload& w, Tally& tally) {
  std::atomic<bool> stop{false};
  std::deque<std::pair<std::string, absl::Status>> results;  // stable refs
  std::vector<std::thread> threads;
  auto start = [&](std::string role, std::function<absl::Status()> fn) {
    auto& result = results.emplace_back(std::move(role), absl::OkStatus());
    threads.emplace_back([&result, &stop, fn = std::move(fn)] {
      result.second = fn();
      if (!result.second.ok()) stop = true;  // the others stop polling
    });
  };
  auto worker = [&](std::string consumer, int rank, Handler handle) {
    start(absl::StrCat(consumer, "/", rank), [&, consumer, rank, handle] {
      return Work(client, w, tally, stop, consumer, rank, handle);
    });
  };
  start("rollout", [&] { return Rollout(client, w); });
  worker("reward", 0, ScoreRole(client, w, "rewards", Reward));
  for (int rank = 0; rank < w.logprob_ranks; ++rank) {
    worker("actor_logprob", rank,
           ScoreRole(client, w, "old_log_prob", LogProbs));
  }
  worker("actor_update", 0, UpdateRole(w));
  for (std::thread& t : threads) t.join();
  for (const auto& [role, st] : results) {
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(role, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

// After the run every step must be released: no rows, bytes or waiters left.
absl::Status CheckReleased(Client& client, const std::string& dock) {
  for (int attempt = 0;; ++attempt) {
    TDOCK_ASSIGN_OR_RETURN(tdock::DockStatusInfo st,
                           client.GetDockStatus(dock));
    int64_t waiters = 0;
    for (const auto& [consumer, n] : st.waiters) waiters += n;
    if (st.steps.empty() && st.arena_bytes_used == 0 && waiters == 0) {
      return absl::OkStatus();
    }
    if (attempt == 50) {
      return absl::InternalError(absl::StrCat(
          "dock ", dock, " still holds ", st.steps.size(), " steps, ",
          st.arena_bytes_used, " bytes, ", waiters, " waiters"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status Run() {
  tdock::ClientOptions options;
  options.address = absl::GetFlag(FLAGS_server);
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                         Client::Connect(options));
  // A new job starts on an empty dock: re-create it from the server's spec.
  const std::string dock = absl::GetFlag(FLAGS_dock);
  absl::StatusOr<tdock::DockStatusInfo> old = client->GetDockStatus(dock);
  if (absl::IsNotFound(old.status())) {
    return absl::NotFoundError(absl::StrCat(
        old.status().message(),
        " (start tdock-server with --config examples/quickstart.yaml)"));
  }
  TDOCK_RETURN_IF_ERROR(old.status());
  TDOCK_RETURN_IF_ERROR(client->DeleteDock(dock));
  TDOCK_ASSIGN_OR_RETURN(tdock::DockSpec spec, client->CreateDock(old->spec));
  const Workload w = MakeWorkload(spec, absl::GetFlag(FLAGS_steps),
                                  absl::GetFlag(FLAGS_seed));
  absl::PrintF("dock %s on %s: %d steps x %d rows (%d prompts x %d samples)\n",
               dock, options.address, w.steps, w.rows, spec.num_prompts,
               w.samples);

  Tally tally;
  const absl::Status pipeline = RunPipeline(*client, w, tally);
  tally.Print();
  TDOCK_RETURN_IF_ERROR(pipeline);
  TDOCK_RETURN_IF_ERROR(
      tally.CheckExactlyOnce({"reward", "actor_logprob", "actor_update"}, w));
  TDOCK_RETURN_IF_ERROR(CheckReleased(*client, dock));
  absl::PrintF(
      "OK: %d steps drained; every row reached reward, actor_logprob and "
      "actor_update exactly once with the bytes written; dock %s released "
      "every step\n",
      w.steps, dock);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = Run();
  if (!status.ok()) {
    absl::FPrintF(stderr, "quickstart failed: %s\n", status.ToString());
    return 1;
  }
  return 0;
}
