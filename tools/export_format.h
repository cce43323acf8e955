// The format of `idem export` and `idem import`: JSON Lines, one record a line with every field
// (docs/format.md, "Export format"). Written by RecordToExportJson (cli.h), read back by
// ParseImportLine, which also takes the shorter lines that people and conversion scripts write
// (absent fields get defaults).

#ifndef IDEM_TOOLS_EXPORT_FORMAT_H_
#define IDEM_TOOLS_EXPORT_FORMAT_H_

#include <string>
#include <string_view>
#include <variant>

#include "idem/record.h"
#include "idem/status.h"
#include "idem/tables.h"
#include "text.h"

namespace idem::cli {

// A line of an application table's value: {"table", "key", "value", "version"}.
struct ExportedTableValue {
  std::string table;
  std::string key;
  std::string value;
  uint64_t version = 0;
};
std::string TableValueToExportJson(std::string_view table, std::string_view key,
                                   const TableValue& value);

// What one line of an export holds: a table value when it has a "table" member, else a record.
using ImportLine = std::variant<Record, ExportedTableValue>;

// The line parsed once. `now` is a record's default `created` (and through it of `updated`,
// `lease_deadline` and `expires`) when the line has none. kInvalidArgument saying what is wrong
// (the field named) when the line is neither a record nor a whole table value.
Result<ImportLine> ParseImportLine(std::string_view line, TimePoint now);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_EXPORT_FORMAT_H_
