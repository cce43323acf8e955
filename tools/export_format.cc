#include "export_format.h"

#include <fmt/format.h>

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

namespace idem::cli {
namespace {

using Json = nlohmann::json;

// When a line gives no `expires`: idem's default retention (Options::default_retention, 30 days)
// after `created`.
constexpr std::chrono::hours kDefaultRetention{24 * 30};
constexpr uint64_t kLargestToken = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

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

Result<Holder> ReadHolder(const Json& value) {
  if (!value.is_object()) return Bad("holder", "must be an object");
  Holder holder;
  for (const auto& [name, member] : value.items()) {
    const std::string field = "holder." + name;
    if (name == "pid") {
      IDEM_ASSIGN_OR_RETURN(uint64_t pid,
                            ReadWhole(member, field, std::numeric_limits<uint32_t>::max()));
      holder.pid = static_cast<uint32_t>(pid);
    } else if (name == "process_start") {
      IDEM_ASSIGN_OR_RETURN(holder.process_start,
                            ReadWhole(member, field, std::numeric_limits<uint64_t>::max()));
    } else if (name == "pid_scope") {
      IDEM_ASSIGN_OR_RETURN(holder.pid_scope,
                            ReadWhole(member, field, std::numeric_limits<uint64_t>::max()));
    } else if (name == "request_id") {
      IDEM_ASSIGN_OR_RETURN(holder.request_id,
                            ReadWhole(member, field, std::numeric_limits<uint64_t>::max()));
    } else if (name == "took_over") {
      if (!member.is_boolean()) return Bad(field, "must be true or false");
      holder.took_over = member.get<bool>();
    } else {
      return Bad(field,
                 "is not a field of the holder (pid, process_start, pid_scope, "
                 "request_id, took_over)");
    }
  }
  return holder;
}

}  // namespace

std::string RecordToExportJson(const Record& record) {
  std::string out;
  out.reserve(320 + 2 * (record.key.size() + record.result.size() + record.checkpoint.size()));
  JsonWriter json(out);
  json.BeginObject();
  json.Key("key");
  WriteBytes(json, record.key);
  json.Key("type");
  WriteBytes(json, record.type);
  json.Key("state");
  json.String(StateName(record.state));  // as stored: a timed-out record is pending
  json.Key("result");
  WriteBytes(json, record.result);
  json.Key("fingerprint");
  WriteBytes(json, record.fingerprint);
  json.Key("checkpoint");
  WriteBytes(json, record.checkpoint);
  json.Key("token");
  json.Number(record.token);
  json.Key("attempts");
  json.Number(record.attempts);
  json.Key("retryable");
  json.Bool(record.retryable);
  WriteRecordTimes(json, record);
  json.Key("holder");
  json.BeginObject();
  json.Key("pid");
  json.Number(record.holder.pid);
  json.Key("process_start");
  json.Number(record.holder.process_start);
  json.Key("pid_scope");
  json.Number(record.holder.pid_scope);
  json.Key("request_id");
  json.Number(record.holder.request_id);
  json.Key("took_over");
  json.Bool(record.holder.took_over);
  json.EndObject();
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

Result<std::optional<ExportedTableValue>> ParseTableValueLine(std::string_view line) {
  Result<Json> json = ParseLine(line);
  if (!json.ok()) return std::optional<ExportedTableValue>();  // ParseExportLine says why
  const Json& object = *json;
  if (!object.is_object() || !object.contains("table")) return std::optional<ExportedTableValue>();
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
  return std::optional<ExportedTableValue>(std::move(parsed));
}

namespace {

// A record's "state": "timeout" is derived, a pending record.
Result<State> ReadState(const Json& value, std::string_view name) {
  const std::string state = value.is_string() ? value.get<std::string>() : "";
  if (state == "pending" || state == "timeout") return State::kPending;
  if (state == "done") return State::kDone;
  if (state == "failed") return State::kFailed;
  return Bad(name, "must be \"pending\", \"done\" or \"failed\" (or \"timeout\")");
}

}  // namespace

Result<Record> ParseExportLine(std::string_view line, TimePoint now) {
  IDEM_ASSIGN_OR_RETURN(const Json object, ParseLine(line));
  if (!object.is_object()) return Status::InvalidArgument("not a JSON object");
  Record record;
  record.attempts = 1;
  bool has_key = false;
  bool has_state = false;
  std::optional<TimePoint> created, updated, lease_deadline, expires;
  for (const auto& [name, value] : object.items()) {
    if (name == "key") {
      IDEM_ASSIGN_OR_RETURN(record.key, ReadBytes(value, name));
      has_key = true;
    } else if (name == "type") {
      IDEM_ASSIGN_OR_RETURN(record.type, ReadBytes(value, name));
    } else if (name == "result") {
      IDEM_ASSIGN_OR_RETURN(record.result, ReadBytes(value, name));
    } else if (name == "fingerprint") {
      IDEM_ASSIGN_OR_RETURN(record.fingerprint, ReadBytes(value, name));
    } else if (name == "checkpoint") {
      IDEM_ASSIGN_OR_RETURN(record.checkpoint, ReadBytes(value, name));
    } else if (name == "state") {
      IDEM_ASSIGN_OR_RETURN(record.state, ReadState(value, name));
      has_state = true;
    } else if (name == "token") {
      IDEM_ASSIGN_OR_RETURN(record.token, ReadWhole(value, name, kLargestToken));
    } else if (name == "attempts") {
      IDEM_ASSIGN_OR_RETURN(uint64_t attempts,
                            ReadWhole(value, name, std::numeric_limits<uint32_t>::max()));
      if (attempts == 0) return Bad(name, "must be at least 1 (a record was acquired once)");
      record.attempts = static_cast<uint32_t>(attempts);
    } else if (name == "retryable") {
      if (!value.is_boolean()) return Bad(name, "must be true or false");
      record.retryable = value.get<bool>();
    } else if (name == "created") {
      IDEM_ASSIGN_OR_RETURN(created, ReadTime(value, name));
    } else if (name == "updated") {
      IDEM_ASSIGN_OR_RETURN(updated, ReadTime(value, name));
    } else if (name == "lease_deadline") {
      IDEM_ASSIGN_OR_RETURN(lease_deadline, ReadTime(value, name));
    } else if (name == "expires") {
      IDEM_ASSIGN_OR_RETURN(expires, ReadTime(value, name));
    } else if (name == "holder") {
      IDEM_ASSIGN_OR_RETURN(record.holder, ReadHolder(value));
    } else {
      return Bad(name, "is not a field of a record (see docs/format.md, \"Export format\")");
    }
  }
  if (!has_key) return Status::InvalidArgument("key: missing");
  if (record.key.empty()) return Bad("key", "is empty");
  if (!has_state) return Status::InvalidArgument("state: missing");
  if (record.retryable && record.state != State::kFailed) {
    return Bad("retryable", "may be true only when state is \"failed\"");
  }
  record.created = created.value_or(std::chrono::time_point_cast<TimePoint::duration>(
      std::chrono::floor<std::chrono::microseconds>(now)));
  record.updated = updated.value_or(record.created);
  record.lease_deadline = lease_deadline.value_or(record.created);
  record.expires = expires.value_or(record.created + kDefaultRetention);
  return record;
}

}  // namespace idem::cli
