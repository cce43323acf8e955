// Reading one line of the export format (docs/format.md, "Export format"), for `idem import`.
//
// The line is read with a SAX interface (quick_json.h's, or nlohmann's for what that one does not
// take), straight into a Record (or a table value), field by field as its members come: no JSON
// tree is built, so a line costs its lexing and the record's own strings. A member's value
// reaches the field's reader (import_field.h) as a JsonScalar; bytes given as {"hex":"..."}
// arrive whole, once their object closes.

#include <fmt/format.h>

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "export_format.h"
#include "import_field.h"
#include "quick_json.h"
#include "util/record_fields.h"

namespace idem::cli {
namespace {

// When a line gives no `expires`: idem's default retention (Options::default_retention, 30 days)
// after `created`.
constexpr std::chrono::hours kDefaultRetention{24 * 30};

Status NotAField(std::string_view name, std::string_view of_what) {
  return FieldError(
      name, fmt::format("is not a field of {} (see docs/format.md, \"Export format\")", of_what));
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

// Each row's next row that a line may give (kFieldCount after the last).
inline constexpr std::array<std::size_t, kFieldCount> kNextGivenRow = [] {
  std::array<std::size_t, kFieldCount> next{};
  std::size_t after = kFieldCount;
  for (std::size_t row = kFieldCount; row-- > 0;) {
    next[row] = after;
    if (kPlaces[row] != Place::kNowhere) after = row;
  }
  return next;
}();

// No field bears a name the line's object gives another meaning, so the row tried first never
// hides one.
static_assert(util::RecordFieldIndex("holder") == kFieldCount &&
              util::RecordFieldIndex("table") == kFieldCount &&
              util::RecordFieldIndex("value") == kFieldCount &&
              util::RecordFieldIndex("version") == kFieldCount);

// `likely` is tried first: lines from `idem export` give the fields in their rows' order, so the
// row after the last one named is usually the next.
Member MemberNamed(std::string_view name, Scope scope, std::size_t likely) {
  const Place place = scope == Scope::kLine ? Place::kRecord : Place::kHolder;
  if (likely < kFieldCount && kPlaces[likely] == place && kFieldNames[likely] == name) {
    return static_cast<Member>(likely);
  }
  if (scope == Scope::kLine) {
    if (name == "holder") return kHolderMember;
    if (name == "table") return kTableMember;
    if (name == "value") return kValueMember;
    if (name == "version") return kVersionMember;
  }
  const std::size_t row = util::RecordFieldIndex(name);
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
  // The first reason the line is not a record (or not a table value) is kept: a Status, or the
  // name of a member that kind has not, whose message is made only if the line turns out to be
  // of that kind (every record's line has fields no table value has). Such a name outlives the
  // reader: a literal, or one of kFieldNames.
  void KeepRecordError(Status status) {
    if (record_error_.ok() && record_not_field_.empty()) record_error_ = std::move(status);
  }
  void KeepTableError(Status status) {
    if (table_error_.ok() && table_not_field_.empty()) table_error_ = std::move(status);
  }
  void NotOfATableValue(std::string_view lasting_name) {
    if (table_error_.ok() && table_not_field_.empty()) table_not_field_ = lasting_name;
  }
  void NotOfARecord(std::string_view lasting_name) {
    if (record_error_.ok() && record_not_field_.empty()) record_not_field_ = lasting_name;
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
  Member member_ = kUnknownMember;     // whose value comes next, in the line's or holder's object
  std::size_t likely_row_ = 0;         // the row the next member's name most likely names
  std::string member_name_;            // when member_ is kUnknownMember
  std::bitset<kUnknownMember> given_;  // the members given, to refuse one given twice
  // The bytes object being read: whether its member so far is one "hex" with a string.
  bool bytes_ok_ = false;
  bool bytes_named_hex_ = false;
  std::string hex_;

  Record record_;  // a table value's key too
  ExportedTableValue table_;
  Status record_error_;
  Status table_error_;
  std::string_view record_not_field_;
  std::string_view table_not_field_;
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
  member_ = MemberNamed(name, scope, likely_row_);
  if (member_ < kFieldCount) likely_row_ = kNextGivenRow[member_];
  if (member_ == kUnknownMember) {
    member_name_ = name;  // its message quotes it
  } else {
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
        KeepRecordError(
            FieldError("holder." + member_name_,
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
      KeepRecordError(FieldError("holder", "must be an object"));
      NotOfATableValue("holder");
      return;
    case kTableMember:
      if (value.kind == Kind::kString) {
        table_.table = std::move(*value.text);
      } else {
        KeepTableError(FieldError("table", "must be a string, the table's name"));
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
        KeepTableError(FieldError("version", "must be at least 1 (the value was written)"));
      } else {
        table_.version = *version;
      }
      NotOfARecord("version");
      return;
    case kUnknownMember:
      KeepRecordError(NotAField(member_name_, "a record"));
      KeepTableError(NotAField(member_name_, "a table value"));
      return;
    default: {
      Status read = ReadRow(member_, value, record_);
      if (member_ == kKeyRow) {
        KeepTableError(read);
      } else {
        NotOfATableValue(kFieldNames[member_]);
      }
      KeepRecordError(std::move(read));
    }
  }
}

Result<ImportLine> LineReader::Finish() {
  if (syntax_error_) return Status::InvalidArgument(fmt::format("not JSON: {}", *syntax_error_));
  if (repeated_) return FieldError(*repeated_, "is given twice");
  if (not_object_) return Status::InvalidArgument("not a JSON object");
  return given_[kTableMember] ? FinishTableValue() : FinishRecord();
}

Result<ImportLine> LineReader::FinishTableValue() {
  if (!table_not_field_.empty()) return NotAField(table_not_field_, "a table value");
  IDEM_RETURN_IF_ERROR(table_error_);
  if (!given_[kKeyRow]) return Status::InvalidArgument("key: missing");
  table_.key = std::move(record_.key);
  if (table_.key.empty()) return FieldError("key", "is empty");
  if (!given_[kValueMember]) return Status::InvalidArgument("value: missing");
  if (!given_[kVersionMember]) return Status::InvalidArgument("version: missing");
  return ImportLine(std::move(table_));
}

// The import's own rules: what a record's line must give, and what it may leave out.
Result<ImportLine> LineReader::FinishRecord() {
  if (!record_not_field_.empty()) return NotAField(record_not_field_, "a record");
  IDEM_RETURN_IF_ERROR(record_error_);
  Record& record = record_;
  const auto given = [&](std::string_view name) { return given_[util::RecordFieldIndex(name)]; };
  if (!given("key")) return Status::InvalidArgument("key: missing");
  if (record.key.empty()) return FieldError("key", "is empty");
  if (!given("state")) return Status::InvalidArgument("state: missing");
  if (record.retryable && record.state != State::kFailed) {
    return FieldError("retryable", "may be true only when state is \"failed\"");
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
  // Most lines are read by the quick reader; a line it does not take whole is read again by
  // nlohmann, from the start and into a fresh reader, so that its errors are nlohmann's.
  LineReader quick(now);
  if (ReadQuickJson(line, quick) != QuickJson::kUnsure) return quick.Finish();
  LineReader reader(now);
  nlohmann::json::sax_parse(line, &reader);
  return reader.Finish();
}

}  // namespace idem::cli
