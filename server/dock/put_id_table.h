// PutIdTable: the Puts of a dock by the id their writer chose
// (PutInput::put_id), so that a Put sent again after its answer was lost
// gets the answer of the one that was stored instead of writing twice.
//
// A Put with an id claims it before it is checked (Begin): a Put with the
// id meanwhile is told the first is in flight. Once the first is stored its
// answer is kept (Finish, while its step is live, under the dock's lock),
// and it is given to Puts sent again once the first is answered (End): not
// before, so a Put sent again is answered only after the first's every
// effect (its cells ready, its lease acknowledged, the seal it causes). A
// Put answered without being stored frees its id. A released step's answers
// move to a memo of the latest kReleasedRemembered (ForgetStep): a Put sent
// again after its step's release (which may follow the last hand-out at
// once) is still answered as stored. Recovery puts back the answers of a
// live step's stored Puts (Restore): each is recorded with the Put's cells,
// in the same write.
//
// Each answer keeps the fingerprint of its Put (PutFingerprint: its step,
// rows, keys, counts, lease, reservation and columns' names and lengths,
// not its bytes), so an id sent with another Put is told apart.
//
// Invariants: an answered id names a Put of a live step or is in the memo;
// the memo holds at most kReleasedRemembered ids.
//
// Thread safety: every method may be called from any thread. mu_ is a leaf:
// nothing is taken while holding it.
#ifndef TDOCK_SERVER_DOCK_PUT_ID_TABLE_H_
#define TDOCK_SERVER_DOCK_PUT_ID_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "server/dock/types.h"

namespace tdock::internal {

// What tells one Put from another, besides its bytes; the same in every
// process (it is recorded).
uint64_t PutFingerprint(const PutInput& in);

class PutIdTable final {
 public:
  // Answers of released steps' Puts remembered.
  static constexpr size_t kReleasedRemembered = 4096;

  PutIdTable() = default;
  PutIdTable(const PutIdTable&) = delete;
  PutIdTable& operator=(const PutIdTable&) = delete;

  struct Stored {
    PutResult answer;
    uint64_t fingerprint = 0;
  };
  enum class Claim {
    kNew,       // the caller's: it stores the Put (Finish), then calls End
    kInFlight,  // a Put with this id is being stored or answered
    kAnswered,  // a Put with this id was stored: *stored is its answer
  };
  // Claims `id` (non-zero) for a Put.
  Claim Begin(uint64_t id, Stored* stored);
  // The Put of a claimed `id` was stored (its answer of stored.answer.step).
  void Finish(uint64_t id, const Stored& stored);
  // The Put of a claimed `id` was answered: its answer, if Finish kept one,
  // goes to Puts sent again; else a Put may use the id again.
  void End(uint64_t id);
  // Recovery: `id`'s Put was stored.
  void Restore(uint64_t id, const Stored& stored);
  // `step` was released: its Puts' answers move to the memo.
  void ForgetStep(int64_t step);
  // Answers of live steps' Puts (for tests and statistics).
  size_t answered() const;

 private:
  mutable tdock::Mutex mu_;
  absl::flat_hash_set<uint64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Stored> answered_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::set<uint64_t>> by_step_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Stored> released_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> released_order_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_PUT_ID_TABLE_H_
