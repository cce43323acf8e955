#include "cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/idem.h"
#include "util/escape.h"
#include "util/hex.h"

#ifndef IDEM_VERSION
#define IDEM_VERSION "0.1.0"
#endif

namespace idem::cli {
namespace {

using TimePoint = std::chrono::system_clock::time_point;

// ---- UTF-8 -------------------------------------------------------------------------------------

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at s[i] (Unicode table 3-7:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0 when s[i] starts none.
std::size_t Utf8SequenceLength(std::string_view s, std::size_t i, char32_t* code_point) {
  const auto byte = [&s](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  char32_t cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    const unsigned char b = byte(i + k);
    if (k == 1 ? (b < low || b > high) : (b < 0x80 || b > 0xBF)) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  *code_point = cp;
  return length;
}

void AppendJsonByteEscape(std::string& out, unsigned char byte) {
  out += "\\u00";
  util::AppendHexByte(out, byte);
}

// The number of code points in valid UTF-8 text (how many columns it takes, for the scripts we
// expect in keys and labels).
std::size_t DisplayWidth(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

constexpr std::string_view kEllipsis = "\u2026";

// `text` (valid UTF-8) cut to `width` columns, ending with an ellipsis when cut.
std::string CutToWidth(std::string text, std::size_t width, bool already_cut = false) {
  if (!already_cut && DisplayWidth(text) <= width) return text;
  if (width == 0) return "";
  std::size_t columns = 0;
  std::size_t end = 0;
  while (end < text.size()) {
    if ((static_cast<unsigned char>(text[end]) & 0xC0) != 0x80) {
      if (columns == width - 1) break;
      ++columns;
    }
    ++end;
  }
  text.resize(end);
  text += kEllipsis;
  return text;
}

// DisplayEscape(s) cut to `width` columns, without escaping more of a long `s` than it shows.
std::string DisplayCell(std::string_view s, std::size_t width) {
  // An escape takes at most 4 columns per byte, a code point at least one byte: 4 * width bytes
  // are always enough to fill `width` columns.
  const std::size_t budget = 4 * width + 4;
  const bool cut = s.size() > budget;
  std::string escaped = DisplayEscape(cut ? s.substr(0, budget) : s);
  const bool needs_ellipsis = cut && DisplayWidth(escaped) <= width;
  return CutToWidth(std::move(escaped), width, needs_ellipsis);
}

std::string PadRight(std::string text, std::size_t width) {
  const std::size_t have = DisplayWidth(text);
  if (have < width) text.append(width - have, ' ');
  return text;
}

std::string PadLeft(std::string text, std::size_t width) {
  const std::size_t have = DisplayWidth(text);
  if (have < width) text.insert(0, width - have, ' ');
  return text;
}

bool IsUnset(TimePoint t) { return t.time_since_epoch().count() == 0; }

// ---- Records as text -----------------------------------------------------------------------

// The command's one JSON writer (records and stats): compact, members in the order written,
// strings through JsonEscape (so every \u00XX is exactly the byte XX, docs/operations.md).
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  void BeginObject() {
    Separate();
    out_ += '{';
    first_ = true;
  }
  void EndObject() {
    out_ += '}';
    first_ = false;
  }
  // A member's name; its value is written next.
  void Key(std::string_view name) {
    Separate();
    AppendString(name);
    out_ += ':';
    first_ = true;
  }
  void String(std::string_view value) {
    Separate();
    AppendString(value);
  }
  void Number(uint64_t value) {
    Separate();
    out_ += std::to_string(value);
  }
  void Null() {
    Separate();
    out_ += "null";
  }
  // RFC 3339 in UTC, or null for a time never set.
  void Time(TimePoint value) {
    if (IsUnset(value)) {
      Null();
    } else {
      String(FormatRfc3339(value));
    }
  }

 private:
  void Separate() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void AppendString(std::string_view value) {
    out_ += '"';
    out_ += JsonEscape(value);
    out_ += '"';
  }

  std::string& out_;
  bool first_ = true;
};

// The columns of `idem dump --format table`.
enum Column { kKey, kType, kState, kAttempts, kToken, kUpdated, kLease, kExpires, kResult, kCount };

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

using Row = std::array<std::string, kCount>;

std::string TimeCell(TimePoint t) { return IsUnset(t) ? "-" : FormatLocalTime(t); }

Row MakeRow(const Record& record) {
  Row row;
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

// Writes records as aligned columns in constant memory: the column widths come from the first
// kSampleRows records; a later cell that is wider is cut with an ellipsis.
class RecordTable {
 public:
  static constexpr std::size_t kSampleRows = 200;

  explicit RecordTable(std::ostream& out) : out_(out) {}

  void Add(const Record& record) {
    Row row = MakeRow(record);
    if (sized_) {
      WriteRow(row);
      return;
    }
    sample_.push_back(std::move(row));
    if (sample_.size() >= kSampleRows) Flush();
  }

  // Writes what is buffered. Call once after the last Add.
  void Flush() {
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

 private:
  void WriteRow(const Row& row) {
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
    while (!line.empty() && line.back() == ' ') line.pop_back();
    line += '\n';
    out_ << line;
  }

  std::ostream& out_;
  std::vector<Row> sample_;
  std::array<std::size_t, kCount> widths_{};
  bool sized_ = false;
};

// `idem get --format table`: one field a line.
void WriteRecordFields(std::ostream& out, const Record& record) {
  constexpr std::size_t kLongest = 4000;  // columns of a result or checkpoint shown
  const auto text = [](std::string_view value) {
    std::string shown = DisplayCell(value, kLongest);
    if (value.size() > kLongest) shown += " (" + std::to_string(value.size()) + " bytes)";
    return shown;
  };
  const auto time = [](TimePoint t) {
    if (IsUnset(t)) return std::string("-");
    return FormatLocalTime(t) + " (" + FormatRfc3339(t) + ")";
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
    std::string line = PadRight(std::string(name), 16) + value;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text_out += line;
    text_out += '\n';
  }
  out << text_out;
}

// ---- Running a command -----------------------------------------------------------------------

// Where a command writes and how it reports.
struct Context {
  std::string command;  // "dump", "get", ... for messages
  std::ostream& out;
  std::ostream& err;

  // "idem get: <message>" on err, one line whatever the message quotes; returns `code`. The
  // library escapes the keys and paths it puts in a message, but not every message that
  // reaches the command comes from code that does: EscapeControls keeps it on one line and
  // free of terminal escapes without escaping twice what is escaped already (DisplayEscape
  // would double its backslashes).
  int Fail(int code, std::string_view message) const {
    err << "idem " << command << ": " << EscapeControls(message) << '\n' << std::flush;
    return code;
  }

  // A usage error: the message and where to look; returns kExitUsage.
  int Usage(std::string_view message) const {
    return Fail(kExitUsage, std::string(message) + " (see 'idem " + command + " --help')");
  }

  int StoreError(std::string_view path, const Status& status) const {
    const std::string shown = DisplayEscape(path);
    if (status.code() == Status::Code::kNotFound) {
      return Fail(kExitStoreError, "no idem store at " + shown + " (" + status.message() + ")");
    }
    if (status.code() == Status::Code::kBusy) {
      return Fail(kExitStoreError,
                  "store " + shown + " is held by another process (" + status.ToString() + ")");
    }
    return Fail(kExitStoreError, "cannot use store " + shown + ": " + status.ToString());
  }

  // Checks that the output was written; a closed pipe (`idem dump ... | head`) ends quietly.
  int FinishOutput(int code) const {
    out.flush();
    if (out.good()) return code;
    if (errno == EPIPE) return code;
    return Fail(kExitStoreError, "cannot write the output");
  }

  bool OutIsTerminal() const { return &out == &std::cout && ::isatty(STDOUT_FILENO) == 1; }
  bool ErrIsTerminal() const { return &err == &std::cerr && ::isatty(STDERR_FILENO) == 1; }
};

Result<std::unique_ptr<Store>> OpenStore(const std::string& path, bool read_only) {
  Options options;
  options.create_if_missing = false;
  options.read_only = read_only;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  return Store::Open(path, options);
}

// The key given on the command line, decoded from hex with --hex-key; nullopt after reporting a
// usage error.
std::optional<std::string> KeyArgument(const Context& ctx, const std::string& key, bool hex) {
  std::optional<std::string> bytes = hex ? util::FromHex(key) : std::optional<std::string>(key);
  if (!bytes) {
    ctx.Usage("--hex-key: '" + DisplayEscape(key) + "' is not hex (pairs of digits 0-9, a-f)");
    return std::nullopt;
  }
  if (bytes->empty()) {
    ctx.Usage("KEY is empty");
    return std::nullopt;
  }
  return bytes;
}

std::string ResolveFormat(const Context& ctx, const std::string& format) {
  if (!format.empty()) return format;
  return ctx.OutIsTerminal() ? "table" : "jsonl";
}

// ---- dump ----------------------------------------------------------------------------------

struct DumpArgs {
  std::string path;
  std::string state;  // empty: any
  std::string type;
  bool has_type = false;
  std::string prefix;
  std::string format;
  int64_t limit = 0;  // 0: no limit
};

int Dump(const Context& ctx, const DumpArgs& args) {
  auto store = OpenStore(args.path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(args.path, store.status());

  const bool table = ResolveFormat(ctx, args.format) == "table";
  RecordTable records_table(ctx.out);
  uint64_t listed = 0;
  std::string line;
  ScanOptions scan;
  scan.prefix = args.prefix;
  const Status scanned = (*store)->Scan(scan, [&](const Record& record) {
    if (!args.state.empty() && DisplayState(record) != args.state) return true;
    if (args.has_type && record.type != args.type) return true;
    ++listed;
    if (table) {
      records_table.Add(record);
    } else {
      line = RecordToJson(record);
      line += '\n';
      ctx.out << line;
    }
    if (!ctx.out.good()) return false;  // the reader went away (| head)
    return args.limit == 0 || listed < static_cast<uint64_t>(args.limit);
  });
  if (table) records_table.Flush();
  if (!scanned.ok()) {
    ctx.out.flush();
    return ctx.StoreError(args.path, scanned);
  }
  return ctx.FinishOutput(listed == 0 ? kExitNotFound : kExitOk);
}

// ---- get -----------------------------------------------------------------------------------

int Get(const Context& ctx, const std::string& path, const std::string& key_argument, bool hex_key,
        const std::string& format) {
  const std::optional<std::string> key = KeyArgument(ctx, key_argument, hex_key);
  if (!key) return kExitUsage;
  auto store = OpenStore(path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  auto record = (*store)->Get(*key);
  if (!record.ok()) {
    if (record.status().code() == Status::Code::kInvalidArgument) {
      return ctx.Usage(record.status().message());
    }
    return ctx.StoreError(path, record.status());
  }
  if (!record->has_value()) {
    return ctx.Fail(kExitNotFound, "no record for key '" + DisplayEscape(*key) + "'");
  }
  if (ResolveFormat(ctx, format) == "table") {
    WriteRecordFields(ctx.out, **record);
  } else {
    ctx.out << RecordToJson(**record) << '\n';
  }
  return ctx.FinishOutput(kExitOk);
}

// ---- stats ---------------------------------------------------------------------------------

constexpr std::array<std::string_view, 4> kDisplayStates = {"pending", "timeout", "done", "failed"};

struct StoreStats {
  uint64_t records = 0;
  std::map<std::string_view, uint64_t> by_state;
  std::map<std::string, uint64_t> by_type;
  std::optional<Record> oldest_pending;  // key and created only
  uint64_t disk_bytes = 0;
  Counters counters;

  uint64_t CountInState(std::string_view state) const {
    const auto it = by_state.find(state);
    return it == by_state.end() ? 0 : it->second;
  }
};

uint64_t DirectorySize(const std::string& path) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += size;
    }
  }
  return total;
}

std::string HumanBytes(uint64_t bytes) {
  constexpr std::array<std::string_view, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), unit == 0 ? "%.0f %s" : "%.1f %s", value,
                std::string(kUnits[unit]).c_str());
  return buffer;
}

std::string HumanAge(std::chrono::system_clock::duration age) {
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(age).count();
  if (seconds < 0) seconds = 0;
  char buffer[64];
  if (seconds < 120) {
    std::snprintf(buffer, sizeof(buffer), "%llds", static_cast<long long>(seconds));
  } else if (seconds < 2 * 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lldm", static_cast<long long>(seconds / 60));
  } else if (seconds < 2 * 86400) {
    std::snprintf(buffer, sizeof(buffer), "%lldh", static_cast<long long>(seconds / 3600));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lldd", static_cast<long long>(seconds / 86400));
  }
  return buffer;
}

// A Prometheus label value: valid UTF-8 with \, " and newline escaped.
std::string PrometheusLabel(std::string_view value) {
  std::string out;
  for (char c : ToValidUtf8(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void WriteStatsPrometheus(std::ostream& out, const std::string& path, const StoreStats& stats) {
  const std::string store = "store=\"" + PrometheusLabel(path) + "\"";
  const auto family = [&out](std::string_view name, std::string_view type, std::string_view help) {
    out << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
  };
  family("idem_records", "gauge",
         "Live records by state (timeout: pending with an expired lease).");
  for (std::string_view state : kDisplayStates) {
    out << "idem_records{" << store << ",state=\"" << state << "\"} " << stats.CountInState(state)
        << '\n';
  }
  family("idem_records_by_type", "gauge", "Live records by type label.");
  for (const auto& [type, count] : stats.by_type) {
    out << "idem_records_by_type{" << store << ",type=\"" << PrometheusLabel(type) << "\"} "
        << count << '\n';
  }
  family("idem_timed_out_records", "gauge",
         "Pending records whose lease has passed (stuck or abandoned).");
  out << "idem_timed_out_records{" << store << "} " << stats.CountInState("timeout") << '\n';
  if (stats.oldest_pending) {
    family("idem_oldest_pending_created_timestamp_seconds", "gauge",
           "Creation time of the oldest pending record, in seconds since the Unix epoch.");
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            stats.oldest_pending->created.time_since_epoch())
                            .count();
    char buffer[48];
    std::snprintf(buffer, sizeof(buffer), "%lld.%06lld", static_cast<long long>(micros / 1000000),
                  static_cast<long long>(micros % 1000000));
    out << "idem_oldest_pending_created_timestamp_seconds{" << store << "} " << buffer << '\n';
  }
  family("idem_disk_bytes", "gauge", "Bytes of all files under the store directory.");
  out << "idem_disk_bytes{" << store << "} " << stats.disk_bytes << '\n';
  for (const CounterInfo& counter : kCounters) {
    const std::string metric = "idem_" + std::string(counter.name) + "_total";
    family(metric, "counter",
           std::string(counter.help) + " Counted by the process that ran idem stats.");
    out << metric << '{' << store << "} " << stats.counters.*counter.field << '\n';
  }
}

void WriteStatsJson(std::ostream& out, const std::string& path, const StoreStats& stats) {
  std::string text;
  JsonWriter json(text);
  json.BeginObject();
  json.Key("store");
  json.String(path);
  json.Key("records");
  json.Number(stats.records);
  json.Key("by_state");
  json.BeginObject();
  for (std::string_view state : kDisplayStates) {
    json.Key(state);
    json.Number(stats.CountInState(state));
  }
  json.EndObject();
  json.Key("by_type");
  json.BeginObject();
  for (const auto& [type, count] : stats.by_type) {
    json.Key(type);
    json.Number(count);
  }
  json.EndObject();
  json.Key("timed_out");
  json.Number(stats.CountInState("timeout"));
  json.Key("oldest_pending");
  if (stats.oldest_pending) {
    json.BeginObject();
    json.Key("key");
    json.String(stats.oldest_pending->key);
    json.Key("created");
    json.Time(stats.oldest_pending->created);
    json.EndObject();
  } else {
    json.Null();
  }
  json.Key("disk_bytes");
  json.Number(stats.disk_bytes);
  json.Key("counters");
  json.BeginObject();
  for (const CounterInfo& counter : kCounters) {
    json.Key(counter.name);
    json.Number(stats.counters.*counter.field);
  }
  json.EndObject();
  json.EndObject();
  out << text << '\n';
}

void WriteStatsTable(std::ostream& out, const std::string& path, const StoreStats& stats) {
  out << "store           " << DisplayEscape(path) << '\n'
      << "disk size       " << HumanBytes(stats.disk_bytes) << " (" << stats.disk_bytes
      << " bytes)\n"
      << "records         " << stats.records << '\n';
  for (std::string_view state : kDisplayStates) {
    out << "  " << PadRight(std::string(state), 14) << stats.CountInState(state) << '\n';
  }
  out << "oldest pending  ";
  if (stats.oldest_pending) {
    out << DisplayCell(stats.oldest_pending->key, 48) << ", created "
        << FormatLocalTime(stats.oldest_pending->created) << " ("
        << HumanAge(std::chrono::system_clock::now() - stats.oldest_pending->created) << " ago)\n";
  } else {
    out << "-\n";
  }
  out << "by type\n";
  if (stats.by_type.empty()) out << "  -\n";
  for (const auto& [type, count] : stats.by_type) {
    out << "  " << PadRight(type.empty() ? "(none)" : DisplayCell(type, 32), 14) << count << '\n';
  }
  out << "counters (this process)\n";
  for (const CounterInfo& counter : kCounters) {
    out << "  " << PadRight(std::string(counter.name), 14) << stats.counters.*counter.field << '\n';
  }
}

int Stats(const Context& ctx, const std::string& path, const std::string& format_argument) {
  auto store = OpenStore(path, /*read_only=*/true);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  StoreStats stats;
  const Status scanned = (*store)->Scan(ScanOptions{}, [&](const Record& record) {
    ++stats.records;
    ++stats.by_state[DisplayState(record)];
    ++stats.by_type[record.type];
    if (record.state == State::kPending &&
        (!stats.oldest_pending || record.created < stats.oldest_pending->created)) {
      Record oldest;
      oldest.key = record.key;
      oldest.created = record.created;
      stats.oldest_pending = std::move(oldest);
    }
    return true;
  });
  if (!scanned.ok()) return ctx.StoreError(path, scanned);
  Result<Counters> counters = (*store)->GetCounters();
  if (!counters.ok()) return ctx.StoreError(path, counters.status());
  stats.counters = *counters;
  store->reset();
  stats.disk_bytes = DirectorySize(path);

  const std::string format = ResolveFormat(ctx, format_argument);
  if (format == "prometheus") {
    WriteStatsPrometheus(ctx.out, path, stats);
  } else if (format == "jsonl") {
    WriteStatsJson(ctx.out, path, stats);
  } else {
    WriteStatsTable(ctx.out, path, stats);
  }
  return ctx.FinishOutput(kExitOk);
}

// ---- purge ---------------------------------------------------------------------------------

int Purge(const Context& ctx, const std::string& path, bool dry_run, bool quiet) {
  // A dry run only reads: it never writes nor takes the store from its owner.
  auto store = OpenStore(path, /*read_only=*/dry_run);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  // On a terminal, say what is going on, with the running count when this process does the
  // purge itself (through another owner the count arrives at the end).
  const bool progress = !quiet && ctx.ErrIsTerminal();
  const char* verb = dry_run ? "counted" : "removed";
  auto last_shown = std::chrono::steady_clock::now();
  PurgeOptions options;
  options.dry_run = dry_run;
  options.compact = !dry_run;
  if (progress) {
    ctx.err << "idem purge: " << (dry_run ? "counting" : "removing") << " expired records in "
            << DisplayEscape(path) << " ..." << std::flush;
    options.progress = [&](uint64_t so_far) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_shown < std::chrono::milliseconds(200)) return;
      last_shown = now;
      ctx.err << "\r\033[Kidem purge: " << verb << " " << so_far << " expired records so far ..."
              << std::flush;
    };
  }
  auto purged = (*store)->Purge(options);
  if (progress) ctx.err << "\r\033[K" << std::flush;
  if (!purged.ok()) return ctx.StoreError(path, purged.status());
  store->reset();
  if (!quiet) {
    ctx.out << (dry_run ? "would purge " : "purged ") << *purged << " records\n";
  }
  return ctx.FinishOutput(kExitOk);
}

// ---- forget --------------------------------------------------------------------------------

int Forget(const Context& ctx, const std::string& path, const std::string& key_argument,
           bool hex_key) {
  const std::optional<std::string> key = KeyArgument(ctx, key_argument, hex_key);
  if (!key) return kExitUsage;
  auto store = OpenStore(path, /*read_only=*/false);
  if (!store.ok()) return ctx.StoreError(path, store.status());
  const Status forgotten = (*store)->Forget(*key);
  if (forgotten.code() == Status::Code::kNotFound) {
    return ctx.Fail(kExitNotFound, "no record for key '" + DisplayEscape(*key) + "'");
  }
  if (forgotten.code() == Status::Code::kInvalidArgument) {
    return ctx.Usage(forgotten.message());
  }
  if (!forgotten.ok()) return ctx.StoreError(path, forgotten);
  store->reset();
  ctx.out << "forgot " << DisplayEscape(*key) << '\n';
  return ctx.FinishOutput(kExitOk);
}

// --limit N: a decimal whole number from 1 to 2^63-1. Checked on the text, before CLI11 converts
// it: CLI11 2.1 reads a number too large for int64_t as the largest one (so
// --limit 99999999999999999999 meant "no limit"), and reads 0x10 as 16.
CLI::Validator LimitValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const char* first = text.data();
        const char* last = text.data() + text.size();
        const auto [stop, error] = std::from_chars(first, last, value);
        if (first == last || error != std::errc() || stop != last || value < 1) {
          return "'" + DisplayEscape(text) + "' is not a whole number from 1 to " +
                 std::to_string(std::numeric_limits<int64_t>::max());
        }
        return "";
      },
      "N >= 1");
}

// One line of a CLI11 message.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

// ---- Formats -------------------------------------------------------------------------------

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t code_point = 0;
    const std::size_t length = Utf8SequenceLength(s, i, &code_point);
    if (length == 0) {
      AppendJsonByteEscape(out, static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    if (length > 1) {
      out.append(s.substr(i, length));
      i += length;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          AppendJsonByteEscape(out, static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t code_point = 0;
    const std::size_t length = Utf8SequenceLength(s, i, &code_point);
    if (length > 0) {
      out.append(s.substr(i, length));
      i += length;
      continue;
    }
    // U+0080..U+00FF in UTF-8: two bytes.
    const unsigned char byte = static_cast<unsigned char>(s[i++]);
    out += static_cast<char>(0xC0 | (byte >> 6));
    out += static_cast<char>(0x80 | (byte & 0x3F));
  }
  return out;
}

std::string DisplayEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t code_point = 0;
    const std::size_t length = Utf8SequenceLength(s, i, &code_point);
    const bool printable = length == 1 ? (code_point >= 0x20 && code_point < 0x7F)
                                       : (length > 1 && code_point >= 0xA0);
    if (!printable) {
      // Escape every byte of a control character, or the one byte that starts no sequence.
      const std::size_t bytes = length == 0 ? 1 : length;
      for (std::size_t k = 0; k < bytes; ++k) {
        util::AppendEscapedByte(out, static_cast<unsigned char>(s[i + k]));
      }
      i += bytes;
      continue;
    }
    if (length == 1 && s[i] == '\\') {
      out += "\\\\";
    } else {
      out.append(s.substr(i, length));
    }
    i += length;
  }
  return out;
}

std::string FormatRfc3339(std::chrono::system_clock::time_point t) {
  const int64_t micros =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  int64_t seconds = micros / 1000000;
  int64_t fraction = micros % 1000000;
  if (fraction < 0) {
    fraction += 1000000;
    seconds -= 1;
  }
  const std::time_t time = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&time, &tm);
  char buffer[64];
  const std::size_t length = std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buffer + length, sizeof(buffer) - length, ".%06" PRId64 "Z", fraction);
  return buffer;
}

std::string FormatLocalTime(std::chrono::system_clock::time_point t) {
  const std::time_t time =
      std::chrono::system_clock::to_time_t(std::chrono::floor<std::chrono::seconds>(t));
  std::tm tm{};
  ::localtime_r(&time, &tm);
  char buffer[64];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &tm);
  return buffer;
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
  json.EndObject();
  return out;
}

// ---- The command line ----------------------------------------------------------------------

int Run(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"Inspect and maintain an idem idempotency store.", "idem"};
  app.set_version_flag("--version", std::string(IDEM_VERSION));
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success, 1 not found (get, forget) or nothing listed (dump), 2 usage error,\n"
      "3 store error (missing, unreadable, corrupt or busy). Run 'idem COMMAND --help' for a\n"
      "command's flags. See docs/operations.md.\n");

  const std::string format_help =
      "table (aligned columns, local times) or jsonl (one JSON object a line, UTC times). "
      "Default: table on a terminal, jsonl otherwise";

  DumpArgs dump;
  CLI::App* dump_command = app.add_subcommand(
      "dump",
      "List records in key order. Never writes; reads the store as of the moment it opens.");
  dump_command->add_option("PATH", dump.path, "Store directory")->required();
  dump_command
      ->add_option("--state", dump.state,
                   "Only records in this state (pending: lease live; timeout: lease passed)")
      ->check(CLI::IsMember({"pending", "done", "failed", "timeout"}));
  CLI::Option* type_option =
      dump_command->add_option("--type", dump.type, "Only records of this type label");
  dump_command->add_option("--prefix", dump.prefix, "Only keys that start with these bytes");
  dump_command->add_option("--format", dump.format, format_help)
      ->check(CLI::IsMember({"table", "jsonl"}));
  dump_command
      ->add_option("--limit", dump.limit, "Stop after N records (N >= 1). Default: no limit")
      ->check(LimitValidator());

  std::string get_path;
  std::string get_key;
  std::string get_format;
  bool get_hex = false;
  CLI::App* get_command =
      app.add_subcommand("get", "Show one record; exit 1 when there is none. Never writes.");
  get_command->add_option("PATH", get_path, "Store directory")->required();
  get_command
      ->add_option("KEY", get_key, "Key bytes as given (use -- before a key starting with -)")
      ->required();
  get_command->add_flag("--hex-key", get_hex, "KEY is written in hex (for binary keys)");
  get_command->add_option("--format", get_format, format_help)
      ->check(CLI::IsMember({"table", "jsonl"}));

  std::string stats_path;
  std::string stats_format;
  CLI::App* stats_command = app.add_subcommand(
      "stats", "Count records by state and type; disk size; counters. Never writes.");
  stats_command->add_option("PATH", stats_path, "Store directory")->required();
  stats_command
      ->add_option("--format", stats_format,
                   "table, jsonl (one JSON object) or prometheus (text exposition format, for "
                   "node_exporter's textfile collector). Default: table on a terminal, jsonl "
                   "otherwise")
      ->check(CLI::IsMember({"table", "jsonl", "prometheus"}));

  std::string purge_path;
  bool purge_dry_run = false;
  bool purge_quiet = false;
  CLI::App* purge_command = app.add_subcommand(
      "purge",
      "Remove records whose retention has expired, then compact what was removed. Last line: "
      "'purged N records' ('would purge N records' with --dry-run).");
  purge_command->add_option("PATH", purge_path, "Store directory")->required();
  purge_command->add_flag("--dry-run", purge_dry_run,
                          "Count what would be removed; remove nothing");
  purge_command->add_flag("--quiet", purge_quiet,
                          "Print nothing on success (errors still go to "
                          "stderr)");

  std::string forget_path;
  std::string forget_key;
  bool forget_hex = false;
  CLI::App* forget_command = app.add_subcommand(
      "forget",
      "Remove one record whatever its state (after reconciling a stuck request by hand); exit 1 "
      "when there is none.");
  forget_command->add_option("PATH", forget_path, "Store directory")->required();
  forget_command
      ->add_option("KEY", forget_key, "Key bytes as given (use -- before a key starting with -)")
      ->required();
  forget_command->add_flag("--hex-key", forget_hex, "KEY is written in hex (for binary keys)");

  const std::array<CLI::App*, 5> commands = {dump_command, get_command, stats_command,
                                             purge_command, forget_command};
  // CLI11 would report an unknown command as "A subcommand is required".
  if (argc >= 2 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(),
                   [&](const CLI::App* sub) { return sub->get_name() == argv[1]; })) {
    err << "idem: unknown command '" << DisplayEscape(argv[1])
        << "'; the commands are dump, get, stats, purge, forget (see 'idem --help')\n"
        << std::flush;
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, out, err);  // --help, --version
    }
    std::string command = "idem";
    for (CLI::App* sub : commands) {
      if (sub->parsed()) command += " " + sub->get_name();
    }
    err << command << ": " << OneLine(e.what()) << " (see '" << command << " --help')\n"
        << std::flush;
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "idem: " << OneLine(e.what()) << '\n' << std::flush;
    return kExitUsage;
  }

  try {
    if (dump_command->parsed()) {
      dump.has_type = type_option->count() > 0;
      return Dump(Context{"dump", out, err}, dump);
    }
    if (get_command->parsed()) {
      return Get(Context{"get", out, err}, get_path, get_key, get_hex, get_format);
    }
    if (stats_command->parsed()) {
      return Stats(Context{"stats", out, err}, stats_path, stats_format);
    }
    if (purge_command->parsed()) {
      return Purge(Context{"purge", out, err}, purge_path, purge_dry_run, purge_quiet);
    }
    if (forget_command->parsed()) {
      return Forget(Context{"forget", out, err}, forget_path, forget_key, forget_hex);
    }
  } catch (const std::exception& e) {  // std::bad_alloc, a filesystem error, ...
    err << "idem: " << OneLine(e.what()) << '\n' << std::flush;
    return kExitStoreError;
  }
  err << "idem: no command (see 'idem --help')\n";
  return kExitUsage;
}

}  // namespace idem::cli
