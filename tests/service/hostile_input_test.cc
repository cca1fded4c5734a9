// Hostile and malformed requests over the wire, table-driven: each gets its
// expected status code with a message naming what was wrong, and leaves the
// server as it was (the status of every dock and the dock list are
// identical before and after). The server runs with small limits so that
// every limit flag is exercised.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

// Protobuf wire pieces for raw requests.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Tag(int field, int wire_type) { return Varint((field << 3) | wire_type); }
std::string Len(int field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

struct Case {
  std::string what;
  std::function<absl::Status()> call;
  absl::StatusCode code;
  std::vector<std::string> names;  // each must be in the message
};

class HostileInputTest : public ServiceTest {
 protected:
  void Configure(ServerOptions& options) override {
    options.limits.max_rows_per_request = 8;
    options.limits.max_columns_per_dock = 4;
    options.limits.max_docks = 2;
    options.limits.max_spec_bytes = 4096;
    options.limits.max_wait_ms = 60'000;
    options.limits.max_parked_gets_per_consumer = 2;
  }

  void SetUp() override {
    ServiceTest::SetUp();
    ASSERT_OK(CreateDock(GrpoSpec()));
    v1::DockSpec spare = GrpoSpec();
    spare.set_name("spare");
    ASSERT_OK(CreateDock(spare));  // the server is now at --max_docks
    // Some state to keep: rows 0 and 1 of step 0 have prompts.
    v1::PutRequest put = GoodPut();
    put.clear_rows();
    put.add_rows(0);
    put.add_rows(1);
    put.clear_columns();
    *put.add_columns() = Int32Column("prompt_ids", {{1, 2}, {3}});
    ASSERT_OK(Put(put));
  }

  // A valid Put of rows 2 and 3's prompts, to be broken by each case.
  static v1::PutRequest GoodPut() {
    v1::PutRequest put;
    put.set_dock("grpo");
    put.add_rows(2);
    put.add_rows(3);
    *put.add_columns() = Int32Column("prompt_ids", {{4, 5, 6}, {7}});
    return put;
  }
  static v1::PutRequest Broken(const std::function<void(v1::PutRequest&)>& change) {
    v1::PutRequest put = GoodPut();
    change(put);
    return put;
  }
  static v1::DockSpec BrokenSpec(const std::function<void(v1::DockSpec&)>& change) {
    v1::DockSpec spec = GrpoSpec();
    spec.set_name("third");
    change(spec);
    return spec;
  }
  static v1::GetRequest GoodGet() {
    v1::GetRequest get;
    get.set_dock("grpo");
    get.set_consumer("actor");
    return get;
  }
  absl::Status GetWith(const std::function<void(v1::GetRequest&)>& change) {
    v1::GetRequest get = GoodGet();
    change(get);
    return Get(get).status();
  }
  absl::Status Read(const std::vector<int64_t>& rows) {
    v1::ReadRequest read;
    read.set_dock("grpo");
    for (int64_t r : rows) read.add_rows(r);
    v1::GetResponse typed;
    return FromGrpcStatus(stub_->Read(Context().get(), read, &typed));
  }
  absl::Status AddConsumer(v1::ConsumerSpec consumer) {
    v1::AddConsumerRequest request;
    request.set_dock("grpo");
    *request.mutable_consumer() = std::move(consumer);
    v1::AddConsumerResponse response;
    return FromGrpcStatus(stub_->AddConsumer(Context().get(), request, &response));
  }
  absl::StatusOr<v1::ListDocksResponse> List() {
    v1::ListDocksResponse response;
    const grpc::Status status =
        stub_->ListDocks(Context().get(), v1::ListDocksRequest(), &response);
    if (!status.ok()) return FromGrpcStatus(status);
    return response;
  }
};

TEST_F(HostileInputTest, EveryMalformedRequestIsRefusedAndChangesNothing) {
  const std::string good = GoodPut().SerializeAsString();
  std::vector<Case> cases = {
      // ---- raw Put bytes (the bulk framing)
      {"truncated buffer", [&] { return RawPut(good.substr(0, good.size() - 3)); },
       absl::StatusCode::kInvalidArgument, {"PutRequest.columns[0]", "exceeds"}},
      {"truncated tag", [&] { return RawPut(good + "\x80"); },
       absl::StatusCode::kInvalidArgument, {"PutRequest", "truncated tag"}},
      {"length past the end", [&] { return RawPut(Tag(1, 2) + Varint(1000) + "grpo"); },
       absl::StatusCode::kInvalidArgument, {"PutRequest.dock", "length 1000"}},
      {"huge length", [&] { return RawPut(Tag(15, 2) + Varint(uint64_t{1} << 62)); },
       absl::StatusCode::kInvalidArgument, {"PutRequest.columns[0]", "length"}},
      {"wrong wire type", [&] { return RawPut(Tag(3, 5) + "abcd"); },
       absl::StatusCode::kInvalidArgument, {"PutRequest.rows", "wire type 5"}},
      {"invalid tag 0", [&] { return RawPut(std::string("\0", 1)); },
       absl::StatusCode::kInvalidArgument, {"PutRequest", "invalid tag 0"}},
      {"group wire type", [&] { return RawPut(Tag(9, 3)); },
       absl::StatusCode::kInvalidArgument, {"group wire type"}},
      {"unknown DType enum value", [&] { return RawPut(Len(1, "grpo") + Len(15, Tag(2, 0) + Varint(99))); },
       absl::StatusCode::kInvalidArgument, {"columns[0].dtype", "99"}},
      {"negative row varint", [&] { return RawPut(Len(1, "grpo") + Tag(3, 0) + Varint(~uint64_t{0}) + Len(15, Len(1, "prompt_ids"))); },
       absl::StatusCode::kInvalidArgument, {"row", "-1"}},
      // ---- Put semantics
      {"offsets out of order",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->set_offsets(1, 5); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids", "offsets"}},
      {"offsets not starting at 0",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->set_offsets(0, 1); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids", "offsets"}},
      {"offsets not rows + 1",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->add_offsets(4); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids", "offsets"}},
      {"data not a whole number of items",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->mutable_data()->pop_back(); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids"}},
      {"dtype mismatch",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->set_dtype(v1::FLOAT32); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids", "int32"}},
      {"duplicate rows",
       [&] { return Put(Broken([](auto& p) { p.set_rows(1, 2); })); },
       absl::StatusCode::kInvalidArgument, {"row 2"}},
      {"row out of range",
       [&] { return Put(Broken([](auto& p) { p.set_rows(1, 4); })); },
       absl::StatusCode::kInvalidArgument, {"row", "4"}},
      {"negative row",
       [&] { return Put(Broken([](auto& p) { p.set_rows(1, -3); })); },
       absl::StatusCode::kInvalidArgument, {"row", "-3"}},
      {"negative step", [&] { return Put(Broken([](auto& p) { p.set_step(-1); })); },
       absl::StatusCode::kInvalidArgument, {"step", "-1"}},
      {"no columns", [&] { return Put(Broken([](auto& p) { p.clear_columns(); })); },
       absl::StatusCode::kInvalidArgument, {"column"}},
      {"column twice",
       [&] { return Put(Broken([](auto& p) { *p.add_columns() = p.columns(0); })); },
       absl::StatusCode::kInvalidArgument, {"prompt_ids"}},
      {"unknown column",
       [&] { return Put(Broken([](auto& p) { p.mutable_columns(0)->set_name("nope"); })); },
       absl::StatusCode::kInvalidArgument, {"nope"}},
      {"cell written twice",
       [&] { return Put(Broken([](auto& p) { p.set_rows(0, 0); })); },
       absl::StatusCode::kAlreadyExists, {"prompt_ids"}},
      {"empty dock name", [&] { return Put(Broken([](auto& p) { p.set_dock(""); })); },
       absl::StatusCode::kNotFound, {"dock ''"}},
      {"negative wait", [&] { return Put(Broken([](auto& p) { p.set_wait_ms(-1); })); },
       absl::StatusCode::kInvalidArgument, {"wait_ms"}},
      {"wait over --max_wait_ms",
       [&] { return Put(Broken([](auto& p) { p.set_wait_ms(3'600'000); })); },
       absl::StatusCode::kInvalidArgument, {"wait_ms 3600000", "--max_wait_ms"}},
      {"rows over --max_rows_per_request",
       [&] {
         return Put(Broken([](auto& p) {
           for (int i = 0; i < 9; ++i) p.add_rows(i);
         }));
       },
       absl::StatusCode::kInvalidArgument, {"rows 11", "--max_rows_per_request"}},
      {"unknown ack_lease",
       [&] { return Put(Broken([](auto& p) { p.set_ack_lease(77); })); },
       absl::StatusCode::kNotFound, {"lease 77"}},
      // ---- Get, Read, Ack
      {"negative rank", [&] { return GetWith([](auto& g) { g.set_rank(-1); }); },
       absl::StatusCode::kInvalidArgument, {"rank -1"}},
      {"rank past dp_size", [&] { return GetWith([](auto& g) { g.set_rank(5); }); },
       absl::StatusCode::kInvalidArgument, {"rank 5"}},
      {"negative count", [&] { return GetWith([](auto& g) { g.set_count(-2); }); },
       absl::StatusCode::kInvalidArgument, {"count -2"}},
      {"count over --max_rows_per_request",
       [&] { return GetWith([](auto& g) { g.set_count(int64_t{1} << 40); }); },
       absl::StatusCode::kInvalidArgument, {"--max_rows_per_request"}},
      {"Get wait over --max_wait_ms",
       [&] { return GetWith([](auto& g) { g.set_wait_ms(int64_t{1} << 40); }); },
       absl::StatusCode::kInvalidArgument, {"--max_wait_ms"}},
      {"round without step", [&] { return GetWith([](auto& g) { g.set_round(0); }); },
       absl::StatusCode::kInvalidArgument, {"without a step"}},
      {"unknown consumer", [&] { return GetWith([](auto& g) { g.set_consumer("x\n"); }); },
       absl::StatusCode::kNotFound, {"is unknown"}},
      {"Read row out of range", [&] { return Read({99}); },
       absl::StatusCode::kInvalidArgument, {"99"}},
      {"Read rows over --max_rows_per_request", [&] { return Read({0, 1, 2, 3, 0, 1, 2, 3, 0}); },
       absl::StatusCode::kInvalidArgument, {"--max_rows_per_request"}},
      {"Ack of a consumer without leases",
       [&] {
         v1::AckRequest ack;
         ack.set_dock("grpo");
         ack.set_consumer("actor");
         ack.set_lease_id(1);
         v1::AckResponse response;
         return FromGrpcStatus(stub_->Ack(Context().get(), ack, &response));
       },
       absl::StatusCode::kFailedPrecondition, {"has no leases"}},
      // ---- CreateDock and AddConsumer
      {"empty dock name in a spec",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.set_name(""); })); },
       absl::StatusCode::kInvalidArgument, {"dock name"}},
      {"control characters in a dock name",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.set_name("gr\x01po"); })); },
       absl::StatusCode::kInvalidArgument, {"\\x01"}},
      {"control characters in a column name",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.mutable_columns(0)->set_name("a\tb"); })); },
       absl::StatusCode::kInvalidArgument, {"column name", "\\t"}},
      {"unknown policy enum value",
       [&] {
         return CreateDock(BrokenSpec([](auto& s) {
           s.mutable_consumers(0)->set_policy(static_cast<v1::Policy>(7));
         }));
       },
       absl::StatusCode::kInvalidArgument, {"policy", "7"}},
      {"unknown dtype enum value in a spec",
       [&] {
         return CreateDock(BrokenSpec([](auto& s) {
           s.mutable_columns(0)->set_dtype(static_cast<v1::DType>(42));
         }));
       },
       absl::StatusCode::kInvalidArgument, {"dtype", "42"}},
      {"negative max_len",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.mutable_columns(0)->set_max_len(-1); })); },
       absl::StatusCode::kInvalidArgument, {"max_len"}},
      {"zero inner dimension",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.mutable_columns(2)->add_inner_shape(0); })); },
       absl::StatusCode::kInvalidArgument, {"inner_shape"}},
      {"huge num_prompts",
       [&] { return CreateDock(BrokenSpec([](auto& s) { s.set_num_prompts(int64_t{1} << 40); })); },
       absl::StatusCode::kInvalidArgument, {"num_prompts"}},
      {"columns over --max_columns_per_dock",
       [&] {
         return CreateDock(BrokenSpec([](auto& s) {
           for (int i = 0; i < 2; ++i) {
             v1::ColumnSpec* c = s.add_columns();
             c->set_name(absl::StrCat("extra", i));
             c->set_dtype(v1::INT8);
           }
         }));
       },
       absl::StatusCode::kInvalidArgument, {"5 columns", "--max_columns_per_dock"}},
      {"spec over --max_spec_bytes",
       [&] {
         return CreateDock(BrokenSpec([](auto& s) {
           for (int i = 0; i < 600; ++i) s.mutable_consumers(0)->add_columns("prompt_ids");
         }));
       },
       absl::StatusCode::kInvalidArgument, {"--max_spec_bytes"}},
      {"a third dock over --max_docks", [&] { return CreateDock(BrokenSpec([](auto&) {})); },
       absl::StatusCode::kResourceExhausted, {"third", "--max_docks"}},
      {"empty consumer name",
       [&] {
         v1::ConsumerSpec c;
         c.add_columns("prompt_ids");
         return AddConsumer(c);
       },
       absl::StatusCode::kInvalidArgument, {"consumer name"}},
      {"negative lease_ms",
       [&] {
         v1::ConsumerSpec c;
         c.set_name("leaser");
         c.add_columns("prompt_ids");
         c.set_lease_ms(-5);
         return AddConsumer(c);
       },
       absl::StatusCode::kInvalidArgument, {"lease_ms -5"}},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_OK_AND_ASSIGN(v1::ListDocksResponse docks_before, List());
    ExpectRejected(c.call, c.code, c.names);
    ASSERT_OK_AND_ASSIGN(v1::ListDocksResponse docks_after, List());
    EXPECT_TRUE(::google::protobuf::util::MessageDifferencer::Equals(docks_before, docks_after));
  }
}

// --max_parked_gets_per_consumer: a third waiting Get of a consumer is
// refused with RESOURCE_EXHAUSTED naming the flag; the two parked ones are
// unaffected and end when their calls are cancelled.
TEST_F(HostileInputTest, ParkedGetsPerConsumerAreBounded) {
  v1::GetRequest get = GoodGet();
  get.set_consumer("reward");  // rewards are never written: Gets park
  get.set_wait_ms(30'000);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::promise<grpc::Status>> done(2);
  std::vector<v1::GetResponse> responses(2);
  for (int i = 0; i < 2; ++i) {
    contexts.push_back(Context());
    stub_->async()->Get(contexts[i].get(), &get, &responses[i],
                        [&done, i](grpc::Status s) { done[i].set_value(s); });
  }
  ASSERT_TRUE(AwaitWaiters("grpo", "reward", 2));
  EXPECT_STATUS(Get(get).status(), absl::StatusCode::kResourceExhausted,
                "--max_parked_gets_per_consumer");
  EXPECT_EQ(Waiters("grpo", "reward"), 2);
  for (auto& context : contexts) context->TryCancel();
  for (auto& d : done) EXPECT_EQ(d.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace tdock::service_testing
