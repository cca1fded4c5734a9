// The transport edge copies no payload: request spans view gRPC's slices in
// place, and response slices point into the batch's memory and keep its pin
// alive until gRPC releases them.
#include "server/service/byte_buffers.h"

#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tdock/v1/dock.pb.h"
#include "tests/test_util.h"

namespace tdock::internal {
namespace {

// The bytes of a ByteBuffer, concatenated.
std::string Contents(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// RequestBytes views each slice of the buffer where it lies, and its spans
// stay valid after the buffer itself is gone.
TEST(RequestBytes, SpansViewSlicesInPlace) {
  std::vector<grpc::Slice> slices = {grpc::Slice(std::string(5000, 'a')),
                                     grpc::Slice(std::string(3000, 'b'))};
  auto buffer = std::make_unique<grpc::ByteBuffer>(slices.data(), 2);
  ASSERT_OK_AND_ASSIGN(RequestBytes bytes, RequestBytes::From(*buffer));
  buffer.reset();
  ASSERT_EQ(bytes.spans().size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(bytes.spans()[i].data(),
              reinterpret_cast<const char*>(slices[i].begin()));
    EXPECT_EQ(bytes.spans()[i].size(), slices[i].size());
  }
  slices.clear();  // the RequestBytes references keep the memory alive
  EXPECT_EQ(std::string(bytes.spans()[1].data(), 3), "bbb");
}

// BatchToByteBuffer encodes a GetResponse that protobuf parses back to the
// batch; the large cell is sent from the batch's own memory (a slice starts
// at its address), and the pin lives exactly as long as the buffer.
TEST(BatchToByteBuffer, BorrowsPayloadAndHoldsPin) {
  auto arena = std::make_shared<std::string>(64 << 10, '\0');
  for (size_t i = 0; i < arena->size(); ++i) (*arena)[i] = char(i * 7);
  std::weak_ptr<std::string> watch = arena;

  Batch batch;
  batch.step = 3;
  batch.rows = {5, 1};
  batch.token_counts = {4096, 12288};
  PackedColumn column;
  column.name = "response_ids";
  column.dtype = DType::kInt32;
  column.offsets = {0, 4096, 16384};
  column.segments = {ByteSpan(arena->data(), arena->size())};
  batch.columns.push_back(column);
  batch.pin = arena;
  const char* payload = arena->data();
  const std::string expected = *arena;
  arena.reset();

  auto buffer =
      std::make_unique<grpc::ByteBuffer>(BatchToByteBuffer(std::move(batch)));
  EXPECT_FALSE(watch.expired());  // the slices hold the pin

  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer->Dump(&slices).ok());
  bool borrowed = false;
  for (const grpc::Slice& s : slices) {
    borrowed |= reinterpret_cast<const char*>(s.begin()) == payload;
  }
  EXPECT_TRUE(borrowed) << "no slice points at the batch's payload";

  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Contents(*buffer)));
  EXPECT_EQ(parsed.step(), 3);
  ASSERT_EQ(parsed.rows_size(), 2);
  EXPECT_EQ(parsed.rows(0), 5);
  EXPECT_EQ(parsed.token_counts(1), 12288);
  ASSERT_EQ(parsed.columns_size(), 1);
  EXPECT_EQ(parsed.columns(0).name(), "response_ids");
  EXPECT_EQ(parsed.columns(0).offsets(2), 16384);
  EXPECT_EQ(parsed.columns(0).data(), expected);

  slices.clear();
  buffer.reset();
  EXPECT_TRUE(watch.expired());  // gRPC released every slice
}

// An empty batch (nothing served) encodes to a buffer protobuf reads as the
// timed-out response.
TEST(BatchToByteBuffer, EmptyTimedOutBatch) {
  Batch batch;
  batch.step = -1;
  batch.timed_out = true;
  const grpc::ByteBuffer buffer = BatchToByteBuffer(std::move(batch));
  v1::GetResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Contents(buffer)));
  EXPECT_TRUE(parsed.timed_out());
  EXPECT_EQ(parsed.rows_size(), 0);
}

// BatchToByteBufferParts: whole columns, in order, a part closing once it
// holds part_bytes of data (two 600 kB columns share the first, which also
// holds the batch's fields; a 2 MB column is one alone; the last small one
// ends the stream); the parts parse back to the batch, and the payload is
// still sent from the batch's memory under its pin. An empty batch is one
// part.
TEST(BatchToByteBufferParts, WholeColumnsInOrderUpToThePartSize) {
  auto arena = std::make_shared<std::string>(3'300'000, '\0');
  for (size_t i = 0; i < arena->size(); ++i) (*arena)[i] = char(i * 13);
  std::weak_ptr<std::string> watch = arena;
  Batch batch;
  batch.step = 1;
  batch.rows = {0, 1};
  batch.token_counts = {7, 9};
  const std::vector<std::pair<std::string, size_t>> sizes = {
      {"a", 600'000}, {"b", 600'000}, {"c", 2'000'000}, {"d", 8}};
  size_t at = 0;
  for (const auto& [name, bytes] : sizes) {
    PackedColumn column;
    column.name = name;
    column.dtype = DType::kUint8;
    column.offsets = {0, static_cast<int64_t>(bytes / 2), static_cast<int64_t>(bytes)};
    column.segments = {ByteSpan(arena->data() + at, bytes)};
    batch.columns.push_back(column);
    at += bytes;
  }
  batch.pin = arena;
  const std::string expected = *arena;
  arena.reset();

  std::vector<grpc::ByteBuffer> parts =
      BatchToByteBufferParts(std::move(batch), /*part_bytes=*/1'000'000);
  EXPECT_FALSE(watch.expired());
  ASSERT_EQ(parts.size(), 3u);
  std::vector<v1::GetResponse> parsed(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_TRUE(parsed[i].ParseFromString(Contents(parts[i]))) << "part " << i;
  }
  EXPECT_EQ(parsed[0].step(), 1);
  EXPECT_EQ(parsed[0].token_counts(1), 9);
  const std::vector<std::vector<std::string>> names = {{"a", "b"}, {"c"}, {"d"}};
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::string> got;
    for (const v1::PackedColumn& column : parsed[i].columns()) {
      got.push_back(column.name());
      joined += column.data();
    }
    EXPECT_EQ(got, names[i]) << "part " << i;
    if (i > 0) {
      EXPECT_EQ(parsed[i].rows_size(), 0) << "part " << i;
    }
  }
  EXPECT_EQ(joined, expected.substr(0, at));
  parts.clear();
  EXPECT_TRUE(watch.expired());

  Batch empty;
  empty.step = 4;
  empty.end_of_step = true;
  parts = BatchToByteBufferParts(std::move(empty));
  ASSERT_EQ(parts.size(), 1u);
  v1::GetResponse over;
  ASSERT_TRUE(over.ParseFromString(Contents(parts[0])));
  EXPECT_TRUE(over.end_of_step());
  EXPECT_EQ(over.step(), 4);
}

}  // namespace
}  // namespace tdock::internal
