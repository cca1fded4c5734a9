// What tdockctl prints: each result as a JSON object (for --json) and as text
// for people. Specs print in the shape of the YAML spec files (columns and
// consumers keyed by name, in spec order).
#ifndef TDOCK_CLIENT_CTL_OUTPUT_H_
#define TDOCK_CLIENT_CTL_OUTPUT_H_

#include <string>
#include <vector>

#include "client/client.h"
#include "client/ctl_values.h"
#include "common/spec.h"

namespace tdock::ctl {

Json SpecToJson(const DockSpec& spec);
Json DocksToJson(const std::vector<DockSummaryInfo>& docks);
Json StatusToJson(const DockStatusInfo& status);
// {step, rows, token_counts, end_of_step, timed_out, round, micro_batches:
// [{begin, end, rows, padded_len, tokens, padded_tokens}], balance (null when
// absent), columns: {name: rows}}.
Json BatchToJson(const ClientBatch& batch);
// {rank_cost, rank_tokens, micro_batch_cost, micro_batch_tokens: {min, max,
// mean, max_over_mean}, micro_batches, tokens, padded_tokens, padding_ratio}.
Json BalanceToJson(const BalanceStats& stats);

std::string SpecToText(const DockSpec& spec);
std::string DocksToText(const std::vector<DockSummaryInfo>& docks);
std::string StatusToText(const DockStatusInfo& status);
std::string BatchToText(const ClientBatch& batch);
// A step's rows (ctl_rows.cc).
Json RowsToJson(const RowListing& listing);
std::string RowsToText(const RowListing& listing);

// Serializes without throwing: invalid UTF-8 (from bytes columns) is
// replaced by U+FFFD.
std::string Dump(const Json& json);

}  // namespace tdock::ctl

#endif  // TDOCK_CLIENT_CTL_OUTPUT_H_
