// One member of an import line (import_line.cc) read into the Record field it names, by the
// field's type (util::kRecordFields), with the checks and messages of docs/format.md's "Export
// format".

#ifndef IDEM_TOOLS_IMPORT_FIELD_H_
#define IDEM_TOOLS_IMPORT_FIELD_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"
#include "util/record_fields.h"

namespace idem::cli {

// kInvalidArgument "FIELD: WHY".
Status FieldError(std::string_view field, std::string_view why);

// A member's value as the field readers see it. kOther: what no field takes (a fraction, an
// array, an object that is not {"hex": string}).
struct JsonScalar {
  enum class Kind { kNull, kBool, kWhole, kNegative, kString, kHex, kOther };
  Kind kind = Kind::kOther;
  bool boolean = false;
  uint64_t whole = 0;
  std::string* text = nullptr;  // kString, kHex: the string, which a reader may move from
};

// Bytes: a string, or {"hex": "..."}.
Result<std::string> ReadBytes(const JsonScalar& value, std::string_view field);
// A whole number from 0 to `largest`.
Result<uint64_t> ReadWhole(const JsonScalar& value, std::string_view field, uint64_t largest);

inline constexpr std::size_t kFieldCount = util::kRecordFieldCount;

// Where a line may give each of util::kRecordFields: in the record's object, in its holder's, or
// nowhere (a field the export does not write).
enum class Place { kNowhere, kRecord, kHolder };
inline constexpr std::array<Place, kFieldCount> kPlaces = [] {
  std::array<Place, kFieldCount> places{};
  util::ForEachRecordField<util::kTableOrder>([&](auto row) {
    using Row = decltype(row);
    places[Row::kIndex] = !Row::field.exported   ? Place::kNowhere
                          : Row::field.kInHolder ? Place::kHolder
                                                 : Place::kRecord;
  });
  return places;
}();

// Each row's name, as a constant a reader may keep.
inline constexpr std::array<std::string_view, kFieldCount> kFieldNames = [] {
  std::array<std::string_view, kFieldCount> names{};
  util::ForEachRecordField<util::kTableOrder>(
      [&](auto row) { names[decltype(row)::kIndex] = decltype(row)::field.name; });
  return names;
}();

// Reads `value` into the field in row `row` of util::kRecordFields; a holder field's message
// names it "holder.NAME".
Status ReadRow(std::size_t row, const JsonScalar& value, Record& record);

// "pid, process_start, pid_scope, request_id, took_over".
std::string HolderFieldNames();

}  // namespace idem::cli

#endif  // IDEM_TOOLS_IMPORT_FIELD_H_
