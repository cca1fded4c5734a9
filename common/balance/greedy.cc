// Greedy longest-processing-time-first partitioning with optional equal
// counts: units by decreasing cost, each to the lightest part with room.
#include <algorithm>
#include <vector>

#include "common/balance/partition_internal.h"

namespace tdock::internal {
namespace {

struct Slot {
  double sum;
  int part;
};

// Min-heap of parts, lightest first (ties: lowest part). Hand-rolled for its
// replace-top: assigning a unit changes only the top, so one sift-down does
// what pop + push would do in two.
class LightestFirst {
 public:
  explicit LightestFirst(int k) {
    slots_.reserve(k);
    for (int p = 0; p < k; ++p) slots_.push_back(Slot{0.0, p});  // a heap
  }
  const Slot& top() const { return slots_[0]; }
  void AddToTop(double cost) {
    slots_[0].sum += cost;
    SiftDown();
  }
  void RemoveTop() {
    slots_[0] = slots_.back();
    slots_.pop_back();
    if (!slots_.empty()) SiftDown();
  }

 private:
  // Written without short-circuits so the compiler emits flag arithmetic
  // rather than hard-to-predict branches.
  static bool Before(const Slot& x, const Slot& y) {
    return (x.sum < y.sum) | ((x.sum == y.sum) & (x.part < y.part));
  }
  void SiftDown() {
    const size_t n = slots_.size();
    const Slot moving = slots_[0];
    size_t i = 0;
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n) child += Before(slots_[child + 1], slots_[child]);
      if (!Before(slots_[child], moving)) break;
      slots_[i] = slots_[child];
      i = child;
    }
    slots_[i] = moving;
  }

  std::vector<Slot> slots_;
};

// With equal counts every part takes floor(n/k) units and `extra` = n % k of
// them one more; a part at the floor has room while extras remain.
class Capacity {
 public:
  Capacity(int n, int k, bool equal_count)
      : equal_count_(equal_count), floor_(n / k), extra_(n % k) {}
  bool HasRoom(int count) const {
    return !equal_count_ || count < floor_ ||
           (count == floor_ && extras_used_ < extra_);
  }
  void Took(int count_after) {
    if (equal_count_ && count_after == floor_ + 1) ++extras_used_;
  }

 private:
  const bool equal_count_;
  const int floor_;
  const int extra_;
  int extras_used_ = 0;
};

}  // namespace

std::vector<int> GreedyLpt(const UnitProblem& problem) {
  const int n = static_cast<int>(problem.costs.size());
  std::vector<int> part_of(n, 0);
  std::vector<int> count(problem.k, 0);
  LightestFirst heap(problem.k);
  Capacity capacity(n, problem.k, problem.equal_count);
  for (int pos = n - 1; pos >= 0; --pos) {
    const int unit = problem.ascending[pos];
    // Parts that lost their room when the extras ran out leave lazily.
    // Total room equals n, so the heap never runs dry here.
    while (!capacity.HasRoom(count[heap.top().part])) heap.RemoveTop();
    const int part = heap.top().part;
    part_of[unit] = part;
    capacity.Took(++count[part]);
    if (capacity.HasRoom(count[part])) {
      heap.AddToTop(problem.costs[unit]);
    } else {
      heap.RemoveTop();
    }
  }
  return part_of;
}

}  // namespace tdock::internal
