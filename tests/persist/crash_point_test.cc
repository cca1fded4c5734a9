// Crash points: randomized workloads against a journaled dock (several
// writers and readers, on one thread or three, leased and BALANCED
// consumers, Put with ack_lease, Nack, rewrites, early releases,
// AddConsumer, DeleteDock (its record failing now and then) and a new dock of
// the same name, failed writes),
// whose journal writes
// are then replayed up to every crash point k (the first k writes survive,
// the rest are lost). At every k:
//   - the server comes back: recovery succeeds;
//   - every Put acknowledged by k is present and whole; a Put in doubt is
//     all there or not at all; a step holding acknowledged cells is gone
//     only if it was released, or every consumer may have been done with it;
//   - a row dropped by an acknowledged Drop (a step sealed by an acknowledged
//     Seal) is dropped (sealed) after recovery, and nothing is dropped or
//     sealed unless a Drop or Seal of it may have been stored; no row a Put
//     of which was acknowledged by k is dropped as sealed (in the concurrent
//     workload Seals race the producer's writes);
//   - draining every consumer after recovery hands out no row whose
//     hand-out (without a lease) or acknowledgement (with one) was answered
//     by k, hands out no row twice, no dropped row, and every row that is
//     ready, not dropped, and that no consumer's answer may have counted as
//     done.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "server/dock/registry.h"
#include "server/persist/persistence.h"
#include "tests/core/dock_test_util.h"
#include "tests/persist/crash_workload.h"
#include "tests/test_util.h"

namespace tdock::persist::crash {
namespace {

using testing::GetSync;
using testing::RowValues;

// The checker of one crash point; failures are collected as text.
class CrashPoint {
 public:
  CrashPoint(const std::vector<History>& histories, int64_t k) : histories_(histories), k_(k) {}

  std::vector<std::string> Check(std::unique_ptr<Store> store) {
    Persistence persistence(std::move(store), {.data_dir = absl::StrCat("crash point ", k_)});
    DockRegistry registry;
    absl::StatusOr<RecoveryStats> recovered = persistence.Recover(registry);
    if (!recovered.ok()) {
      Fail(absl::StrCat("recovery failed: ", recovered.status().ToString()));
      return failures_;
    }
    absl::StatusOr<std::shared_ptr<Dock>> dock = registry.Find("crash");
    if (dock.ok()) {
      CheckDock(**dock);
    } else if (!MayBeAbsent()) {
      Fail(absl::StrCat("the dock is gone: ", dock.status().ToString()));
    }
    registry.Shutdown();
    return failures_;
  }

 private:
  bool Acked(const Event& e) const { return e.acked <= k_; }
  bool Possibly(const Event& e) const { return e.issued < k_ && e.acked != kNever; }
  void Fail(std::string what) { failures_.push_back(absl::StrCat("crash point ", k_, ": ", what)); }

  // The incarnations the recovered dock may be: its creation may be stored,
  // no later creation surely is, and its deletion surely is not.
  std::vector<int> Candidates() const {
    std::vector<int> out;
    for (int i = static_cast<int>(histories_.size()) - 1; i >= 0; --i) {
      const History& h = histories_[i];
      if (!Possibly(h.created) || Acked(h.deleted)) continue;
      if (i + 1 < static_cast<int>(histories_.size()) && Acked(histories_[i + 1].created)) {
        continue;
      }
      out.push_back(i);
    }
    return out;
  }

  // No dock is a right outcome: the last creation surely stored may have
  // been deleted, or none is surely stored.
  bool MayBeAbsent() const {
    for (int i = static_cast<int>(histories_.size()) - 1; i >= 0; --i) {
      if (Acked(histories_[i].created)) return Possibly(histories_[i].deleted);
    }
    return true;
  }

  bool DoneBy(const History& h, const std::string& consumer, int64_t step, int64_t row,
              bool acked) const {
    auto it = h.done.find({consumer, step, row});
    if (it == h.done.end()) return false;
    for (const Event& e : it->second) {
      if (acked ? Acked(e) : Possibly(e)) return true;
    }
    return false;
  }

  bool AnyPossibly(const std::vector<Event>& events) const {
    return std::any_of(events.begin(), events.end(), [&](const Event& e) { return Possibly(e); });
  }
  bool AnyAcked(const std::vector<Event>& events) const {
    return std::any_of(events.begin(), events.end(), [&](const Event& e) { return Acked(e); });
  }
  // Some Put of the row was acknowledged by this crash point.
  bool AckedPut(const History& h, int64_t step, int64_t row) const {
    return std::any_of(h.puts.begin(), h.puts.end(), [&](const PutRecord& put) {
      return put.step == step && Acked(put.event) &&
             std::find(put.rows.begin(), put.rows.end(), row) != put.rows.end();
    });
  }
  // A Drop naming the row, or a Seal of its step, may have been stored.
  bool MayBeDropped(const History& h, int64_t step, int64_t row) const {
    auto drop = h.drops.find({step, row});
    auto seal = h.seals.find(step);
    return (drop != h.drops.end() && AnyPossibly(drop->second)) ||
           (seal != h.seals.end() && AnyPossibly(seal->second));
  }

  // The live steps' dropped rows after recovery, with the reason the dock
  // names; each must be one a Drop (a Seal) may have stored, and each row of
  // an acknowledged Drop must be there. The seal likewise.
  std::map<int64_t, std::set<int64_t>> CheckDrops(Dock& dock, const History& h,
                                                  const std::set<int64_t>& live) {
    std::map<int64_t, std::set<int64_t>> dropped;
    for (int64_t step : live) {
      for (int64_t row = 0; row < kRows; ++row) {
        absl::StatusOr<Batch> read = dock.Read(step, {row}, {});
        const std::string message(read.status().message());
        const size_t at = message.find("was dropped (");
        if (at == std::string::npos) continue;
        dropped[step].insert(row);
        const bool sealed = message.find("(sealed)", at) != std::string::npos;
        auto drop = h.drops.find({step, row});
        auto seal = h.seals.find(step);
        const bool may = sealed ? seal != h.seals.end() && AnyPossibly(seal->second)
                                : drop != h.drops.end() && AnyPossibly(drop->second);
        if (!may) Fail(absl::StrCat("step ", step, " row ", row, ": ", message, ", but no such drop may have been stored"));
        // A Seal drops only rows with no write: a write it raced (a first
        // write being stored) keeps its row, and one acknowledged by this
        // crash point is never lost to it. (A write whose record came after
        // the Seal's and is lost here leaves an orphan, dropped as sealed.)
        if (sealed && AckedPut(h, step, row)) {
          Fail(absl::StrCat("step ", step, " row ", row,
                            ": dropped as sealed, but a Put of it was acknowledged"));
        }
      }
    }
    for (const auto& [cell, events] : h.drops) {
      if (live.count(cell.first) != 0 && AnyAcked(events) && dropped[cell.first].count(cell.second) == 0) {
        Fail(absl::StrCat("step ", cell.first, " row ", cell.second,
                          ": an acknowledged drop is not there after recovery"));
      }
    }
    for (const StepStats& step : dock.Stats().steps) {
      auto seal = h.seals.find(step.step);
      const bool acked = seal != h.seals.end() && AnyAcked(seal->second);
      const bool possibly = seal != h.seals.end() && AnyPossibly(seal->second);
      if ((acked && !step.sealed) || (step.sealed && !possibly)) {
        Fail(absl::StrCat("step ", step.step, " is ", step.sealed ? "" : "not ",
                          "sealed after recovery; its seal was ", acked ? "acknowledged" : "never stored"));
      }
    }
    return dropped;
  }

  void CheckDock(Dock& dock) {
    const DockSpec spec = dock.spec();
    std::set<int64_t> live;
    for (const StepStats& s : dock.Stats().steps) live.insert(s.step);
    // Which incarnation came back: the first candidate whose Puts check out
    // (reading only); cells differ between incarnations.
    const std::vector<int> candidates = Candidates();
    if (candidates.empty()) {
      Fail("a dock is there, but no creation of it may have been stored");
      return;
    }
    int incarnation = candidates.front();
    std::vector<std::string> first_failures;
    for (int candidate : candidates) {
      std::vector<std::string> failures;
      CheckPuts(dock, histories_[candidate], spec, live, failures);
      if (failures.empty()) {
        incarnation = candidate;
        first_failures.clear();
        break;
      }
      if (candidate == candidates.front()) first_failures = std::move(failures);
    }
    for (std::string& f : first_failures) failures_.push_back(std::move(f));
    const History& h = histories_[incarnation];
    std::map<int64_t, std::set<int64_t>> dropped = CheckDrops(dock, h, live);
    CheckLateRemoval(spec, h);
    CheckKeys(dock, h, incarnation, live);
    // Which cells are there, before draining releases steps.
    std::map<int64_t, std::vector<std::set<std::string>>> cells;
    for (int64_t step : live) {
      cells[step].resize(kRows);
      for (int64_t row = 0; row < kRows; ++row) {
        for (const ColumnSpec& c : spec.columns) {
          if (dock.Read(step, {row}, {c.name}).ok()) cells[step][row].insert(c.name);
        }
      }
    }
    // The producers write what is missing, so every row can reach every
    // consumer.
    for (int64_t step : live) {
      for (const ColumnSpec& c : spec.columns) {
        std::vector<int64_t> rows;
        for (int64_t row = 0; row < kRows; ++row) {
          if (cells[step][row].count(c.name) == 0 && dropped[step].count(row) == 0) {
            rows.push_back(row);
          }
        }
        if (rows.empty()) continue;
        absl::StatusOr<PutResult> put =
            testing::PutSync(dock, step, rows, {ColumnOf(c.name, incarnation, step, rows)});
        if (!put.ok()) {
          Fail(absl::StrCat("step ", step, ": writing the missing ", c.name,
                            " cells failed: ", put.status().ToString()));
        }
      }
    }
    // Leases still in flight come back, as when their workers are gone.
    for (const auto& [consumer, ids] : h.leases) {
      for (uint64_t id : ids) (void)dock.Nack(consumer, id);
    }
    for (int64_t step : live) {
      for (const ConsumerSpec& consumer : spec.consumers) {
        if (consumer.removed) continue;
        CheckDrain(dock, h, consumer, step, dropped[step]);
      }
    }
  }

  // Every Put acknowledged by k is there and whole, a Put in doubt is all
  // there or not at all; a rewritten cell holds a value that may have been
  // stored, no older than the last acknowledged one.
  void CheckPuts(Dock& dock, const History& h, const DockSpec& spec,
                 const std::set<int64_t>& live, std::vector<std::string>& failures) const {
    auto fail = [&](std::string what) {
      failures.push_back(absl::StrCat("crash point ", k_, ": ", what));
    };
    const int incarnation = static_cast<int>(&h - histories_.data());
    std::map<std::pair<int64_t, int64_t>, std::pair<std::set<int32_t>, int32_t>> notes;
    for (const PutRecord& put : h.puts) {
      if (!Possibly(put.event)) continue;
      if (live.count(put.step) == 0) {
        if (Acked(put.event) && !MayBeReleased(h, spec, put.step)) {
          fail(absl::StrCat("step ", put.step, " holds an acknowledged Put of ", put.column,
                            " but is gone after recovery"));
        }
        continue;
      }
      if (put.column == "note") {
        auto& [possible, floor] = notes[{put.step, put.rows[0]}];
        possible.insert(put.note);
        if (Acked(put.event)) floor = std::max(floor, put.note);
        continue;
      }
      int present = 0;
      int gone = 0;  // rows dropped since: their cells are not served
      for (int64_t row : put.rows) {
        absl::StatusOr<Batch> read = dock.Read(put.step, {row}, {put.column});
        if (!read.ok()) {
          gone += read.status().message().find("was dropped") != absl::string_view::npos;
          continue;
        }
        ++present;
        const bool right =
            put.column == "ids"     ? RowValues<int32_t>(read->columns[0], 0) ==
                                          IdsOf(incarnation, put.step, row)
            : put.column == "extra" ? RowValues<int32_t>(read->columns[0], 0) ==
                                          std::vector<int32_t>{put.note}
                                    : RowValues<float>(read->columns[0], 0) ==
                                          std::vector<float>{ScoreOf(incarnation, put.step, row)};
        if (!right) fail(absl::StrCat("step ", put.step, " row ", row, " ", put.column, " differs"));
      }
      const int rows = static_cast<int>(put.rows.size());
      // Whole: every row there or dropped since; absent: none there.
      if (Acked(put.event) && present + gone != rows) {
        fail(absl::StrCat("an acknowledged Put of step ", put.step, " ", put.column, " has ",
                          present, " of its ", rows, " cells"));
      } else if (present != 0 && present + gone != rows) {
        fail(absl::StrCat("a Put of step ", put.step, " ", put.column, " is partial: ", present,
                          " of ", rows, " cells"));
      }
    }
    for (const auto& [cell, what] : notes) {
      const auto& [possible, floor] = what;
      absl::StatusOr<Batch> read = dock.Read(cell.first, {cell.second}, {"note"});
      if (!read.ok()) {
        const bool dropped = read.status().message().find("was dropped") != absl::string_view::npos;
        if (floor > 0 && !dropped) {
          fail(absl::StrCat("step ", cell.first, " row ", cell.second, ": note ", floor,
                            " was acknowledged, but the cell is not there"));
        }
        continue;
      }
      const int32_t note = RowValues<int32_t>(read->columns[0], 0).at(0);
      if (possible.count(note) == 0 || note < floor) {
        fail(absl::StrCat("step ", cell.first, " row ", cell.second, ": note is ", note,
                          ", the last acknowledged is ", floor));
      }
    }
  }

  // Keys: a row an acknowledged Put named has its key (a dropped one too: the
  // listing shows it), and a row has a key only if a Put naming it may have
  // been stored; a row not dropped is found by its key.
  void CheckKeys(Dock& dock, const History& h, int incarnation, const std::set<int64_t>& live) {
    std::map<std::pair<int64_t, int64_t>, std::pair<bool, bool>> named;  // acked, possibly
    for (const PutRecord& put : h.puts) {
      for (int64_t row : put.rows) {
        auto& [acked, possibly] = named[{put.step, row}];
        acked |= Acked(put.event);
        possibly |= Possibly(put.event);
      }
    }
    for (int64_t step : live) {
      absl::StatusOr<RowListing> listing = dock.ListRows(step);
      if (!listing.ok()) {
        Fail(absl::StrCat("step ", step, ": ListRows failed: ", listing.status().ToString()));
        continue;
      }
      for (const RowState& row : listing->rows) {
        auto it = named.find({step, row.row});
        const bool acked = it != named.end() && it->second.first;
        const bool possibly = it != named.end() && it->second.second;
        const std::string want = KeyOf(incarnation, step, row.row);
        const std::string where = absl::StrCat("step ", step, " row ", row.row, ": ");
        if (acked && row.key != want) {
          Fail(absl::StrCat(where, "an acknowledged Put named key ", want, ", the row has '",
                            row.key, "'"));
        }
        if (!row.key.empty() && (row.key != want || !possibly)) {
          Fail(absl::StrCat(where, "key '", row.key, "', which no stored Put may have named"));
        }
        if (!row.key.empty() && row.written.empty()) {
          Fail(absl::StrCat(where, "key '", row.key, "' on a row with no cell"));
        } else if (!row.key.empty() && row.dropped == DropReason::kUnspecified) {
          absl::StatusOr<Batch> read = dock.ReadKeys({row.key}, {row.written.front()});
          if (!read.ok() || read->rows != std::vector<int64_t>{row.row}) {
            Fail(absl::StrCat(where, "its key does not find it: ",
                              read.ok() ? "another row" : read.status().ToString()));
          }
        }
      }
    }
  }

  // The removal of `late` is in the recovered spec once acknowledged, and
  // only if it may have been stored; the addition of column `extra` too.
  void CheckLateRemoval(const DockSpec& spec, const History& h) {
    // The column `extra` likewise.
    const bool extra = spec.ColumnIndex("extra") >= 0;
    if (Acked(h.extra_added) && !extra) {
      Fail("the acknowledged addition of column extra is not there after recovery");
    }
    if (extra && !Possibly(h.extra_added)) {
      Fail("column extra is there after recovery, but no addition of it may have been stored");
    }
    bool removed = false;
    for (const ConsumerSpec& c : spec.consumers) removed |= c.name == "late" && c.removed;
    if (Acked(h.late_removed) && !removed) {
      Fail("the acknowledged removal of late is not there after recovery");
    }
    if (removed && !Possibly(h.late_removed)) {
      Fail("late is removed after recovery, but no removal of it may have been stored");
    }
  }

  // A step may be gone if it was released, or if every consumer may have
  // taken every row (or the row may have been dropped). `late` counts only if the step was live after it was
  // added (an acknowledged Put of the step was asked for after that): a
  // step done before never reached it.
  bool MayBeReleased(const History& h, const DockSpec& spec, int64_t step) const {
    auto released = h.releases.find(step);
    if (released != h.releases.end() && released->second < k_) return true;
    bool late_joined = false;
    for (const PutRecord& put : h.puts) {
      late_joined |= put.step == step && Acked(put.event) && put.event.issued >= h.late_added.acked;
    }
    for (const ConsumerSpec& c : spec.consumers) {
      // A removed consumer holds nothing (its removal was stored before any
      // release it allowed).
      if (c.removed || (c.name == LateConsumer().name && !late_joined)) continue;
      for (int64_t row = 0; row < kRows; ++row) {
        if (!DoneBy(h, c.name, step, row, /*acked=*/false) && !MayBeDropped(h, step, row)) {
          return false;
        }
      }
    }
    return true;
  }

  void CheckDrain(Dock& dock, const History& h, const ConsumerSpec& consumer, int64_t step,
                  const std::set<int64_t>& dropped) {
    std::vector<int64_t> drained;
    for (int32_t rank = 0; rank < consumer.dp_size; ++rank) {
      for (int i = 0; i < 4 * kRows; ++i) {
        GetInput in = testing::GetOf(consumer.name);
        in.rank = rank;
        in.step = step;
        absl::StatusOr<Batch> got = GetSync(dock, in);
        if (!got.ok()) {
          Fail(absl::StrCat(consumer.name, " step ", step, ": Get failed: ",
                            got.status().ToString()));
          return;
        }
        drained.insert(drained.end(), got->rows.begin(), got->rows.end());
        if (got->lease_id != 0) (void)dock.Ack(consumer.name, got->lease_id);
        // A balanced rank takes an empty share as a round: it goes on after it.
        if (got->end_of_step || got->timed_out || (got->rows.empty() && got->round < 0)) break;
      }
    }
    std::set<int64_t> seen;
    for (int64_t row : drained) {
      if (!seen.insert(row).second) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row, " handed out twice"));
      }
      if (dropped.count(row) != 0) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " is dropped and is handed out"));
      }
      if (DoneBy(h, consumer.name, step, row, /*acked=*/true)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was acknowledged before the crash and is handed out again"));
      }
    }
    for (int64_t row = 0; row < kRows; ++row) {
      if (seen.count(row) == 0 && dropped.count(row) == 0 &&
          !DoneBy(h, consumer.name, step, row, /*acked=*/false)) {
        Fail(absl::StrCat(consumer.name, " step ", step, ": row ", row,
                          " was never acknowledged, but is not handed out"));
      }
    }
  }

  const std::vector<History>& histories_;
  const int64_t k_;
  std::vector<std::string> failures_;
};

// What the workloads of a test did, so that a run that checks nothing shows.
struct Tally {
  int64_t points = 0;     // crash points checked
  int64_t recreated = 0;  // docks deleted and created again
  int64_t notes = 0;      // rewrites acknowledged
  int64_t drops = 0;      // Drop calls acknowledged (per row)
  int64_t seals = 0;      // Seal calls acknowledged
  int64_t removals = 0;   // RemoveConsumer calls acknowledged
  int64_t extras = 0;     // cells of the column added at run time, acknowledged
  int64_t deletes_failed = 0;  // DeleteDock calls whose record failed
  std::vector<std::string> failures;

  void Report(const char* what) {
    std::printf("crash points: %s: %lld crash points, %lld docks re-created, %lld rewrites, "
                "%lld rows dropped, %lld seals, %lld removals, %lld cells of an added column, "
                "%lld failed deletions, %zu failures\n",
                what, static_cast<long long>(points), static_cast<long long>(recreated),
                static_cast<long long>(notes), static_cast<long long>(drops),
                static_cast<long long>(seals), static_cast<long long>(removals),
                static_cast<long long>(extras), static_cast<long long>(deletes_failed),
                failures.size());
    for (size_t i = 0; i < failures.size() && i < 40; ++i) ADD_FAILURE() << failures[i];
  }
};

// A key with its bytes that are not letters or digits as \<decimal>.
std::string Readable(absl::string_view key) {
  std::string out;
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      out += c;
    } else {
      absl::StrAppend(&out, "\\", static_cast<int>(u));
    }
  }
  return out;
}

void PrintJournal(const RecordingStore& store, int64_t writes,
                  const std::vector<History>& histories) {
  static constexpr const char* kOps[] = {"put", "delete", "delete-range"};
  int64_t i = 0;
  for (const StoreBatch& batch : store.Log(writes)) {
    std::string line;
    for (const StoreBatch::Op& op : batch.ops()) {
      absl::StrAppend(&line, " ", kOps[static_cast<int>(op.kind)], " ", Readable(op.key));
    }
    std::printf("write %lld:%s\n", static_cast<long long>(i++), line.c_str());
  }
  auto event = [](const Event& e) {
    auto at = [](int64_t w) { return w == kNever ? std::string("-") : absl::StrCat(w); };
    return absl::StrCat(at(e.issued), "/", at(e.acked));
  };
  for (size_t n = 0; n < histories.size(); ++n) {
    const History& h = histories[n];
    std::printf("incarnation %zu: created %s, deleted %s, late added %s\n", n,
                event(h.created).c_str(), event(h.deleted).c_str(), event(h.late_added).c_str());
    for (const PutRecord& p : h.puts) {
      std::printf("  put step %lld %s rows %s: %s\n", static_cast<long long>(p.step),
                  p.column.c_str(), absl::StrJoin(p.rows, ",").c_str(), event(p.event).c_str());
    }
    for (const auto& [key, events] : h.done) {
      for (const Event& e : events) {
        std::printf("  done %s step %lld row %lld: %s\n", std::get<0>(key).c_str(),
                    static_cast<long long>(std::get<1>(key)),
                    static_cast<long long>(std::get<2>(key)), event(e).c_str());
      }
    }
    for (const auto& [cell, events] : h.drops) {
      for (const Event& e : events) {
        std::printf("  drop step %lld row %lld: %s\n", static_cast<long long>(cell.first),
                    static_cast<long long>(cell.second), event(e).c_str());
      }
    }
    for (const auto& [step, events] : h.seals) {
      for (const Event& e : events) {
        std::printf("  seal step %lld: %s\n", static_cast<long long>(step), event(e).c_str());
      }
    }
    for (const auto& [step, issued] : h.releases) {
      std::printf("  release step %lld: %lld\n", static_cast<long long>(step),
                  static_cast<long long>(issued));
    }
  }
}

// Runs workload `seed` and checks every crash point.
void RunAndCheck(uint64_t seed, int ops, int threads, Tally& tally) {
  auto owned = std::make_unique<RecordingStore>();
  RecordingStore* store = owned.get();
  Persistence persistence(std::move(owned), {.data_dir = "recording"});
  DockRegistry registry;
  EXPECT_OK(persistence.Recover(registry).status());
  CrashWorkload workload(seed, store, &registry, /*may_delete=*/seed % 2 == 0);
  workload.Run(ops, threads);
  registry.Shutdown();
  workload.WaitParked();
  EXPECT_OK(persistence.journal().Flush());
  const int64_t writes = store->writes();
  const std::vector<History> histories = workload.histories();
  tally.recreated += static_cast<int64_t>(histories.size()) - 1;
  for (const History& h : histories) {
    for (const PutRecord& put : h.puts) {
      tally.notes += put.column == "note";
      tally.extras += put.column == "extra";
    }
    for (const auto& [cell, events] : h.drops) {
      for (const Event& e : events) tally.drops += e.acked != kNever;
    }
    for (const auto& [step, events] : h.seals) {
      for (const Event& e : events) tally.seals += e.acked != kNever;
    }
    tally.removals += h.late_removed.acked != kNever;
    tally.deletes_failed += h.deletes_failed;
  }
  const size_t failed_before = tally.failures.size();
  for (int64_t k = 0; k <= writes; ++k) {
    for (std::string& f : CrashPoint(histories, k).Check(store->Replay(k))) {
      tally.failures.push_back(absl::StrCat("seed ", seed, " (", threads, " threads) ", f));
    }
  }
  // The first failing workload's journal and history, to find the cause.
  if (tally.failures.size() > failed_before && failed_before == 0) {
    PrintJournal(*store, writes, histories);
  }
  tally.points += writes + 1;
}

// Every other workload deletes the dock and creates it again midway (some
// of the deletions' records fail, and the dock goes on).
TEST(CrashPoint, EveryPrefixOfTheJournalRecovers) {
  constexpr int kWorkloads = 24;
  constexpr int kOps = 160;
  Tally tally;
  for (uint64_t seed = 1; seed <= kWorkloads; ++seed) RunAndCheck(seed, kOps, 1, tally);
  tally.Report("24 workloads of 160 operations");
  EXPECT_GT(tally.points, kWorkloads * 20);
  EXPECT_GT(tally.recreated, 0);
  EXPECT_GT(tally.notes, 0);
  EXPECT_GT(tally.drops, 0);
  EXPECT_GT(tally.seals, 0);
  EXPECT_GT(tally.removals, 0);
  EXPECT_GT(tally.extras, 0);
  EXPECT_GT(tally.deletes_failed, 0);
}

// The same with a producer, the scorer and the readers on three threads at
// once (the interleaving differs from run to run; the checks do not depend
// on it).
TEST(CrashPoint, EveryPrefixOfAConcurrentJournalRecovers) {
  constexpr int kWorkloads = 12;
  constexpr int kOps = 240;
  Tally tally;
  for (uint64_t seed = 101; seed < 101 + kWorkloads; ++seed) RunAndCheck(seed, kOps, 3, tally);
  tally.Report("12 workloads of 3 threads at once");
  EXPECT_GT(tally.points, kWorkloads * 20);
}

}  // namespace
}  // namespace tdock::persist::crash
