// Bad input: each gets the status code of DESIGN.md §6 with a message naming
// what is wrong, and leaves the dock's state exactly as it was.
#include <functional>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "server/dock/dock.h"
#include "tests/core/dock_test_util.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

using testing::GetOf;
using testing::GetSync;
using testing::OwnedColumn;
using testing::PutSync;

DockSpec Spec() {
  DockSpec spec;
  spec.name = "errs";
  spec.num_prompts = 2;
  spec.n_samples_per_prompt = 2;
  spec.steps_in_flight = 1;
  spec.length_columns = {"tokens"};
  spec.columns = {{"tokens", DType::kInt32, {}, 4, false},
                  {"score", DType::kFloat32, {}, 0, false}};
  spec.consumers = {{"actor", {"tokens"}, 2, 2, false, Policy::kFifo, 0},
                    {"grouped", {"tokens"}, 2, 1, true, Policy::kFifo, 0}};
  return spec;
}

OwnedColumn Tokens(int rows, int len = 2) {
  return OwnedColumn::Of<int32_t>(
      "tokens", DType::kInt32, std::vector<std::vector<int32_t>>(rows, std::vector<int32_t>(len, 3)));
}

// Everything observable about the dock's state.
std::string Fingerprint(Dock& dock) {
  DockStats s = dock.Stats();
  std::string out = absl::StrCat("used=", s.arena_bytes_used, ";");
  for (const StepStats& step : s.steps) {
    absl::StrAppend(&out, "step", step.step, ":");
    for (int64_t r : step.ready_rows) absl::StrAppend(&out, r, ",");
    for (int64_t c : step.consumed_rows) absl::StrAppend(&out, c, ",");
  }
  for (int64_t w : s.waiters) absl::StrAppend(&out, "w", w);
  return out;
}

struct Case {
  std::string what;
  std::function<absl::Status(Dock&)> call;
  absl::StatusCode code;
  std::string message;
};

absl::Status PutStatus(Dock& dock, int64_t step, std::vector<int64_t> rows,
                       std::vector<OwnedColumn> columns) {
  return PutSync(dock, step, std::move(rows), columns).status();
}

std::vector<Case> Cases() {
  using C = absl::StatusCode;
  auto with = [](std::function<void(OwnedColumn&)> edit) {
    OwnedColumn c = Tokens(2);
    edit(c);
    return c;
  };
  return {
      {"unknown column", [](Dock& d) {
         return PutStatus(d, 0, {2}, {OwnedColumn::Of<int32_t>("nope", DType::kInt32, {{1}})});
       }, C::kInvalidArgument, "column 'nope' is unknown"},
      {"wrong dtype", [](Dock& d) {
         return PutStatus(d, 0, {2}, {OwnedColumn::Of<int64_t>("tokens", DType::kInt64, {{1}})});
       }, C::kInvalidArgument, "has dtype int32, the request sent int64"},
      {"row out of range", [](Dock& d) { return PutStatus(d, 0, {4}, {Tokens(1)}); },
       C::kInvalidArgument, "row 4 is out of range"},
      {"negative row", [](Dock& d) { return PutStatus(d, 0, {-1}, {Tokens(1)}); },
       C::kInvalidArgument, "row -1 is out of range"},
      {"duplicate row", [](Dock& d) { return PutStatus(d, 0, {2, 2}, {Tokens(2)}); },
       C::kInvalidArgument, "row 2 appears twice"},
      {"offsets count", [](Dock& d) { return PutStatus(d, 0, {2, 3, 1}, {Tokens(2)}); },
       C::kInvalidArgument, "tokens"},
      {"offsets past data", [with](Dock& d) {
         return PutStatus(d, 0, {2, 3}, {with([](OwnedColumn& c) { c.offsets = {0, 2, 9}; })});
       }, C::kInvalidArgument, "tokens"},
      {"offsets decreasing", [with](Dock& d) {
         return PutStatus(d, 0, {2, 3}, {with([](OwnedColumn& c) { c.offsets = {0, 3, 1}; })});
       }, C::kInvalidArgument, "tokens"},
      {"data not whole items", [with](Dock& d) {
         return PutStatus(d, 0, {2, 3}, {with([](OwnedColumn& c) { c.bytes.push_back('x'); })});
       }, C::kInvalidArgument, "tokens"},
      {"over max_len", [](Dock& d) { return PutStatus(d, 0, {2}, {Tokens(1, 5)}); },
       C::kInvalidArgument, "more than max_len 4"},
      {"cell written twice", [](Dock& d) { return PutStatus(d, 0, {0, 2}, {Tokens(2)}); },
       C::kAlreadyExists, "cell (row 0, column 'tokens') is already written"},
      {"step blocked, no wait", [](Dock& d) { return PutStatus(d, 1, {0}, {Tokens(1)}); },
       C::kResourceExhausted, "waits for step 0"},
      {"negative step", [](Dock& d) { return PutStatus(d, -1, {0}, {Tokens(1)}); },
       C::kInvalidArgument, "step is negative"},
      {"no rows", [](Dock& d) { return PutStatus(d, 0, {}, {Tokens(0)}); },
       C::kInvalidArgument, "no rows"},
      {"unknown consumer", [](Dock& d) { return GetSync(d, GetOf("ghost")).status(); },
       C::kNotFound, "consumer 'ghost' is unknown"},
      {"rank out of range", [](Dock& d) {
         GetInput in = GetOf("actor");
         in.rank = 2;
         return GetSync(d, in).status();
       }, C::kInvalidArgument, "rank 2 is out of range"},
      {"partial group count", [](Dock& d) { return GetSync(d, GetOf("grouped", 3)).status(); },
       C::kInvalidArgument, "not a multiple of n_samples_per_prompt 2"},
      {"release a step not live", [](Dock& d) { return d.ReleaseStep(5); },
       C::kFailedPrecondition, "step 5 is not live"},
      {"read unwritten cell", [](Dock& d) { return d.Read(0, {3}, {"tokens"}).status(); },
       C::kFailedPrecondition, "cell (row 3, column 'tokens') is not written"},
      {"bad consumer", [](Dock& d) {
         return d.AddConsumer({"x", {"missing"}, 0, 1, false, Policy::kFifo, 0}).status();
       }, C::kInvalidArgument, "needs unknown column 'missing'"},
  };
}

TEST(DockErrors, EachBadInputIsRejectedAndChangesNothing) {
  auto created = Dock::Create(Spec());
  ASSERT_OK(created);
  Dock& dock = **created;
  ASSERT_OK(PutSync(dock, 0, {0, 1}, {Tokens(2)}));
  ASSERT_OK(GetSync(dock, GetOf("grouped", 2)));
  const std::string before = Fingerprint(dock);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.what);
    EXPECT_STATUS(c.call(dock), c.code, c.message);
    EXPECT_EQ(Fingerprint(dock), before);
  }
}

// A spec that is inconsistent is refused with a message naming the field.
TEST(DockErrors, InconsistentSpecs) {
  struct SpecCase {
    std::function<void(DockSpec&)> edit;
    std::string message;
  };
  const std::vector<SpecCase> cases = {
      {[](DockSpec& s) { s.name = ""; }, "dock name is empty"},
      {[](DockSpec& s) { s.name = "a\nb"; }, "may only hold"},
      {[](DockSpec& s) { s.num_prompts = 0; }, "num_prompts 0"},
      {[](DockSpec& s) { s.steps_in_flight = 100; }, "steps_in_flight 100"},
      {[](DockSpec& s) { s.columns.push_back(s.columns[0]); }, "declared twice"},
      {[](DockSpec& s) { s.columns[0].dtype = DType::kUnspecified; }, "no valid dtype"},
      {[](DockSpec& s) { s.length_columns = {"nope"}; }, "unknown column 'nope'"},
      {[](DockSpec& s) { s.consumers[1].dispatch_size = 3; },
       "dispatch_size 3 is not a multiple of n_samples_per_prompt 2"},
      {[](DockSpec& s) { s.consumers[0].columns = {"nope"}; }, "needs unknown column 'nope'"},
      {[](DockSpec& s) { s.consumers[0].dp_size = 5000; }, "dp_size 5000 must be in"},
      {[](DockSpec& s) { s.consumers[0].dispatch_size = 0; s.consumers[0].dp_size = 9; },
       "dp_size 9 larger than the rows"},
      {[](DockSpec& s) { s.consumers[0].policy = static_cast<Policy>(9); }, "no valid policy"},
      {[](DockSpec& s) { s.consumers[0].cost = {0, 0}; }, "consumer 'actor' cost:"},
      {[](DockSpec& s) { s.consumers[0].micro_batch = MicroBatchOptions{}; },
       "consumer 'actor' micro_batch:"},
      {[](DockSpec& s) { s.consumers.push_back(s.consumers[0]); }, "consumer 'actor' is declared twice"},
      {[](DockSpec& s) { s.chunk_bytes = 64 << 10; s.memory_limit_bytes = 1 << 20; s.preallocate_bytes = 2 << 20; },
       "exceeds memory_limit_bytes"},
      {[](DockSpec& s) { s.chunk_bytes = (64 << 10) + 1; }, "must be a multiple of 64"},
      {[](DockSpec& s) { s.memory_limit_bytes = 1024; }, "is below chunk_bytes"},
      {[](DockSpec& s) { s.seal_when = SealWhen{"nobody", 1}; },
       "seal_when.consumer 'nobody' is not a consumer of the dock"},
      {[](DockSpec& s) { s.seal_when = SealWhen{"actor", 0}; }, "seal_when.groups 0 must be in [1,"},
      // 4 bytes x (2^62 + 2) wraps to 8 bytes in 64 bits.
      {[](DockSpec& s) { s.columns[1].inner_shape = {(int64_t{1} << 62) + 2}; },
       "items of at most 1 GiB"},
      {[](DockSpec& s) { s.num_prompts = 1 << 22; s.steps_in_flight = 32; },
       "rows per step x columns x steps_in_flight = 536870912 cells, over the limit"},
  };
  for (const SpecCase& c : cases) {
    DockSpec spec = Spec();
    c.edit(spec);
    SCOPED_TRACE(c.message);
    EXPECT_STATUS(Dock::Create(spec), absl::StatusCode::kInvalidArgument, c.message);
  }
}

}  // namespace
}  // namespace tdock
