// Status helpers used across tdock. absl 20220623 has no RETURN_IF_ERROR or
// ASSIGN_OR_RETURN of its own; these are the only status macros we define.
//
//   absl::StatusOr<int> Parse(std::string_view s);
//   absl::Status Use(std::string_view s) {
//     TDOCK_ASSIGN_OR_RETURN(int v, Parse(s));
//     TDOCK_RETURN_IF_ERROR(Check(v));
//     return absl::OkStatus();
//   }
#ifndef TDOCK_COMMON_STATUS_H_
#define TDOCK_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TDOCK_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status tdock_status_ = (expr);           \
    if (!tdock_status_.ok()) return tdock_status_;   \
  } while (0)

#define TDOCK_STATUS_CONCAT_INNER_(a, b) a##b
#define TDOCK_STATUS_CONCAT_(a, b) TDOCK_STATUS_CONCAT_INNER_(a, b)

#define TDOCK_ASSIGN_OR_RETURN(lhs, expr)                                    \
  TDOCK_ASSIGN_OR_RETURN_IMPL_(TDOCK_STATUS_CONCAT_(tdock_or_, __LINE__), lhs, \
                               expr)
#define TDOCK_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#endif  // TDOCK_COMMON_STATUS_H_
