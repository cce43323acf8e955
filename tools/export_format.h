// The format of `idem export` and `idem import`: JSON Lines, one record a line with every field
// (docs/format.md, "Export format"). Written by RecordToExportJson (cli.h), read back by
// ParseExportLine, which also takes the shorter lines that people and conversion scripts write
// (absent fields get defaults).

#ifndef IDEM_TOOLS_EXPORT_FORMAT_H_
#define IDEM_TOOLS_EXPORT_FORMAT_H_

#include <optional>
#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"
#include "idem/tables.h"
#include "text.h"

namespace idem::cli {

// The record that one line of an export holds. `now` is the default of `created` (and through
// it of `updated`, `lease_deadline` and `expires`) when the line has none. kInvalidArgument
// saying what is wrong (the field named) when the line is not one.
Result<Record> ParseExportLine(std::string_view line, TimePoint now);

// A line of an application table's value: {"table", "key", "value", "version"}.
struct ExportedTableValue {
  std::string table;
  std::string key;
  std::string value;
  uint64_t version = 0;
};
std::string TableValueToExportJson(std::string_view table, std::string_view key,
                                   const TableValue& value);
// The table value one line holds; nullopt when the line is not one (it has no "table" member:
// a record's line, or not JSON, which ParseExportLine then names). kInvalidArgument saying what
// is wrong when it names a table but is not a whole table value.
Result<std::optional<ExportedTableValue>> ParseTableValueLine(std::string_view line);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_EXPORT_FORMAT_H_
