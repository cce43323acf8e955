// ParseImportLine (tools/import_line.cc) in-process: the shapes a line's JSON may take that the
// round trips (export_roundtrip_test) and the command's refusals (backup_export_test) do not
// reach. Bytes as {"hex": ...} in every place, members in any order, values no field takes (arrays,
// objects, fractions, deep nesting) named by their field, a member given twice at each level, and
// which error wins when a line has several.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include "export_format.h"

namespace {

using idem::Record;
using idem::cli::ExportedTableValue;
using idem::cli::ImportLine;
using idem::cli::ParseImportLine;

const Record::TimePoint kNow = Record::TimePoint(std::chrono::seconds(1'800'000'000));

Record RecordOf(const std::string& line) {
  idem::Result<ImportLine> parsed = ParseImportLine(line, kNow);
  EXPECT_TRUE(parsed.ok()) << line << "\n" << parsed.status().message();
  if (!parsed.ok() || !std::holds_alternative<Record>(*parsed)) {
    ADD_FAILURE() << line << " is not a record";
    return Record{};
  }
  return std::get<Record>(*parsed);
}

std::string RefusalOf(const std::string& line) {
  idem::Result<ImportLine> parsed = ParseImportLine(line, kNow);
  EXPECT_FALSE(parsed.ok()) << line;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), idem::Status::Code::kInvalidArgument) << line;
  return parsed.status().message();
}

TEST(ImportLine, MembersComeInAnyOrderAndBytesAsHex) {
  const Record record = RecordOf(
      R"({"result":{"hex":"00ff"},"state":"pending","key":{"hex":"6b00"},)"
      R"("holder":{"took_over":true,"request_id":12,"pid":7},"checkpoint":{"hex":"ff"},"token":9})");
  EXPECT_EQ(record.key, std::string("k\0", 2));
  EXPECT_EQ(record.result, std::string("\0\xff", 2));
  EXPECT_EQ(record.state, idem::State::kPending);
  EXPECT_EQ(record.token, 9u);
  EXPECT_EQ(record.holder.pid, 7u);
  EXPECT_EQ(record.holder.request_id, 12u);
  EXPECT_EQ(record.checkpoint, "\xff");
  EXPECT_TRUE(record.holder.took_over);
  EXPECT_EQ(record.attempts, 1u);  // the defaults of fields not given
  EXPECT_EQ(record.created, kNow);
  EXPECT_EQ(record.expires, kNow + std::chrono::hours(24 * 30));

  idem::Result<ImportLine> value = ParseImportLine(
      R"( {"version":3,"value":{"hex":"00"},"key":{"hex":"6b"},"table":"t"} )", kNow);
  ASSERT_TRUE(value.ok()) << value.status().message();
  ASSERT_TRUE(std::holds_alternative<ExportedTableValue>(*value));
  const auto& table_value = std::get<ExportedTableValue>(*value);
  EXPECT_EQ(table_value.table, "t");
  EXPECT_EQ(table_value.key, "k");
  EXPECT_EQ(table_value.value, std::string(1, '\0'));
  EXPECT_EQ(table_value.version, 3u);
}

TEST(ImportLine, EachRefusalNamesWhatIsWrong) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"([{"key":"k","state":"done"}])", "not a JSON object"},
      {R"("k")", "not a JSON object"},
      {"42", "not a JSON object"},
      {"", "not JSON: "},
      {R"({"key":"k","state":"done"} x)", "not JSON: "},
      // A syntax error anywhere wins over a field's error before it.
      {R"({"key":"k","state":"bogus",)", "not JSON: "},
      // Bytes: only {"hex": a string}.
      {R"({"key":{"hex":"61","hex":"62"},"state":"done"})", "hex: is given twice"},
      {R"({"key":{"hex":"61","more":1},"state":"done"})", "key: must be a string, or {\"hex\""},
      {R"({"key":{"hex":61},"state":"done"})", "key: must be a string, or {\"hex\""},
      {R"({"key":{"hex":{"hex":"61"}},"state":"done"})", "key: must be a string, or {\"hex\""},
      {R"({"key":{},"state":"done"})", "key: must be a string, or {\"hex\""},
      {R"({"key":["a"],"state":"done"})", "key: must be a string, or {\"hex\""},
      {R"({"key":"k","state":"done","result":)" + deep + "}", "result: must be a string"},
      // Numbers: whole, in range.
      {R"({"key":"k","state":"done","token":1.0})", "token: must be a whole number"},
      {R"({"key":"k","state":"done","token":-1})", "token: must be a whole number"},
      {R"({"key":"k","state":"done","token":{"hex":"01"}})", "token: must be a whole number"},
      // The holder: an object of its own fields.
      {R"({"key":"k","state":"done","holder":"x"})", "holder: must be an object"},
      {R"({"key":"k","state":"done","holder":[]})", "holder: must be an object"},
      {R"({"key":"k","state":"done","holder":{"pid":[1,{"a":2}]}})",
       "holder.pid: must be a whole number"},
      {R"({"key":"k","state":"done","holder":{"request_id":{"hex":"01"}}})",
       "holder.request_id: must be a whole number"},
      {R"({"key":"k","state":"done","holder":{"holder":{}}})",
       "holder.holder: is not a field of the holder"},
      {R"({"key":"k","state":"done","holder":{"pid":1},"holder":{"pid":2}})",
       "holder: is given twice"},
      {R"({"key":"k","state":"done","holder":{"took_over":true,"took_over":false}})",
       "took_over: is given twice"},
      {R"({"key":"k","state":"done","pid":1})", "pid: is not a field of a record"},
      {R"({"key":"k","state":"done","timed_out":true})", "timed_out: is not a field of a record"},
      // A record's line and a table value's do not mix.
      {R"({"key":"k","state":"done","value":"v"})", "value: is not a field of a record"},
      {R"({"key":"k","state":"done","version":1})", "version: is not a field of a record"},
      {R"({"table":"t","key":"k","value":"v","version":1,"holder":{}})",
       "holder: is not a field of a table value"},
      {R"({"table":"t","key":"k","value":"v","version":1,"state":"done"})",
       "state: is not a field of a table value"},
      {R"({"table":5,"key":"k","value":"v","version":1})", "table: must be a string"},
      {R"({"table":"t","key":"","value":"v","version":1})", "key: is empty"},
      {R"({"table":"t","key":"k","version":1})", "value: missing"},
      {R"({"table":"t","value":"v","version":1})", "key: missing"},
      {R"({"key":"","state":"done"})", "key: is empty"},
      {R"({"state":"done"})", "key: missing"},
      {R"({"key":"k"})", "state: missing"},
  };
  for (const Case& c : cases) {
    const std::string refusal = RefusalOf(c.line);
    EXPECT_EQ(refusal.rfind(c.message, 0), 0u)
        << c.line.substr(0, 120) << "\nwas refused with: " << refusal
        << "\nexpected: " << c.message;
  }
}

}  // namespace
