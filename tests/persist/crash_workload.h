// CrashWorkload: a seeded, randomized workload against one journaled dock,
// which notes for every effect when it was asked for and when it was
// acknowledged, counted in the journal's successful writes. A crash point k
// (the first k writes survive) then splits every effect three ways: acked at
// or before k (it must survive), issued at or after k (it cannot have been
// recorded), or in doubt (either way, but whole).
//
// The dock: 4 prompts x 2 samples, two steps in flight; `ids` is written by
// a producer, `score` by a leased consumer (`scorer`) that acknowledges its
// lease with the Put of its scores (or Ack, or hands it back with Nack);
// `reader` (FIFO), `groups` (whole groups) and `bal` (BALANCED over two
// ranks, leased) read; `late` is added halfway. Steps are released early now
// and then, and some journal writes fail.
//
// Thread safety: Run on one thread; completions may come from the journal's.
#ifndef TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_
#define TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/recording_store.h"

namespace tdock::persist::crash {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
inline constexpr int kRows = 8;  // per step

// When an effect was asked for and acknowledged, in journal writes.
struct Event {
  int64_t issued = 0;
  int64_t acked = kNever;  // kNever: not (yet) acknowledged, or failed
};

struct PutRecord {
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::string column;
  Event event;
};

// The value of a cell; every cell of the workload is a function of its place.
std::vector<int32_t> IdsOf(int64_t step, int64_t row);
float ScoreOf(int64_t step, int64_t row);

// A Put's column of `name` ("ids" or "score") for `rows` of `step`.
testing::OwnedColumn ColumnOf(const std::string& name, int64_t step,
                              const std::vector<int64_t>& rows);

DockSpec CrashSpec();
ConsumerSpec LateConsumer();

class CrashWorkload {
 public:
  CrashWorkload(uint64_t seed, RecordingStore* store, std::shared_ptr<Dock> dock)
      : rng_(seed), store_(store), dock_(std::move(dock)) {}

  // `ops` random operations; Puts of a step whose partition is busy stay
  // parked. WaitParked waits for them to end (after the dock's Shutdown).
  void Run(int ops);
  void WaitParked();

  // What happened, for the checker. Read after Run.
  std::vector<PutRecord> puts() const;
  // Successful "done" effects per (consumer, step, row): a hand-out without a
  // lease, or the acknowledgement of a lease.
  const std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<Event>>& done() const {
    return done_;
  }
  const std::map<int64_t, int64_t>& releases() const { return release_issued_; }
  // Journal writes when the dock's creation had been stored.
  int64_t created() const { return created_; }
  // Every lease id handed out, per consumer.
  const std::map<std::string, std::set<uint64_t>>& leases() const { return leases_; }

 private:
  struct Held {
    std::string consumer;
    uint64_t lease = 0;
    int64_t step = 0;
    std::vector<int64_t> rows;
  };
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t Writes() const { return store_->writes(); }

  void PutIds();
  void WriteScores(bool with_ack);
  void Read(const std::string& consumer, int32_t rank);
  void EndLease(bool ack);
  void ReleaseOldest();
  void Done(const std::string& consumer, int64_t step, const std::vector<int64_t>& rows,
            Event event);

  std::mt19937_64 rng_;
  RecordingStore* const store_;
  const std::shared_ptr<Dock> dock_;

  int64_t ids_step_ = 0;                      // the step the producer writes
  std::map<int64_t, std::set<int64_t>> ids_;  // rows whose ids were asked for
  std::map<int64_t, std::set<int64_t>> scored_;  // rows whose scores are stored
  std::vector<Held> held_;                    // leases not yet ended
  bool late_added_ = false;
  const int64_t created_ = store_->writes();

  std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<Event>> done_;
  std::map<int64_t, int64_t> release_issued_;
  std::map<std::string, std::set<uint64_t>> leases_;

  // Puts; parked ones complete on another thread.
  mutable tdock::Mutex mu_;
  std::vector<PutRecord> puts_ ABSL_GUARDED_BY(mu_);
  int64_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  // (step, row) of ids whose Put was not stored, to be written again.
  std::vector<std::pair<int64_t, int64_t>> unstored_ids_ ABSL_GUARDED_BY(mu_);
  CondVar parked_cv_;
};

}  // namespace tdock::persist::crash

#endif  // TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_
