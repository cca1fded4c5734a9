#include "common/balance/cost_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tdock {

absl::Status CostModel::Validate() const {
  if (!std::isfinite(a) || !std::isfinite(b) || a < 0 || b < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model a=", a, " b=", b,
                     ": both must be finite and >= 0"));
  }
  if (a == 0 && b == 0) {
    return absl::InvalidArgumentError(
        "cost model a=0 b=0 gives every row zero cost; set a or b > 0");
  }
  return absl::OkStatus();
}

std::vector<double> CostModel::Costs(absl::Span<const int64_t> lengths) const {
  std::vector<double> costs;
  costs.reserve(lengths.size());
  for (int64_t length : lengths) costs.push_back(Cost(length));
  return costs;
}

absl::Status ValidateLengths(absl::Span<const int64_t> lengths) {
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", i, " has negative length ", lengths[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> RowCosts(const CostModel& cost,
                                             absl::Span<const int64_t> lengths) {
  TDOCK_RETURN_IF_ERROR(cost.Validate());
  TDOCK_RETURN_IF_ERROR(ValidateLengths(lengths));
  std::vector<double> costs = cost.Costs(lengths);
  double total = 0;
  for (double c : costs) total += c;
  if (!std::isfinite(total)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cost model a=", cost.a, " b=", cost.b, " makes the costs of ",
        lengths.size(), " rows sum beyond the double range; scale a and b down"));
  }
  return costs;
}

}  // namespace tdock
