// Cell values for tdockctl: JSON rows in, packed columns out (Put), and
// received packed rows back to JSON or text (Get). Numbers are converted to the
// column's dtype with range checks; float16 and bfloat16 round to nearest even
// straight from the double, as numpy and torch do. JSON has no NaN or
// infinity, so float columns take and print the strings "nan", "inf", "-inf".
//
// No function here throws: errors come back as absl::Status naming the
// source file, column, row and element at fault.
#ifndef TDOCK_CLIENT_CTL_VALUES_H_
#define TDOCK_CLIENT_CTL_VALUES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "common/spec.h"
#include "nlohmann/json.hpp"

namespace tdock::ctl {

// JSON objects keep their keys in insertion order.
using Json = nlohmann::ordered_json;

// IEEE binary16 and bfloat16 bits of `value`, rounded to nearest even.
// Finite values past the largest finite half round to infinity.
uint16_t DoubleToFloat16(double value);
uint16_t DoubleToBFloat16(double value);
double Float16ToDouble(uint16_t bits);
double BFloat16ToDouble(uint16_t bits);

// Reads and parses a JSON file; INVALID_ARGUMENT with the file name and the
// parser's account of what is wrong where.
absl::StatusOr<Json> ReadJsonFile(const std::string& path);

// Packs `rows_json` (a JSON list of `rows` rows; each row an array of
// numbers, nested arrays flattened, or a string for bytes columns) into a
// column of `spec`'s dtype. `source` names the file in messages.
absl::StatusOr<ClientColumn> ColumnFromJson(const ColumnSpec& spec,
                                            const Json& rows_json,
                                            size_t rows,
                                            const std::string& source);

// Row `row` of a received column: a JSON array of its elements, or a string
// for bytes columns.
Json RowToJson(const ClientBatch& batch, const PackedColumn& column,
                         int64_t row);

// Row `row` as text for people: at most `max_values` elements (or about that
// many characters of bytes), then how many there were.
std::string RowToText(const ClientBatch& batch, const PackedColumn& column,
                      int64_t row, size_t max_values);

}  // namespace tdock::ctl

#endif  // TDOCK_CLIENT_CTL_VALUES_H_
