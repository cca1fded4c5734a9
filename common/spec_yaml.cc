// YAML dock specs. yaml-cpp reports errors by throwing; every call into it
// happens under the try block of ParseSpecsYaml, so no exception leaves this
// file. Errors name the key path ("docks[1].columns.rewards.dtype") and the
// line of the file.
#include "common/spec_yaml.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
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

absl::Status GetString(const YAML::Node& node, absl::string_view path,
                       std::string* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "a string"));
  *out = node.Scalar();
  return absl::OkStatus();
}

template <typename Int>
absl::Status GetInt(const YAML::Node& node, absl::string_view path, Int* out) {
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

absl::Status GetBool(const YAML::Node& node, absl::string_view path,
                     bool* out) {
  TDOCK_RETURN_IF_ERROR(ExpectScalar(node, path, "true or false"));
  if (!YAML::convert<bool>::decode(node, *out)) {
    return YamlError(
        node, path, absl::StrCat("'", node.Scalar(), "' is not true or false"));
  }
  return absl::OkStatus();
}

absl::Status ExpectSequence(const YAML::Node& node, absl::string_view path) {
  if (node.IsSequence()) return absl::OkStatus();
  return YamlError(node, path,
                   absl::StrCat("expected a list, got ", TypeName(node)));
}

absl::Status GetStringList(const YAML::Node& node, absl::string_view path,
                           std::vector<std::string>* out) {
  TDOCK_RETURN_IF_ERROR(ExpectSequence(node, path));
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    TDOCK_RETURN_IF_ERROR(GetString(node[i], absl::StrCat(path, "[", i, "]"),
                                    &out->emplace_back()));
  }
  return absl::OkStatus();
}

absl::Status GetIntList(const YAML::Node& node, absl::string_view path,
                        std::vector<int64_t>* out) {
  TDOCK_RETURN_IF_ERROR(ExpectSequence(node, path));
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    TDOCK_RETURN_IF_ERROR(
        GetInt(node[i], absl::StrCat(path, "[", i, "]"), &out->emplace_back()));
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
    TDOCK_RETURN_IF_ERROR(GetString(entry.first, path, &key));
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

std::string DTypeNames() {
  std::vector<std::string> names;
  for (int v = 1; IsValidDType(v); ++v) {
    names.emplace_back(DTypeName(static_cast<DType>(v)));
  }
  return absl::StrJoin(names, ", ");
}

absl::Status GetDType(const YAML::Node& node, absl::string_view path,
                      DType* out) {
  std::string name;
  TDOCK_RETURN_IF_ERROR(GetString(node, path, &name));
  const std::optional<DType> dtype = ParseDType(absl::AsciiStrToLower(name));
  if (!dtype.has_value()) {
    return YamlError(
        node, path,
        absl::StrCat("unknown dtype '", name, "' (one of ", DTypeNames(), ")"));
  }
  *out = *dtype;
  return absl::OkStatus();
}

absl::Status GetPolicy(const YAML::Node& node, absl::string_view path,
                       Policy* out) {
  std::string name;
  TDOCK_RETURN_IF_ERROR(GetString(node, path, &name));
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "fifo") {
    *out = Policy::kFifo;
  } else if (lower == "random") {
    *out = Policy::kRandom;
  } else if (lower == "balanced") {
    *out = Policy::kBalanced;
  } else {
    return YamlError(
        node, path,
        absl::StrCat("unknown policy '", name, "' (fifo, random or balanced)"));
  }
  return absl::OkStatus();
}

absl::Status ParseColumn(const YAML::Node& node, const std::string& path,
                         ColumnSpec* column) {
  bool has_dtype = false;
  TDOCK_RETURN_IF_ERROR(ForEachEntry(
      node, path, {"dtype", "inner_shape", "max_len", "rewritable"},
      [&](const std::string& key, const YAML::Node& value,
          const std::string& p) -> absl::Status {
        if (key == "dtype") {
          has_dtype = true;
          return GetDType(value, p, &column->dtype);
        }
        if (key == "inner_shape") {
          return GetIntList(value, p, &column->inner_shape);
        }
        if (key == "max_len") return GetInt(value, p, &column->max_len);
        return GetBool(value, p, &column->rewritable);
      }));
  if (!has_dtype) return YamlError(node, path, "missing key 'dtype'");
  return absl::OkStatus();
}

absl::Status ParseConsumer(const YAML::Node& node, const std::string& path,
                           ConsumerSpec* consumer) {
  return ForEachEntry(
      node, path,
      {"columns", "dispatch_size", "dp_size", "whole_groups", "policy", "seed"},
      [&](const std::string& key, const YAML::Node& value,
          const std::string& p) -> absl::Status {
        if (key == "columns")
          return GetStringList(value, p, &consumer->columns);
        if (key == "dispatch_size") {
          return GetInt(value, p, &consumer->dispatch_size);
        }
        if (key == "dp_size") return GetInt(value, p, &consumer->dp_size);
        if (key == "whole_groups") {
          return GetBool(value, p, &consumer->whole_groups);
        }
        if (key == "policy") return GetPolicy(value, p, &consumer->policy);
        return GetInt(value, p, &consumer->seed);
      });
}

absl::Status ParseColumns(const YAML::Node& node, const std::string& path,
                          std::vector<ColumnSpec>* columns) {
  return ForEachEntry(node, path, {},
                      [&](const std::string& key, const YAML::Node& value,
                          const std::string& p) -> absl::Status {
                        ColumnSpec& column = columns->emplace_back();
                        column.name = key;
                        return ParseColumn(value, p, &column);
                      });
}

absl::Status ParseConsumers(const YAML::Node& node, const std::string& path,
                            std::vector<ConsumerSpec>* consumers) {
  return ForEachEntry(node, path, {},
                      [&](const std::string& key, const YAML::Node& value,
                          const std::string& p) -> absl::Status {
                        ConsumerSpec& consumer = consumers->emplace_back();
                        consumer.name = key;
                        return ParseConsumer(value, p, &consumer);
                      });
}

absl::Status ParseDock(const YAML::Node& node, const std::string& path,
                       DockSpec* spec) {
  if (node.IsNull())
    return YamlError(node, path, "expected a map, got nothing");
  return ForEachEntry(
      node, path,
      {"name", "num_prompts", "n_samples_per_prompt", "steps_in_flight",
       "length_columns", "columns", "consumers", "preallocate_bytes",
       "memory_limit_bytes", "chunk_bytes"},
      [&](const std::string& key, const YAML::Node& value,
          const std::string& p) -> absl::Status {
        if (key == "name") return GetString(value, p, &spec->name);
        if (key == "num_prompts") return GetInt(value, p, &spec->num_prompts);
        if (key == "n_samples_per_prompt") {
          return GetInt(value, p, &spec->n_samples_per_prompt);
        }
        if (key == "steps_in_flight") {
          return GetInt(value, p, &spec->steps_in_flight);
        }
        if (key == "length_columns") {
          return GetStringList(value, p, &spec->length_columns);
        }
        if (key == "columns") return ParseColumns(value, p, &spec->columns);
        if (key == "consumers") {
          return ParseConsumers(value, p, &spec->consumers);
        }
        if (key == "preallocate_bytes") {
          return GetInt(value, p, &spec->preallocate_bytes);
        }
        if (key == "memory_limit_bytes") {
          return GetInt(value, p, &spec->memory_limit_bytes);
        }
        return GetInt(value, p, &spec->chunk_bytes);
      });
}

// `docks: [spec, ...]`, alone at the top level.
absl::StatusOr<std::vector<DockSpec>> ParseDockList(const YAML::Node& root) {
  std::vector<DockSpec> specs;
  TDOCK_RETURN_IF_ERROR(ForEachEntry(
      root, "", {"docks"},
      [&](const std::string&, const YAML::Node& value,
          const std::string& p) -> absl::Status {
        TDOCK_RETURN_IF_ERROR(ExpectSequence(value, p));
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open spec file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read spec file '", path, "'"));
  }
  absl::StatusOr<std::vector<DockSpec>> specs = ParseSpecsYaml(text.str());
  if (!specs.ok()) {
    return absl::Status(specs.status().code(),
                        absl::StrCat(path, ": ", specs.status().message()));
  }
  return specs;
}

}  // namespace tdock
