// CrashWorkload: a seeded, randomized workload against a journaled dock,
// which notes for every effect when it was asked for and when it was
// acknowledged, counted in the journal's successful writes. A crash point k
// (the first k writes survive) then splits every effect three ways: acked at
// or before k (it must survive), issued at or after k (it cannot have been
// recorded), or in doubt (either way, but whole).
//
// The dock: 4 prompts x 2 samples, two steps in flight; `ids` is written by
// a producer, `score` by a leased consumer (`scorer`) that acknowledges its
// lease with the Put of its scores (or Ack, or hands it back with Nack),
// `note` (rewritable) is written again and again by the producer, who also
// drops rows now and then and seals steps (with three threads the scorer
// seals too, racing the producer's writes);
// `reader` (FIFO), `groups` (whole groups) and `bal` (BALANCED over two
// ranks, leased) read; `late` is added a third of the way in and may be
// removed later. The producer adds the column `extra` a quarter of the way in
// (by the first Put that writes it, or in odd incarnations by AddColumn) and
// writes it now and then. Steps are released early now
// and then, some journal writes fail, and the dock may be deleted and
// created again under its name (a new incarnation, whose cells differ).
//
// Every Put names its rows' keys (KeyOf): whichever write of a row comes
// first gives it its key.
//
// Run with one thread does all of it in a seeded order; with three, a
// producer, the scorer and the readers run at once, each on its own thread.
//
// Thread safety: Run's actors share the histories under mu_; completions
// may come from the journal's thread.
#ifndef TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_
#define TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_

#include <atomic>
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
#include "server/dock/registry.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/recording_store.h"

namespace tdock::persist::crash {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
inline constexpr int kRows = 8;  // per step

// When an effect was asked for and acknowledged, in journal writes.
struct Event {
  int64_t issued = kNever;  // kNever: never asked for
  int64_t acked = kNever;   // kNever: not (yet) acknowledged, or failed
};

struct PutRecord {
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::string column;
  Event event;
  int32_t note = 0;  // the value written, for "note"
};

// What happened to one incarnation of the dock.
struct History {
  Event created;
  Event deleted;
  std::vector<PutRecord> puts;
  // Successful "done" effects per (consumer, step, row): a hand-out without
  // a lease, or the acknowledgement of a lease.
  std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<Event>> done;
  std::map<int64_t, int64_t> releases;  // step -> issued
  // Drop calls naming (step, row), and seals of a step (each acknowledged or
  // not).
  std::map<std::pair<int64_t, int64_t>, std::vector<Event>> drops;
  std::map<int64_t, std::vector<Event>> seals;
  std::map<std::string, std::set<uint64_t>> leases;  // every lease id handed out
  Event late_added;  // AddConsumer of `late`, if it succeeded
  Event late_removed;  // RemoveConsumer of `late` (acked kNever: it failed)
  Event extra_added;   // the addition of `extra`, if it was made
  int64_t deletes_failed = 0;  // DeleteDock calls whose record failed (it goes on)
};

// The value of a cell; every cell of `ids` and `score` is a function of its
// place and the dock's incarnation.
std::vector<int32_t> IdsOf(int incarnation, int64_t step, int64_t row);
float ScoreOf(int incarnation, int64_t step, int64_t row);

// A Put's column of `name` for `rows` of `step` (notes: `note` in each).
testing::OwnedColumn ColumnOf(const std::string& name, int incarnation, int64_t step,
                              const std::vector<int64_t>& rows, int32_t note = 0);

// The key every Put of the workload gives row `row` of `step`.
std::string KeyOf(int incarnation, int64_t step, int64_t row);
std::vector<std::string> KeysOf(int incarnation, int64_t step, const std::vector<int64_t>& rows);

DockSpec CrashSpec();
ConsumerSpec LateConsumer();

class CrashWorkload {
 public:
  // Creates the dock in `registry` (its first incarnation).
  CrashWorkload(uint64_t seed, RecordingStore* store, DockRegistry* registry,
                bool may_delete);

  // `ops` random operations per thread (1 or 3 threads). Puts of a step
  // whose partition is busy stay parked; WaitParked waits for them to end
  // (after the registry's Shutdown).
  void Run(int ops, int threads);
  void WaitParked();

  // What happened, per incarnation, for the checker. Read after Run.
  std::vector<History> histories() const;

 private:
  enum Role { kProduce = 1, kScore = 2, kRead = 4, kAll = 7 };
  struct Held {
    std::string consumer;
    uint64_t lease = 0;
    int64_t step = 0;
    std::vector<int64_t> rows;
  };
  // One thread's state; reset when the dock it works on is replaced.
  struct Actor {
    Actor(uint64_t seed, int roles) : rng(seed), roles(roles) {}
    std::mt19937_64 rng;
    const int roles;
    int incarnation = -1;
    std::shared_ptr<Dock> dock;
    int64_t ids_step = 0;                      // the step the producer writes
    std::map<int64_t, std::set<int64_t>> ids;  // rows whose ids were asked for
    std::map<int64_t, std::set<int64_t>> scored;  // rows whose scores are stored
    std::vector<Held> held;                       // leases not yet ended
    bool late_added = false;
    bool late_removed = false;
    bool extra_added = false;
    std::map<int64_t, std::set<int64_t>> extra;  // rows whose extra is stored
  };

  static bool Chance(Actor& a, double p) {
    return std::uniform_real_distribution<double>(0, 1)(a.rng) < p;
  }
  int64_t Writes() const { return store_->writes(); }

  // `ops` operations; with `until`, as many as run until it is set, then
  // `ops` more.
  void RunActor(Actor& a, int ops, const std::atomic<bool>* until = nullptr);
  // Points `a` at the current dock; false if there is none.
  bool Sync(Actor& a);
  void PutIds(Actor& a);
  void WriteNote(Actor& a);
  void WriteScores(Actor& a, bool with_ack);
  void Read(Actor& a, const std::string& consumer, int32_t rank);
  void EndLease(Actor& a, bool ack);
  void ReleaseOldest(Actor& a);
  // Drops a row or two of a live step as failed or filtered; seals the
  // oldest live step (its rows with no cell are dropped).
  void DropRows(Actor& a);
  void SealOldest(Actor& a);
  void AddLate(Actor& a);
  void RemoveLate(Actor& a);
  // Adds the column `extra` (int32 [1], not rewritable) to the live dock:
  // by a Put that writes it (`adding`) in even incarnations, by AddColumn
  // in odd ones; writes it into a row of a live step that lacks it.
  void AddExtra(Actor& a);
  void WriteExtra(Actor& a, std::vector<ColumnSpec> adding = {});
  // Deletes the dock (if any) and creates it again.
  void Recreate(Actor& a);
  void Done(int incarnation, const std::string& consumer, int64_t step,
            const std::vector<int64_t>& rows, Event event);
  void AddPut(int incarnation, PutRecord put);

  const uint64_t seed_;
  RecordingStore* const store_;
  DockRegistry* const registry_;
  const bool may_delete_;

  mutable tdock::Mutex mu_;
  std::vector<History> histories_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Dock> dock_ ABSL_GUARDED_BY(mu_);  // null after a failed creation
  bool deleting_ ABSL_GUARDED_BY(mu_) = false;       // one deletion per workload
  int32_t next_note_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t parked_ ABSL_GUARDED_BY(mu_) = 0;  // Puts not yet answered
  // (incarnation, step, row) of ids whose Put was not stored, to write again.
  std::vector<std::tuple<int, int64_t, int64_t>> unstored_ids_ ABSL_GUARDED_BY(mu_);
  CondVar parked_cv_;
};

}  // namespace tdock::persist::crash

#endif  // TDOCK_TESTS_PERSIST_CRASH_WORKLOAD_H_
