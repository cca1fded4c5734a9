// DockSpec: the description of one dock (one training job's buffer), shared by
// the server core, the clients and the YAML loader. Plain data; NormalizeSpec
// fills defaults and validates with messages that name the field at fault.
#ifndef TDOCK_COMMON_SPEC_H_
#define TDOCK_COMMON_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "common/balance/cost_model.h"
#include "common/balance/micro_batch.h"
#include "common/dtype.h"

namespace tdock {

enum class Policy : uint8_t {
  kFifo = 1,      // lowest row index first
  kRandom = 2,    // uniformly among available rows, seeded
  kBalanced = 3,  // token-balanced across dp ranks
};
absl::string_view PolicyName(Policy policy);

// What happens to a row too old for a consumer's max_staleness.
enum class StalePolicy : uint8_t {
  kLeave = 0,  // the consumer passes over it; consumers without a bound take it
  kDrop = 1,   // dropped (reason "stale") for every consumer
};
// The order a consumer takes a step's available rows in.
enum class RowOrder : uint8_t {
  kDefault = 0,        // kOldestVersion with max_staleness, else kIndex
  kOldestVersion = 1,  // the oldest version first; then the policy's order
  kIndex = 2,          // the policy's order alone
};
// How a BALANCED consumer fills the shares of a round that has fewer rows
// than its largest share (every rank takes every round either way).
enum class RoundPad : uint8_t {
  kNone = 0,    // a short share stays short (an empty share is an empty batch)
  kRepeat = 1,  // repeats of the round's rows, marked, fill every share
};
absl::string_view StalePolicyName(StalePolicy stale);  // "leave", "drop"
absl::string_view RoundPadName(RoundPad pad);          // "none", "repeat"
absl::string_view RowOrderName(RowOrder order);        // "default", "oldest_version", "index"

// What a BYTES column's cells hold: the server keeps bytes either way, clients
// encode and decode. In YAML, `dtype: string`, `dtype: json` and `dtype:
// tensors` are bytes columns with that encoding.
enum class ColumnEncoding { kRaw = 0, kUtf8 = 1, kJson = 2, kTensors = 3 };

struct ColumnSpec {
  std::string name;
  DType dtype = DType::kUnspecified;
  std::vector<int64_t> inner_shape;  // empty: an item is one element
  int64_t max_len = 0;               // max items per row; 0: unbounded
  bool rewritable = false;
  ColumnEncoding encoding = ColumnEncoding::kRaw;  // kRaw unless dtype is BYTES
  // The server's state (CreateDock cannot set it): added by AddColumn.
  bool added = false;

  // Bytes of one item: DTypeSize(dtype) * product(inner_shape).
  int64_t item_bytes() const;

  // Every field: specs that normalize alike describe the same column.
  bool operator==(const ColumnSpec&) const = default;
};

// A column's type as YAML names it: "string" and "json" for encoded bytes
// columns, the dtype's name otherwise.
absl::string_view ColumnTypeName(const ColumnSpec& column);
// Sets column->dtype and ->encoding from a YAML type name (lower case):
// a dtype name, "string" or "json". False if it is none of them.
bool ParseColumnType(absl::string_view name, ColumnSpec* column);

struct ConsumerSpec {
  std::string name;
  std::vector<std::string> columns;
  int64_t dispatch_size = 0;  // 0: rows_per_step / dp_size
  int32_t dp_size = 1;
  bool whole_groups = false;
  Policy policy = Policy::kFifo;
  uint64_t seed = 0;
  // Row cost a·L + b·L² used to balance ranks (BALANCED) and to spread rows
  // over micro-batches. Default: a = 1, b = 0.
  CostModel cost;
  // When set, every batch comes cut into micro-batches under this token
  // budget (rows ordered micro-batch after micro-batch). Default: unset.
  std::optional<MicroBatchOptions> micro_batch;
  // BALANCED with micro_batch: every rank of a round gets the same number of
  // micro-batches. Default: true.
  bool same_count_across_ranks = true;
  // > 0: rows a Get hands out are leased for this long; unacknowledged, they
  // are handed out again (at-least-once). 0: handed out once (at-most-once).
  int64_t lease_ms = 0;
  // BALANCED consumers: the replicas of each DP rank (its TP / PP / CP
  // peers), each receiving the rank's share of every round once; a Get names
  // its replica. Default: 1.
  int32_t replicas = 1;
  // Until its first Get the consumer holds no step: a step the other
  // consumers are done with is released without it (a role a run may leave
  // out). From its first Get on it holds every step not yet released.
  bool optional = false;
  // The server's state, kept in the spec it records (CreateDock and
  // AddConsumer cannot set them): an optional consumer that has made a Get;
  // a consumer removed by RemoveConsumer (it stays in the spec so that the
  // journal's records keep naming consumers by position; its name is free).
  bool joined = false;
  bool removed = false;
  bool added = false;  // added by AddConsumer
  // Set (>= 0): no row whose version is older than the dock's version minus
  // this is handed to the consumer (a row without a version has no age).
  // Unset: no bound.
  std::optional<int64_t> max_staleness;
  StalePolicy stale = StalePolicy::kLeave;
  RowOrder order = RowOrder::kDefault;
  // BALANCED: how short shares of a round are filled. Default: none.
  RoundPad pad = RoundPad::kNone;

  // It takes a step's oldest versions first.
  bool oldest_first() const {
    return order == RowOrder::kOldestVersion ||
           (order == RowOrder::kDefault && max_staleness.has_value());
  }
  // It counts toward a step's release.
  bool holds_steps() const { return !removed && (!optional || joined); }

  static constexpr int32_t kMaxReplicas = 1024;
  static constexpr int64_t kMaxLeaseMs = int64_t{24} * 3600 * 1000;

  bool operator==(const ConsumerSpec&) const = default;
};

// The dock seals a step by itself once `consumer` has `groups` complete
// groups (every row of the group that is not dropped ready in each column
// the consumer needs), counting groups it has taken: those groups stay, every
// other group of the step is dropped as surplus (DAPO: train on the first B
// groups that passed the filter). With `carry`, the other groups whose rows
// all have `carry_columns` (none named: the columns `consumer` needs) are
// carried into the next step instead (dropped as carried here, written there
// with their keys, versions and what each consumer has taken of them).
struct SealWhen {
  std::string consumer;
  int64_t groups = 0;
  bool carry = false;
  std::vector<std::string> carry_columns;

  bool operator==(const SealWhen&) const = default;
};

struct DockSpec {
  std::string name;
  int64_t num_prompts = 0;
  int32_t n_samples_per_prompt = 1;
  int32_t steps_in_flight = 1;
  std::vector<std::string> length_columns;
  std::vector<ColumnSpec> columns;
  std::vector<ConsumerSpec> consumers;
  int64_t preallocate_bytes = 0;
  // Cell memory of the dock's steps at most (0: unlimited). Puts to newer
  // steps wait for memory under it; the oldest live step is never held back
  // (its Puts may take the dock past the limit by what that step still
  // needs), so a newer step that took the memory cannot stall the ring.
  int64_t memory_limit_bytes = 0;
  int64_t chunk_bytes = 0;         // 0: kDefaultChunkBytes
  std::optional<SealWhen> seal_when;  // unset: steps are sealed only by Seal
  // A step every consumer is done with stays live (readable) until
  // ReleaseStep, instead of being released by itself; the ring's
  // backpressure bounds how many are kept.
  bool retain_steps = false;
  // A step's capacity in rows, a multiple of n_samples_per_prompt, at least
  // num_prompts x n (0: exactly that). Rows beyond num_prompts x n are room to
  // over-generate (DAPO): Puts that ask the server for new rows take them
  // group by group.
  int64_t max_rows_per_step = 0;
  // A Put may write columns the dock lacks: each is added first, as by
  // AddColumn (recorded before the Put), its definition from the Put
  // (PutInput::new_columns, else the column's name and dtype).
  bool add_columns_on_write = false;

  static constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;
  static constexpr int64_t kMaxRowsPerStep = int64_t{1} << 24;
  static constexpr int32_t kMaxStepsInFlight = 64;
  // rows per step x columns x steps_in_flight (the cell slots allocated at
  // creation, 8 bytes each).
  static constexpr int64_t kMaxCells = int64_t{1} << 27;

  // Rows a step holds at most (its partition's size): max_rows_per_step,
  // once normalized; num_prompts x n before.
  int64_t rows_per_step() const {
    return max_rows_per_step > 0 ? max_rows_per_step : num_prompts * n_samples_per_prompt;
  }
  int64_t num_groups() const { return rows_per_step() / n_samples_per_prompt; }
  // The rows of a step as the job plans it, num_prompts x n: what consumers'
  // default dispatch sizes divide.
  int64_t planned_rows() const { return num_prompts * n_samples_per_prompt; }
  // Index into columns, or -1.
  int ColumnIndex(absl::string_view column) const;
  // Consumers a dock holds at most, removed ones included (each keeps its
  // state in every partition).
  static constexpr int64_t kMaxConsumers = 1024;
  // Index into consumers of the consumer of that name not removed, or -1.
  int ConsumerIndex(absl::string_view consumer) const;

  // Every field: a CreateDock of an existing name is the same dock only if
  // the normalized specs are equal.
  bool operator==(const DockSpec&) const = default;
};

// Checks a name of a dock, column or consumer: 1..128 characters from
// [A-Za-z0-9_.-]. `what` is used in the message ("column name").
absl::Status ValidateName(absl::string_view what, absl::string_view name);

// Returns `spec` with defaults filled in (dp_size, dispatch_size, chunk size,
// ...) or INVALID_ARGUMENT naming the dock and the field at fault.
absl::StatusOr<DockSpec> NormalizeSpec(DockSpec spec);

// INVALID_ARGUMENT naming the consumer (the column) if it sets the server's
// state (joined, removed, added): CreateDock, AddConsumer and AddColumn take
// specs from users.
absl::Status CheckNoServerState(absl::string_view dock, const ConsumerSpec& consumer);
absl::Status CheckNoServerState(absl::string_view dock, const ColumnSpec& column);

// The spec a dock was created with, from its spec now: without the consumers
// and columns added since, its consumers neither removed nor joined. A
// CreateDock of an existing name is the same dock if its spec is this.
DockSpec AsCreated(DockSpec spec);

// Validates a consumer against an already normalized spec (used by
// AddConsumer) and returns it with defaults filled in.
absl::StatusOr<ConsumerSpec> NormalizeConsumer(const DockSpec& spec,
                                               ConsumerSpec consumer);

}  // namespace tdock

#endif  // TDOCK_COMMON_SPEC_H_
