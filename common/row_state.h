// What a listing of a live step's rows says of each row (Dock::ListRows,
// the ListRows RPC, tdockctl rows): its key, group and state, without payload
// but for the cells of the columns the listing names.
#ifndef TDOCK_COMMON_ROW_STATE_H_
#define TDOCK_COMMON_ROW_STATE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/drop.h"

namespace tdock {

struct RowState {
  int64_t row = 0;
  std::string key;                   // "" for none
  int64_t group = 0;
  std::vector<std::string> written;  // columns with a cell
  std::vector<std::string> taken;    // consumers that have taken it
  DropReason dropped = DropReason::kUnspecified;  // kUnspecified: not dropped
  int64_t version = -1;  // the policy version it was generated with; -1: none
  // The row's written cells of the columns the listing was asked for, in
  // that order: (column, bytes).
  std::vector<std::pair<std::string, std::string>> cells;

  bool operator==(const RowState&) const = default;
};

struct RowListing {
  int64_t step = 0;
  bool sealed = false;
  std::vector<RowState> rows;

  bool operator==(const RowListing&) const = default;
};

}  // namespace tdock

#endif  // TDOCK_COMMON_ROW_STATE_H_
