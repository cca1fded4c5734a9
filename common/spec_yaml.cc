// YAML dock specs. yaml-cpp reports errors by throwing; every call into it
// happens under the try block of ParseSpecsYaml, so no exception leaves this
// file. Errors name the key path ("docks[1].columns.rewards.dtype") and the
// line of the file.
#include "common/spec_yaml.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/files.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace tdock {
namespace {

absl::Status YamlError(const YAML::Node& node, absl::string_view path,
                       absl::string_view what) {
  const YAML::Mark mark = node.Mark();
  return absl::InvalidArgumentError(absl::StrCat(
      path.empty() ? "spec" : path, " (line ", mark.line + 1, "): ", what));
}

std::string Child(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

const char* TypeName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "an undefined node";
  }
}

absl::Status ExpectScalar(const YAML::Node& node, absl::string_view path,
                          absl::string_view want) {
  if (node.IsScalar()) return absl::OkStatus();
  return YamlError(node, path,
                   absl::StrCat("expected ", want, ", got ", TypeName(node)));
}

// Read(node, path, &out) reads one value of out's type; errors name `path`.
absl::Status Read(const YAML::Node& node, absl::string_view path,
                  std::string* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "a string"));
  *out = node.Scalar();
  return absl::OkStatus();
}

template <typename Int>
std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>,
                 absl::Status>
Read(const YAML::Node& node, absl::string_view path, Int* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "an integer"));
  Int value{};
  if (!absl::SimpleAtoi(node.Scalar(), &value)) {
    return YamlError(
        node, path,
        absl::StrCat("'", node.Scalar(), "' is not an integer in the range [",
                     std::numeric_limits<Int>::min(), ", ",
                     std::numeric_limits<Int>::max(), "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status Read(const YAML::Node& node, absl::string_view path, double* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "a number"));
  double value = 0;
  if (!absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value)) {
    return YamlError(
        node, path,
        absl::StrCat("'", node.Scalar(), "' is not a finite number"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status Read(const YAML::Node& node, absl::string_view path, bool* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "true or false"));
  if (!YAML::convert<bool>::decode(node, *out)) {
    return YamlError(
        node, path, absl::StrCat("'", node.Scalar(), "' is not true or false"));
  }
  return absl::OkStatus();
}

std::string DTypeNames() {
  std::vector<std::string> names;
  for (int v = 1; IsValidDType(v); ++v) {
    names.emplace_back(DTypeName(static_cast<DType>(v)));
  }
  return absl::StrJoin(names, ", ");
}

// Reads one of `names` (matched case-insensitively); `what` names the enum
// in errors: "unknown policy 'lifo' (one of fifo, random, balanced)".
template <typename Enum>
absl::Status ReadEnum(const YAML::Node& node, absl::string_view path,
                      absl::string_view what,
                      std::initializer_list<std::pair<const char*, Enum>> names,
                      Enum* out) {
  std::string name;
  TDOCK_RETURN_IF_ERROR(Read(node, path, &name));
  const std::string lower = absl::AsciiStrToLower(name);
  std::vector<std::string> known;
  for (const auto& [n, value] : names) {
    if (lower == n) {
      *out = value;
      return absl::OkStatus();
    }
    known.emplace_back(n);
  }
  return YamlError(node, path,
                   absl::StrCat("unknown ", what, " '", name, "' (one of ",
                                absl::StrJoin(known, ", "), ")"));
}

absl::Status Read(const YAML::Node& node, absl::string_view path, Policy* out) {
  return ReadEnum(node, path, "policy",
                  {{"fifo", Policy::kFifo},
                   {"random", Policy::kRandom},
                   {"balanced", Policy::kBalanced}},
                  out);
}

absl::Status Read(const YAML::Node& node, absl::string_view path,
                  MicroBatchPlanner* out) {
  return ReadEnum(node, path, "planner",
                  {{"balanced", MicroBatchPlanner::kBalanced},
                   {"packed", MicroBatchPlanner::kPacked}},
                  out);
}

absl::Status Read(const YAML::Node& node, absl::string_view path,
                  MicroBatchOrder* out) {
  return ReadEnum(node, path, "order",
                  {{"heavy_first", MicroBatchOrder::kHeavyFirst},
                   {"smallest_at_ends", MicroBatchOrder::kSmallestAtEnds}},
                  out);
}

absl::Status Read(const YAML::Node& node, absl::string_view path, StalePolicy* out) {
  return ReadEnum(node, path, "stale policy",
                  {{"leave", StalePolicy::kLeave}, {"drop", StalePolicy::kDrop}}, out);
}

absl::Status Read(const YAML::Node& node, absl::string_view path, RoundPad* out) {
  return ReadEnum(node, path, "pad", {{"none", RoundPad::kNone}, {"repeat", RoundPad::kRepeat}},
                  out);
}

absl::Status Read(const YAML::Node& node, absl::string_view path, RowOrder* out) {
  return ReadEnum(node, path, "row order",
                  {{"default", RowOrder::kDefault},
                   {"oldest_version", RowOrder::kOldestVersion},
                   {"index", RowOrder::kIndex}},
                  out);
}

template <typename T>
absl::Status Read(const YAML::Node& node, absl::string_view path,
                  std::vector<T>* out) {
  if (!node.IsSequence()) {
    return YamlError(node, path,
                     absl::StrCat("expected a list, got ", TypeName(node)));
  }
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    TDOCK_RETURN_IF_ERROR(
        Read(node[i], absl::StrCat(path, "[", i, "]"), &out->emplace_back()));
  }
  return absl::OkStatus();
}

// Calls `fn(key, value, path of value)` for each entry of the map `node`, in
// file order. Null is an empty map. Rejects non-maps, duplicate keys and keys
// outside `allowed` (when `allowed` is not empty).
using EntryFn = std::function<absl::Status(
    const std::string& key, const YAML::Node& value, const std::string& path)>;
absl::Status ForEachEntry(const YAML::Node& node, absl::string_view path,
                          const std::vector<std::string>& allowed,
                          const EntryFn& fn) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return YamlError(node, path,
                     absl::StrCat("expected a map, got ", TypeName(node)));
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    std::string key;
    TDOCK_RETURN_IF_ERROR(Read(entry.first, path, &key));
    const std::string child = Child(path, key);
    if (!seen.insert(key).second) {
      return YamlError(entry.first, child, "duplicate key");
    }
    if (!allowed.empty() &&
        std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return YamlError(entry.first, child,
                       absl::StrCat("unknown key '", key, "' (known keys: ",
                                    absl::StrJoin(allowed, ", "), ")"));
    }
    TDOCK_RETURN_IF_ERROR(fn(key, entry.second, child));
  }
  return absl::OkStatus();
}

// One known key of a map: how to read its value, and whether it must be
// there.
struct Field {
  using ReadFn =
      std::function<absl::Status(const YAML::Node&, const std::string&)>;
  std::string key;
  ReadFn read;
  bool required = false;
};

// A Field::ReadFn storing into `out` with the Read overload of its type.
template <typename T>
Field::ReadFn Into(T* out) {
  return [out](const YAML::Node& value, const std::string& path) {
    return Read(value, path, out);
  };
}

// Reads the map `node` whose keys are exactly (a subset of) `fields`.
absl::Status ReadFields(const YAML::Node& node, const std::string& path,
                        const std::vector<Field>& fields) {
  std::vector<std::string> keys;
  for (const Field& f : fields) keys.push_back(f.key);
  std::set<std::string> seen;
  TDOCK_RETURN_IF_ERROR(ForEachEntry(
      node, path, keys,
      [&](const std::string& key, const YAML::Node& value,
          const std::string& p) {
        seen.insert(key);
        const size_t i =
            std::find(keys.begin(), keys.end(), key) - keys.begin();
        return fields[i].read(value, p);
      }));
  for (const Field& f : fields) {
    if (f.required && seen.count(f.key) == 0) {
      return YamlError(node, path, absl::StrCat("missing key '", f.key, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseColumn(const YAML::Node& node, const std::string& path,
                         ColumnSpec* column) {
  return ReadFields(node, path,
                    {{"dtype",
                      [column](const YAML::Node& value, const std::string& path) {
                        std::string name;
                        TDOCK_RETURN_IF_ERROR(Read(value, path, &name));
                        if (ParseColumnType(absl::AsciiStrToLower(name), column)) {
                          return absl::OkStatus();
                        }
                        return YamlError(value, path,
                                         absl::StrCat("unknown dtype '", name, "' (one of ",
                                                      DTypeNames(), ", string, json, tensors)"));
                      },
                      /*required=*/true},
                     {"inner_shape", Into(&column->inner_shape)},
                     {"max_len", Into(&column->max_len)},
                     {"rewritable", Into(&column->rewritable)}});
}

// `micro_batch: {max_tokens: 16384, ...}`: sets consumer->micro_batch and,
// from its key of that name, consumer->same_count_across_ranks.
absl::Status ParseMicroBatch(const YAML::Node& node, const std::string& path,
                             ConsumerSpec* consumer) {
  MicroBatchOptions& mb = consumer->micro_batch.emplace();
  return ReadFields(
      node, path,
      {{"max_tokens", Into(&mb.max_tokens), /*required=*/true},
       {"max_rows", Into(&mb.max_rows)},
       {"round_to", Into(&mb.round_to)},
       {"count_multiple", Into(&mb.count_multiple)},
       {"min_count", Into(&mb.min_count)},
       {"planner", Into(&mb.planner)},
       {"order", Into(&mb.order)},
       {"padded", Into(&mb.padded)},
       {"same_count_across_ranks", Into(&consumer->same_count_across_ranks)}});
}

absl::Status ParseConsumer(const YAML::Node& node, const std::string& path,
                           ConsumerSpec* consumer) {
  return ReadFields(
      node, path,
      {{"columns", Into(&consumer->columns)},
       {"dispatch_size", Into(&consumer->dispatch_size)},
       {"dp_size", Into(&consumer->dp_size)},
       {"whole_groups", Into(&consumer->whole_groups)},
       {"policy", Into(&consumer->policy)},
       {"seed", Into(&consumer->seed)},
       {"lease_ms", Into(&consumer->lease_ms)},
       {"replicas", Into(&consumer->replicas)},
       {"optional", Into(&consumer->optional)},
       {"max_staleness",
        [consumer](const YAML::Node& value, const std::string& p) {
          return Read(value, p, &consumer->max_staleness.emplace());
        }},
       {"stale", Into(&consumer->stale)},
       {"order", Into(&consumer->order)},
       {"pad", Into(&consumer->pad)},
       // A key left out of `cost` keeps its default (a = 1, b = 0).
       {"cost",
        [consumer](const YAML::Node& value, const std::string& p) {
          return ReadFields(
              value, p,
              {{"a", Into(&consumer->cost.a)}, {"b", Into(&consumer->cost.b)}});
        }},
       {"micro_batch",
        [consumer](const YAML::Node& value, const std::string& p) {
          return ParseMicroBatch(value, p, consumer);
        }}});
}

// A map from name to entry, in file order; `parse(value, path, &entry)`
// reads one entry after its name is set.
template <typename T, typename Parse>
absl::Status ParseNamed(const YAML::Node& node, const std::string& path,
                        Parse parse, std::vector<T>* out) {
  return ForEachEntry(node, path, {},
                      [&](const std::string& key, const YAML::Node& value,
                          const std::string& p) -> absl::Status {
                        T& entry = out->emplace_back();
                        entry.name = key;
                        return parse(value, p, &entry);
                      });
}

absl::Status ParseSealWhen(const YAML::Node& node, const std::string& path,
                           DockSpec* spec) {
  SealWhen& when = spec->seal_when.emplace();
  return ReadFields(node, path,
                    {{"consumer", Into(&when.consumer), /*required=*/true},
                     {"groups", Into(&when.groups), /*required=*/true},
                     {"carry", Into(&when.carry)},
                     {"carry_columns", Into(&when.carry_columns)}});
}

absl::Status ParseDock(const YAML::Node& node, const std::string& path,
                       DockSpec* spec) {
  if (node.IsNull())
    return YamlError(node, path, "expected a map, got nothing");
  return ReadFields(
      node, path,
      {{"name", Into(&spec->name)},
       {"num_prompts", Into(&spec->num_prompts)},
       {"n_samples_per_prompt", Into(&spec->n_samples_per_prompt)},
       {"steps_in_flight", Into(&spec->steps_in_flight)},
       {"length_columns", Into(&spec->length_columns)},
       {"columns",
        [spec](const YAML::Node& value, const std::string& p) {
          return ParseNamed(value, p, ParseColumn, &spec->columns);
        }},
       {"consumers",
        [spec](const YAML::Node& value, const std::string& p) {
          return ParseNamed(value, p, ParseConsumer, &spec->consumers);
        }},
       {"preallocate_bytes", Into(&spec->preallocate_bytes)},
       {"memory_limit_bytes", Into(&spec->memory_limit_bytes)},
       {"chunk_bytes", Into(&spec->chunk_bytes)},
       {"retain_steps", Into(&spec->retain_steps)},
       {"add_columns_on_write", Into(&spec->add_columns_on_write)},
       {"max_rows_per_step", Into(&spec->max_rows_per_step)},
       {"seal_when",
        [spec](const YAML::Node& value, const std::string& p) {
          return ParseSealWhen(value, p, spec);
        }}});
}

// `docks: [spec, ...]`, alone at the top level.
absl::StatusOr<std::vector<DockSpec>> ParseDockList(const YAML::Node& root) {
  std::vector<DockSpec> specs;
  TDOCK_RETURN_IF_ERROR(ForEachEntry(
      root, "", {"docks"},
      [&](const std::string&, const YAML::Node& value,
          const std::string& p) -> absl::Status {
        if (!value.IsSequence()) {
          return YamlError(
              value, p, absl::StrCat("expected a list, got ", TypeName(value)));
        }
        if (value.size() == 0) return YamlError(value, p, "the list is empty");
        for (size_t i = 0; i < value.size(); ++i) {
          TDOCK_RETURN_IF_ERROR(ParseDock(
              value[i], absl::StrCat(p, "[", i, "]"), &specs.emplace_back()));
        }
        return absl::OkStatus();
      }));
  return specs;
}

absl::StatusOr<std::vector<DockSpec>> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) {
    return YamlError(root, "",
                     absl::StrCat("expected a dock spec map or "
                                  "'docks:', got ",
                                  TypeName(root)));
  }
  if (root["docks"]) return ParseDockList(root);
  std::vector<DockSpec> specs(1);
  TDOCK_RETURN_IF_ERROR(ParseDock(root, "", &specs[0]));
  return specs;
}

}  // namespace

absl::StatusOr<std::vector<DockSpec>> ParseSpecsYaml(const std::string& text) {
  try {
    return ParseRoot(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("YAML error (line ", e.mark.line + 1, ", column ",
                     e.mark.column + 1, "): ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML error: ", e.what()));
  }
}

absl::StatusOr<std::vector<DockSpec>> LoadSpecsYamlFile(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("spec file: ", text.status().message()));
  }
  absl::StatusOr<std::vector<DockSpec>> specs = ParseSpecsYaml(*text);
  if (!specs.ok()) {
    return absl::Status(specs.status().code(),
                        absl::StrCat(path, ": ", specs.status().message()));
  }
  return specs;
}

}  // namespace tdock
