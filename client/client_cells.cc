// tdock::Client with a controller (docs/scale-out.md): a batch or a
// listing of cell locations read back from the shards holding them, one
// call a shard, all at once (through a shard's shared memory when it
// offers it), and, for a partial Get, narrowed to the rows read.
#include <map>
#include <set>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client_impl.h"
#include "common/cell_location.h"
#include "common/status.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/tdock/v1/bulk.h"
#include "proto/tdock/v1/convert.h"

namespace tdock {
namespace {

// A location column's records, one a row.
std::vector<CellLocation> LocationsOf(const PackedColumn& column) {
  std::vector<CellLocation> out(static_cast<size_t>(column.rows()));
  char record[kCellLocationBytes];
  for (size_t r = 0; r < out.size(); ++r) {
    CopyFromSegments(column.segments, static_cast<int64_t>(r) * kCellLocationBytes,
                     kCellLocationBytes, record);
    out[r] = *DecodeCellLocation(ByteSpan(record, sizeof(record)));
  }
  return out;
}

// The batch without the rows not `kept`, those in its missing_rows: its
// columns' offsets and its per-row fields narrowed, its repeats and
// micro-batches renumbered (a micro-batch may be left empty: every rank keeps
// the same count). Its columns' data already holds only the kept rows.
void Narrow(const std::vector<bool>& kept, ClientBatch& batch) {
  std::vector<int64_t> before(kept.size() + 1);  // old position -> new (or the next kept)
  for (size_t r = 0; r < kept.size(); ++r) before[r + 1] = before[r] + (kept[r] ? 1 : 0);
  auto narrowed = [&kept](auto& values) {
    if (values.size() != kept.size()) return;
    size_t out = 0;
    for (size_t r = 0; r < kept.size(); ++r) {
      if (kept[r]) values[out++] = std::move(values[r]);
    }
    values.resize(out);
  };
  for (size_t r = 0; r < kept.size() && r < batch.rows.size(); ++r) {
    if (!kept[r]) batch.missing_rows.push_back(batch.rows[r]);
  }
  for (PackedColumn& column : batch.columns) {
    std::vector<int64_t> offsets = {0};
    for (size_t r = 0; r < kept.size(); ++r) {
      if (kept[r]) offsets.push_back(offsets.back() + column.length(static_cast<int64_t>(r)));
    }
    column.offsets = std::move(offsets);
  }
  std::vector<int64_t> repeats;
  for (int64_t p : batch.repeats) {
    if (kept[static_cast<size_t>(p)]) repeats.push_back(before[static_cast<size_t>(p)]);
  }
  batch.repeats = std::move(repeats);
  std::vector<int64_t> tokens = batch.token_counts;
  narrowed(batch.rows);
  narrowed(batch.token_counts);
  narrowed(batch.keys);
  narrowed(batch.versions);
  for (MicroBatchInfo& mb : batch.micro_batches) {
    mb.tokens = 0;
    for (int64_t r = mb.begin; r < mb.end; ++r) {
      if (kept[static_cast<size_t>(r)] && !tokens.empty()) mb.tokens += tokens[r];
    }
    mb.begin = before[static_cast<size_t>(mb.begin)];
    mb.end = before[static_cast<size_t>(mb.end)];
    mb.padded_tokens = mb.padded_len * (mb.end - mb.begin);
  }
}

}  // namespace

absl::Status Client::Impl::ReadCells(const std::string& what, const std::string& dock,
                                     ClientBatch& batch, bool partial) {
  // Per column its locations; per shard, per column, the rows it holds.
  std::vector<std::vector<CellLocation>> where;
  std::map<uint64_t, std::vector<std::vector<size_t>>> by_shard;
  for (size_t c = 0; c < batch.columns.size(); ++c) {
    where.push_back(LocationsOf(batch.columns[c]));
    for (size_t r = 0; r < where[c].size(); ++r) {
      auto& positions = by_shard[where[c][r].shard];
      positions.resize(batch.columns.size());
      positions[c].push_back(r);
    }
  }
  TDOCK_ASSIGN_OR_RETURN(Shards shards, ListShards());
  std::map<uint64_t, const Shard*> listed;
  for (bool refreshed : {false, true}) {
    listed.clear();
    for (const auto& shard : shards) listed[shard->id] = shard.get();
    std::vector<uint64_t> missing;
    for (const auto& [id, positions] : by_shard) {
      if (listed.count(id) == 0) missing.push_back(id);
    }
    if (missing.empty()) break;
    if (refreshed) {
      return absl::UnavailableError(absl::StrCat(
          what, ": shards ", absl::StrJoin(missing, ", "),
          " hold cells of this batch but the controller does not list them"));
    }
    TDOCK_ASSIGN_OR_RETURN(shards, ListShards(/*refresh=*/true));
  }
  // Every shard's read at once, on one completion queue; the answers are
  // copied in shard order once all are in.
  struct ShardRead {
    uint64_t id = 0;
    const std::vector<std::vector<size_t>>* positions = nullptr;
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Status failed;  // the read's error, the call's or its session's
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> call;
    internal::ShmShard* shm = nullptr;  // read through the shard's shared memory
    uint64_t session = 0;               // then, in this session
    std::vector<grpc::Slice> slices;  // the answer's bytes, which `got` views
    std::optional<bulk::Decoded<v1::GetResponse>> got;  // the answer, decoded
  };
  grpc::CompletionQueue cq;  // outlives the calls
  std::vector<std::unique_ptr<ShardRead>> reads;
  size_t started = 0;
  absl::Status prepared;
  for (const auto& [id, positions] : by_shard) {
    v1::ReadCellsRequest request;
    request.set_dock(dock);
    for (size_t c = 0; c < batch.columns.size(); ++c) {
      const PackedColumn& column = batch.columns[c];
      v1::PackedColumn* asked = request.add_columns();
      asked->set_name(column.name);
      asked->set_dtype(static_cast<v1::DType>(column.dtype));
      asked->add_offsets(0);
      for (size_t r : positions[c]) {
        asked->add_offsets(asked->offsets(asked->offsets_size() - 1) + column.length(r));
        asked->mutable_data()->append(EncodeCellLocation(where[c][r]));
      }
    }
    auto read = std::make_unique<ShardRead>();
    read->id = id;
    read->positions = &positions;
    ShardRead& at = *reads.emplace_back(std::move(read));
    if (internal::ShmShard* shm = listed[id]->shm.get(); shm != nullptr) {
      absl::StatusOr<uint64_t> session =
          shm->Session(listed[id]->channel, options.token.empty() ? "" : authorization);
      if (!session.ok()) {
        at.failed = absl::Status(session.status().code(),
                                 absl::StrCat("opening a session: ", session.status().message()));
        continue;
      }
      request.set_shm_session(*session);
      at.shm = shm;
      at.session = *session;
    }
    bool own_buffer = false;
    prepared = FromGrpcStatus(grpc::SerializationTraits<v1::ReadCellsRequest>::Serialize(
        request, &at.request, &own_buffer));
    if (!prepared.ok()) break;
    SetDeadline(&at.context);
    at.call = listed[id]->read_stub->PrepareUnaryCall(&at.context, "/tdock.v1.Shard/ReadCells",
                                                     at.request, &cq);
    at.call->StartCall();
    at.call->Finish(&at.response, &at.status, &at);
    ++started;
  }
  // Every call started finishes (an error, at the deadline at the latest).
  void* tag = nullptr;
  bool ok = false;
  for (size_t done = 0; done < started; ++done) cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  // Every answer decoded first (its slices kept by its response), so that
  // the pin of every read over shared memory goes back, whatever happens.
  std::vector<std::pair<internal::ShmShard*, uint64_t>> pinned;  // shard, session
  std::vector<uint64_t> pins;
  std::set<uint64_t> failed;  // shards whose read failed
  for (const std::unique_ptr<ShardRead>& read : reads) {
    if (read->call != nullptr) read->failed = FromGrpcStatus(read->status);
    if (!read->failed.ok()) {
      failed.insert(read->id);
      continue;
    }
    if (!read->response.Dump(&read->slices).ok()) continue;
    std::vector<ByteSpan> spans;
    for (const grpc::Slice& slice : read->slices) {
      spans.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    absl::StatusOr<bulk::Decoded<v1::GetResponse>> got = bulk::DecodeBatch(spans);
    if (!got.ok()) continue;
    if (read->shm != nullptr && got->header.shm_pin() != 0) {
      pinned.push_back({read->shm, read->session});
      pins.push_back(got->header.shm_pin());
    }
    read->got = *std::move(got);
  }
  const absl::Cleanup give_back = [&pinned, &pins] {
    for (size_t i = 0; i < pins.size(); ++i) {
      pinned[i].first->GiveBack(pinned[i].second, {pins[i]});
    }
  };
  TDOCK_RETURN_IF_ERROR(prepared);
  for (const std::unique_ptr<ShardRead>& read : reads) {
    if (read->failed.ok()) continue;
    ForgetShards();  // it may be back at another address
    if (read->shm != nullptr && internal::ShmShard::SessionLost(read->failed)) {
      read->shm->EndSession(read->session);
    }
    if (!partial || failed.size() == reads.size()) {
      return absl::Status(read->failed.code(),
                          absl::StrCat(what, ": reading shard ", read->id, " at ",
                                       listed[read->id]->address, ": ", read->failed.message()));
    }
  }
  // The rows kept: those with every cell on a shard that answered.
  std::vector<bool> kept(where.empty() ? 0 : where.front().size(), true);
  for (const std::vector<CellLocation>& column : where) {
    for (size_t r = 0; r < column.size(); ++r) {
      if (failed.count(column[r].shard) != 0) kept[r] = false;
    }
  }
  // The batch's cells, column after column (each 64-byte aligned, as a
  // standalone server's batch is), each kept row where its items go.
  constexpr int64_t kAlignment = 64;
  std::vector<std::vector<int64_t>> starts(batch.columns.size());
  std::vector<int64_t> column_start(batch.columns.size());
  std::vector<int64_t> column_bytes(batch.columns.size());
  int64_t total = 0;
  for (size_t c = 0; c < where.size(); ++c) {
    total = (total + kAlignment - 1) / kAlignment * kAlignment;
    column_start[c] = total;
    for (size_t r = 0; r < where[c].size(); ++r) {
      starts[c].push_back(total);
      if (kept[r]) total += static_cast<int64_t>(where[c][r].bytes);
    }
    column_bytes[c] = total - column_start[c];
  }
  std::shared_ptr<char> buffer =
      total > 0 ? buffers.Acquire(static_cast<size_t>(total)) : nullptr;
  for (const std::unique_ptr<ShardRead>& read : reads) {
    const uint64_t id = read->id;
    if (failed.count(id) != 0) continue;
    const std::vector<std::vector<size_t>>& positions = *read->positions;
    if (!read->got.has_value() || read->got->columns.size() != batch.columns.size()) {
      return absl::InternalError(absl::StrCat(what, ": malformed answer from shard ", id));
    }
    const bulk::Decoded<v1::GetResponse>* got = &*read->got;
    if (read->shm != nullptr) {
      // Where each cell is: copied out, then the pin goes back.
      for (size_t c = 0; c < batch.columns.size(); ++c) {
        const PackedColumn& records = got->columns[c];
        if (records.data_bytes() != static_cast<int64_t>(positions[c].size()) * 16) {
          return absl::InternalError(absl::StrCat(what, ": shard ", id, " named ",
                                                  records.data_bytes() / 16, " cells of column '",
                                                  batch.columns[c].name, "', ",
                                                  positions[c].size(), " were asked"));
        }
        for (size_t i = 0; i < positions[c].size(); ++i) {
          const size_t r = positions[c][i];
          const size_t size = static_cast<size_t>(where[c][r].bytes);
          if (size == 0 || !kept[r]) continue;
          char record[16];
          CopyFromSegments(records.segments, static_cast<int64_t>(i) * 16, 16, record);
          const absl::Status copied = read->shm->CopyOut(
              absl::little_endian::Load64(record), absl::little_endian::Load64(record + 8), size,
              buffer.get() + starts[c][r]);
          if (!copied.ok()) {
            return absl::Status(copied.code(), absl::StrCat(what, ": reading shard ", id, ": ",
                                                            copied.message()));
          }
        }
      }
      continue;  // its pin goes back with the others
    }
    for (size_t c = 0; c < batch.columns.size(); ++c) {
      int64_t pos = 0;
      const int64_t sent = got->columns[c].data_bytes();
      for (size_t r : positions[c]) {
        const int64_t size = static_cast<int64_t>(where[c][r].bytes);
        if (pos + size > sent) {
          return absl::InternalError(absl::StrCat(what, ": shard ", id, " sent ", sent,
                                                  " bytes of column '", batch.columns[c].name,
                                                  "', fewer than asked"));
        }
        if (kept[r]) {
          CopyFromSegments(got->columns[c].segments, pos, size, buffer.get() + starts[c][r]);
        }
        pos += size;
      }
    }
  }
  for (size_t c = 0; c < batch.columns.size(); ++c) {
    PackedColumn& column = batch.columns[c];
    char* at = buffer == nullptr ? nullptr : buffer.get() + column_start[c];
    column.segments = {ByteSpan(at, static_cast<size_t>(column_bytes[c]))};
  }
  batch.buffer = std::move(buffer);
  batch.cell_locations = false;
  if (!failed.empty()) Narrow(kept, batch);
  return absl::OkStatus();
}

absl::Status Client::Impl::ReadListedCells(const std::string& dock, RowListing& listing) {
  // Per column listed (in order of first appearance), its cells' locations.
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string*>> cells;
  for (RowState& row : listing.rows) {
    for (auto& [column, bytes] : row.cells) {
      auto [it, added] = cells.try_emplace(column);
      if (added) names.push_back(column);
      it->second.push_back(&bytes);
    }
  }
  if (names.empty()) return absl::OkStatus();
  ClientBatch batch;
  std::vector<std::string> records(names.size());
  std::vector<std::vector<int64_t>> sizes(names.size());
  for (size_t c = 0; c < names.size(); ++c) {
    PackedColumn& column = batch.columns.emplace_back();
    column.name = names[c];
    column.offsets = {0};
    for (const std::string* record : cells[names[c]]) {
      TDOCK_ASSIGN_OR_RETURN(const CellLocation where, DecodeCellLocation(*record));
      sizes[c].push_back(static_cast<int64_t>(where.bytes));
      column.offsets.push_back(column.offsets.back() + static_cast<int64_t>(where.bytes));
      records[c] += *record;
    }
    column.segments = {ByteSpan(records[c])};
  }
  TDOCK_RETURN_IF_ERROR(ReadCells(absl::StrCat("ListRows on dock '", dock, "'"), dock, batch));
  for (size_t c = 0; c < names.size(); ++c) {
    const ByteSpan bytes = batch.columns[c].segments.front();
    int64_t at = 0;
    std::vector<std::string*>& held = cells[names[c]];
    for (size_t r = 0; r < held.size(); ++r) {
      held[r]->assign(bytes.data() + at, static_cast<size_t>(sizes[c][r]));
      at += sizes[c][r];
    }
  }
  return absl::OkStatus();
}

}  // namespace tdock