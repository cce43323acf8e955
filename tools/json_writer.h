// The command's one JSON writer.

#ifndef IDEM_TOOLS_JSON_WRITER_H_
#define IDEM_TOOLS_JSON_WRITER_H_

#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "text.h"

namespace idem::cli {

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
  void BeginArray() {
    Separate();
    out_ += '[';
    first_ = true;
  }
  void EndArray() {
    out_ += ']';
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
    fmt::format_to(std::back_inserter(out_), "{}", value);
  }
  void Bool(bool value) {
    Separate();
    out_ += value ? "true" : "false";
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

}  // namespace idem::cli

#endif  // IDEM_TOOLS_JSON_WRITER_H_
