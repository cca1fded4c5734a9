// Karmarkar–Karp largest differencing for k-way partitioning.
//
// A state is a k-tuple of disjoint unit sets, kept sorted heaviest first.
// Repeatedly the two states with the largest spread (heaviest minus lightest
// set) are merged: set i of one joins set k-1-i of the other, pairing heavy
// with light. With equal counts every initial state holds one unit per set
// (a window of k consecutive units in sorted order, short of k padded by
// zero-cost dummies), so all sets of a state always hold the same count.
//
// Layout, chosen so a merge allocates nothing in the common case: units form
// singly linked lists through next_ (joining two sets is O(1)); a state's sets
// live in a block of pool_; blocks have power-of-two capacities and are
// recycled through per-capacity free lists. Empty sets are not stored, so a
// state of one unit takes one slot, not k.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "common/balance/partition_internal.h"

namespace tdock::internal {
namespace {

struct Set {
  double sum = 0;
  int count = 0;
  int head = -1;  // first unit of the list, -1 when empty
  int tail = -1;
};

// Heaviest first; ties by count, then by first unit, larger first (unique
// among non-empty sets), so the order is total and the result deterministic.
// The last rule makes a window of units in ascending (cost, id) order, read
// backwards, already sorted.
struct Heavier {
  bool operator()(const Set& x, const Set& y) const {
    if (x.sum != y.sum) return x.sum > y.sum;
    if (x.count != y.count) return x.count > y.count;
    return x.head > y.head;
  }
};

// Solves one problem; single use, not thread-safe (each call makes its own).
class KarmarkarKarpSolver {
 public:
  explicit KarmarkarKarpSolver(const UnitProblem& problem)
      : problem_(problem), k_(problem.k) {}

  std::vector<int> Solve();

 private:
  struct State {
    int offset = 0;  // first slot in pool_
    int size = 0;    // non-empty sets stored
    int cap = 0;     // slots in the block, a power of two
  };
  // Heap entry; the heap pops the largest spread, then the heaviest top set,
  // then the smallest id.
  struct Entry {
    double spread;
    double top;
    int id;
  };
  struct PopsLater {
    bool operator()(const Entry& x, const Entry& y) const {
      if (x.spread != y.spread) return x.spread < y.spread;
      if (x.top != y.top) return x.top < y.top;
      return x.id > y.id;
    }
  };

  void InitEqualCount();
  void InitFree();
  int Allocate(int cap);
  void Release(const State& state);
  Entry MakeEntry(int id) const;
  void Merge(int into, int from);
  void Push(int id);
  int Pop();
  size_t Remaining() const { return heap_.size() + (singles_ - next_single_); }

  const UnitProblem& problem_;
  const int k_;
  std::vector<int> next_;  // next unit in the same set, -1 at the end
  std::vector<Set> pool_;
  std::vector<std::vector<int>> free_blocks_;  // by log2(capacity)
  std::vector<State> states_;
  std::vector<Entry> heap_;
  // Free mode: states [next_single_, singles_) hold one unit each and have
  // not been popped yet; they come out in id order.
  int next_single_ = 0;
  int singles_ = 0;
  std::vector<Set> scratch_;
  std::vector<Set> merged_;
};

int KarmarkarKarpSolver::Allocate(int cap) {
  const int cls = std::countr_zero(static_cast<unsigned>(cap));
  if (cls < static_cast<int>(free_blocks_.size()) &&
      !free_blocks_[cls].empty()) {
    const int offset = free_blocks_[cls].back();
    free_blocks_[cls].pop_back();
    return offset;
  }
  const int offset = static_cast<int>(pool_.size());
  pool_.resize(pool_.size() + cap);
  return offset;
}

void KarmarkarKarpSolver::Release(const State& state) {
  const int cls = std::countr_zero(static_cast<unsigned>(state.cap));
  if (cls >= static_cast<int>(free_blocks_.size())) {
    free_blocks_.resize(cls + 1);
  }
  free_blocks_[cls].push_back(state.offset);
}

// Windows of k units in ascending order, each one state of k singleton sets.
// When k does not divide n, zero-cost dummies (ids n, n+1, ...) fill the
// first window up to k. All dummies sit in that one window, one per set, and
// merges keep sets disjoint, so no part gets two: part sizes differ by at
// most one.
void KarmarkarKarpSolver::InitEqualCount() {
  const int n = static_cast<int>(problem_.costs.size());
  const int pad = (k_ - n % k_) % k_;
  const int cap = static_cast<int>(std::bit_ceil(static_cast<unsigned>(k_)));
  next_.assign(n + pad, -1);
  const int windows = (n + pad) / k_;
  pool_.reserve(static_cast<size_t>(windows) * cap);
  for (int w = 0; w < windows; ++w) {
    State state{Allocate(cap), k_, cap};
    for (int i = 0; i < k_; ++i) {
      const int pos = w * k_ + (k_ - 1 - i) - pad;  // read backwards
      const int unit = pos < 0 ? n + (pos + pad) : problem_.ascending[pos];
      const double cost = pos < 0 ? 0.0 : problem_.costs[unit];
      pool_[state.offset + i] = Set{cost, 1, unit, unit};
    }
    if (w == 0 && pad > 0) {  // dummies (ids >= n) break the id order
      std::sort(pool_.begin() + state.offset,
                pool_.begin() + state.offset + k_, Heavier());
    }
    states_.push_back(state);
    Push(w);
  }
}

// One state per unit. They would leave the heap heaviest first (ties by
// id), so instead of the heap they wait in that order as ids 0..n-1 and Pop
// takes the next of them or the heap's top, whichever comes first.
void KarmarkarKarpSolver::InitFree() {
  const int n = static_cast<int>(problem_.costs.size());
  next_.assign(n, -1);
  pool_.reserve(2 * static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const int unit = problem_.ascending[n - 1 - id];
    State state{Allocate(1), 1, 1};
    pool_[state.offset] = Set{problem_.costs[unit], 1, unit, unit};
    states_.push_back(state);
  }
  singles_ = n;
}

KarmarkarKarpSolver::Entry KarmarkarKarpSolver::MakeEntry(int id) const {
  const State& s = states_[id];
  const double top = pool_[s.offset].sum;
  const double bottom = s.size == k_ ? pool_[s.offset + k_ - 1].sum : 0.0;
  return Entry{top - bottom, top, id};
}

void KarmarkarKarpSolver::Push(int id) {
  heap_.push_back(MakeEntry(id));
  std::push_heap(heap_.begin(), heap_.end(), PopsLater());
}

int KarmarkarKarpSolver::Pop() {
  if (next_single_ < singles_ &&
      (heap_.empty() || PopsLater()(heap_.front(), MakeEntry(next_single_)))) {
    return next_single_++;
  }
  std::pop_heap(heap_.begin(), heap_.end(), PopsLater());
  const int id = heap_.back().id;
  heap_.pop_back();
  return id;
}

// Set i of `into` joins set k-1-i of `from`; slots past a state's size are
// empty sets. Only slots where both hold a set change, so just those are
// sorted and then merged with the two untouched runs, which are already
// heaviest first. The result replaces `into`; `from`'s block is recycled.
void KarmarkarKarpSolver::Merge(int into, int from) {
  const State a = states_[into];
  const State b = states_[from];
  const int lo = std::max(0, k_ - b.size);  // first slot facing a set
  const int joined = std::max(0, a.size - lo);
  const int na = std::min(a.size, lo);        // `into`'s sets facing empty
  const int nb = std::min(b.size, k_ - a.size);  // `from`'s facing empty
  State out = a;
  out.size = joined + na + nb;
  if (out.size > a.cap) {  // before taking iterators: may grow pool_
    out.cap = static_cast<int>(std::bit_ceil(static_cast<unsigned>(out.size)));
    out.offset = Allocate(out.cap);
  }
  for (int i = lo; i < a.size; ++i) {
    const Set& x = pool_[a.offset + i];
    const Set& y = pool_[b.offset + k_ - 1 - i];
    next_[x.tail] = y.head;
    scratch_[i - lo] = Set{x.sum + y.sum, x.count + y.count, x.head, y.tail};
  }
  std::sort(scratch_.begin(), scratch_.begin() + joined, Heavier());
  const auto a_only = pool_.begin() + a.offset;
  const auto b_only = pool_.begin() + b.offset;
  const auto merged_end =
      std::merge(scratch_.begin(), scratch_.begin() + joined, a_only,
                 a_only + na, merged_.begin(), Heavier());
  // `into`'s sets are all in merged_ now, so its block may be overwritten.
  std::merge(merged_.begin(), merged_end, b_only, b_only + nb,
             pool_.begin() + out.offset, Heavier());
  if (out.offset != a.offset) Release(a);
  Release(b);
  states_[into] = out;
}

std::vector<int> KarmarkarKarpSolver::Solve() {
  const int n = static_cast<int>(problem_.costs.size());
  std::vector<int> part_of(n, 0);
  if (n == 0) return part_of;
  scratch_.resize(k_);
  merged_.resize(k_);
  if (problem_.equal_count) {
    InitEqualCount();
  } else {
    InitFree();
  }
  while (Remaining() > 1) {
    const int a = Pop();
    const int b = Pop();
    Merge(a, b);
    Push(a);
  }
  const State& last = states_[Pop()];
  for (int i = 0; i < last.size; ++i) {
    for (int u = pool_[last.offset + i].head; u != -1; u = next_[u]) {
      if (u < n) part_of[u] = i;  // ids >= n are dummies
    }
  }
  return part_of;
}

}  // namespace

std::vector<int> KarmarkarKarp(const UnitProblem& problem) {
  return KarmarkarKarpSolver(problem).Solve();
}

}  // namespace tdock::internal
