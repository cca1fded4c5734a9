// Holds one gRPC library reference for the whole test binary, so that
// tearing down a test's server and client never runs the final
// grpc_shutdown: in gRPC 1.51 that joins the executor, which can sit in the
// TCP backup poller for up to 10 s after a large write. Include it in one
// source file of each binary that starts servers (an inline variable, so
// including it more than once is harmless too).
#ifndef TDOCK_TESTS_GRPC_ENVIRONMENT_H_
#define TDOCK_TESTS_GRPC_ENVIRONMENT_H_

#include "grpc/grpc.h"
#include "gtest/gtest.h"

namespace tdock::testing_internal {

class GrpcLibraryEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { grpc_init(); }
};

inline ::testing::Environment* const kGrpcLibraryEnvironment =
    ::testing::AddGlobalTestEnvironment(new GrpcLibraryEnvironment);

}  // namespace tdock::testing_internal

#endif  // TDOCK_TESTS_GRPC_ENVIRONMENT_H_
