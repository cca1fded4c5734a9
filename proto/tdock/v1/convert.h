// Conversions between tdock.v1 messages and tdock's own types, and between
// absl::Status and grpc::Status (the same codes), shared by server and client.
#ifndef TDOCK_PROTO_TDOCK_V1_CONVERT_H_
#define TDOCK_PROTO_TDOCK_V1_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/batch_meta.h"
#include "common/drop.h"
#include "common/row_state.h"
#include "common/spec.h"
#include "grpcpp/support/status.h"
#include "tdock/v1/dock.pb.h"

namespace tdock {

v1::DockSpec ToProto(const DockSpec& spec);
v1::ConsumerSpec ToProto(const ConsumerSpec& consumer);
v1::ColumnSpec ToProto(const ColumnSpec& column);
// INVALID_ARGUMENT for enum values outside the contract (naming the field).
// Drop reasons share their values with the wire's; a value the dock does not
// know becomes kUnspecified (the dock refuses it, naming the valid reasons).
inline v1::DropReason ToProto(DropReason reason) { return static_cast<v1::DropReason>(reason); }
inline DropReason FromProto(v1::DropReason reason) {
  const int value = static_cast<int>(reason);
  return value > 0 && value < kDropReasons ? static_cast<DropReason>(value)
                                           : DropReason::kUnspecified;
}

absl::StatusOr<DockSpec> FromProto(const v1::DockSpec& spec);
absl::StatusOr<ConsumerSpec> FromProto(const v1::ConsumerSpec& consumer);
absl::StatusOr<ColumnSpec> FromProto(const v1::ColumnSpec& column);

// Batch metadata (convert_batch.cc). A GetResponse (also Read's) and a
// SampleResponse carry the same fields; ToProto sets them and leaves the
// columns alone.
v1::ListRowsResponse ToProto(const RowListing& listing);
RowListing FromProto(const v1::ListRowsResponse& in);
void ToProto(const BatchMeta& meta, v1::GetResponse* out);
void ToProto(const BatchMeta& meta, v1::SampleResponse* out);
BatchMeta FromProto(const v1::GetResponse& in);
BatchMeta FromProto(const v1::SampleResponse& in);
void ToProto(const BalanceStats& stats, v1::BalanceStats* out);
BalanceStats FromProto(const v1::BalanceStats& in);

// The same code and message; a refusal (common/refusal.h) travels in the
// status details as an RpcStatus holding a v1.Refusal (dock.proto), and
// comes back attached to the absl::Status.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tdock

#endif  // TDOCK_PROTO_TDOCK_V1_CONVERT_H_
