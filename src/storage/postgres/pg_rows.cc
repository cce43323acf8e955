#include "storage/postgres/pg_rows.h"

#include <fmt/format.h>

#include <bit>
#include <limits>
#include <type_traits>

#include "engine/state_machine.h"
#include "util/check.h"
#include "util/escape.h"
#include "util/record_fields.h"
#include "util/time.h"

namespace idem::storage {
namespace {

constexpr int kVersionColumn = PgColumnIndex("version");
static_assert(kVersionColumn == kPgRecordColumnCount - 1,
              "the version is the last column: the parameters of a row's fields come before it");

// The column of a row of util::kRecordFields, by its name in kPgRecordColumns (or none).
template <class Row>
constexpr bool kHasColumn = !Row::field.column.empty();
template <class Row>
constexpr int kColumnOf = PgColumnIndex(Row::field.column);

// The PostgreSQL type that a field of C++ type T is kept as (kPgRecordColumns' reported_type).
template <class T>
constexpr std::string_view PgTypeOf() {
  if constexpr (std::is_same_v<T, std::string>) return kPgBytea;
  if constexpr (std::is_same_v<T, State>) return "smallint";
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  if constexpr (std::is_integral_v<T>) return "bigint";  // a uint32_t does not fit integer
  if constexpr (std::is_same_v<T, Record::TimePoint>) return kPgTimestamp;
  return "";
}

// An integer field whose largest value fits int8 is kept as its value (and read back within
// [0, largest]); a wider one (the holder's digests) bit-cast.
template <class Row>
constexpr bool kKeptAsValue = Row::field.Largest() <= uint64_t{std::numeric_limits<int64_t>::max()};

// Every column but the version is one field's, of that field's type; the version is no field's.
template <std::size_t... I>
constexpr bool ColumnsAreTheFields(std::index_sequence<I...>) {
  for (int column = 0; column < kPgRecordColumnCount; ++column) {
    int fields = 0;
    bool typed = true;
    ((fields += kHasColumn<util::RecordRow<I>> && kColumnOf<util::RecordRow<I>> == column,
      typed =
          typed &&
          (!kHasColumn<util::RecordRow<I>> || kColumnOf<util::RecordRow<I>> != column ||
           PgTypeOf<typename std::remove_cvref_t<decltype(util::RecordRow<I>::field)>::Type>() ==
               kPgRecordColumns[column].reported_type)),
     ...);
    if (fields != (column == kVersionColumn ? 0 : 1) || !typed) return false;
  }
  return true;
}
static_assert(ColumnsAreTheFields(std::make_index_sequence<util::kRecordFieldCount>()),
              "each column of kPgRecordColumns but the version is one row of util::kRecordFields, "
              "of the PostgreSQL type of its C++ type");

// Reads the field that `Row` is from its column.
template <class Row>
Status ReadColumn(const PgRows& rows, int row, Record& record) {
  auto& out = Row::field.Of(record);
  using Type = std::remove_cvref_t<decltype(out)>;
  constexpr int column = kColumnOf<Row>;
  if constexpr (std::is_same_v<Type, std::string>) {
    out = std::string(rows.Bytes(row, column));
  } else if constexpr (std::is_same_v<Type, bool>) {
    IDEM_ASSIGN_OR_RETURN(out, rows.Bool(row, column));
  } else if constexpr (std::is_same_v<Type, Record::TimePoint>) {
    IDEM_ASSIGN_OR_RETURN(const int64_t micros, rows.Timestamp(row, column));
    out = util::FromMicros(micros);
  } else {
    IDEM_ASSIGN_OR_RETURN(const int64_t value, rows.Int(row, column));
    if constexpr (std::is_same_v<Type, State>) {
      if (value < 0 || value > static_cast<int64_t>(State::kFailed)) {
        return Status::Corruption(fmt::format("record {} has state {}, which no idem writes",
                                              EscapeKey(record.key), value));
      }
      out = static_cast<State>(value);
    } else if constexpr (kKeptAsValue<Row>) {
      if (value < 0 || static_cast<uint64_t>(value) > Row::field.Largest()) {
        return Status::Corruption(fmt::format("record {} has {} {}, out of range (0 to {})",
                                              EscapeKey(record.key), Row::field.column, value,
                                              Row::field.Largest()));
      }
      out = static_cast<Type>(value);
    } else {
      out = std::bit_cast<uint64_t>(value);
    }
  }
  return Status::OK();
}

// The parameter that writes the field that `Row` is; `times` as PgRowParams says.
template <class Row>
PgParam ColumnParam(const Record& record, PgTimes times) {
  const auto& value = Row::field.Of(record);
  using Type = std::remove_cvref_t<decltype(value)>;
  if constexpr (std::is_same_v<Type, std::string>) {
    return PgParam::Bytea(value);
  } else if constexpr (std::is_same_v<Type, State>) {
    return PgParam::Int2(static_cast<int16_t>(value));
  } else if constexpr (std::is_same_v<Type, bool>) {
    return PgParam::Bool(value);
  } else if constexpr (std::is_same_v<Type, Record::TimePoint>) {
    return times == PgTimes::kMicros ? PgParam::Int8(util::ToMicros(value))
                                     : PgParam::Timestamp(util::ToMicros(value));
  } else if constexpr (kKeptAsValue<Row>) {
    return PgParam::Int8(static_cast<int64_t>(value));
  } else {
    return PgParam::Int8(std::bit_cast<int64_t>(value));
  }
}

}  // namespace

Result<std::optional<Record>> DecodePgRow(const PgRows& rows, int row, int64_t* version) {
  static_assert(kColumnOf<util::RecordRow<0>> == 0, "the key is read first: messages name it");
  if (rows.IsNull(row, 0)) return std::optional<Record>();
  std::optional<Record> record(std::in_place);
  Status status;
  util::ForEachRecordField<util::kTableOrder>([&](auto field_row) {
    using Row = decltype(field_row);
    if constexpr (kHasColumn<Row>) {
      if (status.ok()) status = ReadColumn<Row>(rows, row, *record);
    }
  });
  IDEM_RETURN_IF_ERROR(status);
  IDEM_ASSIGN_OR_RETURN(*version, rows.Int(row, kVersionColumn));
  return record;
}

std::vector<PgParam> PgRowParams(std::string_view key, const Record& record, PgTimes times) {
  IDEM_DCHECK(engine::KeepsNoHolder(record));
  std::vector<PgParam> params(kVersionColumn);
  util::ForEachRecordField<util::kTableOrder>([&](auto field_row) {
    using Row = decltype(field_row);
    if constexpr (kHasColumn<Row>) params[kColumnOf<Row>] = ColumnParam<Row>(record, times);
  });
  params[PgColumnIndex("key")] = PgParam::Bytea(key);  // the key given, not the record's
  return params;
}

std::string PgRowValues(int first, std::string (*time)(std::string_view parameter)) {
  std::string values;
  for (int column = 0; column < kVersionColumn; ++column) {
    if (column > 0) values += ", ";
    const std::string parameter = fmt::format("${}", first + column);
    values += time != nullptr && kPgRecordColumns[column].reported_type == kPgTimestamp
                  ? time(parameter)
                  : parameter;
  }
  return values;
}

std::string PgRowAssignments(int first) {
  std::string assignments;
  for (int column = 0; column < kVersionColumn; ++column) {
    if (column == PgColumnIndex("key")) continue;
    if (!assignments.empty()) assignments += ", ";
    assignments += fmt::format("{} = ${}", kPgRecordColumns[column].name, first + column);
  }
  return assignments;
}

}  // namespace idem::storage
