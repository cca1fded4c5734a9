#include "proto/tdock/v1/convert.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/refusal.h"
#include "common/status.h"

namespace tdock {
namespace {

// Proto 0 means "use the default" for these counters (the proto documents
// `0: 1`); other values pass through for NormalizeSpec to check.
int32_t ZeroMeansOne(int32_t value) { return value == 0 ? 1 : value; }
int64_t ZeroMeansOne(int64_t value) { return value == 0 ? 1 : value; }

absl::StatusOr<DType> DTypeFromProto(absl::string_view field, int value) {
  if (value == 0) return DType::kUnspecified;  // NormalizeSpec rejects it
  if (!IsValidDType(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": unknown DType value ", value));
  }
  return static_cast<DType>(value);
}

absl::StatusOr<Policy> PolicyFromProto(absl::string_view field, int value) {
  switch (value) {
    case v1::POLICY_UNSPECIFIED:
    case v1::FIFO:
      return Policy::kFifo;
    case v1::RANDOM:
      return Policy::kRandom;
    case v1::BALANCED:
      return Policy::kBalanced;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown Policy value ", value));
  }
}

v1::Policy PolicyToProto(Policy policy) {
  switch (policy) {
    case Policy::kRandom:
      return v1::RANDOM;
    case Policy::kBalanced:
      return v1::BALANCED;
    case Policy::kFifo:
      break;
  }
  return v1::FIFO;
}

absl::StatusOr<MicroBatchPlanner> PlannerFromProto(absl::string_view field,
                                                   int value) {
  switch (value) {
    case v1::MICRO_BATCH_PLANNER_UNSPECIFIED:
    case v1::PLANNER_BALANCED:
      return MicroBatchPlanner::kBalanced;
    case v1::PLANNER_PACKED:
      return MicroBatchPlanner::kPacked;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown MicroBatchPlanner value ", value));
  }
}

absl::StatusOr<MicroBatchOrder> OrderFromProto(absl::string_view field,
                                               int value) {
  switch (value) {
    case v1::MICRO_BATCH_ORDER_UNSPECIFIED:
    case v1::HEAVY_FIRST:
      return MicroBatchOrder::kHeavyFirst;
    case v1::SMALLEST_AT_ENDS:
      return MicroBatchOrder::kSmallestAtEnds;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": unknown MicroBatchOrder value ", value));
  }
}

v1::MicroBatchSpec MicroBatchToProto(const MicroBatchOptions& in,
                                     bool same_count_across_ranks) {
  v1::MicroBatchSpec out;
  out.set_max_tokens(in.max_tokens);
  out.set_max_rows(in.max_rows);
  out.set_round_to(in.round_to);
  out.set_count_multiple(in.count_multiple);
  out.set_min_count(in.min_count);
  out.set_padded(in.padded);
  out.set_planner(in.planner == MicroBatchPlanner::kPacked
                      ? v1::PLANNER_PACKED
                      : v1::PLANNER_BALANCED);
  out.set_order(in.order == MicroBatchOrder::kSmallestAtEnds
                    ? v1::SMALLEST_AT_ENDS
                    : v1::HEAVY_FIRST);
  out.set_same_count_across_ranks(same_count_across_ranks);
  return out;
}

// `where` names the micro_batch field, e.g. "ConsumerSpec (actor).micro_batch".
absl::StatusOr<MicroBatchOptions> MicroBatchFromProto(
    absl::string_view where, const v1::MicroBatchSpec& in) {
  MicroBatchOptions out;
  out.max_tokens = in.max_tokens();
  out.max_rows = in.max_rows();
  out.round_to = ZeroMeansOne(in.round_to());
  out.count_multiple = ZeroMeansOne(in.count_multiple());
  out.min_count = in.min_count();
  out.padded = in.padded();
  TDOCK_ASSIGN_OR_RETURN(
      out.planner,
      PlannerFromProto(absl::StrCat(where, ".planner"), in.planner()));
  TDOCK_ASSIGN_OR_RETURN(
      out.order, OrderFromProto(absl::StrCat(where, ".order"), in.order()));
  return out;
}

// `where` names the message for error messages, e.g. "DockSpec.columns[2]
// (rewards)".
absl::StatusOr<ColumnSpec> ColumnFromProto(absl::string_view where,
                                           const v1::ColumnSpec& in) {
  ColumnSpec out;
  out.name = in.name();
  TDOCK_ASSIGN_OR_RETURN(
      out.dtype, DTypeFromProto(absl::StrCat(where, ".dtype"), in.dtype()));
  out.inner_shape.assign(in.inner_shape().begin(), in.inner_shape().end());
  out.max_len = in.max_len();
  out.rewritable = in.rewritable();
  out.added = in.added();
  if (!v1::ColumnEncoding_IsValid(in.encoding())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".encoding: unknown ColumnEncoding value ", in.encoding()));
  }
  out.encoding = static_cast<ColumnEncoding>(in.encoding());
  return out;
}

absl::StatusOr<ConsumerSpec> ConsumerFromProto(absl::string_view where,
                                               const v1::ConsumerSpec& in) {
  ConsumerSpec out;
  out.name = in.name();
  out.columns.assign(in.columns().begin(), in.columns().end());
  out.dispatch_size = in.dispatch_size();
  out.dp_size = ZeroMeansOne(in.dp_size());
  out.whole_groups = in.whole_groups();
  TDOCK_ASSIGN_OR_RETURN(
      out.policy, PolicyFromProto(absl::StrCat(where, ".policy"), in.policy()));
  out.seed = in.seed();
  out.lease_ms = in.lease_ms();
  out.replicas = ZeroMeansOne(in.replicas());
  out.optional = in.optional();
  out.joined = in.joined();
  out.removed = in.removed();
  out.added = in.added();
  if (in.has_max_staleness()) out.max_staleness = in.max_staleness();
  if (!v1::StalePolicy_IsValid(in.stale())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".stale: unknown StalePolicy value ", in.stale()));
  }
  out.stale = static_cast<StalePolicy>(in.stale());
  if (!v1::RowOrder_IsValid(in.order())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".order: unknown RowOrder value ", in.order()));
  }
  out.order = static_cast<RowOrder>(in.order());
  if (!v1::RoundPad_IsValid(in.pad())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".pad: unknown RoundPad value ", in.pad()));
  }
  out.pad = static_cast<RoundPad>(in.pad());
  if (in.has_cost())
    out.cost = CostModel{.a = in.cost().a(), .b = in.cost().b()};
  if (in.has_micro_batch()) {
    TDOCK_ASSIGN_OR_RETURN(
        out.micro_batch,
        MicroBatchFromProto(absl::StrCat(where, ".micro_batch"),
                            in.micro_batch()));
    out.same_count_across_ranks =
        !in.micro_batch().has_same_count_across_ranks() ||
        in.micro_batch().same_count_across_ranks();
  }
  return out;
}

std::string Where(absl::string_view message, absl::string_view name) {
  return absl::StrCat(message, " (", name, ")");
}

std::string Where(absl::string_view field, int index, absl::string_view name) {
  return absl::StrCat(field, "[", index, "] (", name, ")");
}

}  // namespace

v1::ColumnSpec ToProto(const ColumnSpec& column) {
  v1::ColumnSpec out;
  out.set_name(column.name);
  out.set_dtype(static_cast<v1::DType>(column.dtype));
  for (int64_t d : column.inner_shape) out.add_inner_shape(d);
  out.set_max_len(column.max_len);
  out.set_rewritable(column.rewritable);
  out.set_added(column.added);
  out.set_encoding(static_cast<v1::ColumnEncoding>(column.encoding));
  return out;
}

v1::ConsumerSpec ToProto(const ConsumerSpec& consumer) {
  v1::ConsumerSpec out;
  out.set_name(consumer.name);
  for (const std::string& c : consumer.columns) out.add_columns(c);
  out.set_dispatch_size(consumer.dispatch_size);
  out.set_dp_size(consumer.dp_size);
  out.set_whole_groups(consumer.whole_groups);
  out.set_policy(PolicyToProto(consumer.policy));
  out.set_seed(consumer.seed);
  out.set_lease_ms(consumer.lease_ms);
  out.set_replicas(consumer.replicas);
  out.set_optional(consumer.optional);
  out.set_joined(consumer.joined);
  out.set_removed(consumer.removed);
  out.set_added(consumer.added);
  if (consumer.max_staleness.has_value()) out.set_max_staleness(*consumer.max_staleness);
  out.set_stale(static_cast<v1::StalePolicy>(consumer.stale));
  out.set_order(static_cast<v1::RowOrder>(consumer.order));
  out.set_pad(static_cast<v1::RoundPad>(consumer.pad));
  out.mutable_cost()->set_a(consumer.cost.a);
  out.mutable_cost()->set_b(consumer.cost.b);
  if (consumer.micro_batch.has_value()) {
    *out.mutable_micro_batch() = MicroBatchToProto(
        *consumer.micro_batch, consumer.same_count_across_ranks);
  }
  return out;
}

v1::DockSpec ToProto(const DockSpec& spec) {
  v1::DockSpec out;
  out.set_name(spec.name);
  out.set_num_prompts(spec.num_prompts);
  out.set_n_samples_per_prompt(spec.n_samples_per_prompt);
  out.set_steps_in_flight(spec.steps_in_flight);
  for (const std::string& c : spec.length_columns) out.add_length_columns(c);
  for (const ColumnSpec& c : spec.columns) *out.add_columns() = ToProto(c);
  for (const ConsumerSpec& c : spec.consumers) {
    *out.add_consumers() = ToProto(c);
  }
  out.set_preallocate_bytes(spec.preallocate_bytes);
  out.set_memory_limit_bytes(spec.memory_limit_bytes);
  out.set_chunk_bytes(spec.chunk_bytes);
  out.set_retain_steps(spec.retain_steps);
  out.set_add_columns_on_write(spec.add_columns_on_write);
  out.set_max_rows_per_step(spec.max_rows_per_step);
  if (spec.seal_when.has_value()) {
    out.mutable_seal_when()->set_consumer(spec.seal_when->consumer);
    out.mutable_seal_when()->set_groups(spec.seal_when->groups);
    out.mutable_seal_when()->set_carry(spec.seal_when->carry);
    for (const std::string& column : spec.seal_when->carry_columns) {
      out.mutable_seal_when()->add_carry_columns(column);
    }
  }
  return out;
}

absl::StatusOr<ColumnSpec> FromProto(const v1::ColumnSpec& column) {
  return ColumnFromProto(Where("ColumnSpec", column.name()), column);
}

absl::StatusOr<ConsumerSpec> FromProto(const v1::ConsumerSpec& consumer) {
  return ConsumerFromProto(Where("ConsumerSpec", consumer.name()), consumer);
}

absl::StatusOr<DockSpec> FromProto(const v1::DockSpec& spec) {
  DockSpec out;
  out.name = spec.name();
  out.num_prompts = spec.num_prompts();
  out.n_samples_per_prompt = ZeroMeansOne(spec.n_samples_per_prompt());
  out.steps_in_flight = ZeroMeansOne(spec.steps_in_flight());
  out.length_columns.assign(spec.length_columns().begin(),
                            spec.length_columns().end());
  const std::string dock = Where("DockSpec", spec.name());
  out.columns.reserve(spec.columns_size());
  for (int i = 0; i < spec.columns_size(); ++i) {
    const v1::ColumnSpec& c = spec.columns(i);
    TDOCK_ASSIGN_OR_RETURN(
        ColumnSpec column,
        ColumnFromProto(Where(absl::StrCat(dock, ".columns"), i, c.name()), c));
    out.columns.push_back(std::move(column));
  }
  out.consumers.reserve(spec.consumers_size());
  for (int i = 0; i < spec.consumers_size(); ++i) {
    const v1::ConsumerSpec& c = spec.consumers(i);
    TDOCK_ASSIGN_OR_RETURN(
        ConsumerSpec consumer,
        ConsumerFromProto(Where(absl::StrCat(dock, ".consumers"), i, c.name()),
                          c));
    out.consumers.push_back(std::move(consumer));
  }
  out.preallocate_bytes = spec.preallocate_bytes();
  out.memory_limit_bytes = spec.memory_limit_bytes();
  out.chunk_bytes = spec.chunk_bytes();
  out.retain_steps = spec.retain_steps();
  out.add_columns_on_write = spec.add_columns_on_write();
  out.max_rows_per_step = spec.max_rows_per_step();
  if (spec.has_seal_when()) {
    out.seal_when = SealWhen{spec.seal_when().consumer(), spec.seal_when().groups(),
                             spec.seal_when().carry(),
                             {spec.seal_when().carry_columns().begin(),
                              spec.seal_when().carry_columns().end()}};
  }
  return out;
}

namespace {

constexpr absl::string_view kRefusalType = "type.googleapis.com/tdock.v1.Refusal";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const RefusalInfo refusal = RefusalOf(status);
  if (refusal.why == Refusal::kNone) {
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()));
  }
  v1::Refusal why;
  why.set_reason(static_cast<v1::RefusalReason>(refusal.why));
  why.set_drop_reason(ToProto(refusal.drop));
  if (refusal.free_groups >= 0) why.set_free_groups(refusal.free_groups);
  v1::RpcStatus details;
  details.set_code(static_cast<int>(status.code()));
  details.set_message(std::string(status.message()));
  v1::StatusDetail* detail = details.add_details();
  detail->set_type_url(std::string(kRefusalType));
  detail->set_value(why.SerializeAsString());
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  // gRPC codes 1..16 are absl's codes; anything else is not a valid code.
  if (code < 1 || code > 16)
    code = static_cast<int>(absl::StatusCode::kUnknown);
  absl::Status converted(static_cast<absl::StatusCode>(code), status.error_message());
  // The dock's refusal, if the details carry one (details it cannot read
  // leave the status as it is).
  v1::RpcStatus details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return converted;
  }
  for (const v1::StatusDetail& detail : details.details()) {
    v1::Refusal why;
    if (detail.type_url() != kRefusalType || !why.ParseFromString(detail.value())) continue;
    const int reason = static_cast<int>(why.reason());
    if (reason <= 0 || reason >= kRefusals) continue;
    return Refuse(static_cast<Refusal>(reason), std::move(converted),
                  FromProto(why.drop_reason()),
                  why.has_free_groups() && why.free_groups() >= 0 ? why.free_groups() : -1);
  }
  return converted;
}

}  // namespace tdock
