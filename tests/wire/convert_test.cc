// Conversions between tdock.v1 messages and tdock's spec types and statuses.
#include "proto/tdock/v1/convert.h"

#include "absl/strings/cord.h"
#include "common/refusal.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

DockSpec SampleSpec() {
  DockSpec spec;
  spec.name = "grpo";
  spec.num_prompts = 256;
  spec.n_samples_per_prompt = 8;
  spec.steps_in_flight = 2;
  spec.length_columns = {"prompt_ids", "response_ids"};
  spec.columns.push_back({"prompt_ids", DType::kInt32, {}, 4096, false});
  spec.columns.push_back({"hidden", DType::kBFloat16, {4, 8}, 0, true});
  spec.columns.push_back({"messages", DType::kBytes, {}, 0, false, ColumnEncoding::kJson});
  ConsumerSpec actor;
  actor.name = "actor";
  actor.columns = {"prompt_ids", "hidden"};
  actor.dispatch_size = 64;
  actor.dp_size = 8;
  actor.whole_groups = true;
  actor.policy = Policy::kBalanced;
  actor.seed = 0xFFFFFFFFFFFFFFF0ull;
  actor.cost = CostModel{.a = 24576, .b = 1};
  actor.micro_batch =
      MicroBatchOptions{.max_tokens = 16384,
                        .max_rows = 32,
                        .round_to = 128,
                        .count_multiple = 4,
                        .min_count = 2,
                        .padded = true,
                        .planner = MicroBatchPlanner::kPacked,
                        .order = MicroBatchOrder::kSmallestAtEnds};
  actor.same_count_across_ranks = false;
  actor.lease_ms = 5000;
  actor.replicas = 4;
  actor.pad = RoundPad::kRepeat;
  spec.consumers.push_back(actor);
  ConsumerSpec reward;
  reward.name = "reward";
  reward.columns = {"prompt_ids"};
  reward.policy = Policy::kRandom;
  reward.seed = 7;
  reward.max_staleness = 0;
  reward.stale = StalePolicy::kDrop;
  reward.order = RowOrder::kOldestVersion;
  spec.consumers.push_back(reward);
  spec.preallocate_bytes = 1 << 20;
  spec.memory_limit_bytes = int64_t{1} << 33;
  spec.chunk_bytes = 1 << 22;
  spec.seal_when = SealWhen{"reward", 3, /*carry=*/true, {"prompt_ids"}};
  spec.retain_steps = true;
  spec.add_columns_on_write = true;
  return spec;
}

// A spec survives ToProto then FromProto field by field.
TEST(Convert, DockSpecRoundTrip) {
  const DockSpec spec = SampleSpec();
  const v1::DockSpec proto = ToProto(spec);
  EXPECT_EQ(proto.columns(1).dtype(), v1::BFLOAT16);
  EXPECT_EQ(proto.columns(2).encoding(), v1::JSON);
  EXPECT_EQ(proto.consumers(0).policy(), v1::BALANCED);
  EXPECT_EQ(proto.consumers(1).policy(), v1::RANDOM);
  const v1::MicroBatchSpec& mb = proto.consumers(0).micro_batch();
  EXPECT_EQ(mb.planner(), v1::PLANNER_PACKED);
  EXPECT_EQ(mb.order(), v1::SMALLEST_AT_ENDS);
  EXPECT_TRUE(mb.has_same_count_across_ranks());
  EXPECT_FALSE(mb.same_count_across_ranks());
  EXPECT_EQ(proto.consumers(0).cost().a(), 24576);
  EXPECT_FALSE(proto.consumers(1).has_micro_batch());
  EXPECT_EQ(proto.seal_when().consumer(), "reward");
  EXPECT_TRUE(proto.seal_when().carry());
  ASSERT_OK_AND_ASSIGN(DockSpec back, FromProto(proto));
  EXPECT_EQ(back, spec);  // every field
}

// Every DType keeps its numeric value across the boundary.
TEST(Convert, DTypeValuesMatchProto) {
  for (int v = 1; v <= 11; ++v) {
    v1::ColumnSpec proto;
    proto.set_name("c");
    proto.set_dtype(static_cast<v1::DType>(v));
    ASSERT_OK_AND_ASSIGN(ColumnSpec column, FromProto(proto));
    EXPECT_EQ(static_cast<int>(column.dtype), v);
    EXPECT_EQ(static_cast<int>(ToProto(column).dtype()), v);
  }
  EXPECT_EQ(static_cast<int>(v1::BYTES), static_cast<int>(DType::kBytes));
  EXPECT_EQ(static_cast<int>(v1::FLOAT32), static_cast<int>(DType::kFloat32));
}

// Proto zeros of n_samples_per_prompt, steps_in_flight and dp_size mean 1;
// an unset policy means FIFO.
TEST(Convert, ZeroMeansDefault) {
  v1::DockSpec proto;
  proto.set_name("d");
  proto.set_num_prompts(4);
  proto.add_consumers()->set_name("c");
  ASSERT_OK_AND_ASSIGN(DockSpec spec, FromProto(proto));
  EXPECT_EQ(spec.n_samples_per_prompt, 1);
  EXPECT_EQ(spec.steps_in_flight, 1);
  ASSERT_EQ(spec.consumers.size(), 1u);
  EXPECT_EQ(spec.consumers[0].dp_size, 1);
  EXPECT_EQ(spec.consumers[0].policy, Policy::kFifo);

  v1::ConsumerSpec fifo;
  fifo.set_policy(v1::FIFO);
  ASSERT_OK_AND_ASSIGN(ConsumerSpec c, FromProto(fifo));
  EXPECT_EQ(c.policy, Policy::kFifo);
  EXPECT_EQ(ToProto(c).policy(), v1::FIFO);
}

// Enum values outside the contract are rejected, naming the field and value.
TEST(Convert, UnknownEnumValuesRejected) {
  v1::DockSpec proto;
  proto.set_name("d");
  proto.add_columns()->set_name("ok");
  v1::ColumnSpec* bad = proto.add_columns();
  bad->set_name("weird");
  bad->set_dtype(static_cast<v1::DType>(42));
  EXPECT_STATUS(FromProto(proto), absl::StatusCode::kInvalidArgument,
                "columns[1] (weird).dtype: unknown DType value 42");

  v1::DockSpec proto2;
  proto2.set_name("d");
  v1::ConsumerSpec* consumer = proto2.add_consumers();
  consumer->set_name("actor");
  consumer->set_policy(static_cast<v1::Policy>(9));
  EXPECT_STATUS(FromProto(proto2), absl::StatusCode::kInvalidArgument,
                "consumers[0] (actor).policy: unknown Policy value 9");
  EXPECT_STATUS(FromProto(*consumer), absl::StatusCode::kInvalidArgument,
                "ConsumerSpec (actor).policy: unknown Policy value 9");
  EXPECT_STATUS(FromProto(*bad), absl::StatusCode::kInvalidArgument,
                "ColumnSpec (weird).dtype");
  consumer->set_policy(v1::FIFO);
  consumer->set_stale(static_cast<v1::StalePolicy>(5));
  EXPECT_STATUS(FromProto(*consumer), absl::StatusCode::kInvalidArgument,
                "ConsumerSpec (actor).stale: unknown StalePolicy value 5");
  consumer->set_stale(v1::STALE_LEAVE);
  consumer->set_order(static_cast<v1::RowOrder>(8));
  EXPECT_STATUS(FromProto(*consumer), absl::StatusCode::kInvalidArgument,
                "ConsumerSpec (actor).order: unknown RowOrder value 8");
  consumer->set_order(v1::ORDER_INDEX);
  consumer->set_pad(static_cast<v1::RoundPad>(3));
  EXPECT_STATUS(FromProto(*consumer), absl::StatusCode::kInvalidArgument,
                "ConsumerSpec (actor).pad: unknown RoundPad value 3");

  v1::ColumnSpec encoded;
  encoded.set_name("uid");
  encoded.set_dtype(v1::BYTES);
  encoded.set_encoding(static_cast<v1::ColumnEncoding>(7));
  EXPECT_STATUS(FromProto(encoded), absl::StatusCode::kInvalidArgument,
                "ColumnSpec (uid).encoding: unknown ColumnEncoding value 7");
}

// Absent cost and micro_batch messages mean a = 1, b = 0 and no
// micro-batching; inside a present micro_batch, zero round_to and
// count_multiple mean 1, unset enums mean BALANCED / HEAVY_FIRST and an unset
// same_count_across_ranks means true.
TEST(Convert, BalanceDefaults) {
  v1::ConsumerSpec bare;
  bare.set_name("c");
  ASSERT_OK_AND_ASSIGN(ConsumerSpec plain, FromProto(bare));
  EXPECT_EQ(plain.cost.a, 1);
  EXPECT_EQ(plain.cost.b, 0);
  EXPECT_FALSE(plain.micro_batch.has_value());
  EXPECT_TRUE(plain.same_count_across_ranks);
  const v1::ConsumerSpec plain_proto = ToProto(plain);
  EXPECT_FALSE(plain_proto.has_micro_batch());
  EXPECT_EQ(plain_proto.cost().a(), 1);
  EXPECT_EQ(plain_proto.cost().b(), 0);

  v1::ConsumerSpec proto;
  proto.set_name("c");
  proto.mutable_cost()->set_b(0.5);  // present: an unset a is 0
  proto.mutable_micro_batch()->set_max_tokens(4096);
  ASSERT_OK_AND_ASSIGN(ConsumerSpec c, FromProto(proto));
  EXPECT_EQ(c.cost.a, 0);
  EXPECT_EQ(c.cost.b, 0.5);
  ASSERT_TRUE(c.micro_batch.has_value());
  EXPECT_EQ(c.micro_batch->max_tokens, 4096);
  EXPECT_EQ(c.micro_batch->max_rows, 0);
  EXPECT_EQ(c.micro_batch->round_to, 1);
  EXPECT_EQ(c.micro_batch->count_multiple, 1);
  EXPECT_EQ(c.micro_batch->min_count, 0);
  EXPECT_FALSE(c.micro_batch->padded);
  EXPECT_EQ(c.micro_batch->planner, MicroBatchPlanner::kBalanced);
  EXPECT_EQ(c.micro_batch->order, MicroBatchOrder::kHeavyFirst);
  EXPECT_TRUE(c.same_count_across_ranks);
  const v1::ConsumerSpec back = ToProto(c);
  EXPECT_EQ(back.micro_batch().round_to(), 1);
  EXPECT_EQ(back.micro_batch().planner(), v1::PLANNER_BALANCED);
  EXPECT_EQ(back.micro_batch().order(), v1::HEAVY_FIRST);
  EXPECT_TRUE(back.micro_batch().same_count_across_ranks());

  proto.mutable_micro_batch()->set_same_count_across_ranks(false);
  ASSERT_OK_AND_ASSIGN(ConsumerSpec differing, FromProto(proto));
  EXPECT_FALSE(differing.same_count_across_ranks);
}

// Micro-batch planner and order values outside the contract are rejected,
// naming the consumer and the field.
TEST(Convert, UnknownMicroBatchEnumsRejected) {
  v1::DockSpec proto;
  proto.set_name("d");
  proto.add_consumers()->set_name("ok");
  v1::ConsumerSpec* consumer = proto.add_consumers();
  consumer->set_name("actor");
  consumer->mutable_micro_batch()->set_max_tokens(100);
  consumer->mutable_micro_batch()->set_planner(
      static_cast<v1::MicroBatchPlanner>(3));
  EXPECT_STATUS(
      FromProto(proto), absl::StatusCode::kInvalidArgument,
      "consumers[1] (actor).micro_batch.planner: unknown MicroBatchPlanner "
      "value 3");
  consumer->mutable_micro_batch()->set_planner(v1::PLANNER_PACKED);
  consumer->mutable_micro_batch()->set_order(
      static_cast<v1::MicroBatchOrder>(-1));
  EXPECT_STATUS(FromProto(*consumer), absl::StatusCode::kInvalidArgument,
                "ConsumerSpec (actor).micro_batch.order: unknown "
                "MicroBatchOrder value -1");
}

// Status codes and messages are kept in both directions.
// Every field of a batch's metadata set to a value of its own, so a field
// left out of either direction shows.
BatchMeta SampleMeta() {
  BatchMeta meta;
  meta.step = 7;
  meta.rows = {5, 1, 9};
  meta.token_counts = {300, 20, 4000};
  meta.end_of_step = true;
  meta.timed_out = true;
  meta.round = 3;
  meta.micro_batches = {{.begin = 0, .end = 2, .padded_len = 384, .tokens = 320, .padded_tokens = 768},
                        {.begin = 2, .end = 3, .padded_len = 4096, .tokens = 4000, .padded_tokens = 4096}};
  BalanceStats stats;
  stats.rank_cost = {1.5, 2.5, 2.0};
  stats.rank_tokens = {10, 30, 20};
  stats.micro_batch_cost = {0.25, 0.75, 0.5};
  stats.micro_batch_tokens = {4, 12, 8};
  stats.micro_batches = 11;
  stats.tokens = 4320;
  stats.padded_tokens = 4864;
  stats.padding_ratio = 1.125;
  meta.balance = stats;
  meta.lease_id = (uint64_t{9} << 40) + 17;
  meta.lease = absl::Milliseconds(2500);
  return meta;
}

TEST(Convert, BatchMetaRoundTripsThroughGetAndSampleResponses) {
  const BatchMeta meta = SampleMeta();
  v1::GetResponse get;
  ToProto(meta, &get);
  EXPECT_EQ(FromProto(get), meta);
  v1::SampleResponse sample;
  ToProto(meta, &sample);
  EXPECT_EQ(FromProto(sample), meta);

  BatchMeta bare = meta;  // written over a full one: nothing of it stays
  bare.balance.reset();
  bare.micro_batches.pop_back();
  ToProto(bare, &get);
  EXPECT_FALSE(get.has_balance());
  EXPECT_EQ(FromProto(get), bare);
}

TEST(Convert, StatusRoundTrip) {
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "msg here");
    const grpc::Status g = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), "msg here");
    const absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), status.code());
    EXPECT_EQ(back.message(), "msg here");
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("dock 'x'")).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A refusal travels in the status details as a google.rpc.Status holding a
// tdock.v1.Refusal, and comes back attached to the status; a status without
// one sends no details, and details that are not a refusal leave the status
// as it is.
TEST(Convert, RefusalsTravelInTheStatusDetails) {
  const absl::Status sealed = RefuseDropped(
      DropReason::kSealed, absl::FailedPreconditionError("step 0: row 6 was dropped (sealed)"));
  const grpc::Status g = ToGrpcStatus(sealed);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(g.error_message(), "step 0: row 6 was dropped (sealed)");
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(g.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(details.message(), g.error_message());
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/tdock.v1.Refusal");
  v1::Refusal refusal;
  ASSERT_TRUE(refusal.ParseFromString(details.details(0).value()));
  EXPECT_EQ(refusal.reason(), v1::REFUSAL_SEALED);
  EXPECT_EQ(refusal.drop_reason(), v1::SEALED);

  const absl::Status back = FromGrpcStatus(g);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(back.message(), "step 0: row 6 was dropped (sealed)");
  EXPECT_REFUSED(back, Refusal::kSealed, DropReason::kSealed);
  EXPECT_REFUSED(FromGrpcStatus(ToGrpcStatus(CapacityError("full"))), Refusal::kCapacity,
                 DropReason::kUnspecified);
  EXPECT_EQ(RefusalOf(FromGrpcStatus(ToGrpcStatus(CapacityError("full")))).free_groups, -1);
  // New rows a step has no room for: its free groups go along.
  const absl::Status no_room = FromGrpcStatus(ToGrpcStatus(NoRoomError("no room", 3)));
  EXPECT_REFUSED(no_room, Refusal::kCapacity, DropReason::kUnspecified);
  EXPECT_EQ(RefusalOf(no_room).free_groups, 3);

  EXPECT_TRUE(ToGrpcStatus(absl::FailedPreconditionError("plain")).error_details().empty());
  const grpc::Status garbage(grpc::StatusCode::ABORTED, "odd", "\xff\x01not a status");
  EXPECT_EQ(FromGrpcStatus(garbage).message(), "odd");
  EXPECT_REFUSED(FromGrpcStatus(garbage), Refusal::kNone, DropReason::kUnspecified);
  v1::RpcStatus other;
  other.set_code(10);
  other.add_details()->set_type_url("type.googleapis.com/google.rpc.RetryInfo");
  EXPECT_REFUSED(FromGrpcStatus(grpc::Status(grpc::StatusCode::ABORTED, "x",
                                             other.SerializeAsString())),
                 Refusal::kNone, DropReason::kUnspecified);
}

// A refusal is a payload of the status: code and message stay as they are,
// an OK status takes none, and a payload that does not read as one is none.
TEST(Convert, ARefusalKeepsTheStatusAsItIs) {
  const absl::Status refused = Refuse(Refusal::kReleased, absl::FailedPreconditionError("gone"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(), "gone");
  EXPECT_REFUSED(refused, Refusal::kReleased, DropReason::kUnspecified);
  EXPECT_TRUE(Refuse(Refusal::kSealed, absl::OkStatus()).ok());
  EXPECT_REFUSED(RefuseDropped(DropReason::kFiltered, absl::FailedPreconditionError("f")),
                 Refusal::kDropped, DropReason::kFiltered);
  EXPECT_REFUSED(RefuseDropped(DropReason::kExpired, absl::FailedPreconditionError("e")),
                 Refusal::kExpired, DropReason::kExpired);
  absl::Status odd = absl::AbortedError("odd");
  odd.SetPayload("type.tdock.dev/tdock.Refusal", absl::Cord("\x63\x01"));
  EXPECT_REFUSED(odd, Refusal::kNone, DropReason::kUnspecified);
}

}  // namespace
}  // namespace tdock
