// DockImpl's row keys: a row's key (a uid) comes with its first write and is
// unique among the dock's live rows; the dock's index maps it to the row
// until the row is dropped or its step released. Puts and Reads may name
// rows by key; batches carry them; ListRows shows each row's key and state.
//
// Lock order: the dock's mu_ (shared) -> the step's commit lock (RowIndex::mu()) -> the
// KeyIndex's lock (key_index.h). A key is set under the commit lock, before the
// row's cells are made ready, so a reader that saw a cell ready sees its
// row's key.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/refusal.h"
#include "common/status.h"
#include "server/dock/dock_impl.h"

namespace tdock::internal {

absl::StatusOr<DockImpl::RowRef> DockImpl::FindKey(absl::string_view key) const {
  std::optional<RowRef> ref = keys_.Find(key);
  if (!ref.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("dock '", name_, "': no live row has key '", key, "'"));
  }
  return *ref;
}

absl::StatusOr<std::vector<int64_t>> DockImpl::RowsOfKeys(int64_t step,
                                                          const std::vector<std::string>& keys) const {
  std::vector<int64_t> rows;
  const std::string* unknown = nullptr;
  const std::string* known = nullptr;
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& key : keys) {
    TDOCK_RETURN_IF_ERROR(PutChecks::Key(Where(step), key));
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(Where(step), ": key '", key,
                                                     "' appears twice"));
    }
    absl::StatusOr<RowRef> ref = FindKey(key);
    if (!ref.ok()) {
      unknown = &key;
      continue;
    }
    known = &key;
    if (ref->step != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step), ": key '", key, "' is row ", ref->row, " of step ", ref->step));
    }
    rows.push_back(ref->row);
  }
  if (unknown == nullptr) return rows;
  if (!rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(step), ": key '", *unknown, "' is new and key '", *known,
        "' is not: a Put names the rows of keys live rows have, or asks for new rows "
        "for new keys, not both"));
  }
  return std::vector<int64_t>();  // every key new: new rows
}

absl::Status DockImpl::AssignRows(PutInput& in, uint64_t reserve) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, in.step) != StepState::kLive) {
    // Undone by a concurrent Put that started it: the caller tries again.
    return absl::AbortedError(absl::StrCat(Where(in.step), " is starting"));
  }
  Partition& part = ring_.Of(in.step);
  tdock::MutexLock commit(&part.row_index().mu());
  if (part.sealed(mu_)) {
    return Refuse(Refusal::kSealed, absl::FailedPreconditionError(absl::StrCat(
                                        Where(in.step), " is sealed: no new rows join it")));
  }
  if (part.seal_pending(mu_) || part.row_index().sealing()) {  // a Seal, or seal_when's
    return Refuse(Refusal::kSealed,
                  absl::FailedPreconditionError(
                      absl::StrCat(Where(in.step), " is being sealed: no new rows join it")));
  }
  const int64_t n = group_size_;
  const bool declared = !in.group_sizes.empty();
  const int64_t need = declared ? static_cast<int64_t>(in.group_sizes.size())
                                : (in.new_rows + n - 1) / n;
  std::vector<int64_t> groups;
  int64_t g = part.row_index().append_cursor();
  for (; g < part.groups() && static_cast<int64_t>(groups.size()) < need; ++g) {
    bool free = true;
    for (int64_t row = g * n; free && row < (g + 1) * n; ++row) {
      // The cursor can go back (a reservation whose record failed), past
      // rows an append in progress holds.
      free = !part.has_cell(row) && part.row_index().key(row) == nullptr && !part.dropped(row) &&
             part.row_index().reservation(row) == 0 && part.row_index().append_claim(row) == 0;
    }
    if (free) groups.push_back(g);
  }
  if (static_cast<int64_t>(groups.size()) < need) {
    return NoRoomError(
        absl::StrCat(Where(in.step), ": no room for ", in.new_rows, " new rows (", need,
                     " groups): the step holds ", rows_per_step_, " rows (max_rows_per_step) and ",
                     groups.size(), " free groups are left; write to a later step"),
        static_cast<int64_t>(groups.size()));
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const int64_t first = groups[i] * n;
    const int64_t size =
        declared ? in.group_sizes[i]
                 : std::min(n, in.new_rows - static_cast<int64_t>(in.rows.size()));
    for (int64_t row = first; row < first + size; ++row) in.rows.push_back(row);
    // A declared group's other rows are closed with the Put's record.
    for (int64_t row = first + size; declared && row < first + n; ++row) in.unused.push_back(row);
  }
  // What the rows' tokens and keys would refuse, refused before anything is
  // taken: the cursor moves only for a Put that can go in.
  if (absl::Status fits = CheckUnwrittenLocked(part, in); !fits.ok()) {
    in.rows.clear();
    in.unused.clear();
    return fits;
  }
  part.row_index().set_append_cursor(g);
  if (reserve != 0) {
    part.row_index().SetReserved(in.rows, reserve);
    if (!in.unused.empty()) part.row_index().SetUnused(in.unused, /*closed=*/true);
  } else {
    // Held until the Put commits them or is answered (EndAppend).
    part.row_index().ClaimForAppend(in.rows, in.append_claim);
    part.row_index().ClaimForAppend(in.unused, in.append_claim);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KeyIndex::Entry>> DockImpl::NewKeysLocked(const Partition& part,
                                                                      const PutInput& in) const {
  const int64_t step = in.step;  // the partition may not hold it yet (free)
  std::vector<KeyIndex::Entry> fresh;
  for (size_t i = 0; i < in.rows.size(); ++i) {
    const int64_t row = in.rows[i];
    const std::string& key = in.keys[i];
    if (const std::string* has = part.row_index().key(row); has != nullptr) {
      if (*has == key) continue;  // named again
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step), ": row ", row, " has key '", *has, "'; the Put names '", key, "'"));
    }
    if (part.has_cell(row)) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step), ": row ", row, " was written without a key; a row's key comes with "
          "its first write"));
    }
    fresh.push_back({key, {step, row}});
  }
  return fresh;
}

absl::Status DockImpl::KeyTaken(int64_t step, absl::string_view key,
                                const KeyIndex::Taken& taken) const {
  return absl::AlreadyExistsError(absl::StrCat(Where(step), ": key '", key, "' is row ",
                                               taken.holder.row, " of step ",
                                               taken.holder.step));
}

absl::Status DockImpl::CheckKeysLocked(const Partition& part, const PutInput& in) const {
  if (in.keys.empty()) return absl::OkStatus();
  TDOCK_ASSIGN_OR_RETURN(std::vector<KeyIndex::Entry> fresh, NewKeysLocked(part, in));
  std::vector<absl::string_view> keys;
  keys.reserve(fresh.size());
  for (const KeyIndex::Entry& e : fresh) keys.push_back(e.key);
  if (std::optional<KeyIndex::Taken> taken = keys_.FindTaken(keys)) {
    return KeyTaken(in.step, keys[taken->index], *taken);
  }
  return absl::OkStatus();
}

absl::Status DockImpl::SetKeysLocked(Partition& part, const PutInput& in) {
  if (in.keys.empty()) return absl::OkStatus();
  TDOCK_ASSIGN_OR_RETURN(std::vector<KeyIndex::Entry> fresh, NewKeysLocked(part, in));
  // Checked and added in one step (KeyIndex::Insert): Puts of two steps (two
  // commit locks) may give the same new key at once.
  if (std::optional<KeyIndex::Taken> taken = keys_.Insert(fresh)) {
    return KeyTaken(in.step, fresh[taken->index].key, *taken);
  }
  for (const KeyIndex::Entry& e : fresh) part.row_index().SetKey(e.row.row, std::string(e.key));
  return absl::OkStatus();
}

void DockImpl::UnsetKeysLocked(Partition& part, const std::vector<int64_t>& rows) {
  std::vector<KeyIndex::Entry> gone;
  for (int64_t row : rows) {
    const std::string* key = part.row_index().key(row);
    // A stored cell of the row, or another write of it whose record is in
    // flight (every record of a keyed row carries its key), keeps the key.
    if (key == nullptr || part.row_index().pending_writes(row) > 0 || part.has_ready_cell(row)) continue;
    gone.push_back({*key, {part.step(mu_), row}});
  }
  keys_.Forget(gone);
  for (const KeyIndex::Entry& e : gone) part.row_index().ClearKey(e.row.row);  // the views go with it
}

absl::StatusOr<Batch> DockImpl::ReadKeys(const std::vector<std::string>& keys,
                                         const std::vector<std::string>& columns) {
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dock '", name_, "': Read names no keys"));
  }
  int64_t step = -1;
  std::vector<int64_t> rows;
  for (const std::string& key : keys) {
    TDOCK_RETURN_IF_ERROR(PutChecks::Key(absl::StrCat("dock '", name_, "'"), key));
    TDOCK_ASSIGN_OR_RETURN(RowRef ref, FindKey(key));
    if (step >= 0 && ref.step != step) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dock '", name_, "': key '", key, "' is in step ", ref.step, ", key '", keys.front(),
          "' in step ", step, "; one Read reads one step"));
    }
    step = ref.step;
    rows.push_back(ref.row);
  }
  return Read(step, rows, columns);
}

absl::Status DockImpl::RecoverKey(int64_t step, int64_t row, const std::string& key) {
  tdock::ReaderMutexLock lock(&mu_);
  if (ring_.Classify(mu_, step) != StepState::kLive || row < 0 || row >= rows_per_step_) {
    return absl::DataLossError(absl::StrCat(Where(step), ": a key of row ", row,
                                            " whose step holds no cell"));
  }
  Partition& part = ring_.Of(step);
  tdock::MutexLock commit(&part.row_index().mu());
  if (const std::string* has = part.row_index().key(row); has != nullptr) {
    if (*has == key) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(Where(step), ": row ", row, " has two keys"));
  }
  part.row_index().SetKey(row, key);  // indexed by RebuildKeyIndex, once drops are applied
  return absl::OkStatus();
}

void DockImpl::RebuildKeyIndex() {
  tdock::ReaderMutexLock lock(&mu_);
  std::vector<KeyIndex::Entry> live;
  for (const auto& part : ring_.partitions()) {
    if (!part->live(mu_) || !part->row_index().has_keys()) continue;
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      const std::string* key = part->row_index().key(row);
      if (key != nullptr && !part->dropped(row)) live.push_back({*key, {part->step(mu_), row}});
    }
  }
  keys_.Reset(live);
}

absl::StatusOr<RowListing> DockImpl::ListRows(int64_t step,
                                              absl::Span<const std::string> columns) const {
  std::vector<int> listed;  // indices of `columns`
  const absl::Span<const ColumnSpec> known = columns_.view();
  for (const std::string& name : columns) {
    const auto it = std::find_if(known.begin(), known.end(),
                                 [&](const ColumnSpec& c) { return c.name == name; });
    if (it == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(step), ": ListRows of column '", name, "', which is unknown"));
    }
    const int index = static_cast<int>(it - known.begin());
    if (std::find(listed.begin(), listed.end(), index) != listed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(step), ": ListRows names column '", name, "' twice"));
    }
    listed.push_back(index);
  }
  RowListing listing;
  std::vector<ListedCells> cells;
  std::shared_ptr<StepCells> pin;  // the cells' bytes, read after the lock
  {
    tdock::ReaderMutexLock lock(&mu_);
    if (step < 0 || ring_.Classify(mu_, step) != StepState::kLive) return NotLiveLocked(step);
    const Partition& part = ring_.Of(step);
    listing.step = step;
    listing.sealed = part.sealed(mu_);
    listing.rows.reserve(static_cast<size_t>(rows_per_step_));
    for (int64_t row = 0; row < rows_per_step_; ++row) {
      RowState state;
      state.row = row;
      state.group = row / group_size_;
      if (const std::string* key = part.row_index().key(row)) state.key = *key;
      if (part.dropped(row)) state.dropped = part.drop_reason(mu_, row);
      for (size_t c = 0; c < columns_.size(); ++c) {
        if (part.ready(static_cast<int>(c), row)) state.written.push_back(columns_[c].name);
      }
      state.version = part.row_index().version(row);  // after the cells: a ready one's is set
      for (const ConsumerPlan& plan : consumers_.plans(mu_)) {
        if (plan.removed) continue;
        const int64_t unit = plan.whole_groups ? row / group_size_ : row;
        // A dropped row counts as done for the consumers that never took it:
        // it is listed as taken only by those that did before the drop,
        // which the consumed bit cannot tell apart; so none.
        if (!part.dropped(row) && part.consumer(mu_, plan.index).consumed.Test(unit)) {
          state.taken.push_back(plan.name);
        }
      }
      listing.rows.push_back(std::move(state));
    }
    TDOCK_ASSIGN_OR_RETURN(cells, CellsToListLocked(part, listed, listing));
    pin = part.cells(mu_);
  }
  // Copied with no lock held; a location dock lists each cell's location.
  for (const ListedCells& listed_cells : cells) {
    const ColumnSpec& column = columns_[listed_cells.column];
    const PackedColumn& view = listed_cells.view;
    int64_t position = 0;
    for (size_t i = 0; i < listed_cells.rows.size(); ++i) {
      std::string bytes(static_cast<size_t>(StoredCellBytes(
                            limits_.cells, view.length(static_cast<int64_t>(i)),
                            column.item_bytes())),
                        '\0');
      CopyFromSegments(view.segments, position, static_cast<int64_t>(bytes.size()),
                       bytes.data());
      position += static_cast<int64_t>(bytes.size());
      listing.rows[listed_cells.rows[i]].cells.emplace_back(column.name, std::move(bytes));
    }
  }
  return listing;
}

absl::StatusOr<std::vector<ListedCells>> DockImpl::CellsToListLocked(
    const Partition& part, absl::Span<const int> columns, const RowListing& listing) const {
  std::vector<ListedCells> out;
  int64_t total = 0;
  for (int c : columns) {
    ListedCells listed{c, {}, {}};
    // The rows the listing says have one.
    for (const RowState& row : listing.rows) {
      if (std::find(row.written.begin(), row.written.end(), columns_[c].name) !=
          row.written.end()) {
        listed.rows.push_back(row.row);
      }
    }
    if (listed.rows.empty()) continue;
    part.cells(mu_)->Read(part.column(c).cells.get(), listed.rows, columns_[c].item_bytes(),
                          listed.view);
    total += listed.view.data_bytes();
    if (limits_.max_batch_bytes > 0 && total > limits_.max_batch_bytes) {
      return CapacityError(absl::StrCat(
          Where(listing.step), ": the cells ListRows was asked for hold more than ",
          limits_.max_batch_bytes, " bytes, more than one answer carries (the server's "
          "--max_message_mb); list fewer columns, or read them with Read"));
    }
    out.push_back(std::move(listed));
  }
  return out;
}

}  // namespace tdock::internal
