#include "records.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "json_writer.h"
#include "text.h"
#include "util/escape.h"

namespace idem::cli {
namespace {

struct ColumnSpec {
  std::string_view header;
  std::size_t max_width;  // longer cells are cut with an ellipsis
  bool right_aligned;
};

constexpr std::array<ColumnSpec, kCount> kColumns = {{
    {"KEY", 48, false},
    {"TYPE", 16, false},
    {"STATE", 7, false},
    {"ATTEMPTS", 10, true},
    {"TOKEN", 20, true},
    {"UPDATED", 19, false},
    {"LEASE_DEADLINE", 19, false},
    {"EXPIRES", 19, false},
    {"RESULT", 60, false},
}};

std::string TimeCell(TimePoint t) { return IsUnset(t) ? "-" : FormatLocalTime(t); }

std::array<std::string, kCount> MakeRow(const Record& record) {
  std::array<std::string, kCount> row;
  row[kKey] = DisplayCell(record.key, kColumns[kKey].max_width);
  row[kType] = record.type.empty() ? "-" : DisplayCell(record.type, kColumns[kType].max_width);
  row[kState] = std::string(DisplayState(record));
  row[kAttempts] = std::to_string(record.attempts);
  row[kToken] = std::to_string(record.token);
  row[kUpdated] = TimeCell(record.updated);
  // The lease matters only while the record is pending.
  row[kLease] = record.state == State::kPending ? TimeCell(record.lease_deadline) : "-";
  row[kExpires] = TimeCell(record.expires);
  row[kResult] = DisplayCell(record.result, kColumns[kResult].max_width);
  return row;
}

}  // namespace

void RecordTable::Add(const Record& record) {
  Row row = MakeRow(record);
  if (sized_) {
    WriteRow(row);
    return;
  }
  sample_.push_back(std::move(row));
  if (sample_.size() >= kSampleRows) Flush();
}

void RecordTable::Flush() {
  if (sized_) return;
  sized_ = true;
  if (sample_.empty()) return;
  for (std::size_t c = 0; c < kCount; ++c) widths_[c] = kColumns[c].header.size();
  for (const Row& row : sample_) {
    for (std::size_t c = 0; c < kCount; ++c) {
      widths_[c] = std::max(widths_[c], DisplayWidth(row[c]));
    }
  }
  Row header;
  for (std::size_t c = 0; c < kCount; ++c) header[c] = std::string(kColumns[c].header);
  WriteRow(header);
  for (const Row& row : sample_) WriteRow(row);
  sample_.clear();
  sample_.shrink_to_fit();
}

// Keys, types and results may be in any script: the cells are padded in display columns
// (PadLeft, PadRight), the measure the widths were taken with, not by fmt's width spec (text.h).
void RecordTable::WriteRow(const Row& row) {
  std::string line;
  for (std::size_t c = 0; c < kCount; ++c) {
    std::string cell = CutToWidth(row[c], widths_[c]);
    if (c + 1 == kCount) {
      line += cell;
    } else {
      line += kColumns[c].right_aligned ? PadLeft(std::move(cell), widths_[c])
                                        : PadRight(std::move(cell), widths_[c]);
      line += "  ";
    }
  }
  TrimTrailingSpaces(line);
  line += '\n';
  out_ << line;
}

void WriteRecordFields(std::ostream& out, const Record& record) {
  constexpr std::size_t kLongest = 4000;  // columns of a result or checkpoint shown
  const auto text = [](std::string_view value) {
    std::string shown = DisplayCell(value, kLongest);
    if (value.size() > kLongest) shown += fmt::format(" ({} bytes)", value.size());
    return shown;
  };
  const auto time = [](TimePoint t) {
    if (IsUnset(t)) return std::string("-");
    return fmt::format("{} ({})", FormatLocalTime(t), FormatRfc3339(t));
  };
  const std::pair<std::string_view, std::string> fields[] = {
      {"key", DisplayEscape(record.key)},
      {"type", DisplayEscape(record.type)},
      {"state", std::string(DisplayState(record))},
      {"result", text(record.result)},
      {"fingerprint", DisplayEscape(record.fingerprint)},
      {"checkpoint", text(record.checkpoint)},
      {"token", std::to_string(record.token)},
      {"attempts", std::to_string(record.attempts)},
      {"created", time(record.created)},
      {"updated", time(record.updated)},
      {"lease_deadline", time(record.lease_deadline)},
      {"expires", time(record.expires)},
  };
  std::string text_out;
  for (const auto& [name, value] : fields) {
    // The names are ASCII: fmt's width spec pads them. The trim drops the padding of an empty
    // value and the spaces a value ends with.
    std::string line = fmt::format("{:<16}{}", name, value);
    TrimTrailingSpaces(line);
    text_out += line;
    text_out += '\n';
  }
  out << text_out;
}

std::string TableValueToJson(std::string_view key, const TableValue& value) {
  std::string out;
  JsonWriter json(out);
  json.BeginObject();
  json.Key("key");
  json.String(key);
  json.Key("value");
  json.String(value.value.value_or(""));
  json.Key("version");
  json.Number(value.version);
  json.EndObject();
  return out;
}

std::string TableValueLine(std::string_view key, const TableValue& value) {
  return fmt::format("{}  {}  {}", DisplayEscape(key), value.version,
                     DisplayEscape(value.value.value_or("")));
}

std::string RecordToJson(const Record& record) {
  std::string out;
  out.reserve(192 + record.key.size() + record.result.size() + record.checkpoint.size());
  JsonWriter json(out);
  json.BeginObject();
  const std::pair<std::string_view, std::string_view> strings[] = {
      {"key", record.key},
      {"type", record.type},
      {"state", DisplayState(record)},
      {"result", record.result},
      {"fingerprint", record.fingerprint},
      {"checkpoint", record.checkpoint},
  };
  for (const auto& [name, value] : strings) {
    json.Key(name);
    json.String(value);
  }
  json.Key("token");
  json.Number(record.token);
  json.Key("attempts");
  json.Number(record.attempts);
  WriteRecordTimes(json, record);
  json.EndObject();
  return out;
}

void WriteRecordTimes(JsonWriter& json, const Record& record) {
  const std::pair<std::string_view, TimePoint> times[] = {
      {"created", record.created},
      {"updated", record.updated},
      {"lease_deadline", record.lease_deadline},
      {"expires", record.expires},
  };
  for (const auto& [name, value] : times) {
    json.Key(name);
    json.Time(value);
  }
}

}  // namespace idem::cli
