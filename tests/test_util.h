// gtest helpers for absl::Status (gtest 1.12 has none).
#ifndef TDOCK_TESTS_TEST_UTIL_H_
#define TDOCK_TESTS_TEST_UTIL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/refusal.h"
#include "gtest/gtest.h"

namespace tdock::testing_internal {
inline const absl::Status& ToStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& ToStatus(const absl::StatusOr<T>& s) { return s.status(); }
}  // namespace tdock::testing_internal

#define EXPECT_OK(expr)                                                  \
  do {                                                                   \
    const ::absl::Status tdock_st_ = ::tdock::testing_internal::ToStatus(expr); \
    EXPECT_TRUE(tdock_st_.ok()) << tdock_st_;                            \
  } while (0)
#define ASSERT_OK(expr)                                                  \
  do {                                                                   \
    const ::absl::Status tdock_st_ = ::tdock::testing_internal::ToStatus(expr); \
    ASSERT_TRUE(tdock_st_.ok()) << tdock_st_;                            \
  } while (0)

#define TDOCK_TEST_CONCAT_INNER_(a, b) a##b
#define TDOCK_TEST_CONCAT_(a, b) TDOCK_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(TDOCK_TEST_CONCAT_(tdock_test_or_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = std::move(tmp).value()

// Expects a status with `code` whose message contains `substr`.
#define EXPECT_STATUS(expr, expected_code, substr)                         \
  do {                                                                     \
    const ::absl::Status tdock_st_ = ::tdock::testing_internal::ToStatus(expr); \
    EXPECT_EQ(tdock_st_.code(), expected_code) << tdock_st_;               \
    EXPECT_NE(std::string(tdock_st_.message()).find(substr),               \
              std::string::npos)                                           \
        << "message: " << tdock_st_.message() << " lacks: " << (substr);   \
  } while (0)

// Expects a status that carries `refusal` (common/refusal.h) and, for a
// refused row that was dropped, the drop's reason `drop_reason`.
#define EXPECT_REFUSED(expr, refusal, drop_reason)                              \
  do {                                                                          \
    const ::tdock::RefusalInfo tdock_refusal_ =                                 \
        ::tdock::RefusalOf(::tdock::testing_internal::ToStatus(expr));           \
    EXPECT_EQ(::tdock::RefusalName(tdock_refusal_.why),                          \
              ::tdock::RefusalName(refusal));                                    \
    EXPECT_EQ(::tdock::DropReasonName(tdock_refusal_.drop),                      \
              ::tdock::DropReasonName(drop_reason));                             \
  } while (0)

#endif  // TDOCK_TESTS_TEST_UTIL_H_
