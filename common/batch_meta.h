// What a batch says about its rows besides their columns: the step, the rows
// and their token counts, how the hand-out ended, the round, the micro-batch
// plan, the balance statistics and the lease. Declared once and used by every
// layer: the core fills it (server/dock/types.h: Batch), the journal records
// its plan, the wire carries it (proto/tdock/v1/convert.h: one conversion each
// way), and the C++ client and tdockctl hand it to users (client/client.h:
// ClientBatch).
//
//   const BatchMeta& meta = batch;
//   for (const MicroBatchInfo& mb : meta.micro_batches) {
//     absl::Span<const int64_t> rows =
//         absl::MakeConstSpan(meta.rows).subspan(mb.begin, mb.end - mb.begin);
//   }
#ifndef TDOCK_COMMON_BATCH_META_H_
#define TDOCK_COMMON_BATCH_META_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/balance/stats.h"

namespace tdock {

// One micro-batch of a batch: rows [begin, end) of BatchMeta::rows.
struct MicroBatchInfo {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t padded_len = 0;     // longest row rounded up to round_to
  int64_t tokens = 0;         // real tokens
  int64_t padded_tokens = 0;  // tokens as the budget counts them

  bool operator==(const MicroBatchInfo&) const = default;
};

// A row without a policy version (none of its writes carried one).
inline constexpr int64_t kNoVersion = -1;

struct BatchMeta {
  int64_t step = -1;
  std::vector<int64_t> rows;
  std::vector<int64_t> token_counts;  // per row: sum of length_columns' lengths
  bool end_of_step = false;           // the consumer has now taken every row
  bool timed_out = false;             // nothing could be served in time
  // BALANCED consumers: the round this batch is this rank's share of; -1
  // otherwise.
  int64_t round = -1;
  // Consumers with a micro_batch plan: the micro-batches, in order; rows are
  // ordered so each micro-batch is contiguous. Empty otherwise.
  std::vector<MicroBatchInfo> micro_batches;
  // Balance statistics of the round (BALANCED) or of this batch's
  // micro-batches; nullopt when there is nothing to report.
  std::optional<BalanceStats> balance;
  // Consumers with leases: the lease over these rows (0: none) and how long
  // it runs from the hand-out. Acknowledge it in time, or the rows are handed
  // out again.
  uint64_t lease_id = 0;
  absl::Duration lease = absl::ZeroDuration();
  // The rows' keys, in row order ("" for a row without one); empty when no
  // row of the batch has a key.
  std::vector<std::string> keys;
  // The rows' policy versions, in row order (kNoVersion for a row without
  // one); empty when no row of the batch has a version.
  std::vector<int64_t> versions;
  // BALANCED consumers with pad: repeat: the positions in `rows` (ascending)
  // that repeat a row of the round to fill this share; mask them out of the
  // loss. Empty otherwise.
  std::vector<int64_t> repeats;
  // The columns carry cell locations (common/cell_location.h), one a row,
  // not the items: a controller's batch, whose cells are on the shards.
  bool cell_locations = false;

  bool operator==(const BatchMeta&) const = default;
};

}  // namespace tdock

#endif  // TDOCK_COMMON_BATCH_META_H_
