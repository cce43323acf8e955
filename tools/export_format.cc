// Writing the export format (docs/format.md, "Export format"); import_line.cc reads it.

#include "export_format.h"

#include <string>

#include "cli.h"
#include "json_writer.h"
#include "records.h"
#include "util/hex.h"
#include "util/record_fields.h"

namespace idem::cli {
namespace {

// A byte string: as text when it is well-formed UTF-8 (then the JSON string is exactly its
// bytes), otherwise {"hex":"..."}, so that no byte depends on how a reader decodes escapes.
void WriteBytes(JsonWriter& json, std::string_view bytes) {
  if (IsValidUtf8(bytes)) {
    json.String(bytes);
    return;
  }
  json.BeginObject();
  json.Key("hex");
  json.String(util::ToHex(bytes));
  json.EndObject();
}

// A field's value in the export, by its type (util::kRecordFields lists the fields).
void WriteExported(JsonWriter& json, const std::string& bytes) { WriteBytes(json, bytes); }
void WriteExported(JsonWriter& json, State state) {
  json.String(StateName(state));  // as stored: a timed-out record is pending
}
void WriteExported(JsonWriter& json, bool value) { json.Bool(value); }
void WriteExported(JsonWriter& json, uint32_t value) { json.Number(value); }
void WriteExported(JsonWriter& json, uint64_t value) { json.Number(value); }
void WriteExported(JsonWriter& json, TimePoint time) { json.Time(time); }

}  // namespace

std::string RecordToExportJson(const Record& record) {
  std::string out;
  out.reserve(320 + 2 * (record.key.size() + record.result.size() + record.checkpoint.size()));
  JsonWriter json(out);
  json.BeginObject();
  util::ForEachRecordField<util::kTableOrder>([&](auto row) {
    constexpr const auto& field = decltype(row)::field;
    if constexpr (field.exported) {
      if constexpr (decltype(row)::kFirstInHolder) {
        json.Key("holder");
        json.BeginObject();
      }
      json.Key(field.name);
      WriteExported(json, field.Of(record));
    }
  });
  json.EndObject();  // the holder's
  json.EndObject();
  return out;
}

std::string TableValueToExportJson(std::string_view table, std::string_view key,
                                   const TableValue& value) {
  std::string out;
  JsonWriter json(out);
  json.BeginObject();
  json.Key("table");
  json.String(table);  // a table name is ASCII
  json.Key("key");
  WriteBytes(json, key);
  json.Key("value");
  WriteBytes(json, value.value.value_or(""));
  json.Key("version");
  json.Number(value.version);
  json.EndObject();
  return out;
}

}  // namespace idem::cli
