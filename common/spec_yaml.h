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
//
// A config file may hold one spec, or `docks:` followed by a list of specs.
// Columns and consumers keep the order of the file. Unknown keys are errors.
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
