// The format of `idem export` and `idem import`: JSON Lines, one record a line with every field
// (docs/format.md, "Export format"). Written by RecordToExportJson (cli.h), read back by
// ParseExportLine, which also takes the shorter lines that people and conversion scripts write
// (absent fields get defaults).

#ifndef IDEM_TOOLS_EXPORT_FORMAT_H_
#define IDEM_TOOLS_EXPORT_FORMAT_H_

#include <string>
#include <string_view>

#include "idem/record.h"
#include "idem/status.h"
#include "text.h"

namespace idem::cli {

// The record that one line of an export holds. `now` is the default of `created` (and through
// it of `updated`, `lease_deadline` and `expires`) when the line has none. kInvalidArgument
// saying what is wrong (the field named) when the line is not one.
Result<Record> ParseExportLine(std::string_view line, TimePoint now);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_EXPORT_FORMAT_H_
