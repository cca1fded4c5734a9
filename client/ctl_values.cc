#include "client/ctl_values.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/status.h"

namespace tdock::ctl {
namespace {

static_assert(std::endian::native == std::endian::little,
              "packed columns are little-endian; this code copies host values");

// ---- small floats ----

// Rounds `value` to a binary float with `exp_bits` exponent and `man_bits`
// mantissa bits (IEEE layout, bias 2^(exp_bits-1) - 1), to nearest even.
uint16_t DoubleToSmallFloat(double value, int exp_bits, int man_bits) {
  const uint32_t sign = std::signbit(value) ? 1u << (exp_bits + man_bits) : 0;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all = (1u << exp_bits) - 1;
  const uint32_t infinity = sign | exp_all << man_bits;
  if (std::isnan(value)) return infinity | 1u << (man_bits - 1);  // quiet NaN
  const double a = std::fabs(value);
  if (std::isinf(a)) return infinity;
  int exp = 0;
  std::frexp(a, &exp);  // a = f * 2^exp, f in [0.5, 1)
  int e = exp - 1;      // a in [2^e, 2^(e+1))
  const int min_e = 1 - bias;
  if (a == 0 || e < min_e) {
    // Subnormal: a count of 2^(min_e - man_bits). A count of 2^man_bits is
    // the smallest normal number, whose bits are the same.
    return sign | static_cast<uint32_t>(std::nearbyint(std::ldexp(a, man_bits - min_e)));
  }
  // Scaling by a power of two is exact; nearbyint rounds half to even.
  double m = std::nearbyint(std::ldexp(a, man_bits - e));
  if (m == std::ldexp(1.0, man_bits + 1)) {
    m /= 2;
    ++e;
  }
  if (e + bias >= static_cast<int>(exp_all)) return infinity;
  return sign | static_cast<uint32_t>(e + bias) << man_bits |
         (static_cast<uint32_t>(m) - (1u << man_bits));
}

double SmallFloatToDouble(uint16_t bits, int exp_bits, int man_bits) {
  const bool negative = (bits >> (exp_bits + man_bits)) & 1;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int exp_all = (1 << exp_bits) - 1;
  const int e = (bits >> man_bits) & exp_all;
  const int m = bits & ((1 << man_bits) - 1);
  double value;
  if (e == exp_all) {
    value = m != 0 ? std::numeric_limits<double>::quiet_NaN()
                   : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    value = std::ldexp(m, 1 - bias - man_bits);
  } else {
    value = std::ldexp(m + (1 << man_bits), e - bias - man_bits);
  }
  return negative ? -value : value;
}

// ---- JSON element -> bytes ----

absl::StatusOr<int64_t> IntegerOf(const Json& v, int64_t lo, int64_t hi,
                                  DType dtype) {
  const auto out_of_range = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "value ", v.dump(), " is out of range for ", std::string(DTypeName(dtype))));
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return out_of_range();
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != std::trunc(d)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "value ", v.dump(), " is not an integer (column dtype ",
          std::string(DTypeName(dtype)), ")"));
    }
    // 2^63 bounds are exact doubles; lo and hi may not be.
    if (d < -0x1p63 || d >= 0x1p63) return out_of_range();
    const auto i = static_cast<int64_t>(d);
    if (i < lo || i > hi) return out_of_range();
    return i;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected an integer, got ", v.type_name(), " ", v.dump()));
}

absl::StatusOr<double> FloatOf(const Json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "expected a number (or \"nan\", \"inf\", \"-inf\"), got ", v.dump()));
}

template <typename T>
void AppendRaw(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
absl::Status AppendInteger(const Json& v, DType dtype, std::string* out) {
  TDOCK_ASSIGN_OR_RETURN(
      int64_t i, IntegerOf(v, std::numeric_limits<T>::min(),
                           std::numeric_limits<T>::max(), dtype));
  AppendRaw(static_cast<T>(i), out);
  return absl::OkStatus();
}

absl::Status AppendFloat(const Json& v, DType dtype, std::string* out) {
  TDOCK_ASSIGN_OR_RETURN(double d, FloatOf(v));
  uint16_t half = 0;
  bool overflow = false;
  switch (dtype) {
    case DType::kFloat64:
      AppendRaw(d, out);
      return absl::OkStatus();
    case DType::kFloat32: {
      const auto f = static_cast<float>(d);
      overflow = std::isinf(f) && std::isfinite(d);
      AppendRaw(f, out);
      break;
    }
    case DType::kFloat16:
      half = DoubleToFloat16(d);
      overflow = std::isinf(Float16ToDouble(half)) && std::isfinite(d);
      AppendRaw(half, out);
      break;
    default:  // kBFloat16
      half = DoubleToBFloat16(d);
      overflow = std::isinf(BFloat16ToDouble(half)) && std::isfinite(d);
      AppendRaw(half, out);
      break;
  }
  if (!overflow) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "value ", v.dump(), " is out of range for ", std::string(DTypeName(dtype))));
}

absl::Status AppendElement(const Json& v, DType dtype, std::string* out) {
  switch (dtype) {
    case DType::kInt8: return AppendInteger<int8_t>(v, dtype, out);
    case DType::kUint8: return AppendInteger<uint8_t>(v, dtype, out);
    case DType::kInt16: return AppendInteger<int16_t>(v, dtype, out);
    case DType::kInt32: return AppendInteger<int32_t>(v, dtype, out);
    case DType::kInt64: return AppendInteger<int64_t>(v, dtype, out);
    case DType::kBool: {
      if (v.is_boolean()) {
        out->push_back(v.get<bool>() ? 1 : 0);
        return absl::OkStatus();
      }
      const absl::StatusOr<int64_t> bit = IntegerOf(v, 0, 1, dtype);
      if (!bit.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected true, false, 0 or 1, got ", v.dump()));
      }
      out->push_back(static_cast<char>(*bit));
      return absl::OkStatus();
    }
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      return AppendFloat(v, dtype, out);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot convert values to dtype ", std::string(DTypeName(dtype))));
  }
}

// Flattens nested arrays into their elements, in order.
absl::Status Flatten(const Json& v, int depth, std::vector<const Json*>* out) {
  if (!v.is_array()) {
    out->push_back(&v);
    return absl::OkStatus();
  }
  if (depth > 16) return absl::InvalidArgumentError("arrays nested too deeply");
  for (const Json& item : v) TDOCK_RETURN_IF_ERROR(Flatten(item, depth + 1, out));
  return absl::OkStatus();
}

absl::Status AppendRow(const Json& row, DType dtype, std::string* out) {
  if (dtype == DType::kBytes && row.is_string()) {
    out->append(row.get_ref<const std::string&>());
    return absl::OkStatus();
  }
  if (!row.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected an array", dtype == DType::kBytes ? " or a string" : "",
        ", got ", row.type_name()));
  }
  std::vector<const Json*> elements;
  TDOCK_RETURN_IF_ERROR(Flatten(row, 0, &elements));
  const DType element_dtype = dtype == DType::kBytes ? DType::kUint8 : dtype;
  for (size_t j = 0; j < elements.size(); ++j) {
    absl::Status appended = AppendElement(*elements[j], element_dtype, out);
    if (!appended.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("element ", j, ": ", appended.message()));
    }
  }
  return absl::OkStatus();
}

// ---- bytes -> JSON ----

Json FloatJson(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

template <typename T>
Json IntegersJson(const std::vector<T>& values) {
  Json out = Json::array();
  for (T v : values) out.push_back(v);
  return out;
}

template <typename T, typename Convert>
Json FloatsJson(const std::vector<T>& values, Convert convert) {
  Json out = Json::array();
  for (T v : values) out.push_back(FloatJson(convert(v)));
  return out;
}

std::string ElementText(const Json& v) {
  if (v.is_number_float()) return absl::StrFormat("%g", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

uint16_t DoubleToFloat16(double value) { return DoubleToSmallFloat(value, 5, 10); }
uint16_t DoubleToBFloat16(double value) { return DoubleToSmallFloat(value, 8, 7); }
double Float16ToDouble(uint16_t bits) { return SmallFloatToDouble(bits, 5, 10); }
double BFloat16ToDouble(uint16_t bits) { return SmallFloatToDouble(bits, 8, 7); }

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  TDOCK_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not valid JSON: ", e.what()));
  }
}

absl::StatusOr<ClientColumn> ColumnFromJson(const ColumnSpec& spec,
                                            const Json& rows_json, size_t rows,
                                            const std::string& source) {
  const std::string where =
      absl::StrCat("'", source, "' (column '", spec.name, "')");
  if (!rows_json.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected a JSON list of rows, got ", rows_json.type_name()));
  }
  if (rows_json.size() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " has ", rows_json.size(), " rows but --rows names ", rows));
  }
  const int64_t item_bytes = spec.item_bytes();
  ClientColumn column;
  column.name = spec.name;
  column.dtype = spec.dtype;
  column.offsets = {0};
  for (size_t i = 0; i < rows; ++i) {
    const size_t before = column.owned.size();
    absl::Status appended = AppendRow(rows_json[i], spec.dtype, &column.owned);
    if (!appended.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ", row ", i, ": ", appended.message()));
    }
    const int64_t bytes = static_cast<int64_t>(column.owned.size() - before);
    if (item_bytes <= 0 || bytes % item_bytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ", row ", i, ": ", bytes / static_cast<int64_t>(DTypeSize(spec.dtype)),
          " elements do not fill whole items of the inner shape"));
    }
    column.offsets.push_back(column.offsets.back() + bytes / item_bytes);
  }
  return column;
}

Json RowToJson(const ClientBatch& batch, const PackedColumn& column, int64_t row) {
  switch (column.dtype) {
    case DType::kInt8: return IntegersJson(batch.Row<int8_t>(column, row));
    case DType::kUint8: return IntegersJson(batch.Row<uint8_t>(column, row));
    case DType::kInt16: return IntegersJson(batch.Row<int16_t>(column, row));
    case DType::kInt32: return IntegersJson(batch.Row<int32_t>(column, row));
    case DType::kInt64: return IntegersJson(batch.Row<int64_t>(column, row));
    case DType::kFloat16:
      return FloatsJson(batch.Row<uint16_t>(column, row), Float16ToDouble);
    case DType::kBFloat16:
      return FloatsJson(batch.Row<uint16_t>(column, row), BFloat16ToDouble);
    case DType::kFloat32:
      return FloatsJson(batch.Row<float>(column, row), [](float f) { return double{f}; });
    case DType::kFloat64:
      return FloatsJson(batch.Row<double>(column, row), [](double d) { return d; });
    case DType::kBool: {
      Json out = Json::array();
      for (uint8_t b : batch.Row<uint8_t>(column, row)) out.push_back(b != 0);
      return out;
    }
    case DType::kBytes: {
      const std::vector<char> bytes = batch.Row<char>(column, row);
      return std::string(bytes.begin(), bytes.end());
    }
    default:
      return nullptr;
  }
}

std::string RowToText(const ClientBatch& batch, const PackedColumn& column,
                      int64_t row, size_t max_values) {
  const Json values = RowToJson(batch, column, row);
  if (values.is_string()) {  // bytes
    const std::string& bytes = values.get_ref<const std::string&>();
    const size_t max_chars = max_values * 8;
    if (bytes.size() <= max_chars) return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
    return absl::StrCat("\"", absl::CHexEscape(bytes.substr(0, max_chars)),
                        "\"... (", bytes.size(), " bytes)");
  }
  if (!values.is_array()) return "?";
  std::string text = "[";
  for (size_t j = 0; j < values.size() && j < max_values; ++j) {
    absl::StrAppend(&text, j > 0 ? ", " : "", ElementText(values[j]));
  }
  if (values.size() <= max_values) return absl::StrCat(text, "]");
  return absl::StrCat(text, ", ...] (", values.size(), " values)");
}

}  // namespace tdock::ctl
