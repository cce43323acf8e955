// Reading one line of the export format (docs/format.md, "Export format"), for `idem import`.
//
// The line is read with nlohmann's SAX interface, straight into a Record (or a table value), field
// by field as its members come: no JSON tree is built, so a line costs its lexing and the record's
// own strings. A member's value reaches the field's reader as a JsonScalar; bytes given as
// {"hex":"..."} arrive whole, once their object closes.

#include <fmt/format.h>

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "cli.h"
#include "export_format.h"
#include "records.h"
#include "util/hex.h"
#include "util/record_fields.h"

namespace idem::cli {
namespace {

// When a line gives no `expires`: idem's default retention (Options::default_retention, 30 days)
// after `created`.
constexpr std::chrono::hours kDefaultRetention{24 * 30};

Status Bad(std::string_view field, std::string_view why) {
  return Status::InvalidArgument(fmt::format("{}: {}", field, why));
}

// A member's value as the field readers see it. kOther: what no field takes (a fraction, an
// array, an object that is not {"hex": string}).
struct JsonScalar {
  enum class Kind { kNull, kBool, kWhole, kNegative, kString, kHex, kOther };
  Kind kind = Kind::kOther;
  bool boolean = false;
  uint64_t whole = 0;
  std::string* text = nullptr;  // kString, kHex: the string, which a reader may move from
};

Result<std::string> ReadBytes(const JsonScalar& value, std::string_view field) {
  if (value.kind == JsonScalar::Kind::kString) return std::move(*value.text);
  if (value.kind == JsonScalar::Kind::kHex) {
    std::optional<std::string> bytes = util::FromHex(*value.text);
    if (!bytes) return Bad(field, "\"hex\" is not pairs of hex digits");
    return std::move(*bytes);
  }
  return Bad(field, "must be a string, or {\"hex\":\"...\"} for bytes that are not UTF-8");
}

Result<uint64_t> ReadWhole(const JsonScalar& value, std::string_view field, uint64_t largest) {
  if (value.kind != JsonScalar::Kind::kWhole) {
    return Bad(field, fmt::format("must be a whole number from 0 to {}", largest));
  }
  if (value.whole > largest) {
    return Bad(field, fmt::format("{} is above the largest, {}", value.whole, largest));
  }
  return value.whole;
}

// A time: RFC 3339, or null for a time never set (the epoch).
Result<TimePoint> ReadTime(const JsonScalar& value, std::string_view field) {
  if (value.kind == JsonScalar::Kind::kNull) return TimePoint();
  if (value.kind == JsonScalar::Kind::kString) {
    if (std::optional<TimePoint> time = ParseRfc3339(*value.text)) return *time;
  }
  return Bad(field,
             "must be an RFC 3339 time such as \"2026-11-30T01:02:03.123456Z\" (years 1678 to "
             "2261), or null");
}

// A record's "state": "timeout" is derived, a pending record.
Result<State> ReadState(const JsonScalar& value, std::string_view name) {
  if (value.kind == JsonScalar::Kind::kString) {
    const std::string& state = *value.text;
    if (state == "pending" || state == "timeout") return State::kPending;
    if (state == "done") return State::kDone;
    if (state == "failed") return State::kFailed;
  }
  return Bad(name, "must be \"pending\", \"done\" or \"failed\" (or \"timeout\")");
}

// Reads `value` into the field of `record` that `Row` is, by the field's type.
template <class Row>
Status ReadField(const JsonScalar& value, Record& record) {
  constexpr std::string_view name = Row::field.name;
  auto& out = Row::field.Of(record);
  using Type = std::remove_cvref_t<decltype(out)>;
  if constexpr (std::is_same_v<Type, std::string>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadBytes(value, name));
  } else if constexpr (std::is_same_v<Type, State>) {
    IDEM_ASSIGN_OR_RETURN(out, ReadState(value, name));
  } else if constexpr (std::is_same_v<Type, bool>) {
    if (value.kind != JsonScalar::Kind::kBool) return Bad(name, "must be true or false");
    out = value.boolean;
  } else if constexpr (std::is_integral_v<Type>) {
    IDEM_ASSIGN_OR_RETURN(const uint64_t number, ReadWhole(value, name, Row::field.Largest()));
    if constexpr (name == "attempts") {
      if (number == 0) return Bad(name, "must be at least 1 (a record was acquired once)");
    }
    out = static_cast<Type>(number);
  } else {
    static_assert(std::is_same_v<Type, TimePoint>, "a field of a type the export cannot read");
    IDEM_ASSIGN_OR_RETURN(out, ReadTime(value, name));
  }
  return Status::OK();
}

constexpr std::size_t kFieldCount = util::kRecordFieldCount;

// Where a line may give each of util::kRecordFields: in the record's object, in its holder's, or
// nowhere (a field the export does not write).
enum class Place { kNowhere, kRecord, kHolder };
constexpr std::array<Place, kFieldCount> kPlaces = [] {
  std::array<Place, kFieldCount> places{};
  util::ForEachRecordField<util::kTableOrder>([&](auto row) {
    using Row = decltype(row);
    places[Row::kIndex] = !Row::field.exported   ? Place::kNowhere
                          : Row::field.kInHolder ? Place::kHolder
                                                 : Place::kRecord;
  });
  return places;
}();

// Reads `value` into the field in row `row` of util::kRecordFields; a holder field's message
// names it "holder.NAME".
Status ReadRow(std::size_t row, const JsonScalar& value, Record& record) {
  Status read;
  util::ForEachRecordField<util::kTableOrder>([&](auto each) {
    using Row = decltype(each);
    if constexpr (Row::field.exported) {
      if (Row::kIndex == row) read = ReadField<Row>(value, record);
    }
  });
  if (read.ok() || kPlaces[row] != Place::kHolder) return read;
  return Status::InvalidArgument("holder." + read.message());
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

// The members a line's objects may have: a record field by its row, or one of these.
enum Member : std::size_t {
  kHolderMember = kFieldCount,  // "holder": the holder's object
  kTableMember,                 // "table", "value", "version": a table value's
  kValueMember,
  kVersionMember,
  kUnknownMember,  // none of them: refused by name
};
constexpr std::size_t kKeyRow = util::RecordFieldIndex("key");
static_assert(kKeyRow < kFieldCount);

// The objects of a line: the record's (or table value's), the holder's, and bytes as
// {"hex": "..."}.
enum class Scope { kLine, kHolder, kBytes };

Member MemberNamed(std::string_view name, Scope scope) {
  if (scope == Scope::kLine) {
    if (name == "holder") return kHolderMember;
    if (name == "table") return kTableMember;
    if (name == "value") return kValueMember;
    if (name == "version") return kVersionMember;
  }
  const std::size_t row = util::RecordFieldIndex(name);
  const Place place = scope == Scope::kLine ? Place::kRecord : Place::kHolder;
  return row < kFieldCount && kPlaces[row] == place ? static_cast<Member>(row) : kUnknownMember;
}

// nlohmann's SAX handler (json::sax_parse) for one line. It reads the whole line whatever it
// meets, so that a syntax error anywhere in it is the one reported; what the line is (a record,
// or a table value when it has "table") is known at its end, so each member is read as both
// could take it and the first error of each kind is kept.
class LineReader {
 public:
  using Json = nlohmann::json;
  using Kind = JsonScalar::Kind;

  explicit LineReader(TimePoint now) : now_(now) { record_.attempts = 1; }

  bool null() { return Value({.kind = Kind::kNull}); }
  bool boolean(bool value) { return Value({.kind = Kind::kBool, .boolean = value}); }
  bool number_integer(Json::number_integer_t value) {
    if (value < 0) return Value({.kind = Kind::kNegative});
    return Value({.kind = Kind::kWhole, .whole = static_cast<uint64_t>(value)});
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    return Value({.kind = Kind::kWhole, .whole = value});
  }
  bool number_float(Json::number_float_t, const std::string&) { return Value({}); }
  bool string(std::string& value) { return Value({.kind = Kind::kString, .text = &value}); }
  bool binary(Json::binary_t&) { return Value({}); }
  bool start_array(std::size_t) {
    ++skipping_;  // no field is an array
    return true;
  }
  bool end_array() { return Close(); }
  bool start_object(std::size_t);
  bool end_object() { return Close(); }
  bool key(std::string& name);
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    syntax_error_ = error.what();  // nlohmann's says where: "... at line 1, column 12: ..."
    return false;
  }

  // What the line was, once sax_parse has returned.
  Result<ImportLine> Finish();

 private:
  bool Value(JsonScalar value);
  bool Close();
  void ReadLineMember(const JsonScalar& value);
  void KeepRecordError(Status status) {
    if (record_error_.ok()) record_error_ = std::move(status);
  }
  void KeepTableError(Status status) {
    if (table_error_.ok()) table_error_ = std::move(status);
  }
  void NotOfATableValue(std::string_view name) {
    KeepTableError(
        Bad(name, "is not a field of a table value (see docs/format.md, \"Export format\")"));
  }
  void NotOfARecord(std::string_view name) {
    KeepRecordError(
        Bad(name, "is not a field of a record (see docs/format.md, \"Export format\")"));
  }
  void Repeated(std::string_view name) {
    if (!repeated_) repeated_ = std::string(name);
  }
  Result<ImportLine> FinishTableValue();
  Result<ImportLine> FinishRecord();

  const TimePoint now_;
  std::array<Scope, 3> scopes_{};  // the objects open, innermost last
  std::size_t open_ = 0;
  std::size_t skipping_ = 0;  // containers open inside a value no field takes
  bool not_object_ = false;
  Member member_ = kUnknownMember;  // whose value comes next, in the line's or holder's object
  std::string member_name_;
  std::bitset<kUnknownMember> given_;  // the members given, to refuse one given twice
  // The bytes object being read: whether its member so far is one "hex" with a string.
  bool bytes_ok_ = false;
  bool bytes_named_hex_ = false;
  std::string hex_;

  Record record_;  // a table value's key too
  ExportedTableValue table_;
  Status record_error_;
  Status table_error_;
  std::optional<std::string> repeated_;
  std::optional<std::string> syntax_error_;
};

bool LineReader::start_object(std::size_t) {
  if (skipping_ > 0) {
    ++skipping_;
    return true;
  }
  if (open_ == 0) {
    scopes_[open_++] = Scope::kLine;
  } else if (scopes_[open_ - 1] == Scope::kLine && member_ == kHolderMember) {
    scopes_[open_++] = Scope::kHolder;
    NotOfATableValue("holder");
  } else if (scopes_[open_ - 1] != Scope::kBytes) {
    scopes_[open_++] = Scope::kBytes;
    bytes_ok_ = true;
    bytes_named_hex_ = false;
  } else {
    ++skipping_;  // an object inside {"hex": ...}
  }
  return true;
}

bool LineReader::key(std::string& name) {
  if (skipping_ > 0) return true;
  const Scope scope = scopes_[open_ - 1];
  if (scope == Scope::kBytes) {
    if (name != "hex") {
      bytes_ok_ = false;
    } else if (bytes_named_hex_) {
      Repeated(name);
    }
    bytes_named_hex_ = name == "hex";
    return true;
  }
  member_ = MemberNamed(name, scope);
  member_name_ = name;
  if (member_ != kUnknownMember) {
    if (given_[member_]) Repeated(name);
    given_.set(member_);
  }
  return true;
}

bool LineReader::Close() {
  if (skipping_ > 0) {
    // The end of a value no field takes, or of something inside one.
    return --skipping_ > 0 ? true : Value({});
  }
  const Scope closed = scopes_[--open_];
  if (closed != Scope::kBytes) return true;
  if (bytes_ok_ && bytes_named_hex_) return Value({.kind = Kind::kHex, .text = &hex_});
  return Value({});
}

bool LineReader::Value(JsonScalar value) {
  if (skipping_ > 0) return true;
  if (open_ == 0) {
    not_object_ = true;  // the line is a single value, not an object
    return true;
  }
  switch (scopes_[open_ - 1]) {
    case Scope::kBytes:
      if (bytes_named_hex_ && value.kind == Kind::kString) {
        hex_ = std::move(*value.text);
      } else {
        bytes_ok_ = false;
      }
      break;
    case Scope::kHolder:
      if (member_ == kUnknownMember) {
        KeepRecordError(Bad("holder." + member_name_,
                            fmt::format("is not a field of the holder ({})", HolderFieldNames())));
      } else {
        KeepRecordError(ReadRow(member_, value, record_));
      }
      break;
    case Scope::kLine:
      ReadLineMember(value);
      break;
  }
  return true;
}

void LineReader::ReadLineMember(const JsonScalar& value) {
  switch (member_) {
    case kHolderMember:
      KeepRecordError(Bad("holder", "must be an object"));
      NotOfATableValue("holder");
      return;
    case kTableMember:
      if (value.kind == Kind::kString) {
        table_.table = std::move(*value.text);
      } else {
        KeepTableError(Bad("table", "must be a string, the table's name"));
      }
      return;
    case kValueMember:
      if (Result<std::string> bytes = ReadBytes(value, "value"); bytes.ok()) {
        table_.value = std::move(*bytes);
      } else {
        KeepTableError(bytes.status());
      }
      NotOfARecord("value");
      return;
    case kVersionMember:
      if (Result<uint64_t> version = ReadWhole(value, "version", TableValue::kLargestVersion);
          !version.ok()) {
        KeepTableError(version.status());
      } else if (*version == 0) {
        KeepTableError(Bad("version", "must be at least 1 (the value was written)"));
      } else {
        table_.version = *version;
      }
      NotOfARecord("version");
      return;
    case kUnknownMember:
      NotOfARecord(member_name_);
      NotOfATableValue(member_name_);
      return;
    default: {
      Status read = ReadRow(member_, value, record_);
      if (member_ == kKeyRow) {
        KeepTableError(read);
      } else {
        NotOfATableValue(member_name_);
      }
      KeepRecordError(std::move(read));
    }
  }
}

Result<ImportLine> LineReader::Finish() {
  if (syntax_error_) return Status::InvalidArgument(fmt::format("not JSON: {}", *syntax_error_));
  if (repeated_) return Bad(*repeated_, "is given twice");
  if (not_object_) return Status::InvalidArgument("not a JSON object");
  return given_[kTableMember] ? FinishTableValue() : FinishRecord();
}

Result<ImportLine> LineReader::FinishTableValue() {
  IDEM_RETURN_IF_ERROR(table_error_);
  if (!given_[kKeyRow]) return Status::InvalidArgument("key: missing");
  table_.key = std::move(record_.key);
  if (table_.key.empty()) return Bad("key", "is empty");
  if (!given_[kValueMember]) return Status::InvalidArgument("value: missing");
  if (!given_[kVersionMember]) return Status::InvalidArgument("version: missing");
  return ImportLine(std::move(table_));
}

// The import's own rules: what a record's line must give, and what it may leave out.
Result<ImportLine> LineReader::FinishRecord() {
  IDEM_RETURN_IF_ERROR(record_error_);
  Record& record = record_;
  const auto given = [&](std::string_view name) { return given_[util::RecordFieldIndex(name)]; };
  if (!given("key")) return Status::InvalidArgument("key: missing");
  if (record.key.empty()) return Bad("key", "is empty");
  if (!given("state")) return Status::InvalidArgument("state: missing");
  if (record.retryable && record.state != State::kFailed) {
    return Bad("retryable", "may be true only when state is \"failed\"");
  }
  if (!given("created")) {
    record.created = std::chrono::time_point_cast<TimePoint::duration>(
        std::chrono::floor<std::chrono::microseconds>(now_));
  }
  if (!given("updated")) record.updated = record.created;
  if (!given("lease_deadline")) record.lease_deadline = record.created;
  if (!given("expires")) record.expires = record.created + kDefaultRetention;
  return ImportLine(std::move(record));
}

}  // namespace

// Refuses what a lenient reader takes silently: a NUL byte (where readers that stop at one see a
// shorter line: the rest of it was dropped) and a member named twice in one object (readers
// disagree on which one counts).
Result<ImportLine> ParseImportLine(std::string_view line, TimePoint now) {
  if (const std::size_t nul = line.find('\0'); nul != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format("a NUL byte at byte {} of the line", nul + 1));
  }
  LineReader reader(now);
  nlohmann::json::sax_parse(line, &reader);
  return reader.Finish();
}

}  // namespace idem::cli
