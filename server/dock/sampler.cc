#include "server/dock/sampler.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <random>
#include <utility>

namespace tdock::internal {
namespace {

const AtomicBitmap& ReadyBits(const Partition& part, const ConsumerPlan& plan,
                              int c) {
  const ColumnState& column = part.column(c);
  return plan.whole_groups ? column.group_ready : column.ready;
}

// The bits of `word` (units of word w) none of whose rows is older than
// `min_version`.
uint64_t FreshBits(const Partition& part, const ConsumerPlan& plan, int64_t w,
                   uint64_t word, int64_t min_version) {
  uint64_t fresh = 0;
  for (uint64_t bits = word; bits != 0; bits &= bits - 1) {
    const int64_t unit = (w << 6) + std::countr_zero(bits);
    const int64_t version = UnitVersion(part, plan, unit);
    if (version == kNoVersion || version >= min_version) fresh |= bits & (~bits + 1);
  }
  return fresh;
}

// Some unit of the partition may be stale: read after the ready bits it
// covers every row they show.
bool MayBeStale(const Partition& part, int64_t min_version) {
  return min_version != kNoVersion && part.row_index().min_version() < min_version;
}

// Units of word w that are ready in every needed column (not yet masked by
// the consumed bits), not held and not stale.
uint64_t ReadyWord(const Partition& part, const AtomicBitmap& consumed,
                   const ConsumerPlan& plan, int64_t w, int64_t min_version) {
  uint64_t word = consumed.valid_mask(w);
  for (int c : plan.columns) {
    word &= ReadyBits(part, plan, c).word(w);
    if (word == 0) break;
  }
  // A held unit's cells are on a shard that is away: it waits.
  if (word != 0 && part.holding()) word &= ~part.held(plan.whole_groups).word(w);
  if (word != 0 && MayBeStale(part, min_version)) {
    word = FreshBits(part, plan, w, word, min_version);
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
                               const ConsumerPlan& plan, int64_t need, int64_t min_version) {
  std::vector<int64_t> units;
  units.reserve(static_cast<size_t>(need));
  for (int64_t w = 0; w < consumed.num_words() && need > 0; ++w) {
    if (consumed.word(w) == consumed.valid_mask(w)) continue;  // all taken
    // Re-read the word after a partial win: bits others took are gone.
    for (;;) {
      const uint64_t avail =
          ReadyWord(part, consumed, plan, w, min_version) & ~consumed.word(w);
      if (avail == 0) break;
      const uint64_t got = consumed.Claim(w, LowestBits(avail, need));
      AppendUnits(w, got, units);
      need -= std::popcount(got);
      if (need == 0) break;
    }
  }
  return units;
}

std::vector<int64_t> Candidates(const Partition& part, const AtomicBitmap& consumed,
                                const ConsumerPlan& plan, int64_t min_version) {
  std::vector<int64_t> candidates;
  for (int64_t w = 0; w < consumed.num_words(); ++w) {
    AppendUnits(w, ReadyWord(part, consumed, plan, w, min_version) & ~consumed.word(w),
                candidates);
  }
  return candidates;
}

// Claims candidates in order until `need` are won; returns them ascending.
// `arrange(i)` runs before candidate i is tried and may swap a later one
// into its place (a draw).
template <typename Arrange>
std::vector<int64_t> ClaimInOrder(AtomicBitmap& consumed, std::vector<int64_t>& candidates,
                                  int64_t need, Arrange arrange) {
  std::vector<int64_t> units;
  units.reserve(static_cast<size_t>(need));
  for (size_t i = 0; i < candidates.size() && need > 0; ++i) {
    arrange(i);
    const int64_t unit = candidates[i];
    if (consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
      units.push_back(unit);
      --need;
    }
  }
  std::sort(units.begin(), units.end());
  return units;
}

std::vector<int64_t> ClaimRandom(const Partition& part, AtomicBitmap& consumed,
                                 const ConsumerPlan& plan, int64_t need, uint64_t seed,
                                 int64_t min_version) {
  std::vector<int64_t> candidates = Candidates(part, consumed, plan, min_version);
  std::mt19937_64 rng(seed);
  // Partial Fisher-Yates: draw candidates until enough are won.
  return ClaimInOrder(consumed, candidates, need, [&](size_t i) {
    std::uniform_int_distribution<size_t> pick(i, candidates.size() - 1);
    std::swap(candidates[i], candidates[pick(rng)]);
  });
}

// Candidates by version, each version in the policy's order (index, or
// shuffled by `seed`).
std::vector<int64_t> OldestFirst(const Partition& part, const AtomicBitmap& consumed,
                                 const ConsumerPlan& plan, uint64_t seed, int64_t min_version) {
  std::vector<int64_t> candidates = Candidates(part, consumed, plan, min_version);
  std::vector<std::pair<int64_t, int64_t>> keyed;  // (version, unit)
  keyed.reserve(candidates.size());
  for (int64_t unit : candidates) {
    const int64_t version = UnitVersion(part, plan, unit);
    // A row without a version has no age: it comes after every versioned one.
    keyed.emplace_back(version == kNoVersion ? std::numeric_limits<int64_t>::max() : version,
                       unit);
  }
  if (plan.policy == Policy::kRandom) {
    std::mt19937_64 rng(seed);
    std::shuffle(keyed.begin(), keyed.end(), rng);
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  } else {
    std::sort(keyed.begin(), keyed.end());
  }
  for (size_t i = 0; i < keyed.size(); ++i) candidates[i] = keyed[i].second;
  return candidates;
}

// Oldest version first. RANDOM draws anew on every claim. FIFO keeps the
// order it built while nothing can have become available since, and goes on
// where the last claim stopped (ConsumerState::order): draining a step costs
// one sort, not one per claim.
std::vector<int64_t> ClaimOldestFirst(const Partition& part, ConsumerState& state,
                                      const ConsumerPlan& plan, int64_t need, uint64_t seed,
                                      int64_t min_version) {
  if (plan.policy == Policy::kRandom) {
    std::vector<int64_t> order = OldestFirst(part, state.consumed, plan, seed, min_version);
    return ClaimInOrder(state.consumed, order, need, [](size_t) {});
  }
  tdock::MutexLock lock(&state.order_mu);
  ConsumerState::ClaimOrder& order = state.order;
  std::vector<int64_t> units;
  for (int pass = 0; pass < 2 && static_cast<int64_t>(units.size()) < need; ++pass) {
    // acquire: pairs with the raises after the bits they announce.
    const uint64_t availability = part.availability();
    const uint64_t give_backs = state.give_backs.load(std::memory_order_acquire);
    const bool current = order.valid && order.availability == availability &&
                         order.give_backs == give_backs && order.min_version == min_version;
    // A list just built has every unit there is; one that fell short is
    // built again (it holds none a claim can still win).
    if (!current || pass == 1) {
      order.units = OldestFirst(part, state.consumed, plan, seed, min_version);
      order.next = 0;
      order.valid = true;
      order.availability = availability;
      order.give_backs = give_backs;
      order.min_version = min_version;
    }
    for (; order.next < order.units.size() && static_cast<int64_t>(units.size()) < need;
         ++order.next) {
      const int64_t unit = order.units[order.next];
      if (state.consumed.Claim(unit >> 6, uint64_t{1} << (unit & 63)) != 0) {
        units.push_back(unit);
      }
    }
    if (pass == 0 && !current) break;  // built now: nothing else is available
  }
  std::sort(units.begin(), units.end());
  return units;
}

}  // namespace

int64_t UnitVersion(const Partition& part, const ConsumerPlan& plan, int64_t unit) {
  if (!plan.whole_groups) return part.row_index().version(unit);
  int64_t oldest = kNoVersion;
  const int64_t first = unit * part.group_size();
  for (int64_t row = first; row < first + part.group_size(); ++row) {
    if (part.dropped(row)) continue;
    const int64_t version = part.row_index().version(row);
    if (version != kNoVersion && (oldest == kNoVersion || version < oldest)) oldest = version;
  }
  return oldest;
}

int64_t CountAvailable(const Partition& part, const ConsumerState& state,
                       const ConsumerPlan& plan, int64_t enough, int64_t min_version) {
  const AtomicBitmap& consumed = state.consumed;
  int64_t available = 0;
  for (int64_t w = 0; w < consumed.num_words() && available < enough; ++w) {
    const uint64_t taken = consumed.word(w);
    if (taken == consumed.valid_mask(w)) continue;  // nothing left here
    available += std::popcount(ReadyWord(part, consumed, plan, w, min_version) & ~taken);
  }
  return available;
}

std::vector<int64_t> Claim(const Partition& part, ConsumerState& state,
                           const ConsumerPlan& plan, int64_t need, uint64_t seed,
                           int64_t min_version) {
  if (need <= 0) return {};
  // One version in the step (or none): oldest first is the policy's order
  // (a step whose rows have one version or none keeps index order).
  if (plan.oldest_first && part.row_index().min_version() < part.row_index().max_version()) {
    return ClaimOldestFirst(part, state, plan, need, seed, min_version);
  }
  if (plan.policy == Policy::kRandom) {
    return ClaimRandom(part, state.consumed, plan, need, seed, min_version);
  }
  return ClaimFifo(part, state.consumed, plan, need, min_version);
}

std::vector<int64_t> ClaimStale(const Partition& part, ConsumerState& state,
                                const ConsumerPlan& plan, int64_t min_version) {
  std::vector<int64_t> units;
  AtomicBitmap& consumed = state.consumed;
  for (int64_t w = 0; w < consumed.num_words(); ++w) {
    const uint64_t taken = consumed.word(w);
    if (taken == consumed.valid_mask(w)) continue;
    const uint64_t ready = ReadyWord(part, consumed, plan, w, kNoVersion) & ~taken;
    if (ready == 0 || !MayBeStale(part, min_version)) continue;
    const uint64_t stale = ready & ~FreshBits(part, plan, w, ready, min_version);
    if (stale != 0) AppendUnits(w, consumed.Claim(w, stale), units);
  }
  return units;
}

void Unclaim(ConsumerState& state, const std::vector<int64_t>& units) {
  if (units.empty()) return;
  AtomicBitmap& consumed = state.consumed;
  for (int64_t unit : units) consumed.Clear(unit >> 6, uint64_t{1} << (unit & 63));
  // release: after the bits (ConsumerState::give_backs).
  state.give_backs.fetch_add(1, std::memory_order_release);
}

}  // namespace tdock::internal
