#include "export_format.h"

#include <fmt/format.h>

#include <bitset>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "json_writer.h"
#include "records.h"
#include "util/hex.h"
#include "util/record_fields.h"

namespace idem::cli {
namespace {

using Json = nlohmann::json;

// When a line gives no `expires`: idem's default retention (Options::default_retention, 30 days)
// after `created`.
constexpr std::chrono::hours kDefaultRetention{24 * 30};

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

Status Bad(std::string_view field, std::string_view why) {
  return Status::InvalidArgument(fmt::format("{}: {}", field, why));
}

Result<std::string> ReadBytes(const Json& value, std::string_view field) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.size() == 1 && value.contains("hex") && value["hex"].is_string()) {
    std::optional<std::string> bytes = util::FromHex(value["hex"].get<std::string>());
    if (!bytes) return Bad(field, "\"hex\" is not pairs of hex digits");
    return std::move(*bytes);
  }
  return Bad(field, "must be a string, or {\"hex\":\"...\"} for bytes that are not UTF-8");
}

Result<uint64_t> ReadWhole(const Json& value, std::string_view field, uint64_t largest) {
  if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
    return Bad(field, fmt::format("must be a whole number from 0 to {}", largest));
  }
  const uint64_t number = value.get<uint64_t>();
  if (number > largest) {
    return Bad(field, fmt::format("{} is above the largest, {}", number, largest));
  }
  return number;
}

// A time: RFC 3339, or null for a time never set (the epoch).
Result<TimePoint> ReadTime(const Json& value, std::string_view field) {
  if (value.is_null()) return TimePoint();
  if (value.is_string()) {
    if (std::optional<TimePoint> time = ParseRfc3339(value.get<std::string>())) return *time;
  }
  return Bad(field,
             "must be an RFC 3339 time such as \"2026-11-30T01:02:03.123456Z\" (years 1678 to "
             "2261), or null");
}

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

namespace {

// One line of an export as JSON, refusing what a lenient reader takes silently: a NUL byte
// (where readers that stop at one see a shorter line: the rest of it was dropped) and a member
// named twice in one object (readers disagree on which one counts; nlohmann keeps the last).
Result<Json> ParseLine(std::string_view line) {
  if (const std::size_t nul = line.find('\0'); nul != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format("a NUL byte at byte {} of the line", nul + 1));
  }
  std::vector<std::set<std::string>> names_seen;  // per object being read, innermost last
  std::optional<std::string> repeated;
  const auto check_names = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      names_seen.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      names_seen.pop_back();
    } else if (event == Json::parse_event_t::key && !repeated &&
               !names_seen.back().insert(parsed.get<std::string>()).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  Json object;
  try {
    object = Json::parse(line, check_names);
  } catch (const Json::exception& e) {
    // nlohmann's message says where ("... at line 1, column 12: ...").
    return Status::InvalidArgument(fmt::format("not JSON: {}", e.what()));
  }
  if (repeated) return Bad(*repeated, "is given twice");
  return object;
}

// The table value of a line that has a "table" member: kInvalidArgument saying what is wrong when
// it is not a whole one.
Result<ExportedTableValue> ReadTableValue(const Json& object) {
  ExportedTableValue parsed;
  bool has_key = false, has_value = false;
  for (const auto& [name, value] : object.items()) {
    if (name == "table") {
      if (!value.is_string()) return Bad(name, "must be a string, the table's name");
      parsed.table = value.get<std::string>();
    } else if (name == "key") {
      IDEM_ASSIGN_OR_RETURN(parsed.key, ReadBytes(value, name));
      has_key = true;
    } else if (name == "value") {
      IDEM_ASSIGN_OR_RETURN(parsed.value, ReadBytes(value, name));
      has_value = true;
    } else if (name == "version") {
      IDEM_ASSIGN_OR_RETURN(parsed.version, ReadWhole(value, name, TableValue::kLargestVersion));
      if (parsed.version == 0) return Bad(name, "must be at least 1 (the value was written)");
    } else {
      return Bad(name, "is not a field of a table value (see docs/format.md, \"Export format\")");
    }
  }
  if (!has_key) return Status::InvalidArgument("key: missing");
  if (parsed.key.empty()) return Bad("key", "is empty");
  if (!has_value) return Status::InvalidArgument("value: missing");
  if (parsed.version == 0) return Status::InvalidArgument("version: missing");
  return parsed;
}

// A record's "state": "timeout" is derived, a pending record.
Result<State> ReadState(const Json& value, std::string_view name) {
  const std::string state = value.is_string() ? value.get<std::string>() : "";
  if (state == "pending" || state == "timeout") return State::kPending;
  if (state == "done") return State::kDone;
  if (state == "failed") return State::kFailed;
  return Bad(name, "must be \"pending\", \"done\" or \"failed\" (or \"timeout\")");
}

// Which rows of util::kRecordFields a line gave.
using FieldsGiven = std::bitset<util::kRecordFieldCount>;

constexpr std::size_t RowOf(std::string_view name) {
  const std::size_t row = util::RecordFieldIndex(name);
  if (row == util::kRecordFieldCount) throw "no such field";  // fails to compile
  return row;
}
constexpr std::size_t kKeyRow = RowOf("key");
constexpr std::size_t kStateRow = RowOf("state");
constexpr std::size_t kCreatedRow = RowOf("created");
constexpr std::size_t kUpdatedRow = RowOf("updated");
constexpr std::size_t kLeaseDeadlineRow = RowOf("lease_deadline");
constexpr std::size_t kExpiresRow = RowOf("expires");

// Reads `value` into the field of `record` that `Row` is, by the field's type; `name` as
// messages show it ("holder.pid").
template <class Row>
Status ReadField(const Json& value, std::string_view name, Record& record) {
  auto& out = Row::field.Of(record);
  using Type = std::remove_cvref_t<decltype(out)>;
  if constexpr (std::is_same_v<Type, std::string>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadBytes(value, name));
  } else if constexpr (std::is_same_v<Type, State>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadState(value, name));
  } else if constexpr (std::is_same_v<Type, bool>) {
    if (!value.is_boolean()) return Bad(name, "must be true or false");
    out = value.get<bool>();
  } else if constexpr (std::is_integral_v<Type>) {
    IDEM_ASSIGN_OR_RETURN(const uint64_t number, ReadWhole(value, name, Row::field.Largest()));
    if constexpr (Row::field.name == "attempts") {
      if (number == 0) return Bad(name, "must be at least 1 (a record was acquired once)");
    }
    out = static_cast<Type>(number);
  } else {
    static_assert(std::is_same_v<Type, TimePoint>, "a field of a type the export cannot read");
    IDEM_ASSIGN_OR_RETURN(out, ReadTime(value, name));
  }
  return Status::OK();
}

// Reads `value` into the exported field named `field` (the holder's when kInHolder), or nullopt
// when no such field is exported.
template <bool kInHolder>
std::optional<Status> ReadNamedField(std::string_view field, std::string_view shown_as,
                                     const Json& value, Record& record, FieldsGiven& given) {
  std::optional<Status> read;
  util::ForEachRecordField<util::kTableOrder>([&](auto row) {
    using Row = decltype(row);
    if constexpr (Row::field.exported && Row::field.kInHolder == kInHolder) {
      if (!read && field == Row::field.name) {
        read = ReadField<Row>(value, shown_as, record);
        given.set(Row::kIndex);
      }
    }
  });
  return read;
}

// "pid, process_start, pid_scope, request_id, took_over".
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

// The "holder" object: a whole holder, whose fields not given are 0.
Status ReadHolder(const Json& value, Record& record, FieldsGiven& given) {
  if (!value.is_object()) return Bad("holder", "must be an object");
  record.holder = Holder{};
  for (const auto& [name, member] : value.items()) {
    const std::string shown_as = "holder." + name;
    std::optional<Status> read =
        ReadNamedField</*kInHolder=*/true>(name, shown_as, member, record, given);
    if (!read) {
      return Bad(shown_as, fmt::format("is not a field of the holder ({})", HolderFieldNames()));
    }
    IDEM_RETURN_IF_ERROR(*read);
  }
  return Status::OK();
}

// The record of a line that has no "table" member.
Result<Record> ReadRecord(const Json& object, TimePoint now) {
  Record record;
  record.attempts = 1;
  FieldsGiven given;
  for (const auto& [name, value] : object.items()) {
    if (name == "holder") {
      IDEM_RETURN_IF_ERROR(ReadHolder(value, record, given));
      continue;
    }
    std::optional<Status> read =
        ReadNamedField</*kInHolder=*/false>(name, name, value, record, given);
    if (!read)
      return Bad(name, "is not a field of a record (see docs/format.md, \"Export format\")");
    IDEM_RETURN_IF_ERROR(*read);
  }
  // The import's own rules: what a line must give, and what it may leave out.
  if (!given[kKeyRow]) return Status::InvalidArgument("key: missing");
  if (record.key.empty()) return Bad("key", "is empty");
  if (!given[kStateRow]) return Status::InvalidArgument("state: missing");
  if (record.retryable && record.state != State::kFailed) {
    return Bad("retryable", "may be true only when state is \"failed\"");
  }
  if (!given[kCreatedRow]) {
    record.created = std::chrono::time_point_cast<TimePoint::duration>(
        std::chrono::floor<std::chrono::microseconds>(now));
  }
  if (!given[kUpdatedRow]) record.updated = record.created;
  if (!given[kLeaseDeadlineRow]) record.lease_deadline = record.created;
  if (!given[kExpiresRow]) record.expires = record.created + kDefaultRetention;
  return record;
}

}  // namespace

Result<ImportLine> ParseImportLine(std::string_view line, TimePoint now) {
  IDEM_ASSIGN_OR_RETURN(const Json object, ParseLine(line));
  if (!object.is_object()) return Status::InvalidArgument("not a JSON object");
  if (object.contains("table")) {
    IDEM_ASSIGN_OR_RETURN(ExportedTableValue value, ReadTableValue(object));
    return ImportLine(std::move(value));
  }
  IDEM_ASSIGN_OR_RETURN(Record record, ReadRecord(object, now));
  return ImportLine(std::move(record));
}

}  // namespace idem::cli
