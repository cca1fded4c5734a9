// tdock::Client: the C++ client of a tdock server, over one gRPC channel.
//
//   TDOCK_ASSIGN_OR_RETURN(auto client,
//                          tdock::Client::Connect({.address = "127.0.0.1:50051"}));
//   TDOCK_RETURN_IF_ERROR(client->CreateDock(spec).status());
//   tdock::ClientPut put{.dock = "grpo", .step = 0, .rows = {0, 1}};
//   put.columns.push_back(tdock::ClientColumn::FromRows<int32_t>(
//       "prompt_ids", tdock::DType::kInt32, {{1, 2}, {3}}));
//   TDOCK_RETURN_IF_ERROR(client->Put(put).status());
//   TDOCK_ASSIGN_OR_RETURN(
//       tdock::ClientBatch batch,
//       client->Get({.dock = "grpo", .consumer = "actor", .wait = absl::Seconds(5)}));
//
// Thread safety: a Client may be shared by threads; every call is independent.
// Every call takes a deadline (options.timeout; a Put's, Get's or Sample's
// deadline is its wait bound plus options.timeout) and returns the server's
// status, code and message unchanged; a call the dock refused for a reason a
// caller acts on (a row dropped, a step sealed or released, a lease ended,
// a limit) carries it: tdock::RefusalOf(status) (common/refusal.h).
// Put sends column data without copying it into a protobuf message (the
// payload goes out as slices borrowed from the caller); Get and Read copy the
// received payload once, into one buffer owned by the returned batch in which
// every column is contiguous and 64-byte aligned.
#ifndef TDOCK_CLIENT_CLIENT_H_
#define TDOCK_CLIENT_CLIENT_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/batch_meta.h"
#include "common/row_state.h"
#include "common/drop.h"
#include "common/refusal.h"
#include "common/dtype.h"
#include "common/packed.h"
#include "common/spec.h"

namespace tdock::v1 {
class ReadRequest;
}  // namespace tdock::v1

namespace tdock {

// TLS to the server. With `enabled`, the server's certificate must be signed
// by `ca_file` (default: the system's roots); cert_file + key_file present a
// client certificate (mutual TLS).
struct ClientTls {
  bool enabled = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Name checked against the server's certificate instead of the address's
  // host (e.g. a test certificate issued for "localhost").
  std::string server_name;
};

struct ClientOptions {
  std::string address = "127.0.0.1:50051";
  // Bearer token sent with every call (authorization: Bearer <token>).
  // Empty: the TDOCK_TOKEN environment variable, if set.
  std::string token;
  ClientTls tls;
  // Deadline of each call (added to a Get's wait). Default: 30 s.
  absl::Duration timeout = absl::Seconds(30);
  // Largest message sent or received. Default: 1 GiB.
  int64_t max_message_bytes = int64_t{1} << 30;
  // How long one connection attempt may take (gRPC's minimum reconnect
  // backoff): a busy host may not run the server, or this process, for
  // seconds. A refused attempt (no server) still fails at once. Default: 20 s.
  absl::Duration connect_timeout = absl::Seconds(20);
  // A client whose server went away tries to connect again at least this
  // often (its backoff grows to this). Each Client has its own connection:
  // a new one never waits out another's backoff. Default: 0.5 s.
  absl::Duration max_reconnect_backoff = absl::Milliseconds(500);
  // How data moves with a controller's shards (docs/scale-out.md, "Same-host
  // shared memory"): "auto" (shared memory with each shard on this host
  // started with --shm_dir, gRPC with the others), "grpc", or "shm" (every
  // shard must share this host's memory: FAILED_PRECONDITION otherwise,
  // before anything is sent). Empty: TDOCK_TRANSPORT, else "auto".
  std::string transport;
};

// One column of a Put, owning its packed bytes (or borrowing them: see View).
struct ClientColumn {
  std::string name;
  DType dtype = DType::kUnspecified;
  std::vector<int64_t> offsets;  // rows + 1 item offsets
  std::string owned;             // payload when the column owns it
  bool borrows = false;          // true: payload is `borrowed`, not `owned`
  ByteSpan borrowed;

  // The payload sent.
  ByteSpan bytes() const {
    return borrows ? borrowed : ByteSpan(owned.data(), owned.size());
  }

  // Packs rows of T into an owning column.
  template <typename T>
  static ClientColumn FromRows(std::string name, DType dtype,
                               const std::vector<std::vector<T>>& rows);
  // Borrows caller-owned packed data (must outlive the Put call).
  static ClientColumn View(std::string name, DType dtype,
                           std::vector<int64_t> offsets, ByteSpan data);
};

struct ClientPut {
  std::string dock;
  int64_t step = 0;
  std::vector<int64_t> rows;
  std::vector<ClientColumn> columns;
  absl::Duration wait = absl::Seconds(30);  // server-side backpressure bound
  // Non-zero: the lease (ClientBatch::lease_id) this Put acknowledges once
  // written; a lease not in flight fails the Put and nothing is written.
  uint64_t ack_lease = 0;
  // Empty, or one per row: the rows' keys (a row's key comes with its first
  // write). With `rows` empty, the rows are those that have these keys (or,
  // keys no live row has, new rows).
  std::vector<std::string> keys;
  // With `rows` empty: the server assigns this many new rows (whole groups);
  // PutAck::assigned lists them.
  int64_t new_rows = 0;
  // With rows the server assigns: the sizes of the groups they open, in
  // order, each at most n, adding up to them; a group's rows past its size
  // are closed (dropped as "unused"). Empty: groups of n.
  std::vector<int32_t> group_sizes;
  // Empty, one for every row, or one per row: the policy version (>= 0)
  // the rows were generated with (a row keeps the oldest it was given).
  std::vector<int64_t> versions;
  // Non-zero: the reservation (Client::Reserve) whose rows this Put writes,
  // at its step; with `rows` empty, all of them.
  uint64_t reservation = 0;
  // Docks with add_columns_on_write: definitions of columns this Put
  // writes that the dock may lack (each names one of `columns`); a column it
  // lacks is added first, from its definition here or else its name and
  // dtype.
  std::vector<ColumnSpec> new_columns;
  // Non-zero: an id for this Put chosen by the writer (a random 64-bit
  // number). A Put sent again with the id of one the dock stored, its step
  // still live, writes nothing and gets that Put's PutAck with `replayed`
  // set: send a Put again with the same put_id when its answer was lost
  // (UNAVAILABLE, DEADLINE_EXCEEDED); ABORTED means the first is still being
  // stored: ask again.
  uint64_t put_id = 0;
  // Through a controller: empty, the client places the Put (its node's
  // shard, else one by a hash); else the address of the listed shard it goes
  // to, whose shared memory (ListShards' shm_prefix; empty: none) is
  // `shard_shm_prefix`. The listing is asked again when no shard it lists is
  // both, and the Put is UNAVAILABLE (the caller's listing is stale) when
  // none is then.
  std::string shard_address;
  std::string shard_shm_prefix;
};

// Rows asked for before generating (Client::Reserve): `rows`, or groups of
// `group_sizes`, for data generated with policy `version` (unset: the
// dock's version when granted).
struct ClientReserve {
  std::string dock;
  std::optional<int64_t> version;
  int64_t rows = 0;
  std::vector<int32_t> group_sizes;
  absl::Duration deadline = absl::Minutes(10);  // unwritten rows are dropped then
  absl::Duration wait = absl::Seconds(30);      // for admission
};

struct ClientReservation {
  uint64_t id = 0;
  int64_t step = 0;
  std::vector<int64_t> rows;
  int64_t version = 0;
  absl::Time deadline;
  bool timed_out = false;  // not admitted within the wait: nothing reserved
};

// A lease in flight (Client::ListLeases).
struct ClientLease {
  uint64_t lease_id = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int64_t round = -1;  // BALANCED: the round of the rank's share
  int64_t rows = 0;
  // Until it expires (zero: due now; InfiniteDuration: its hand-out is being
  // recorded, the lease has not started to run).
  absl::Duration expires_in;
};

// What Client::NackAll handed back.
struct ClientNackAll {
  int64_t leases = 0;
  int64_t rows = 0;
};

struct ClientGet {
  std::string dock;
  std::string consumer;
  int32_t rank = 0;
  std::optional<int64_t> step;
  int64_t count = 0;
  absl::Duration wait = absl::Seconds(30);
  // BALANCED consumers: the round to serve again (the same rows as before);
  // nullopt: this rank's next round.
  std::optional<int64_t> round;
  // Consumers with `replicas`: which replica of the rank asks.
  int32_t replica = 0;
  // Through a controller: rows handed out whose cells cannot be read (a
  // shard away or gone) fail the Get (DATA_LOSS naming them; with a lease,
  // the lease is handed back and it is UNAVAILABLE). With `partial`, the
  // batch comes without them when any shard holding its cells answered; they
  // are in its missing_rows, and still under its lease, if any
  // (acknowledging it completes them too).
  bool partial = false;
};

// A batch as received. Each column's data is one contiguous, 64-byte aligned
// segment (columns[i].segments.size() == 1) in memory that `buffer` keeps
// alive (one buffer, or for a Get received in parts one per part); copies of
// a batch share it, so spans stay valid while any copy lives.
// Its metadata (common/batch_meta.h: rows, token counts, round, micro-batch
// plan, balance statistics, lease) and its columns.
struct ClientBatch : BatchMeta {
  std::vector<PackedColumn> columns;
  std::shared_ptr<const char> buffer;
  // A Get with `partial`: the rows handed out that the batch lacks, their
  // cells unreadable (in `rows` order); empty otherwise.
  std::vector<int64_t> missing_rows;

  const PackedColumn* column(std::string_view name) const;
  // Row i of a column as typed values (copied; every element of every item
  // of the row). REQUIRES: T matches dtype.
  template <typename T>
  std::vector<T> Row(const PackedColumn& column, int64_t i) const;
  // All rows' elements of a column, without copying (see offsets for rows).
  // REQUIRES: T matches dtype; the column belongs to this batch.
  template <typename T>
  absl::Span<const T> Values(const PackedColumn& column) const;
};

struct StepStatusInfo {
  int64_t step = 0;
  int32_t partition = 0;
  std::vector<std::pair<std::string, int64_t>> ready;     // column -> rows
  std::vector<std::pair<std::string, int64_t>> consumed;  // consumer -> rows
  bool sealed = false;
  std::vector<std::pair<DropReason, int64_t>> dropped;  // rows per reason (those with any)
};

// Per consumer with leases: in flight now, and since the dock was created.
struct ConsumerLeaseInfo {
  std::string consumer;
  int64_t leases_in_flight = 0;
  int64_t rows_in_flight = 0;
  int64_t expiries = 0;
  int64_t nacks = 0;
  int64_t rows_returned = 0;  // rows handed back by expiries and Nacks
};

// Per consumer, since the dock was created: how stale the rows handed out
// were (rows with a version), and the rows its max_staleness passed over or
// dropped.
struct ConsumerStalenessInfo {
  std::string consumer;
  int64_t versioned_rows = 0;
  int64_t staleness_sum = 0;
  std::vector<std::pair<int64_t, int64_t>> buckets;  // (max staleness, rows); -1: above all
  int64_t stale_rows = 0;
};

struct DockStatusInfo {
  DockSpec spec;
  std::vector<StepStatusInfo> steps;
  std::vector<std::pair<std::string, int64_t>> waiters;  // consumer -> parked
  std::vector<ConsumerLeaseInfo> leases;  // consumers with lease_ms > 0
  std::vector<ConsumerStalenessInfo> staleness;  // every consumer
  int64_t reservations_live = 0;    // granted, not past their deadline
  int64_t reservations_parked = 0;  // waiting for admission
  int64_t admission_waits = 0;      // since creation: granted after waiting
  double admission_wait_seconds = 0;
  int64_t arena_bytes_used = 0;
  int64_t arena_bytes_reserved = 0;
  int64_t memory_limit_bytes = 0;
  int64_t parked_puts = 0;
  // Rows dropped since the dock was created, per reason (those with any).
  std::vector<std::pair<DropReason, int64_t>> dropped_total;
  int64_t version = 0;  // the dock's current policy version
};

// A shard of a controller (docs/scale-out.md).
struct ShardInfo {
  uint64_t id = 0;
  std::string address;
  std::string node;
  // Not heard from by the controller lately: its rows are not handed out.
  bool away = false;
  // As it last said: the bytes its cells take, its limit (0: none).
  int64_t memory_bytes = 0;
  int64_t memory_limit_bytes = 0;
  // Changes when it restarts without its cells (a data dir keeps it).
  uint32_t incarnation = 0;
};

struct DockSummaryInfo {
  std::string name;
  int64_t rows_per_step = 0;
  int32_t steps_in_flight = 0;
  std::vector<int64_t> live_steps;
};

struct PutAck {
  int64_t rows = 0;
  int64_t bytes = 0;
  std::vector<int64_t> assigned;  // the rows the server assigned (new_rows)
  bool replayed = false;  // an earlier Put's answer (same put_id): nothing written
};

class Client final {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  absl::StatusOr<DockSpec> CreateDock(const DockSpec& spec);
  absl::Status DeleteDock(const std::string& dock);
  absl::StatusOr<std::vector<DockSummaryInfo>> ListDocks();
  // A controller's shards; UNIMPLEMENTED from a standalone server.
  absl::StatusOr<std::vector<ShardInfo>> ListShards();
  absl::StatusOr<DockStatusInfo> GetDockStatus(const std::string& dock);
  absl::StatusOr<ConsumerSpec> AddConsumer(const std::string& dock,
                                           const ConsumerSpec& consumer);
  // A column added to a live dock (no cell written yet); Puts may write it.
  absl::StatusOr<ColumnSpec> AddColumn(const std::string& dock, const ColumnSpec& column);
  // The consumer's Gets and Acks fail from then on and it holds no step; it
  // stays in the spec marked removed. Returns its spec.
  absl::StatusOr<ConsumerSpec> RemoveConsumer(const std::string& dock,
                                              const std::string& consumer);
  absl::Status ReleaseStep(const std::string& dock, int64_t step);
  // Sets the dock's policy version (it only advances); answers the version.
  absl::StatusOr<int64_t> SetVersion(const std::string& dock, int64_t version);
  // Admission before generation: rows of the oldest step that can train data
  // of `version` within the consumers' staleness bounds, waiting for one up
  // to `wait` (Dock::Reserve).
  absl::StatusOr<ClientReservation> Reserve(const ClientReserve& reserve);
  // Takes rows (and every row of `groups`) out of a live step for `reason`;
  // returns how many this call dropped (Dock::Drop). Empty `rows` and `groups`
  // drop nothing: 0, without a call (a bad step or reason is still refused).
  absl::StatusOr<int64_t> Drop(const std::string& dock, int64_t step,
                               const std::vector<int64_t>& rows,
                               const std::vector<int64_t>& groups, DropReason reason);
  // Closes a live step to new rows, dropping those that lack a cell of a
  // required column (none: those with no cell); returns how many it dropped.
  absl::StatusOr<int64_t> Seal(const std::string& dock, int64_t step,
                               const std::vector<std::string>& required_columns = {});

  absl::StatusOr<PutAck> Put(const ClientPut& put);
  absl::StatusOr<ClientBatch> Get(const ClientGet& get);
  // Like Get, without payload (columns empty).
  absl::StatusOr<ClientBatch> Sample(const ClientGet& get);
  // Consumers with leases: completes (Ack) or hands back at once (Nack) a
  // batch's lease; returns the rows it covered.
  absl::StatusOr<int64_t> Ack(const std::string& dock, const std::string& consumer,
                              uint64_t lease_id);
  absl::StatusOr<int64_t> Nack(const std::string& dock, const std::string& consumer,
                               uint64_t lease_id);
  // The consumer's leases in flight, oldest first (a job resuming after its
  // workers died), and every one of them (of rank `rank` if set) handed back
  // at once, each recorded as a Nack.
  absl::StatusOr<std::vector<ClientLease>> ListLeases(const std::string& dock,
                                                      const std::string& consumer);
  absl::StatusOr<ClientNackAll> NackAll(const std::string& dock, const std::string& consumer,
                                        std::optional<int32_t> rank = std::nullopt);
  absl::StatusOr<ClientBatch> Read(const std::string& dock, int64_t step,
                                   const std::vector<int64_t>& rows,
                                   const std::vector<std::string>& columns);
  // The rows that have `keys` (all in one step), in that order.
  absl::StatusOr<ClientBatch> ReadKeys(const std::string& dock,
                                       const std::vector<std::string>& keys,
                                       const std::vector<std::string>& columns);
  // A live step's rows without payload: key, group, columns written,
  // consumers that have taken it, drop reason; and each row's written cells
  // of `columns` (RowState::cells: small cells, such as per-row tags).
  absl::StatusOr<RowListing> ListRows(const std::string& dock, int64_t step,
                                      const std::vector<std::string>& columns = {});
  // An atomic copy of the server's store (--data_dir) in `dir` on the
  // server's machine (which must not exist yet).
  absl::Status Checkpoint(const std::string& dir);
  // The standard gRPC health service: OK when the server is SERVING.
  absl::Status Health();

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // Read and ReadKeys: sends `request` with `columns`; `what` names it in
  // errors.
  absl::StatusOr<ClientBatch> DoRead(v1::ReadRequest& request,
                                     const std::vector<std::string>& columns,
                                     const std::string& what);
  std::unique_ptr<Impl> impl_;
};

// ---- template definitions ----

template <typename T>
ClientColumn ClientColumn::FromRows(std::string name, DType dtype,
                                    const std::vector<std::vector<T>>& rows) {
  ClientColumn column;
  column.name = std::move(name);
  column.dtype = dtype;
  column.offsets.reserve(rows.size() + 1);
  column.offsets.push_back(0);
  size_t items = 0;
  for (const auto& row : rows) {
    items += row.size();
    column.offsets.push_back(static_cast<int64_t>(items));
  }
  column.owned.resize(items * sizeof(T));
  char* out = column.owned.data();
  for (const auto& row : rows) {
    if (!row.empty()) std::memcpy(out, row.data(), row.size() * sizeof(T));
    out += row.size() * sizeof(T);
  }
  return column;
}

template <typename T>
std::vector<T> ClientBatch::Row(const PackedColumn& column, int64_t i) const {
  // An item may hold several elements (inner shape): derive its size.
  const int64_t items = column.offsets.empty() ? 0 : column.offsets.back();
  const int64_t item_bytes = items > 0 ? column.data_bytes() / items : 0;
  const int64_t begin = column.offsets[i] * item_bytes;
  const int64_t len = column.length(i) * item_bytes;
  std::vector<T> out(static_cast<size_t>(len) / sizeof(T));
  if (len > 0) {
    CopyFromSegments(column.segments, begin, len,
                     reinterpret_cast<char*>(out.data()));
  }
  return out;
}

template <typename T>
absl::Span<const T> ClientBatch::Values(const PackedColumn& column) const {
  if (column.segments.empty()) return {};
  const ByteSpan data = column.segments.front();
  return absl::Span<const T>(reinterpret_cast<const T*>(data.data()),
                             data.size() / sizeof(T));
}

}  // namespace tdock

#endif  // TDOCK_CLIENT_CLIENT_H_
