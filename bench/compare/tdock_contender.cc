// The tdock contender: tdock::Client against a tdock-server.
//
// One dock per workload whose step holds every row (num_prompts = rows,
// n_samples_per_prompt 1, steps_in_flight 2), one float32 column per workload
// column and one FIFO consumer of all columns with dispatch_size = chunk rows.
// A Put pass writes a fresh step in chunks (all columns per Put, borrowed
// from the workload's buffers with ClientColumn::View); a Get pass takes that
// step chunk by chunk (Get with step and count = chunk rows); the last Get
// ends the step for the only consumer and the server releases it.
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/compare/contender.h"
#include "client/client.h"
#include "common/status.h"

namespace tdock::compare {
namespace {

constexpr char kConsumer[] = "reader";

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

class TdockContender final : public Contender {
 public:
  explicit TdockContender(std::unique_ptr<Client> client)
      : client_(std::move(client)) {}

  std::string name() const override { return "tdock"; }

  absl::Status Prepare(const Workload& workload) override {
    workload_ = &workload;
    const Shape& shape = workload.shape();
    dock_ = absl::StrCat("compare-cpp-", shape.name);
    (void)client_->DeleteDock(dock_);  // a leftover of an interrupted run
    TDOCK_RETURN_IF_ERROR(client_->CreateDock(Spec()).status());
    puts_.clear();
    for (const Chunk& chunk : workload.chunks()) {
      ClientPut put;
      put.dock = dock_;
      for (int64_t r = chunk.begin; r < chunk.end; ++r) put.rows.push_back(r);
      std::vector<int64_t> offsets(chunk.rows() + 1);
      for (int64_t i = 0; i <= chunk.rows(); ++i) offsets[i] = i * shape.elements;
      for (int64_t c = 0; c < shape.columns; ++c) {
        put.columns.push_back(ClientColumn::View(Workload::ColumnName(c),
                                                 DType::kFloat32, offsets,
                                                 workload.Rows(c, chunk.begin, chunk.end)));
      }
      puts_.push_back(std::move(put));
    }
    return absl::OkStatus();
  }

  absl::Status Verify() override {
    TDOCK_RETURN_IF_ERROR(PutPass());
    return GetPass(/*check=*/true);
  }

  absl::StatusOr<double> TimePut() override {
    const auto start = std::chrono::steady_clock::now();
    TDOCK_RETURN_IF_ERROR(PutPass());
    return Since(start);
  }

  absl::StatusOr<double> TimeGet() override {
    const auto start = std::chrono::steady_clock::now();
    TDOCK_RETURN_IF_ERROR(GetPass(/*check=*/false));
    return Since(start);
  }

  absl::Status Finish() override { return client_->DeleteDock(dock_); }

 private:
  DockSpec Spec() const {
    const Shape& shape = workload_->shape();
    DockSpec spec;
    spec.name = dock_;
    spec.num_prompts = shape.rows;
    spec.n_samples_per_prompt = 1;
    spec.steps_in_flight = 2;
    ConsumerSpec consumer;
    consumer.name = kConsumer;
    consumer.dispatch_size = workload_->chunks().front().rows();
    for (int64_t c = 0; c < shape.columns; ++c) {
      ColumnSpec column;
      column.name = Workload::ColumnName(c);
      column.dtype = DType::kFloat32;
      spec.columns.push_back(column);
      consumer.columns.push_back(column.name);
    }
    spec.consumers.push_back(consumer);
    // One step's payload warmed up front, so steady state writes warm pages.
    spec.preallocate_bytes = shape.pass_bytes() + 4 * DockSpec::kDefaultChunkBytes;
    return spec;
  }

  absl::Status PutPass() {
    step_ = next_step_++;
    for (ClientPut& put : puts_) {
      put.step = step_;
      TDOCK_ASSIGN_OR_RETURN(PutAck ack, client_->Put(put));
      if (ack.rows != static_cast<int64_t>(put.rows.size())) {
        return absl::InternalError(
            absl::StrCat("tdock Put wrote ", ack.rows, " of ", put.rows.size(), " rows"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status GetPass(bool check) {
    ClientGet get{.dock = dock_, .consumer = kConsumer, .step = step_};
    bool ended = false;
    for (const Chunk& chunk : workload_->chunks()) {
      get.count = chunk.rows();
      TDOCK_ASSIGN_OR_RETURN(ClientBatch batch, client_->Get(get));
      if (static_cast<int64_t>(batch.rows.size()) != chunk.rows()) {
        return absl::InternalError(absl::StrCat("tdock Get of step ", step_, " returned ",
                                                batch.rows.size(), " rows, expected ",
                                                chunk.rows()));
      }
      if (check) TDOCK_RETURN_IF_ERROR(Check(batch, chunk));
      ended = batch.end_of_step;
    }
    // The last Get ends the step for the only consumer, which releases it.
    return ended ? absl::OkStatus() : client_->ReleaseStep(dock_, step_);
  }

  absl::Status Check(const ClientBatch& batch, const Chunk& chunk) const {
    for (int64_t i = 0; i < chunk.rows(); ++i) {
      if (batch.rows[i] != chunk.begin + i) {
        return absl::InternalError(absl::StrCat("tdock Get: row ", batch.rows[i],
                                                " where ", chunk.begin + i, " was expected"));
      }
    }
    for (int64_t c = 0; c < workload_->shape().columns; ++c) {
      const PackedColumn* column = batch.column(Workload::ColumnName(c));
      const ByteSpan expected = workload_->Rows(c, chunk.begin, chunk.end);
      if (column == nullptr || column->segments.size() != 1 ||
          column->segments[0].size() != expected.size() ||
          std::memcmp(column->segments[0].data(), expected.data(), expected.size()) != 0) {
        return absl::InternalError(absl::StrCat("tdock Get: column ", c, " of rows [",
                                                chunk.begin, ", ", chunk.end,
                                                ") differs from what was Put"));
      }
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Client> client_;
  const Workload* workload_ = nullptr;
  std::string dock_;
  std::vector<ClientPut> puts_;
  int64_t next_step_ = 0;
  int64_t step_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Contender>> MakeTdockContender(
    const std::string& address) {
  ClientOptions options;
  options.address = address;
  options.timeout = absl::Seconds(120);
  TDOCK_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  TDOCK_RETURN_IF_ERROR(client->Health());
  return std::make_unique<TdockContender>(std::move(client));
}

}  // namespace tdock::compare
