// Records as the command shows them: `idem dump`'s table (RecordTable), `idem get`'s field list
// (WriteRecordFields), and one JSON Lines object a record (RecordToJson, declared in cli.h).

#ifndef IDEM_TOOLS_RECORDS_H_
#define IDEM_TOOLS_RECORDS_H_

#include <array>
#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "idem/record.h"
#include "idem/tables.h"
#include "json_writer.h"

namespace idem::cli {

// The columns of `idem dump --format table`.
enum Column { kKey, kType, kState, kAttempts, kToken, kUpdated, kLease, kExpires, kResult, kCount };

// Writes records as aligned columns in constant memory: the column widths come from the first
// kSampleRows records; a later cell that is wider is cut with an ellipsis.
class RecordTable {
 public:
  static constexpr std::size_t kSampleRows = 200;

  explicit RecordTable(std::ostream& out) : out_(out) {}

  void Add(const Record& record);

  // Writes what is buffered. Call once after the last Add.
  void Flush();

 private:
  using Row = std::array<std::string, kCount>;

  void WriteRow(const Row& row);

  std::ostream& out_;
  std::vector<Row> sample_;
  std::array<std::size_t, kCount> widths_{};
  bool sized_ = false;
};

// An application table's key and value as one JSON object: {"key", "value", "version"}, the
// bytes as in records (JsonEscape).
std::string TableValueToJson(std::string_view key, const TableValue& value);
// The same as `idem dump --format table` shows it: key, version and value, escaped for display.
std::string TableValueLine(std::string_view key, const TableValue& value);

// `idem get --format table`: one field a line.
void WriteRecordFields(std::ostream& out, const Record& record);

// The four times of `record` as members of the JSON object `json` is writing (created, updated,
// lease_deadline, expires: RFC 3339, null when never set), in the order of every JSON form of a
// record (dump's and export's).
void WriteRecordTimes(JsonWriter& json, const Record& record);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_RECORDS_H_
