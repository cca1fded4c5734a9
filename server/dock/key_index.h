// KeyIndex: the dock's index of row keys (a row's uid): which row of which
// live step has each key. Puts and Reads may name rows by key.
//
// The index keeps names only; the dock keeps each row's key in its step
// (Partition::key), checks what a Put's rows already have under the step's
// commit lock, and records keys in the journal with the cells they came with.
//
// Invariants: a key names at most one row; an entry names a row that has the
// key, in a live step, and is not dropped (the dock forgets a dropped row's
// key and every key of a released step). An entry is erased only by naming
// its row, so forgetting a row's key never erases the same key given to
// another row since.
//
// Thread safety: every method may be called from any thread. mu_ is a leaf:
// it is taken under the dock's locks (its structure lock, a step's commit
// lock), and nothing is taken while holding it. Insert checks and adds in one
// hold: Puts of two steps (two commit locks) may give the same new key at
// once, and only one gets it.
#ifndef TDOCK_SERVER_DOCK_KEY_INDEX_H_
#define TDOCK_SERVER_DOCK_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "server/dock/row_index.h"

namespace tdock::internal {

class KeyIndex final {
 public:
  struct RowRef {
    int64_t step = 0;
    int64_t row = 0;
    bool operator==(const RowRef& other) const {
      return step == other.step && row == other.row;
    }
  };
  // A key another row has: its position among the keys asked about, and the
  // row that has it.
  struct Taken {
    size_t index = 0;
    RowRef holder;
  };
  // One row's key.
  struct Entry {
    absl::string_view key;
    RowRef row;
  };

  KeyIndex() = default;
  KeyIndex(const KeyIndex&) = delete;
  KeyIndex& operator=(const KeyIndex&) = delete;

  // The row that has `key`, if a live row has it.
  std::optional<RowRef> Find(absl::string_view key) const ABSL_LOCKS_EXCLUDED(mu_);
  // The first of `keys` that some row has.
  std::optional<Taken> FindTaken(absl::Span<const absl::string_view> keys) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Adds every entry, unless one's key is taken (by any row, its own
  // included): then nothing changes and that key is returned.
  std::optional<Taken> Insert(absl::Span<const Entry> entries) ABSL_LOCKS_EXCLUDED(mu_);
  // Erases each entry's key if it names that entry's row.
  void Forget(absl::Span<const Entry> entries) ABSL_LOCKS_EXCLUDED(mu_);
  // Erases the keys `rows` of step `step` have in `index` (the step's own
  // keys), each if it names that row: the rows were dropped. ForgetStep: every
  // row of the step (of `rows` rows), as it is released. `dock_mu`: the
  // dock's mutex, which keeps the step on its partition and its keys alive.
  void ForgetRows(const tdock::Mutex& dock_mu, int64_t step, const RowIndex& index,
                  absl::Span<const int64_t> rows) ABSL_SHARED_LOCKS_REQUIRED(dock_mu)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetStep(const tdock::Mutex& dock_mu, int64_t step, const RowIndex& index,
                  int64_t rows) ABSL_SHARED_LOCKS_REQUIRED(dock_mu) ABSL_LOCKS_EXCLUDED(mu_);
  // The index becomes exactly `entries` (recovery; a later duplicate key
  // replaces an earlier one).
  void Reset(absl::Span<const Entry> entries) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const RowRef* FindHeld(absl::string_view key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable tdock::Mutex mu_;
  absl::flat_hash_map<std::string, RowRef> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tdock::internal

#endif  // TDOCK_SERVER_DOCK_KEY_INDEX_H_
