// `tdockctl balance`: the balance planner of common/balance without a server,
// to see what settings would do before a training run. Reads one JSON request
// per line and answers each with one JSON line:
//
//   {"op":"partition","lengths":[...],"k":8,"equal_size":true,"group_size":1,
//    "cost":{"a":1,"b":0},"algorithm":"auto|kk|greedy"}
//     -> {"partitions":[[i,...],...],"costs":[...],"max_over_mean":x,
//         "time_us":t}
//   {"op":"micro_batches","lengths":[...],"max_tokens":2000,"max_rows":0,
//    "round_to":1,"count_multiple":1,"min_count":0,"padded":false,
//    "planner":"balanced|packed","order":"heavy_first|smallest_at_ends",
//    "cost":{"a":1,"b":0}}
//     -> {"micro_batches":[{"rows":[...],"padded_len":L,"tokens":T,
//         "padded_tokens":P}],"time_us":t}
//   {"op":"dispatch","lengths":[...],"dp_size":2,"group_size":1,
//    "cost":{...},"algorithm":"auto","micro_batch":{"max_tokens":...,
//    ...the micro_batches keys..., "same_count_across_ranks":true}}
//     -> {"ranks":[{"rows":[...],"tokens":T,"cost":C,"micro_batches":[...]}],
//         "stats":{...},"time_us":t}
//
// Only "op", "lengths" and "k" / "max_tokens" / "dp_size" are required; the
// other keys take the defaults shown. Row indices are positions in
// "lengths". A bad request is answered {"error":"line N: ..."} naming the key
// at fault, and the next line is read as usual; blank lines are skipped.
// "time_us" is the planner's own time, parsing and printing excluded.
//
// Thread safety: the functions share no state.
#ifndef TDOCK_CLIENT_CTL_BALANCE_H_
#define TDOCK_CLIENT_CTL_BALANCE_H_

#include <cstdint>
#include <istream>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/ctl_values.h"

namespace tdock::ctl {

// Plans one request line; INVALID_ARGUMENT naming the op and key at fault.
absl::StatusOr<Json> PlanBalanceRequest(absl::string_view line);

// Answers every non-blank line of `in` on `out`, one line each, flushed as
// it is written. Returns the number of requests that failed.
int64_t RunBalance(std::istream& in, std::ostream& out);

}  // namespace tdock::ctl

#endif  // TDOCK_CLIENT_CTL_BALANCE_H_
