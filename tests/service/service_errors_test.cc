// Bad inputs over the wire: each gets the status code of DESIGN.md section 6
// with a message that names what was wrong, and changes nothing (the dock's
// status is identical before and after).
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/service/service_fixture.h"

namespace tdock::service_testing {
namespace {

class ServiceErrorsTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    ASSERT_OK(CreateDock(GrpoSpec()));
  }

  // A Put of row `row` with one int32 column.
  static v1::PutRequest OneCellPut(const std::string& column, int64_t row) {
    v1::PutRequest put;
    put.set_dock("grpo");
    put.add_rows(row);
    *put.add_columns() = Int32Column(column, {{1, 2, 3}});
    return put;
  }

};

// A Put to a dock that does not exist: NOT_FOUND naming the dock.
TEST_F(ServiceErrorsTest, PutUnknownDock) {
  v1::PutRequest put = OneCellPut("prompt_ids", 0);
  put.set_dock("nosuchdock");
  ExpectRejected([&] { return Put(put); }, absl::StatusCode::kNotFound,
                 {"nosuchdock"});
}

// Get, Sample, Read, status, AddConsumer, ReleaseStep and DeleteDock of a dock
// that does not exist: NOT_FOUND naming the dock.
TEST_F(ServiceErrorsTest, EveryCallOnUnknownDock) {
  v1::GetRequest get = GetFor("actor", 2, 0);
  get.set_dock("nosuchdock");
  ExpectRejected([&] { return Get(get).status(); }, absl::StatusCode::kNotFound,
                 {"nosuchdock"});
  ExpectRejected(
      [&] {
        v1::SampleResponse response;
        return FromGrpcStatus(stub_->Sample(Context().get(), get, &response));
      },
      absl::StatusCode::kNotFound, {"nosuchdock"});
  ExpectRejected(
      [&] {
        v1::ReadRequest read;
        read.set_dock("nosuchdock");
        read.add_rows(0);
        v1::GetResponse response;
        return FromGrpcStatus(stub_->Read(Context().get(), read, &response));
      },
      absl::StatusCode::kNotFound, {"nosuchdock"});
  ExpectRejected([&] { return Status("nosuchdock").status(); },
                 absl::StatusCode::kNotFound, {"nosuchdock"});
  ExpectRejected(
      [&] {
        v1::AddConsumerRequest add;
        add.set_dock("nosuchdock");
        add.mutable_consumer()->set_name("critic");
        add.mutable_consumer()->add_columns("prompt_ids");
        v1::AddConsumerResponse response;
        return FromGrpcStatus(
            stub_->AddConsumer(Context().get(), add, &response));
      },
      absl::StatusCode::kNotFound, {"nosuchdock"});
  ExpectRejected(
      [&] {
        v1::ReleaseStepRequest release;
        release.set_dock("nosuchdock");
        v1::ReleaseStepResponse response;
        return FromGrpcStatus(
            stub_->ReleaseStep(Context().get(), release, &response));
      },
      absl::StatusCode::kNotFound, {"nosuchdock"});
  ExpectRejected(
      [&] {
        v1::DeleteDockRequest del;
        del.set_dock("nosuchdock");
        v1::DeleteDockResponse response;
        return FromGrpcStatus(
            stub_->DeleteDock(Context().get(), del, &response));
      },
      absl::StatusCode::kNotFound, {"nosuchdock"});
}

// A Get or Sample for a consumer the dock does not have: NOT_FOUND naming it.
TEST_F(ServiceErrorsTest, GetUnknownConsumer) {
  ASSERT_OK(Put(FullStepPut()));
  ExpectRejected([&] { return Get(GetFor("nobody", 2, 0)).status(); },
                 absl::StatusCode::kNotFound, {"nobody"});
  ExpectRejected(
      [&] {
        v1::SampleResponse response;
        return FromGrpcStatus(
            stub_->Sample(Context().get(), GetFor("nobody", 2, 0), &response));
      },
      absl::StatusCode::kNotFound, {"nobody"});
}

// A Put of a column the dock does not have: INVALID_ARGUMENT naming it.
TEST_F(ServiceErrorsTest, PutUnknownColumn) {
  ExpectRejected([&] { return Put(OneCellPut("values", 0)); },
                 absl::StatusCode::kInvalidArgument, {"values"});
}

// A Put whose column dtype differs from the spec's: INVALID_ARGUMENT naming
// the column.
TEST_F(ServiceErrorsTest, PutWrongDtype) {
  v1::PutRequest put = OneCellPut("rewards", 0);  // rewards is float32
  ExpectRejected([&] { return Put(put); }, absl::StatusCode::kInvalidArgument,
                 {"rewards"});
}

// A Put of a row past the step's 4 rows: INVALID_ARGUMENT naming the row.
TEST_F(ServiceErrorsTest, PutRowOutOfRange) {
  ExpectRejected([&] { return Put(OneCellPut("prompt_ids", 9)); },
                 absl::StatusCode::kInvalidArgument, {"row", "9"});
}

// A Put whose offsets promise more items than the data holds:
// INVALID_ARGUMENT naming the column.
TEST_F(ServiceErrorsTest, PutOffsetsNotMatchingData) {
  v1::PutRequest put = OneCellPut("prompt_ids", 0);
  put.mutable_columns(0)->set_offsets(1, 4);  // data holds 3 items
  ExpectRejected([&] { return Put(put); }, absl::StatusCode::kInvalidArgument,
                 {"prompt_ids"});
}

// A Put to a cell already written, in a column that is not rewritable:
// ALREADY_EXISTS naming the column; the first write stays.
TEST_F(ServiceErrorsTest, PutCellWrittenTwice) {
  ASSERT_OK(Put(FullStepPut()));
  ExpectRejected([&] { return Put(OneCellPut("prompt_ids", 2)); },
                 absl::StatusCode::kAlreadyExists, {"prompt_ids"});
  ASSERT_OK_AND_ASSIGN(v1::GetResponse got, Get(GetFor("actor", 4, 0)));
  for (int i = 0; i < got.rows_size(); ++i) {
    if (got.rows(i) != 2) continue;
    EXPECT_EQ(CellBytes(got.columns(0), i, 4),
              CellBytes(FullStepPut().columns(0), 2, 4));
  }
}

// A Put with a negative wait bound: INVALID_ARGUMENT naming wait_ms.
TEST_F(ServiceErrorsTest, PutNegativeWait) {
  v1::PutRequest put = OneCellPut("prompt_ids", 0);
  put.set_wait_ms(-1);
  ExpectRejected([&] { return Put(put); }, absl::StatusCode::kInvalidArgument,
                 {"wait_ms"});
}

// Raw Put bytes that are not a valid PutRequest: INVALID_ARGUMENT from the
// bulk framing, naming the field at fault.
TEST_F(ServiceErrorsTest, MalformedRawPut) {
  // Field 1 (dock), length-delimited, claiming 100 bytes of which 3 follow.
  ExpectRejected([&] { return RawPut(std::string("\x0a\x64grp", 5)); },
                 absl::StatusCode::kInvalidArgument, {"dock", "length 100"});
  // Field 2 (step), varint, truncated after a continuation byte.
  ExpectRejected([&] { return RawPut(std::string("\x10\xff", 2)); },
                 absl::StatusCode::kInvalidArgument, {"step", "truncated"});
  // Field 15 (columns) holding a PackedColumn whose dtype (field 2) is 99.
  ExpectRejected([&] { return RawPut(std::string("\x7a\x02\x10\x63", 4)); },
                 absl::StatusCode::kInvalidArgument, {"columns[0]", "99"});
}

// A Read of a column the dock does not have: INVALID_ARGUMENT naming it; a
// Read of a cell not written: FAILED_PRECONDITION.
TEST_F(ServiceErrorsTest, ReadBadColumnOrUnwrittenCell) {
  ASSERT_OK(Put(FullStepPut()));
  v1::ReadRequest read;
  read.set_dock("grpo");
  read.add_rows(0);
  read.add_columns("values");
  v1::GetResponse response;
  ExpectRejected(
      [&] {
        return FromGrpcStatus(stub_->Read(Context().get(), read, &response));
      },
      absl::StatusCode::kInvalidArgument, {"values"});
  read.set_columns(0, "rewards");
  ExpectRejected(
      [&] {
        return FromGrpcStatus(stub_->Read(Context().get(), read, &response));
      },
      absl::StatusCode::kFailedPrecondition, {"rewards"});
}

// CreateDock with an invalid spec: INVALID_ARGUMENT naming the field; with
// the name of an existing dock and another spec: ALREADY_EXISTS naming it.
TEST_F(ServiceErrorsTest, CreateDockBadSpec) {
  v1::DockSpec bad = GrpoSpec();
  bad.set_name("other");
  bad.set_num_prompts(0);
  ExpectRejected([&] { return CreateDock(bad); },
                 absl::StatusCode::kInvalidArgument, {"num_prompts"});
  v1::DockSpec clash = GrpoSpec();
  clash.set_num_prompts(8);
  ExpectRejected([&] { return CreateDock(clash); },
                 absl::StatusCode::kAlreadyExists, {"grpo"});
  v1::ListDocksResponse list;
  ASSERT_TRUE(stub_->ListDocks(Context().get(), {}, &list).ok());
  EXPECT_EQ(list.docks_size(), 1);
}

// AddConsumer needing an unknown column: INVALID_ARGUMENT naming the column.
TEST_F(ServiceErrorsTest, AddConsumerUnknownColumn) {
  v1::AddConsumerRequest add;
  add.set_dock("grpo");
  add.mutable_consumer()->set_name("critic");
  add.mutable_consumer()->add_columns("values");
  v1::AddConsumerResponse response;
  ExpectRejected(
      [&] {
        return FromGrpcStatus(
            stub_->AddConsumer(Context().get(), add, &response));
      },
      absl::StatusCode::kInvalidArgument, {"values"});
}

// ReleaseStep of a step that is not live: FAILED_PRECONDITION naming it.
TEST_F(ServiceErrorsTest, ReleaseStepNotLive) {
  v1::ReleaseStepRequest release;
  release.set_dock("grpo");
  release.set_step(7);
  v1::ReleaseStepResponse response;
  ExpectRejected(
      [&] {
        return FromGrpcStatus(
            stub_->ReleaseStep(Context().get(), release, &response));
      },
      absl::StatusCode::kFailedPrecondition, {"7"});
}

// A Get with a negative wait bound: INVALID_ARGUMENT naming wait_ms.
TEST_F(ServiceErrorsTest, GetNegativeWait) {
  ExpectRejected([&] { return Get(GetFor("actor", 2, -5)).status(); },
                 absl::StatusCode::kInvalidArgument, {"wait_ms"});
}

}  // namespace
}  // namespace tdock::service_testing
