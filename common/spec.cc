#include "common/spec.h"

#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tdock {
namespace {

constexpr int64_t kMaxNameLength = 128;
constexpr int32_t kMaxDpSize = 4096;
constexpr int64_t kMinChunkBytes = int64_t{64} << 10;
constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;
constexpr int64_t kMaxItemBytes = int64_t{1} << 30;

absl::Status Invalid(absl::string_view dock, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("dock '", dock, "': ", what));
}

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

absl::Status NormalizeColumn(const DockSpec& spec, ColumnSpec& column) {
  TDOCK_RETURN_IF_ERROR(ValidateName("column name", column.name));
  if (!IsValidDType(static_cast<int>(column.dtype))) {
    return Invalid(spec.name, absl::StrCat("column '", column.name,
                                           "' has no valid dtype"));
  }
  int64_t item = static_cast<int64_t>(DTypeSize(column.dtype));
  for (int64_t dim : column.inner_shape) {
    // Divides instead of multiplying: a product past 2^63 must not wrap.
    if (dim < 1 || dim > kMaxItemBytes / item) {
      return Invalid(spec.name,
                     absl::StrCat("column '", column.name, "' inner_shape [",
                                  absl::StrJoin(column.inner_shape, ","),
                                  "] needs dimensions >= 1 and items of at "
                                  "most 1 GiB"));
    }
    item *= dim;
  }
  if (column.max_len < 0) {
    return Invalid(spec.name, absl::StrCat("column '", column.name,
                                           "' max_len ", column.max_len,
                                           " is negative"));
  }
  if (column.encoding != ColumnEncoding::kRaw &&
      (column.dtype != DType::kBytes || !column.inner_shape.empty())) {
    return Invalid(spec.name, absl::StrCat("column '", column.name, "' has the ",
                                           ColumnTypeName(column),
                                           " encoding, which needs dtype bytes and "
                                           "no inner_shape"));
  }
  return absl::OkStatus();
}

absl::Status NormalizeColumns(DockSpec& spec) {
  if (spec.columns.empty()) return Invalid(spec.name, "no columns");
  std::set<std::string> seen;
  for (ColumnSpec& column : spec.columns) {
    TDOCK_RETURN_IF_ERROR(NormalizeColumn(spec, column));
    if (!seen.insert(column.name).second) {
      return Invalid(spec.name,
                     absl::StrCat("column '", column.name, "' is declared twice"));
    }
  }
  std::set<std::string> lengths;
  for (const std::string& name : spec.length_columns) {
    if (spec.ColumnIndex(name) < 0) {
      return Invalid(spec.name, absl::StrCat("length_columns names unknown "
                                             "column '", name, "'"));
    }
    if (!lengths.insert(name).second) {
      return Invalid(spec.name, absl::StrCat("length_columns lists '", name,
                                             "' twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeShape(DockSpec& spec) {
  TDOCK_RETURN_IF_ERROR(ValidateName("dock name", spec.name));
  if (spec.num_prompts < 1) {
    return Invalid(spec.name, absl::StrCat("num_prompts ", spec.num_prompts,
                                           " must be at least 1"));
  }
  if (spec.n_samples_per_prompt == 0) spec.n_samples_per_prompt = 1;
  if (spec.n_samples_per_prompt < 1) {
    return Invalid(spec.name, absl::StrCat("n_samples_per_prompt ",
                                           spec.n_samples_per_prompt,
                                           " must be at least 1"));
  }
  if (spec.num_prompts > DockSpec::kMaxRowsPerStep / spec.n_samples_per_prompt) {
    return Invalid(spec.name,
                   absl::StrCat("num_prompts x n_samples_per_prompt exceeds ",
                                DockSpec::kMaxRowsPerStep, " rows per step"));
  }
  const int64_t planned = spec.num_prompts * spec.n_samples_per_prompt;
  if (spec.max_rows_per_step == 0) spec.max_rows_per_step = planned;
  if (spec.max_rows_per_step < planned || spec.max_rows_per_step > DockSpec::kMaxRowsPerStep ||
      spec.max_rows_per_step % spec.n_samples_per_prompt != 0) {
    return Invalid(spec.name, absl::StrCat("max_rows_per_step ", spec.max_rows_per_step,
                                           " must be a multiple of n_samples_per_prompt ",
                                           spec.n_samples_per_prompt, " in [num_prompts x n = ",
                                           planned, ", ", DockSpec::kMaxRowsPerStep, "]"));
  }
  if (spec.steps_in_flight == 0) spec.steps_in_flight = 1;
  if (spec.steps_in_flight < 1 ||
      spec.steps_in_flight > DockSpec::kMaxStepsInFlight) {
    return Invalid(spec.name, absl::StrCat("steps_in_flight ",
                                           spec.steps_in_flight, " must be in [1, ",
                                           DockSpec::kMaxStepsInFlight, "]"));
  }
  return absl::OkStatus();
}

absl::Status NormalizeMemory(DockSpec& spec) {
  if (spec.chunk_bytes == 0) spec.chunk_bytes = DockSpec::kDefaultChunkBytes;
  if (spec.chunk_bytes < kMinChunkBytes || spec.chunk_bytes > kMaxChunkBytes) {
    return Invalid(spec.name, absl::StrCat("chunk_bytes ", spec.chunk_bytes,
                                           " must be in [", kMinChunkBytes, ", ",
                                           kMaxChunkBytes, "]"));
  }
  if (spec.chunk_bytes % 64 != 0) {
    return Invalid(spec.name, absl::StrCat("chunk_bytes ", spec.chunk_bytes,
                                           " must be a multiple of 64"));
  }
  if (spec.memory_limit_bytes > 0 && spec.memory_limit_bytes < spec.chunk_bytes) {
    return Invalid(spec.name, absl::StrCat("memory_limit_bytes ",
                                           spec.memory_limit_bytes,
                                           " is below chunk_bytes ", spec.chunk_bytes));
  }
  if (spec.preallocate_bytes < 0 || spec.memory_limit_bytes < 0) {
    return Invalid(spec.name,
                   "preallocate_bytes and memory_limit_bytes must not be negative");
  }
  if (spec.memory_limit_bytes > 0 &&
      spec.preallocate_bytes > spec.memory_limit_bytes) {
    return Invalid(spec.name, absl::StrCat("preallocate_bytes ",
                                           spec.preallocate_bytes,
                                           " exceeds memory_limit_bytes ",
                                           spec.memory_limit_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckConsumerColumns(const DockSpec& spec,
                                  const ConsumerSpec& consumer) {
  if (consumer.columns.empty()) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' needs at least one column"));
  }
  std::set<std::string> seen;
  for (const std::string& column : consumer.columns) {
    if (spec.ColumnIndex(column) < 0) {
      return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                             "' needs unknown column '",
                                             column, "'"));
    }
    if (!seen.insert(column).second) {
      return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                             "' lists column '", column,
                                             "' twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeDispatch(const DockSpec& spec, ConsumerSpec& consumer) {
  const int64_t n = spec.n_samples_per_prompt;
  if (consumer.dispatch_size == 0) {
    consumer.dispatch_size =
        consumer.whole_groups
            ? (spec.num_prompts / consumer.dp_size) * n
            : spec.planned_rows() / consumer.dp_size;
    if (consumer.dispatch_size == 0) {
      return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                             "' has dp_size ", consumer.dp_size,
                                             " larger than the ",
                                             consumer.whole_groups ? "groups"
                                                                   : "rows",
                                             " of a step"));
    }
  }
  if (consumer.dispatch_size < 1 ||
      consumer.dispatch_size > spec.rows_per_step()) {
    return Invalid(spec.name,
                   absl::StrCat("consumer '", consumer.name, "' dispatch_size ",
                                consumer.dispatch_size, " must be in [1, ",
                                spec.rows_per_step(), "]"));
  }
  if (consumer.whole_groups && consumer.dispatch_size % n != 0) {
    return Invalid(spec.name,
                   absl::StrCat("consumer '", consumer.name,
                                "' takes whole groups but dispatch_size ",
                                consumer.dispatch_size,
                                " is not a multiple of n_samples_per_prompt ", n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNoServerState(absl::string_view dock, const ConsumerSpec& consumer) {
  if (!consumer.joined && !consumer.removed && !consumer.added) return absl::OkStatus();
  return Invalid(dock, absl::StrCat("consumer '", consumer.name, "' sets ",
                                    consumer.removed  ? "removed"
                                    : consumer.joined ? "joined"
                                                      : "added",
                                    ", which is the server's state (RemoveConsumer removes a "
                                    "consumer; an optional one joins with its first Get)"));
}

absl::Status CheckNoServerState(absl::string_view dock, const ColumnSpec& column) {
  if (!column.added) return absl::OkStatus();
  return Invalid(dock, absl::StrCat("column '", column.name,
                                    "' sets added, which is the server's state"));
}

DockSpec AsCreated(DockSpec spec) {
  std::erase_if(spec.consumers, [](const ConsumerSpec& c) { return c.added; });
  for (ConsumerSpec& c : spec.consumers) c.joined = c.removed = false;
  std::erase_if(spec.columns, [](const ColumnSpec& c) { return c.added; });
  return spec;
}

absl::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kFifo: return "fifo";
    case Policy::kRandom: return "random";
    case Policy::kBalanced: return "balanced";
  }
  return "unknown";
}

absl::string_view StalePolicyName(StalePolicy stale) {
  return stale == StalePolicy::kDrop ? "drop" : "leave";
}

absl::string_view RoundPadName(RoundPad pad) {
  return pad == RoundPad::kRepeat ? "repeat" : "none";
}

absl::string_view RowOrderName(RowOrder order) {
  switch (order) {
    case RowOrder::kOldestVersion: return "oldest_version";
    case RowOrder::kIndex: return "index";
    case RowOrder::kDefault: break;
  }
  return "default";
}

absl::string_view ColumnTypeName(const ColumnSpec& column) {
  switch (column.encoding) {
    case ColumnEncoding::kUtf8:
      return "string";
    case ColumnEncoding::kJson:
      return "json";
    case ColumnEncoding::kTensors:
      return "tensors";
    case ColumnEncoding::kRaw:
      break;
  }
  return DTypeName(column.dtype);
}

bool ParseColumnType(absl::string_view name, ColumnSpec* column) {
  if (name == "string" || name == "json" || name == "tensors") {
    column->dtype = DType::kBytes;
    column->encoding = name == "string" ? ColumnEncoding::kUtf8
                       : name == "json" ? ColumnEncoding::kJson
                                        : ColumnEncoding::kTensors;
    return true;
  }
  const std::optional<DType> dtype = ParseDType(name);
  if (!dtype.has_value()) return false;
  column->dtype = *dtype;
  column->encoding = ColumnEncoding::kRaw;
  return true;
}

int64_t ColumnSpec::item_bytes() const {
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t dim : inner_shape) bytes *= dim;
  return bytes;
}

int DockSpec::ColumnIndex(absl::string_view column) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == column) return static_cast<int>(i);
  }
  return -1;
}

int DockSpec::ConsumerIndex(absl::string_view consumer) const {
  for (size_t i = 0; i < consumers.size(); ++i) {
    if (consumers[i].name == consumer && !consumers[i].removed) return static_cast<int>(i);
  }
  return -1;
}

absl::Status ValidateName(absl::string_view what, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (static_cast<int64_t>(name.size()) > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", name.substr(0, 32), "...' is longer than ", kMaxNameLength,
        " characters"));
  }
  for (char c : name) {
    if (!NameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " '", absl::CHexEscape(name),
          "' may only hold letters, digits, '_', '.' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ConsumerSpec> NormalizeConsumer(const DockSpec& spec,
                                               ConsumerSpec consumer) {
  TDOCK_RETURN_IF_ERROR(ValidateName("consumer name", consumer.name));
  TDOCK_RETURN_IF_ERROR(CheckConsumerColumns(spec, consumer));
  if (consumer.dp_size == 0) consumer.dp_size = 1;
  if (consumer.dp_size < 1 || consumer.dp_size > kMaxDpSize) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' dp_size ", consumer.dp_size,
                                           " must be in [1, ", kMaxDpSize, "]"));
  }
  if (consumer.policy != Policy::kFifo && consumer.policy != Policy::kRandom &&
      consumer.policy != Policy::kBalanced) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' has no valid policy"));
  }
  TDOCK_RETURN_IF_ERROR(NormalizeDispatch(spec, consumer));
  if (consumer.replicas == 0) consumer.replicas = 1;
  if (consumer.replicas < 1 || consumer.replicas > ConsumerSpec::kMaxReplicas) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name, "' replicas ",
                                           consumer.replicas, " must be in [1, ",
                                           ConsumerSpec::kMaxReplicas, "]"));
  }
  if (consumer.replicas > 1 && consumer.policy != Policy::kBalanced) {
    return Invalid(spec.name, absl::StrCat(
        "consumer '", consumer.name, "' replicas ", consumer.replicas,
        " needs policy balanced (its rounds give each rank the share its replicas take)"));
  }
  if (consumer.pad != RoundPad::kNone && consumer.pad != RoundPad::kRepeat) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' has no valid pad (none or repeat)"));
  }
  if (consumer.pad == RoundPad::kRepeat && consumer.policy != Policy::kBalanced) {
    return Invalid(spec.name, absl::StrCat(
        "consumer '", consumer.name,
        "' pad repeat needs policy balanced (it fills the short shares of a round)"));
  }
  if (consumer.max_staleness.has_value() && *consumer.max_staleness < 0) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name, "' max_staleness ",
                                           *consumer.max_staleness,
                                           " is negative (it is how many versions a row may "
                                           "lag the dock's; leave it unset for no bound)"));
  }
  if (consumer.stale != StalePolicy::kLeave && consumer.stale != StalePolicy::kDrop) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' has no valid stale policy"));
  }
  if (consumer.stale == StalePolicy::kDrop && !consumer.max_staleness.has_value()) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' stale: drop needs max_staleness (the bound "
                                           "past which a row is dropped)"));
  }
  if (consumer.order != RowOrder::kDefault && consumer.order != RowOrder::kOldestVersion &&
      consumer.order != RowOrder::kIndex) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' has no valid row order"));
  }
  if (consumer.lease_ms < 0 || consumer.lease_ms > ConsumerSpec::kMaxLeaseMs) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' lease_ms ", consumer.lease_ms,
                                           " must be in [0, ",
                                           ConsumerSpec::kMaxLeaseMs, "] (24 h)"));
  }
  absl::Status cost = consumer.cost.Validate();
  if (!cost.ok()) {
    return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                           "' cost: ", cost.message()));
  }
  if (consumer.micro_batch.has_value()) {
    absl::Status plan = consumer.micro_batch->Validate();
    if (!plan.ok()) {
      return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                             "' micro_batch: ", plan.message()));
    }
  }
  return consumer;
}

absl::StatusOr<DockSpec> NormalizeSpec(DockSpec spec) {
  TDOCK_RETURN_IF_ERROR(NormalizeShape(spec));
  TDOCK_RETURN_IF_ERROR(NormalizeColumns(spec));
  TDOCK_RETURN_IF_ERROR(NormalizeMemory(spec));
  // Every partition holds a cell slot per row and column, allocated at
  // creation: bound it so that one spec cannot ask for the machine.
  const int64_t cells = spec.rows_per_step() * static_cast<int64_t>(spec.columns.size()) *
                        spec.steps_in_flight;
  if (cells > DockSpec::kMaxCells) {
    return Invalid(spec.name,
                   absl::StrCat("rows per step x columns x steps_in_flight = ", cells,
                                " cells, over the limit of ", DockSpec::kMaxCells));
  }
  std::set<std::string> seen;
  for (ConsumerSpec& consumer : spec.consumers) {
    TDOCK_ASSIGN_OR_RETURN(consumer, NormalizeConsumer(spec, std::move(consumer)));
    if (!consumer.removed && !seen.insert(consumer.name).second) {
      return Invalid(spec.name, absl::StrCat("consumer '", consumer.name,
                                             "' is declared twice"));
    }
  }
  if (spec.seal_when.has_value()) {
    const SealWhen& when = *spec.seal_when;
    if (spec.ConsumerIndex(when.consumer) < 0) {
      return Invalid(spec.name, absl::StrCat("seal_when.consumer '", when.consumer,
                                             "' is not a consumer of the dock"));
    }
    if (when.groups < 1 || when.groups > spec.num_groups()) {
      return Invalid(spec.name, absl::StrCat("seal_when.groups ", when.groups,
                                             " must be in [1, num_prompts = ",
                                             spec.num_groups(), "]"));
    }
    for (const std::string& column : when.carry_columns) {
      if (spec.ColumnIndex(column) < 0) {
        return Invalid(spec.name, absl::StrCat("seal_when.carry_columns names column '", column,
                                               "', which the dock does not have"));
      }
    }
    if (!when.carry_columns.empty() && !when.carry) {
      return Invalid(spec.name, "seal_when.carry_columns is set but carry is not");
    }
    if (when.carry && spec.steps_in_flight < 2) {
      return Invalid(spec.name, absl::StrCat("seal_when.carry needs steps_in_flight >= 2 (it is ",
                                             spec.steps_in_flight,
                                             "): the next step must start while the sealed "
                                             "one holds the groups it carries"));
    }
  }
  return spec;
}

}  // namespace tdock
