#include "server/dock/sampler.h"

#include <algorithm>
#include <bit>
#include <random>

namespace tdock::internal {
namespace {

const AtomicBitmap& ReadyBits(const Partition& part, const ConsumerPlan& plan,
                              int c) {
  const ColumnState& column = part.column(c);
  return plan.whole_groups ? column.group_ready : column.ready;
}

// Units of word w that are ready in every needed column (not yet masked by
// the consumed bits).
uint64_t ReadyWord(const Partition& part, const AtomicBitmap& consumed,
                   const ConsumerPlan& plan, int64_t w) {
  uint64_t word = consumed.valid_mask(w);
  for (int c : plan.columns) {
    word &= ReadyBits(part, plan, c).word(w);
    if (word == 0) break;
  }
  return word;
}

// The lowest `k` set bits of `word`.
uint64_t LowestBits(uint64_t word, int64_t k) {
  uint64_t mask = 0;
  for (; word != 0 && k > 0; --k) {
    mask |= word & (~word + 1);
    word &= word - 1;
  }
  return mask;
}

void AppendUnits(int64_t w, uint64_t bits, std::vector<int64_t>& units) {
  for (; bits != 0; bits &= bits - 1) {
    units.push_back((w << 6) + std::countr_zero(bits));
  }
}

std::vector<int64_t> ClaimFifo(const Partition& part, AtomicBitmap& consumed,
                               const ConsumerPlan& plan, int64_t need) {
  std::vector<int64_t> units;
  units.reserve(static_cast<size_t>(need));
  for (int64_t w = 0; w < consumed.num_words() && need > 0; ++w) {
    if (consumed.word(w) == consumed.valid_mask(w)) continue;  // all taken
    // Re-read the word after a partial win: bits others took are gone.
    for (;;) {
      const uint64_t avail = ReadyWord(part, consumed, plan, w) & ~consumed.word(w);
      if (avail == 0) break;
      const uint64_t got = consumed.Claim(w, LowestBits(avail, need));
      AppendUnits(w, got, units);
      need -= std::popcount(got);
      if (need == 0) break;
    }
  }
  return units;
}

std::vector<int64_t> ClaimRandom(const Partition& part, AtomicBitmap& consumed,
                                 const ConsumerPlan& plan, int64_t need, uint64_t seed) {
  std::vector<int64_t> candidates;
  for (int64_t w = 0; w < consumed.num_words(); ++w) {
    AppendUnits(w, ReadyWord(part, consumed, plan, w) & ~consumed.word(w), candidates);
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> units;
  units.reserve(static_cast<size_t>(need));
  // Partial Fisher-Yates: draw candidates until enough are won.
  for (size_t i = 0; i < candidates.size() && need > 0; ++i) {
    std::uniform_int_distribution<size_t> pick(i, candidates.size() - 1);
    std::swap(candidates[i], candidates[pick(rng)]);
    const int64_t unit = candidates[i];
    if (consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
      units.push_back(unit);
      --need;
    }
  }
  std::sort(units.begin(), units.end());
  return units;
}

}  // namespace

int64_t CountAvailable(const Partition& part, const ConsumerState& state,
                       const ConsumerPlan& plan, int64_t enough) {
  const AtomicBitmap& consumed = state.consumed;
  int64_t available = 0;
  for (int64_t w = 0; w < consumed.num_words() && available < enough; ++w) {
    const uint64_t taken = consumed.word(w);
    if (taken == consumed.valid_mask(w)) continue;  // nothing left here
    available += std::popcount(ReadyWord(part, consumed, plan, w) & ~taken);
  }
  return available;
}

std::vector<int64_t> Claim(const Partition& part, ConsumerState& state,
                           const ConsumerPlan& plan, int64_t need, uint64_t seed) {
  if (need <= 0) return {};
  if (plan.policy == Policy::kRandom) {
    return ClaimRandom(part, state.consumed, plan, need, seed);
  }
  return ClaimFifo(part, state.consumed, plan, need);
}

void Unclaim(ConsumerState& state, const std::vector<int64_t>& units) {
  AtomicBitmap& consumed = state.consumed;
  for (int64_t unit : units) consumed.Clear(unit >> 6, uint64_t{1} << (unit & 63));
}

}  // namespace tdock::internal
