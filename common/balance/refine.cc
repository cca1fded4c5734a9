// Local refinement of a partition.
//
// Each step takes the heaviest part H and a lighter part P (the lightest
// first, then the others by increasing cost) with difference D > 0, and
// either swaps a unit x of H with a unit y of P or moves x to P. Shifting
// d = c(x) - c(y) (or c(x)) from H to P with 0 < d < D leaves both parts
// strictly between their old costs, so the maximum never rises; the best step
// takes d closest to D/2. Every step lowers the sum of squared part costs by
// 2·d·(D - d) > 0, so the pass terminates. Swaps keep part sizes; a move is
// allowed with equal counts only from a part holding one unit more than P,
// which keeps the multiset of sizes.
//
// Each part's members stay sorted by (cost, id), so the best swap between two
// parts is one merge-like scan and the best move one binary search.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/time/clock.h"
#include "common/balance/partition_internal.h"

namespace tdock::internal {
namespace {

// Refines one assignment in place; single use, not thread-safe.
class Refiner {
 public:
  Refiner(const UnitProblem& problem, std::vector<int>* part_of);
  void Run(absl::Time deadline);

 private:
  // Unit `out` leaves the heavy part; unit `in` (-1 for a move) comes back.
  struct Step {
    int out = -1;
    int in = -1;
    double gain = 0;  // how much the pair's maximum drops
  };

  bool StepOnce();
  bool TryPair(int heavy, int light);
  void BestSwap(int heavy, int light, double diff, Step* best) const;
  void BestMove(int heavy, int light, double diff, Step* best) const;
  void Apply(int heavy, int light, const Step& step);
  void Erase(int part, int unit);
  void Insert(int part, int unit);
  bool CostLess(int u, int v) const {
    const double cu = costs_[u], cv = costs_[v];
    return cu != cv ? cu < cv : u < v;
  }

  const UnitProblem& problem_;
  absl::Span<const double> costs_;
  std::vector<int>& part_of_;
  std::vector<std::vector<int>> members_;  // per part, sorted by CostLess
  std::vector<double> sums_;
  std::vector<int> order_;  // scratch: parts by increasing cost
  double eps_ = 0;          // gains at or below this are rounding noise
};

Refiner::Refiner(const UnitProblem& problem, std::vector<int>* part_of)
    : problem_(problem),
      costs_(problem.costs),
      part_of_(*part_of),
      members_(problem.k),
      sums_(problem.k, 0.0) {
  double total = 0;
  for (int unit : problem.ascending) {
    const int p = part_of_[unit];
    members_[p].push_back(unit);
    sums_[p] += costs_[unit];
    total += costs_[unit];
  }
  eps_ = total * 1e-12;
}

void Refiner::Run(absl::Time deadline) {
  // A generous cap on top of the guaranteed termination.
  const int64_t max_steps =
      16 * static_cast<int64_t>(costs_.size()) + 64 * problem_.k;
  for (int64_t step = 0; step < max_steps; ++step) {
    if (step % 16 == 0 && absl::Now() >= deadline) return;
    if (!StepOnce()) return;
  }
}

bool Refiner::StepOnce() {
  const int k = problem_.k;
  const int heavy = static_cast<int>(
      std::max_element(sums_.begin(), sums_.end()) - sums_.begin());
  const int light = static_cast<int>(
      std::min_element(sums_.begin(), sums_.end()) - sums_.begin());
  if (sums_[heavy] - sums_[light] <= eps_) return false;
  if (TryPair(heavy, light)) return true;
  order_.resize(k);
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [this](int x, int y) {
    return sums_[x] != sums_[y] ? sums_[x] < sums_[y] : x < y;
  });
  for (int p : order_) {
    if (sums_[heavy] - sums_[p] <= eps_) break;
    if (p != light && TryPair(heavy, p)) return true;
  }
  return false;
}

bool Refiner::TryPair(int heavy, int light) {
  const double diff = sums_[heavy] - sums_[light];
  Step best;
  best.gain = eps_;
  BestSwap(heavy, light, diff, &best);
  const bool may_move =
      !problem_.equal_count ||
      members_[heavy].size() == members_[light].size() + 1;
  if (may_move) BestMove(heavy, light, diff, &best);
  if (best.out < 0) return false;
  Apply(heavy, light, best);
  return true;
}

// For each x of the heavy part (ascending) the best partner y has cost
// closest to c(x) - D/2; that target only grows, so one pointer sweeps the
// light part once.
void Refiner::BestSwap(int heavy, int light, double diff, Step* best) const {
  const std::vector<int>& h = members_[heavy];
  const std::vector<int>& l = members_[light];
  if (l.empty()) return;
  size_t j = 0;
  for (int x : h) {
    const double target = costs_[x] - diff / 2;
    while (j < l.size() && costs_[l[j]] < target) ++j;
    for (size_t c = (j == 0 ? 0 : j - 1); c <= j && c < l.size(); ++c) {
      const double d = costs_[x] - costs_[l[c]];
      const double gain = std::min(d, diff - d);
      if (gain > best->gain) *best = Step{x, l[c], gain};
    }
  }
}

void Refiner::BestMove(int heavy, int light, double diff, Step* best) const {
  const std::vector<int>& h = members_[heavy];
  const auto it =
      std::lower_bound(h.begin(), h.end(), diff / 2, [this](int u, double v) {
        return costs_[u] < v;
      });
  for (auto c = (it == h.begin() ? it : it - 1); c != h.end() && c <= it;
       ++c) {
    const double d = costs_[*c];
    const double gain = std::min(d, diff - d);
    if (gain > best->gain) *best = Step{*c, -1, gain};
  }
}

void Refiner::Apply(int heavy, int light, const Step& step) {
  Erase(heavy, step.out);
  Insert(light, step.out);
  part_of_[step.out] = light;
  double shift = costs_[step.out];
  if (step.in >= 0) {
    Erase(light, step.in);
    Insert(heavy, step.in);
    part_of_[step.in] = heavy;
    shift -= costs_[step.in];
  }
  sums_[heavy] -= shift;
  sums_[light] += shift;
}

void Refiner::Erase(int part, int unit) {
  std::vector<int>& m = members_[part];
  m.erase(std::lower_bound(m.begin(), m.end(), unit,
                           [this](int u, int v) { return CostLess(u, v); }));
}

void Refiner::Insert(int part, int unit) {
  std::vector<int>& m = members_[part];
  m.insert(std::lower_bound(m.begin(), m.end(), unit,
                            [this](int u, int v) { return CostLess(u, v); }),
           unit);
}

}  // namespace

void Refine(const UnitProblem& problem, absl::Time deadline,
            std::vector<int>* part_of) {
  if (problem.costs.empty() || problem.k < 2) return;
  Refiner(problem, part_of).Run(deadline);
}

}  // namespace tdock::internal
