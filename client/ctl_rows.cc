// tdockctl rows: a live step's rows as JSON and as text.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ctl_output.h"

namespace tdock::ctl {

Json RowsToJson(const RowListing& listing) {
  Json rows = Json::array();
  for (const RowState& row : listing.rows) {
    rows.push_back({{"row", row.row},
                    {"key", row.key.empty() ? Json(nullptr) : Json(row.key)},
                    {"group", row.group},
                    {"version", row.version < 0 ? Json(nullptr) : Json(row.version)},
                    {"written", row.written},
                    {"taken", row.taken},
                    {"dropped", row.dropped == DropReason::kUnspecified
                                    ? Json(nullptr)
                                    : Json(std::string(DropReasonName(row.dropped)))}});
  }
  return {{"step", listing.step}, {"sealed", listing.sealed}, {"rows", std::move(rows)}};
}

std::string RowsToText(const RowListing& listing) {
  std::string text = absl::StrCat("step ", listing.step, listing.sealed ? " (sealed)" : "",
                                  ": ", listing.rows.size(), " rows\n");
  absl::StrAppendFormat(&text, "  %5s  %-24s %5s %7s  %-24s %s\n", "row", "key", "group",
                        "version", "written", "taken / dropped");
  for (const RowState& row : listing.rows) {
    const std::string state = row.dropped != DropReason::kUnspecified
                                  ? absl::StrCat("dropped (", DropReasonName(row.dropped), ")")
                                  : absl::StrJoin(row.taken, ",");
    absl::StrAppendFormat(&text, "  %5d  %-24s %5d %7s  %-24s %s\n", row.row,
                          row.key.empty() ? "-" : row.key, row.group,
                          row.version < 0 ? "-" : absl::StrCat(row.version),
                          row.written.empty() ? "-" : absl::StrJoin(row.written, ","),
                          state.empty() ? "-" : state);
  }
  return text;
}

}  // namespace tdock::ctl
