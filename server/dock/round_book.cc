#include "server/dock/round_book.h"

#include <algorithm>

namespace tdock::internal {

std::vector<int64_t> RoundShare::RealRows() const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(real_rows()));
  auto repeat = repeats.begin();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (repeat != repeats.end() && *repeat == static_cast<int64_t>(i)) {
      ++repeat;
      continue;
    }
    out.push_back(rows[i]);
  }
  return out;
}

void RoundBook::Keep(Round round) {
  forming_ = false;
  rounds_.push_back(std::move(round));
}

void RoundBook::Fail(absl::Status why) {
  forming_ = false;
  failure_ = std::move(why);
}

int64_t RoundBook::NextFor(int32_t taker) const {
  return again_[taker].empty() ? next_[taker] : *again_[taker].begin();
}

bool RoundBook::FirstDelivery(int32_t taker, int64_t k) const {
  return k >= next_[taker] && again_[taker].count(k) == 0;
}

void RoundBook::Delivered(int32_t taker, int64_t k) {
  next_[taker] = std::max(next_[taker], k + 1);
  again_[taker].erase(k);
}

void RoundBook::HandAgain(int32_t taker, int64_t k) {
  if (next_[taker] > k) again_[taker].insert(k);
}

bool RoundBook::Done(int32_t taker) const {
  return next_[taker] >= formed() && again_[taker].empty();
}

bool RoundBook::AllDone() const {
  for (size_t taker = 0; taker < next_.size(); ++taker) {
    if (!Done(static_cast<int32_t>(taker))) return false;
  }
  return true;
}

void RoundBook::ReplicaLost(int64_t k, int32_t rank, int32_t replica) {
  auto took = lease_takers_.find({k, rank});
  if (took != lease_takers_.end()) took->second.erase(replica);
}

void RoundBook::Acked(int64_t k, int32_t rank) {
  acked_.insert({k, rank});
  lease_takers_.erase({k, rank});
}

void RoundBook::MarkRecorded(int64_t k) {
  if (recorded_.size() <= static_cast<size_t>(k)) recorded_.resize(k + 1, false);
  recorded_[k] = true;
}

void RoundBook::Recover(int64_t k, Round round) {
  const size_t ranks = round.ranks.size();
  while (formed() < k) {
    Round empty;
    empty.ranks.resize(ranks);
    rounds_.push_back(std::move(empty));
  }
  rounds_.push_back(std::move(round));
  recorded_.assign(rounds_.size(), true);
}

void RoundBook::RecoverDelivery(int32_t taker, int64_t k) {
  for (int64_t skipped = next_[taker]; skipped < k; ++skipped) again_[taker].insert(skipped);
  Delivered(taker, k);
}

void RoundBook::Reset() {
  rounds_.clear();
  std::fill(next_.begin(), next_.end(), 0);
  for (std::set<int64_t>& rounds : again_) rounds.clear();
  lease_takers_.clear();
  acked_.clear();
  recorded_.clear();
  forming_ = false;
  failure_ = absl::OkStatus();
}

}  // namespace tdock::internal
