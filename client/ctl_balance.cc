#include "client/ctl_balance.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ctl_output.h"
#include "common/balance/cost_model.h"
#include "common/balance/micro_batch.h"
#include "common/balance/partition.h"
#include "common/balance/round.h"
#include "common/balance/stats.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Values quoted in messages are cut to about this many characters.
constexpr size_t kMaxShown = 40;

std::string Shown(const Json& value) {
  std::string text = Dump(value);
  if (text.size() > kMaxShown) text = absl::StrCat(text.substr(0, kMaxShown), "...");
  return text;
}

bool ToInt64(const Json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (!value.is_number_integer()) return false;
  *out = value.get<int64_t>();
  return true;
}

// Typed keys of one JSON object of a request. Messages name a key by its
// path ("micro_batch.max_tokens") and quote the value at fault.
class Fields final {
 public:
  Fields(const Json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  // INVALID_ARGUMENT for a key outside `known`, listing them.
  absl::Status CheckKeys(absl::string_view what,
                         std::initializer_list<const char*> known) const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      bool found = false;
      for (const char* key : known) found = found || it.key() == key;
      if (!found) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown key '", prefix_, it.key(), "' (", what,
                         " takes: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  // The key as an integer in [min, max]; `fallback` when absent, required
  // when `fallback` is nullopt.
  absl::StatusOr<int64_t> Int(const char* key, std::optional<int64_t> fallback,
                              int64_t min, int64_t max) const {
    const Json* value = Find(key);
    if (value == nullptr) {
      if (fallback.has_value()) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat("missing key '", Name(key), "'"));
    }
    int64_t out = 0;
    if (!ToInt64(*value, &out) || out < min || out > max) {
      return absl::InvalidArgumentError(absl::StrCat("'", Name(key), "' must be an integer in [",
                                                     min, ", ", max, "], got ", Shown(*value)));
    }
    return out;
  }

  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    const Json* value = Find(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", Name(key), "' must be true or false, got ", Shown(*value)));
    }
    return value->get<bool>();
  }

  absl::StatusOr<double> Number(const char* key, double fallback) const {
    const Json* value = Find(key);
    if (value == nullptr) return fallback;
    if (!value->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", Name(key), "' must be a number, got ", Shown(*value)));
    }
    return value->get<double>();
  }

  // One of `choices` by name; `fallback` when absent.
  template <typename E>
  absl::StatusOr<E> Choice(const char* key, E fallback,
                           std::initializer_list<std::pair<const char*, E>> choices) const {
    const Json* value = Find(key);
    if (value == nullptr) return fallback;
    std::vector<std::string> names;
    for (const auto& [name, choice] : choices) {
      if (value->is_string() && value->get<std::string>() == name) return choice;
      names.push_back(absl::StrCat("\"", name, "\""));
    }
    return absl::InvalidArgumentError(absl::StrCat("'", Name(key), "' must be one of ",
                                                   absl::StrJoin(names, ", "), ", got ",
                                                   Shown(*value)));
  }

  // A nested object, or nullptr when absent.
  absl::StatusOr<const Json*> Object(const char* key) const {
    const Json* value = Find(key);
    if (value != nullptr && !value->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", Name(key), "' must be an object, got ", Shown(*value)));
    }
    return value;
  }

  // "lengths": required, an array of token counts >= 0.
  absl::StatusOr<std::vector<int64_t>> Lengths() const {
    const Json* value = Find("lengths");
    if (value == nullptr || !value->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'lengths' must be an array of token counts, got ",
                       value == nullptr ? "nothing" : Shown(*value)));
    }
    std::vector<int64_t> lengths(value->size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (!ToInt64((*value)[i], &lengths[i]) || lengths[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("'lengths'[", i, "] must be an integer >= 0, got ",
                         Shown((*value)[i])));
      }
    }
    return lengths;
  }

  std::string Name(const char* key) const { return absl::StrCat(prefix_, key); }

 private:
  const Json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

  const Json& object_;
  const std::string prefix_;
};

// ---- request keys -> library options ----

absl::StatusOr<CostModel> ParseCost(const Fields& request) {
  TDOCK_ASSIGN_OR_RETURN(const Json* object, request.Object("cost"));
  CostModel cost;
  if (object == nullptr) return cost;
  const Fields fields(*object, "cost.");
  TDOCK_RETURN_IF_ERROR(fields.CheckKeys("cost", {"a", "b"}));
  TDOCK_ASSIGN_OR_RETURN(cost.a, fields.Number("a", 1));
  TDOCK_ASSIGN_OR_RETURN(cost.b, fields.Number("b", 0));
  TDOCK_RETURN_IF_ERROR(cost.Validate());
  return cost;
}

absl::StatusOr<PartitionAlgorithm> ParseAlgorithm(const Fields& request) {
  return request.Choice<PartitionAlgorithm>("algorithm", PartitionAlgorithm::kAuto,
                                            {{"auto", PartitionAlgorithm::kAuto},
                                             {"kk", PartitionAlgorithm::kKarmarkarKarp},
                                             {"greedy", PartitionAlgorithm::kGreedy}});
}

// The micro-batch keys of `fields` (the request itself or its "micro_batch").
absl::StatusOr<MicroBatchOptions> ParseMicroBatch(const Fields& fields) {
  MicroBatchOptions options;
  TDOCK_ASSIGN_OR_RETURN(options.max_tokens, fields.Int("max_tokens", std::nullopt, 1, kInt64Max));
  TDOCK_ASSIGN_OR_RETURN(const int64_t max_rows, fields.Int("max_rows", 0, 0, kInt32Max));
  options.max_rows = static_cast<int>(max_rows);
  TDOCK_ASSIGN_OR_RETURN(options.round_to, fields.Int("round_to", 1, 1, kInt64Max));
  TDOCK_ASSIGN_OR_RETURN(const int64_t multiple, fields.Int("count_multiple", 1, 1, kInt32Max));
  options.count_multiple = static_cast<int>(multiple);
  TDOCK_ASSIGN_OR_RETURN(const int64_t min_count, fields.Int("min_count", 0, 0, kInt32Max));
  options.min_count = static_cast<int>(min_count);
  TDOCK_ASSIGN_OR_RETURN(options.padded, fields.Bool("padded", false));
  TDOCK_ASSIGN_OR_RETURN(options.planner,
                         fields.Choice<MicroBatchPlanner>(
                             "planner", MicroBatchPlanner::kBalanced,
                             {{"balanced", MicroBatchPlanner::kBalanced},
                              {"packed", MicroBatchPlanner::kPacked}}));
  TDOCK_ASSIGN_OR_RETURN(options.order,
                         fields.Choice<MicroBatchOrder>(
                             "order", MicroBatchOrder::kHeavyFirst,
                             {{"heavy_first", MicroBatchOrder::kHeavyFirst},
                              {"smallest_at_ends", MicroBatchOrder::kSmallestAtEnds}}));
  TDOCK_RETURN_IF_ERROR(options.Validate());
  return options;
}

// ---- results -> JSON ----

double Microseconds(absl::Duration elapsed) {
  return std::round(absl::ToDoubleMicroseconds(elapsed) * 10) / 10;
}

Json MicroBatchesJson(const std::vector<MicroBatch>& micro_batches) {
  Json out = Json::array();
  for (const MicroBatch& mb : micro_batches) {
    out.push_back({{"rows", mb.rows},
                   {"padded_len", mb.padded_len},
                   {"tokens", mb.tokens},
                   {"padded_tokens", mb.padded_tokens}});
  }
  return out;
}

// ---- the ops ----

absl::StatusOr<Json> RunPartition(const Fields& request) {
  TDOCK_RETURN_IF_ERROR(request.CheckKeys(
      "partition", {"op", "lengths", "k", "equal_size", "group_size", "cost", "algorithm"}));
  TDOCK_ASSIGN_OR_RETURN(const std::vector<int64_t> lengths, request.Lengths());
  TDOCK_ASSIGN_OR_RETURN(const int64_t k, request.Int("k", std::nullopt, 1, kInt32Max));
  TDOCK_ASSIGN_OR_RETURN(const bool equal_size, request.Bool("equal_size", true));
  TDOCK_ASSIGN_OR_RETURN(const int64_t group_size, request.Int("group_size", 1, 1, kInt32Max));
  TDOCK_ASSIGN_OR_RETURN(const CostModel cost, ParseCost(request));
  PartitionOptions options;
  TDOCK_ASSIGN_OR_RETURN(options.algorithm, ParseAlgorithm(request));
  if (group_size > 1 && !equal_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'group_size' ", group_size,
        " needs 'equal_size' true: whole groups are dealt to parts in equal numbers"));
  }
  options.group_size = static_cast<int>(group_size);
  options.constraint = group_size > 1 ? PartitionConstraint::kEqualGroups
                       : equal_size   ? PartitionConstraint::kEqualSize
                                      : PartitionConstraint::kNone;
  const absl::Time start = absl::Now();
  TDOCK_ASSIGN_OR_RETURN(const std::vector<double> costs, RowCosts(cost, lengths));
  TDOCK_ASSIGN_OR_RETURN(std::vector<std::vector<int>> parts,
                         Partition(costs, static_cast<int>(k), options));
  const absl::Duration elapsed = absl::Now() - start;
  const std::vector<double> part_costs = PartCosts(costs, parts);
  return Json{{"partitions", std::move(parts)},
              {"costs", part_costs},
              {"max_over_mean", Summarize(part_costs).max_over_mean()},
              {"time_us", Microseconds(elapsed)}};
}

absl::StatusOr<Json> RunMicroBatches(const Fields& request) {
  TDOCK_RETURN_IF_ERROR(request.CheckKeys(
      "micro_batches", {"op", "lengths", "max_tokens", "max_rows", "round_to", "count_multiple",
                        "min_count", "padded", "planner", "order", "cost"}));
  TDOCK_ASSIGN_OR_RETURN(const std::vector<int64_t> lengths, request.Lengths());
  TDOCK_ASSIGN_OR_RETURN(const MicroBatchOptions options, ParseMicroBatch(request));
  TDOCK_ASSIGN_OR_RETURN(const CostModel cost, ParseCost(request));
  const absl::Time start = absl::Now();
  TDOCK_ASSIGN_OR_RETURN(const MicroBatchPlan plan, PlanMicroBatches(lengths, options, cost));
  const absl::Duration elapsed = absl::Now() - start;
  return Json{{"micro_batches", MicroBatchesJson(plan.micro_batches)},
              {"time_us", Microseconds(elapsed)}};
}

// The "micro_batch" object of a dispatch request, into `options`.
absl::Status ParseDispatchMicroBatch(const Fields& request, RoundOptions* options) {
  TDOCK_ASSIGN_OR_RETURN(const Json* object, request.Object("micro_batch"));
  if (object == nullptr) return absl::OkStatus();
  const Fields fields(*object, "micro_batch.");
  TDOCK_RETURN_IF_ERROR(fields.CheckKeys(
      "micro_batch", {"max_tokens", "max_rows", "round_to", "count_multiple", "min_count",
                      "padded", "planner", "order", "same_count_across_ranks"}));
  TDOCK_ASSIGN_OR_RETURN(options->micro_batch, ParseMicroBatch(fields));
  TDOCK_ASSIGN_OR_RETURN(options->same_count_across_ranks,
                         fields.Bool("same_count_across_ranks", true));
  return absl::OkStatus();
}

absl::StatusOr<Json> RunDispatch(const Fields& request) {
  TDOCK_RETURN_IF_ERROR(request.CheckKeys(
      "dispatch", {"op", "lengths", "dp_size", "group_size", "cost", "algorithm", "micro_batch"}));
  TDOCK_ASSIGN_OR_RETURN(const std::vector<int64_t> lengths, request.Lengths());
  RoundOptions options;
  TDOCK_ASSIGN_OR_RETURN(const int64_t dp_size, request.Int("dp_size", std::nullopt, 1, kInt32Max));
  TDOCK_ASSIGN_OR_RETURN(const int64_t group_size, request.Int("group_size", 1, 1, kInt32Max));
  options.dp_size = static_cast<int>(dp_size);
  options.group_size = static_cast<int>(group_size);
  TDOCK_ASSIGN_OR_RETURN(options.cost, ParseCost(request));
  TDOCK_ASSIGN_OR_RETURN(options.algorithm, ParseAlgorithm(request));
  TDOCK_RETURN_IF_ERROR(ParseDispatchMicroBatch(request, &options));
  const absl::Time start = absl::Now();
  TDOCK_ASSIGN_OR_RETURN(const RoundPlan round, PlanRound(lengths, options));
  const absl::Duration elapsed = absl::Now() - start;
  Json ranks = Json::array();
  for (const RankPlan& rank : round.ranks) {
    ranks.push_back({{"rows", rank.rows},
                     {"tokens", rank.tokens},
                     {"cost", rank.cost},
                     {"micro_batches", MicroBatchesJson(rank.micro_batches)}});
  }
  return Json{{"ranks", std::move(ranks)},
              {"stats", BalanceToJson(round.stats)},
              {"time_us", Microseconds(elapsed)}};
}

absl::StatusOr<Json> ParseLine(absl::string_view line) {
  try {
    return Json::parse(line.begin(), line.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<Json> PlanBalanceRequest(absl::string_view line) {
  TDOCK_ASSIGN_OR_RETURN(const Json request, ParseLine(line));
  if (!request.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request must be a JSON object, got ", Shown(request)));
  }
  const auto op = request.find("op");
  const std::string name = op != request.end() && op->is_string() ? op->get<std::string>() : "";
  absl::StatusOr<Json> answer;
  const Fields fields(request, "");
  if (name == "partition") {
    answer = RunPartition(fields);
  } else if (name == "micro_batches") {
    answer = RunMicroBatches(fields);
  } else if (name == "dispatch") {
    answer = RunDispatch(fields);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'op' must be one of \"partition\", \"micro_batches\", \"dispatch\", got ",
        op == request.end() ? "nothing" : Shown(*op)));
  }
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        absl::StrCat(name, ": ", answer.status().message()));
  }
  return answer;
}

int64_t RunBalance(std::istream& in, std::ostream& out) {
  int64_t failed = 0;
  int64_t number = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<Json> answer = PlanBalanceRequest(line);
    if (!answer.ok()) {
      ++failed;
      answer = Json{{"error", absl::StrCat("line ", number, ": ", answer.status().message())}};
    }
    out << Dump(*answer) << "\n" << std::flush;
  }
  return failed;
}

}  // namespace tdock::ctl
