// internal::PutOfHeader: the Put a PutRequest header asks for, as the
// Python client's native path (tdock._native) hands it to the C++ client.
#include <set>
#include <string>

#include "client/client.h"
#include "client/client_impl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tdock {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every field a client's header may carry, set.
v1::PutRequest FullHeader() {
  v1::PutRequest header;
  header.set_dock("d");
  header.set_step(3);
  header.add_rows(4);
  header.add_rows(5);
  header.set_wait_ms(1500);
  header.set_ack_lease(7);
  header.add_keys("a");
  header.add_keys("b");
  header.set_new_rows(2);
  header.add_group_sizes(1);
  header.add_group_sizes(1);
  header.add_versions(9);
  header.set_reservation(11);
  header.set_put_id(13);
  v1::ColumnSpec* column = header.add_new_columns();
  column->set_name("extra");
  column->set_dtype(v1::FLOAT32);
  column->add_inner_shape(2);
  return header;
}

TEST(PutOfHeader, CarriesEveryFieldOfTheHeader) {
  const absl::StatusOr<ClientPut> put = internal::PutOfHeader(FullHeader());
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->dock, "d");
  EXPECT_EQ(put->step, 3);
  EXPECT_THAT(put->rows, ElementsAre(4, 5));
  EXPECT_EQ(put->wait, absl::Milliseconds(1500));
  EXPECT_EQ(put->ack_lease, 7u);
  EXPECT_THAT(put->keys, ElementsAre("a", "b"));
  EXPECT_EQ(put->new_rows, 2);
  EXPECT_THAT(put->group_sizes, ElementsAre(1, 1));
  EXPECT_THAT(put->versions, ElementsAre(9));
  EXPECT_EQ(put->reservation, 11u);
  EXPECT_EQ(put->put_id, 13u);
  ASSERT_EQ(put->new_columns.size(), 1u);
  EXPECT_EQ(put->new_columns[0].name, "extra");
  EXPECT_EQ(put->new_columns[0].dtype, DType::kFloat32);
  EXPECT_THAT(put->new_columns[0].inner_shape, ElementsAre(2));
  EXPECT_TRUE(put->columns.empty());
  EXPECT_TRUE(put->shard_address.empty());
}

// A field added to PutRequest must be carried by PutOfHeader (and checked
// above) or refused by it: this lists the fields it knows.
TEST(PutOfHeader, KnowsEveryFieldOfPutRequest) {
  const std::set<std::string> known = {
      "dock",     "step",        "rows",           "wait_ms",        "ack_lease",
      "keys",     "new_rows",    "group_sizes",    "versions",       "reservation",
      "put_id",   "new_columns", "columns",        "cell_locations", "prepared_extent"};
  const google::protobuf::Descriptor* descriptor = v1::PutRequest::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    EXPECT_TRUE(known.count(descriptor->field(i)->name()))
        << "PutRequest." << descriptor->field(i)->name()
        << " is new: carry it in internal::PutOfHeader, or refuse it";
  }
}

TEST(PutOfHeader, RefusesWhatOnlyTheLibrarySets) {
  v1::PutRequest with_columns = FullHeader();
  with_columns.add_columns()->set_name("x");
  v1::PutRequest with_locations = FullHeader();
  with_locations.set_cell_locations(true);
  v1::PutRequest with_extent = FullHeader();
  with_extent.set_prepared_extent(4);
  for (const auto& [header, field] :
       {std::pair<const v1::PutRequest&, const char*>{with_columns, "columns"},
        {with_locations, "cell_locations"},
        {with_extent, "prepared_extent"}}) {
    const absl::StatusOr<ClientPut> put = internal::PutOfHeader(header);
    EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(put.status().message(), HasSubstr(absl::StrCat("the header sets ", field)));
  }
}

TEST(PutOfHeader, RefusesANewColumnThatDoesNotRead) {
  v1::PutRequest header = FullHeader();
  header.mutable_new_columns(0)->set_encoding(static_cast<v1::ColumnEncoding>(99));
  const absl::StatusOr<ClientPut> put = internal::PutOfHeader(header);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(put.status().message(), HasSubstr("new column 'extra'"));
  EXPECT_THAT(put.status().message(), HasSubstr("unknown ColumnEncoding value 99"));
}

}  // namespace
}  // namespace tdock
