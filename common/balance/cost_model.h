// The cost of one row for balancing: cost(L) = a·L + b·L², L its token count.
// a models the linear part of a forward/backward pass (MLP, projections), b
// attention's quadratic term. Defaults a = 1, b = 0 balance plain tokens;
// verl uses a = 24576, b = 1 for 7B models.
//
//   CostModel cost{.a = 1, .b = 1.0 / 4096};
//   TDOCK_RETURN_IF_ERROR(cost.Validate());
//   std::vector<double> costs = cost.Costs(lengths);
//
// A plain value type: thread-compatible, cheap to copy.
#ifndef TDOCK_COMMON_BALANCE_COST_MODEL_H_
#define TDOCK_COMMON_BALANCE_COST_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tdock {

struct CostModel {
  // Weight of the token count. Default: 1.
  double a = 1;
  // Weight of the squared token count. Default: 0.
  double b = 0;

  // OK when a and b are finite, non-negative and not both zero.
  absl::Status Validate() const;

  double Cost(int64_t length) const {
    const double l = static_cast<double>(length);
    return a * l + b * l * l;
  }
  // Cost of every row. REQUIRES: Validate() is OK.
  std::vector<double> Costs(absl::Span<const int64_t> lengths) const;

  bool operator==(const CostModel&) const = default;
};

// OK when every length is >= 0; the message names the first row at fault.
absl::Status ValidateLengths(absl::Span<const int64_t> lengths);

// Validates `cost` and `lengths` and returns the cost of every row; fails
// when the costs sum beyond the double range (an extreme a or b).
absl::StatusOr<std::vector<double>> RowCosts(const CostModel& cost,
                                             absl::Span<const int64_t> lengths);

}  // namespace tdock

#endif  // TDOCK_COMMON_BALANCE_COST_MODEL_H_
