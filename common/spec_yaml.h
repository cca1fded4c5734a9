// Dock specs in YAML, the format of `--config` files and `tdockctl create`:
//
//   name: grpo
//   num_prompts: 256
//   n_samples_per_prompt: 8
//   steps_in_flight: 2
//   length_columns: [prompt_ids, response_ids]
//   columns:
//     prompt_ids:   {dtype: int32, max_len: 4096}
//     response_ids: {dtype: int32, max_len: 16384}
//     rewards:      {dtype: float32}
//   consumers:
//     actor_logprob: {columns: [prompt_ids, response_ids], dp_size: 8}
//     reward: {columns: [prompt_ids, response_ids], whole_groups: true,
//              dispatch_size: 512, policy: fifo}
//     actor_train:
//       columns: [prompt_ids, response_ids]
//       dp_size: 8
//       policy: balanced
//       cost: {a: 1, b: 0}
//       micro_batch: {max_tokens: 16384, round_to: 128, planner: balanced}
//
// A config file may hold one spec, or `docks:` followed by a list of specs.
// Columns and consumers keep the order of the file. Unknown keys are errors.
//
// Consumer keys: columns, dispatch_size, dp_size, whole_groups, seed,
//   policy        fifo (default), random or balanced (token-balanced ranks).
//   cost          {a, b}: row cost a·L + b·L², L its token count; a key left
//                 out keeps its default (a: 1, b: 0).
//   micro_batch   cut every batch into micro-batches; max_tokens is required:
//                   max_tokens: 16384    token budget per micro-batch
//                   max_rows: 0          rows per micro-batch; 0: no limit
//                   round_to: 1          pad lengths up to a multiple
//                   count_multiple: 1    the count divides by this (PP/VPP)
//                   min_count: 0         at least this many micro-batches
//                   padded: false        budget counts rows × padded length
//                   planner: balanced    or packed
//                   order: heavy_first   or smallest_at_ends
//                   same_count_across_ranks: true  (balanced consumers)
//                 Left out: no micro-batching.
// Enum names (dtype, policy, planner, order) are case-insensitive.
#ifndef TDOCK_COMMON_SPEC_YAML_H_
#define TDOCK_COMMON_SPEC_YAML_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec.h"

namespace tdock {

// Parses YAML text into specs (not yet normalized). INVALID_ARGUMENT naming
// the key or line at fault.
absl::StatusOr<std::vector<DockSpec>> ParseSpecsYaml(const std::string& text);
absl::StatusOr<std::vector<DockSpec>> LoadSpecsYamlFile(const std::string& path);

}  // namespace tdock

#endif  // TDOCK_COMMON_SPEC_YAML_H_
