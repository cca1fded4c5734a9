// YAML dock specs: the documented example, `docks:` lists, and errors that
// name the key path and line.
#include "common/spec_yaml.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace tdock {
namespace {

// The example from common/spec_yaml.h.
constexpr char kExample[] = R"(name: grpo
num_prompts: 256
n_samples_per_prompt: 8
steps_in_flight: 2
length_columns: [prompt_ids, response_ids]
columns:
  prompt_ids:   {dtype: int32, max_len: 4096}
  response_ids: {dtype: int32, max_len: 16384}
  rewards:      {dtype: float32}
consumers:
  actor_logprob: {columns: [prompt_ids, response_ids], dp_size: 8}
  reward: {columns: [prompt_ids, response_ids], whole_groups: true,
           dispatch_size: 512, policy: fifo}
  actor_train:
    columns: [prompt_ids, response_ids]
    dp_size: 8
    policy: balanced
    cost: {a: 1, b: 0}
    micro_batch: {max_tokens: 16384, round_to: 128, planner: balanced}
)";

// The header's example parses into exactly the spec it describes, with
// columns and consumers in file order and unset fields at their defaults.
TEST(SpecYaml, HeaderExample) {
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, ParseSpecsYaml(kExample));
  ASSERT_EQ(specs.size(), 1u);
  const DockSpec& s = specs[0];
  EXPECT_EQ(s.name, "grpo");
  EXPECT_EQ(s.num_prompts, 256);
  EXPECT_EQ(s.n_samples_per_prompt, 8);
  EXPECT_EQ(s.steps_in_flight, 2);
  EXPECT_EQ(s.length_columns,
            (std::vector<std::string>{"prompt_ids", "response_ids"}));
  ASSERT_EQ(s.columns.size(), 3u);
  EXPECT_EQ(s.columns[0].name, "prompt_ids");
  EXPECT_EQ(s.columns[0].dtype, DType::kInt32);
  EXPECT_EQ(s.columns[0].max_len, 4096);
  EXPECT_EQ(s.columns[1].name, "response_ids");
  EXPECT_EQ(s.columns[1].max_len, 16384);
  EXPECT_EQ(s.columns[2].name, "rewards");
  EXPECT_EQ(s.columns[2].dtype, DType::kFloat32);
  EXPECT_EQ(s.columns[2].max_len, 0);
  EXPECT_TRUE(s.columns[2].inner_shape.empty());
  EXPECT_FALSE(s.columns[2].rewritable);
  ASSERT_EQ(s.consumers.size(), 3u);
  EXPECT_EQ(s.consumers[0].name, "actor_logprob");
  EXPECT_EQ(s.consumers[0].dp_size, 8);
  EXPECT_EQ(s.consumers[0].dispatch_size, 0);
  EXPECT_EQ(s.consumers[0].policy, Policy::kFifo);
  EXPECT_EQ(s.consumers[1].name, "reward");
  EXPECT_EQ(s.consumers[1].columns,
            (std::vector<std::string>{"prompt_ids", "response_ids"}));
  EXPECT_TRUE(s.consumers[1].whole_groups);
  EXPECT_EQ(s.consumers[1].dispatch_size, 512);
  EXPECT_EQ(s.consumers[1].dp_size, 1);
  EXPECT_FALSE(s.consumers[1].micro_batch.has_value());
  EXPECT_EQ(s.consumers[1].cost.a, 1);
  EXPECT_EQ(s.consumers[1].cost.b, 0);
  const ConsumerSpec& train = s.consumers[2];
  EXPECT_EQ(train.name, "actor_train");
  EXPECT_EQ(train.policy, Policy::kBalanced);
  EXPECT_EQ(train.dp_size, 8);
  EXPECT_EQ(train.cost.a, 1);
  EXPECT_EQ(train.cost.b, 0);
  ASSERT_TRUE(train.micro_batch.has_value());
  EXPECT_EQ(train.micro_batch->max_tokens, 16384);
  EXPECT_EQ(train.micro_batch->round_to, 128);
  EXPECT_EQ(train.micro_batch->planner, MicroBatchPlanner::kBalanced);
  EXPECT_EQ(train.micro_batch->max_rows, 0);
  EXPECT_EQ(train.micro_batch->count_multiple, 1);
  EXPECT_EQ(train.micro_batch->min_count, 0);
  EXPECT_FALSE(train.micro_batch->padded);
  EXPECT_EQ(train.micro_batch->order, MicroBatchOrder::kHeavyFirst);
  EXPECT_TRUE(train.same_count_across_ranks);
  EXPECT_EQ(s.preallocate_bytes, 0);
  EXPECT_EQ(s.memory_limit_bytes, 0);
  EXPECT_EQ(s.chunk_bytes, 0);
}

// Every remaining key is read: inner_shape, rewritable, policy (any case),
// seed (full uint64 range) and the memory settings.
TEST(SpecYaml, AllKeys) {
  const std::string text = R"(
name: ppo
num_prompts: 4
columns:
  z_hidden: {dtype: BFloat16, inner_shape: [2, 3], rewritable: true}
  a_ids: {dtype: int64}
consumers:
  critic: {columns: [a_ids], policy: BALANCED, seed: 18446744073709551615, replicas: 2}
  sampler: {policy: Random, seed: 7, max_staleness: 2, stale: drop, order: index}
preallocate_bytes: 1048576
memory_limit_bytes: 8589934592
chunk_bytes: 4194304
seal_when: {consumer: critic, groups: 3, carry: true, carry_columns: [a_ids]}
retain_steps: true
add_columns_on_write: true
)";
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, ParseSpecsYaml(text));
  const DockSpec& s = specs.at(0);
  ASSERT_EQ(s.columns.size(), 2u);
  EXPECT_EQ(s.columns[0].name, "z_hidden");  // file order, not sorted
  EXPECT_EQ(s.columns[0].dtype, DType::kBFloat16);
  EXPECT_EQ(s.columns[0].inner_shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(s.columns[0].rewritable);
  EXPECT_EQ(s.columns[1].dtype, DType::kInt64);
  ASSERT_EQ(s.consumers.size(), 2u);
  EXPECT_EQ(s.consumers[0].policy, Policy::kBalanced);
  EXPECT_EQ(s.consumers[0].seed, 18446744073709551615ull);
  EXPECT_EQ(s.consumers[0].replicas, 2);
  EXPECT_EQ(s.consumers[1].policy, Policy::kRandom);
  EXPECT_EQ(s.consumers[1].seed, 7u);
  EXPECT_EQ(s.consumers[1].max_staleness, 2);
  EXPECT_EQ(s.consumers[1].stale, StalePolicy::kDrop);
  EXPECT_EQ(s.consumers[1].order, RowOrder::kIndex);
  EXPECT_FALSE(s.consumers[0].max_staleness.has_value());
  EXPECT_EQ(s.consumers[0].stale, StalePolicy::kLeave);
  EXPECT_EQ(s.preallocate_bytes, 1 << 20);
  EXPECT_EQ(s.memory_limit_bytes, int64_t{8} << 30);
  EXPECT_EQ(s.chunk_bytes, 4 << 20);
  EXPECT_EQ(s.seal_when, (SealWhen{"critic", 3, /*carry=*/true, {"a_ids"}}));
  EXPECT_TRUE(s.retain_steps);
  EXPECT_TRUE(s.add_columns_on_write);
}

// `dtype: string`, `dtype: json` and `dtype: tensors` are bytes columns with
// that encoding; YAML names them back the same way; an encoding on a column
// that is not plain bytes is refused, naming the column.
TEST(SpecYaml, StringAndJsonColumnsAreEncodedBytes) {
  const std::string text = R"(
name: agent
num_prompts: 4
columns:
  uid: {dtype: String}
  messages: {dtype: json}
  raw: {dtype: bytes}
  multi_modal_inputs: {dtype: Tensors}
)";
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, ParseSpecsYaml(text));
  const DockSpec& s = specs.at(0);
  ASSERT_EQ(s.columns.size(), 4u);
  EXPECT_EQ(s.columns[0].dtype, DType::kBytes);
  EXPECT_EQ(s.columns[0].encoding, ColumnEncoding::kUtf8);
  EXPECT_EQ(ColumnTypeName(s.columns[0]), "string");
  EXPECT_EQ(s.columns[1].dtype, DType::kBytes);
  EXPECT_EQ(s.columns[1].encoding, ColumnEncoding::kJson);
  EXPECT_EQ(ColumnTypeName(s.columns[1]), "json");
  EXPECT_EQ(s.columns[2].encoding, ColumnEncoding::kRaw);
  EXPECT_EQ(ColumnTypeName(s.columns[2]), "bytes");
  EXPECT_EQ(s.columns[3].dtype, DType::kBytes);
  EXPECT_EQ(s.columns[3].encoding, ColumnEncoding::kTensors);
  EXPECT_EQ(ColumnTypeName(s.columns[3]), "tensors");

  for (auto change : {+[](ColumnSpec& c) { c.dtype = DType::kInt32; },
                      +[](ColumnSpec& c) { c.inner_shape = {2}; }}) {
    DockSpec bad = s;
    change(bad.columns[1]);
    EXPECT_STATUS(NormalizeSpec(bad), absl::StatusCode::kInvalidArgument,
                  "column 'messages' has the json encoding, which needs dtype bytes and "
                  "no inner_shape");
  }
}

// Every micro_batch key is read (enum names in any case), cost keys are
// doubles and one left out keeps its default, and same_count_across_ranks
// lands in the consumer.
TEST(SpecYaml, BalancedConsumerKeys) {
  const std::string text = R"(
name: ppo
num_prompts: 4
consumers:
  actor:
    policy: balanced
    cost: {a: 24576, b: 1.5e-3}
    pad: Repeat
    micro_batch:
      max_tokens: 16384
      max_rows: 64
      round_to: 128
      count_multiple: 4
      min_count: 2
      planner: Packed
      order: SMALLEST_AT_ENDS
      padded: true
      same_count_across_ranks: false
  critic: {cost: {b: 2}, micro_batch: {max_tokens: 100}}
)";
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, ParseSpecsYaml(text));
  ASSERT_EQ(specs.at(0).consumers.size(), 2u);
  const ConsumerSpec& actor = specs[0].consumers[0];
  EXPECT_EQ(actor.policy, Policy::kBalanced);
  EXPECT_EQ(actor.cost.a, 24576);
  EXPECT_EQ(actor.cost.b, 1.5e-3);
  ASSERT_TRUE(actor.micro_batch.has_value());
  const MicroBatchOptions& mb = *actor.micro_batch;
  EXPECT_EQ(mb.max_tokens, 16384);
  EXPECT_EQ(mb.max_rows, 64);
  EXPECT_EQ(mb.round_to, 128);
  EXPECT_EQ(mb.count_multiple, 4);
  EXPECT_EQ(mb.min_count, 2);
  EXPECT_EQ(mb.planner, MicroBatchPlanner::kPacked);
  EXPECT_EQ(mb.order, MicroBatchOrder::kSmallestAtEnds);
  EXPECT_TRUE(mb.padded);
  EXPECT_FALSE(actor.same_count_across_ranks);
  EXPECT_EQ(actor.pad, RoundPad::kRepeat);
  const ConsumerSpec& critic = specs[0].consumers[1];
  EXPECT_EQ(critic.pad, RoundPad::kNone);
  EXPECT_EQ(critic.policy, Policy::kFifo);
  EXPECT_EQ(critic.cost.a, 1);  // left out: default
  EXPECT_EQ(critic.cost.b, 2);
  ASSERT_TRUE(critic.micro_batch.has_value());
  EXPECT_EQ(critic.micro_batch->max_tokens, 100);
  EXPECT_EQ(critic.micro_batch->round_to, 1);
  EXPECT_EQ(critic.micro_batch->planner, MicroBatchPlanner::kBalanced);
  EXPECT_TRUE(critic.same_count_across_ranks);
}

// `docks:` holds several specs, returned in order.
TEST(SpecYaml, DockList) {
  const std::string text = R"(docks:
  - name: a
    num_prompts: 1
    columns: {x: {dtype: uint8}}
  - name: b
    num_prompts: 2
    steps_in_flight: 3
)";
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, ParseSpecsYaml(text));
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "a");
  ASSERT_EQ(specs[0].columns.size(), 1u);
  EXPECT_EQ(specs[0].columns[0].dtype, DType::kUint8);
  EXPECT_EQ(specs[1].name, "b");
  EXPECT_EQ(specs[1].num_prompts, 2);
  EXPECT_EQ(specs[1].steps_in_flight, 3);
}

struct BadYaml {
  std::string text;
  std::string error;
};

// Each malformed spec is INVALID_ARGUMENT naming the key path and the line.
TEST(SpecYaml, ErrorsNameKeyAndLine) {
  const std::vector<BadYaml> cases = {
      {"name: a\nnum_promts: 3\n",
       "num_promts (line 2): unknown key 'num_promts'"},
      {"name: a\nnum_prompts: many\n",
       "num_prompts (line 2): 'many' is not an integer"},
      {"name: a\nnum_prompts: [1]\n",
       "num_prompts (line 2): expected an integer, got a list"},
      {"name: a\nn_samples_per_prompt: 3000000000\n",
       "n_samples_per_prompt (line 2): '3000000000' is not an integer in the "
       "range"},
      {"name: [a]\n", "name (line 1): expected a string, got a list"},
      {"name: a\ncolumns:\n  x: {dtype: int33}\n",
       "columns.x.dtype (line 3): unknown dtype 'int33' (one of int8, uint8"},
      {"name: a\ncolumns:\n  x: {dtype: text}\n",
       "bool, bytes, string, json, tensors)"},
      {"name: a\ncolumns:\n  x: {max_len: 3}\n",
       "columns.x (line 3): missing key 'dtype'"},
      {"name: a\ncolumns:\n  x: {dtype: int8, shape: [2]}\n",
       "columns.x.shape (line 3): unknown key 'shape'"},
      {"name: a\ncolumns:\n  x: {dtype: int8, inner_shape: [2, b]}\n",
       "columns.x.inner_shape[1] (line 3): 'b' is not an integer"},
      {"name: a\ncolumns:\n  x: {dtype: int8, rewritable: maybe}\n",
       "columns.x.rewritable (line 3): 'maybe' is not true or false"},
      {"name: a\ncolumns: [x, y]\n",
       "columns (line 2): expected a map, got a list"},
      {"name: a\nconsumers:\n  c: {policy: lifo}\n",
       "consumers.c.policy (line 3): unknown policy 'lifo'"},
      {"name: a\nconsumers:\n  c: {max_staleness: 1, stale: discard}\n",
       "consumers.c.stale (line 3): unknown stale policy 'discard' (one of leave, drop)"},
      {"name: a\nconsumers:\n  c: {order: newest}\n",
       "consumers.c.order (line 3): unknown row order 'newest'"},
      {"name: a\nconsumers:\n  c: {policy: balanced, pad: zeros}\n",
       "consumers.c.pad (line 3): unknown pad 'zeros' (one of none, repeat)"},
      {"name: a\nconsumers:\n  c: {max_staleness: many}\n",
       "consumers.c.max_staleness (line 3)"},
      {"name: a\nconsumers:\n  c: {seed: -1}\n",
       "consumers.c.seed (line 3): '-1' is not an integer"},
      {"name: a\nconsumers:\n  c: {columns: x}\n",
       "consumers.c.columns (line 3): expected a list, got a scalar"},
      {"name: a\nconsumers:\n  c: {dp: 2}\n",
       "consumers.c.dp (line 3): unknown key 'dp'"},
      {"name: a\nconsumers:\n  c:\n    cost: {a: 1, c: 2}\n",
       "consumers.c.cost.c (line 4): unknown key 'c' (known keys: a, b)"},
      {"name: a\nconsumers:\n  c: {cost: {a: heavy}}\n",
       "consumers.c.cost.a (line 3): 'heavy' is not a finite number"},
      {"name: a\nconsumers:\n  c: {cost: {b: .nan}}\n",
       "consumers.c.cost.b (line 3): '.nan' is not a finite number"},
      {"name: a\nconsumers:\n  c: {cost: 1}\n",
       "consumers.c.cost (line 3): expected a map, got a scalar"},
      {"name: a\nconsumers:\n  c:\n    micro_batch: {round_to: 8}\n",
       "consumers.c.micro_batch (line 4): missing key 'max_tokens'"},
      {"name: a\nconsumers:\n  c:\n    micro_batch: {}\n",
       "consumers.c.micro_batch (line 4): missing key 'max_tokens'"},
      {"name: a\nconsumers:\n  c:\n    micro_batch:\n",
       "missing key 'max_tokens'"},
      {"name: a\nconsumers:\n  c:\n    micro_batch:\n      max_tokens: 8\n"
       "      max_token: 9\n",
       "consumers.c.micro_batch.max_token (line 6): unknown key 'max_token'"},
      {"name: a\nconsumers:\n  c: {micro_batch: {max_tokens: 1.5}}\n",
       "consumers.c.micro_batch.max_tokens (line 3): '1.5' is not an integer"},
      {"name: a\nconsumers:\n  c: {micro_batch: {max_tokens: 8, "
       "max_rows: 3000000000}}\n",
       "consumers.c.micro_batch.max_rows (line 3): '3000000000' is not an "
       "integer in the range"},
      {"name: a\nconsumers:\n  c: {micro_batch: {max_tokens: 8, "
       "planner: greedy}}\n",
       "consumers.c.micro_batch.planner (line 3): unknown planner 'greedy' "
       "(one of balanced, packed)"},
      {"name: a\nconsumers:\n  c: {micro_batch: {max_tokens: 8, "
       "order: [heavy_first]}}\n",
       "consumers.c.micro_batch.order (line 3): expected a string, got a list"},
      {"name: a\nconsumers:\n  c: {micro_batch: {max_tokens: 8, "
       "same_count_across_ranks: sometimes}}\n",
       "consumers.c.micro_batch.same_count_across_ranks (line 3): 'sometimes' "
       "is not true or false"},
      {"name: a\nconsumers:\n  c: {micro_batch: [8]}\n",
       "consumers.c.micro_batch (line 3): expected a map, got a list"},
      {"name: a\nconsumers:\n  c: {same_count_across_ranks: true}\n",
       "consumers.c.same_count_across_ranks (line 3): unknown key"},
      {"name: a\nname: b\n", "name (line 2): duplicate key"},
      {"docks:\n  - name: a\n  - name: b\n    colums: {}\n",
       "docks[1].colums (line 4): unknown key 'colums'"},
      {"docks: []\n", "docks (line 1): the list is empty"},
      {"docks: {name: a}\n", "docks (line 1): expected a list, got a map"},
      {"docks:\n  - name: a\nname: b\n",
       "name (line 3): unknown key 'name' (known keys: docks)"},
      {"- a\n- b\n",
       "spec (line 1): expected a dock spec map or 'docks:', got a list"},
      {"", "expected a dock spec map or 'docks:', got nothing"},
      {"name: a\ncolumns: {x: {dtype: int8}\n",
       "YAML error (line 3, column 1)"},
      {"name: a\n\tnum_prompts: 1\n", "YAML error (line 2"},
      {"name: *x\n", "YAML error (line 1"},
  };
  for (const BadYaml& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_STATUS(ParseSpecsYaml(c.text), absl::StatusCode::kInvalidArgument,
                  c.error);
  }
}

// Files: a readable file parses and errors carry the path; a missing file is
// NOT_FOUND.
TEST(SpecYaml, LoadFile) {
  const std::string path = ::testing::TempDir() + "/tdock_spec_yaml_test.yaml";
  {
    std::ofstream out(path);
    out << kExample;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<DockSpec> specs, LoadSpecsYamlFile(path));
  EXPECT_EQ(specs.at(0).name, "grpo");
  {
    std::ofstream out(path);
    out << "name: a\nbogus: 1\n";
  }
  EXPECT_STATUS(LoadSpecsYamlFile(path), absl::StatusCode::kInvalidArgument,
                path + ": bogus (line 2): unknown key");
  std::remove(path.c_str());
  EXPECT_STATUS(LoadSpecsYamlFile(path), absl::StatusCode::kNotFound, path);
}

}  // namespace
}  // namespace tdock
