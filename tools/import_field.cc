#include "import_field.h"

#include <fmt/format.h>

#include <optional>
#include <type_traits>
#include <utility>

#include "text.h"
#include "util/hex.h"

namespace idem::cli {

Status FieldError(std::string_view field, std::string_view why) {
  return Status::InvalidArgument(fmt::format("{}: {}", field, why));
}

Result<std::string> ReadBytes(const JsonScalar& value, std::string_view field) {
  if (value.kind == JsonScalar::Kind::kString) return std::move(*value.text);
  if (value.kind == JsonScalar::Kind::kHex) {
    std::optional<std::string> bytes = util::FromHex(*value.text);
    if (!bytes) return FieldError(field, "\"hex\" is not pairs of hex digits");
    return std::move(*bytes);
  }
  return FieldError(field, "must be a string, or {\"hex\":\"...\"} for bytes that are not UTF-8");
}

Result<uint64_t> ReadWhole(const JsonScalar& value, std::string_view field, uint64_t largest) {
  if (value.kind != JsonScalar::Kind::kWhole) {
    return FieldError(field, fmt::format("must be a whole number from 0 to {}", largest));
  }
  if (value.whole > largest) {
    return FieldError(field, fmt::format("{} is above the largest, {}", value.whole, largest));
  }
  return value.whole;
}

namespace {

// A time: RFC 3339, or null for a time never set (the epoch).
Result<TimePoint> ReadTime(const JsonScalar& value, std::string_view field) {
  if (value.kind == JsonScalar::Kind::kNull) return TimePoint();
  if (value.kind == JsonScalar::Kind::kString) {
    if (std::optional<TimePoint> time = ParseRfc3339(*value.text)) return *time;
  }
  return FieldError(
      field,
      "must be an RFC 3339 time such as \"2026-11-30T01:02:03.123456Z\" (years 1678 to "
      "2261), or null");
}

// A record's "state": "timeout" is derived, a pending record.
Result<State> ReadState(const JsonScalar& value, std::string_view name) {
  if (value.kind == JsonScalar::Kind::kString) {
    const std::string& state = *value.text;
    if (state == "pending" || state == "timeout") return State::kPending;
    if (state == "done") return State::kDone;
    if (state == "failed") return State::kFailed;
  }
  return FieldError(name, "must be \"pending\", \"done\" or \"failed\" (or \"timeout\")");
}

// Reads `value` into the field of `record` that `Row` is, by the field's type.
template <class Row>
Status ReadField(const JsonScalar& value, Record& record) {
  constexpr std::string_view name = Row::field.name;
  auto& out = Row::field.Of(record);
  using Type = std::remove_cvref_t<decltype(out)>;
  if constexpr (std::is_same_v<Type, std::string>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadBytes(value, name));
  } else if constexpr (std::is_same_v<Type, State>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadState(value, name));
  } else if constexpr (std::is_same_v<Type, bool>) {
    if (value.kind != JsonScalar::Kind::kBool) return FieldError(name, "must be true or false");
    out = value.boolean;
  } else if constexpr (std::is_integral_v<Type>) {
    IDEM_ASSIGN_OR_RETURN(const uint64_t number, ReadWhole(value, name, Row::field.Largest()));
    if constexpr (name == "attempts") {
      if (number == 0) return FieldError(name, "must be at least 1 (a record was acquired once)");
    }
    out = static_cast<Type>(number);
  } else {
    static_assert(std::is_same_v<Type, TimePoint>, "a field of a type the export cannot read");
    IDEM_ASSIGN_OR_RETURN(out, ReadTime(value, name));
  }
  return Status::OK();
}

}  // namespace

Status ReadRow(std::size_t row, const JsonScalar& value, Record& record) {
  Status read;
  util::ForEachRecordField<util::kTableOrder>([&](auto each) {
    using Row = decltype(each);
    if constexpr (Row::field.exported) {
      if (Row::kIndex == row) read = ReadField<Row>(value, record);
    }
  });
  if (read.ok() || kPlaces[row] != Place::kHolder) return read;
  return Status::InvalidArgument("holder." + read.message());
}

std::string HolderFieldNames() {
  std::string names;
  util::ForEachRecordField<util::kTableOrder>([&](auto row) {
    if constexpr (decltype(row)::field.kInHolder) {
      if (!names.empty()) names += ", ";
      names += decltype(row)::field.name;
    }
  });
  return names;
}

}  // namespace idem::cli
