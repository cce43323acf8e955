// A SAX reader for the JSON that `idem export` writes, several times faster than nlohmann's
// lexer, which copies a string a character at a time (a fifth of an import's time went there:
// docs/design/import-ingest-plan.md). It takes the common shapes only: objects, arrays, strings
// of well-formed UTF-8 with JSON's escapes, whole numbers from 0 to 2^64-1, true, false and null.
// On anything else (a negative number or a fraction, nesting deeper than kQuickJsonDepth, a
// syntax error) it stops and says so, and the caller reads the text again with nlohmann, which
// reports the error or reads the rest: every error message and every unusual shape stays
// nlohmann's.
//
// The handler is nlohmann's SAX interface (json_sax), and on a text this reader takes it gets
// exactly the calls nlohmann's sax_parse(text, handler) makes, in the same order (the import
// line's fuzz target checks it): string and key hand it a std::string it may move from.

#ifndef IDEM_TOOLS_QUICK_JSON_H_
#define IDEM_TOOLS_QUICK_JSON_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idem::cli {

inline constexpr std::size_t kQuickJsonDepth = 32;

enum class QuickJson {
  kRead,     // one JSON value and nothing after it but white space: every call was made
  kStopped,  // a handler's call returned false, as nlohmann's sax_parse stops then
  kUnsure,   // something this reader does not take: start again with a fresh handler and nlohmann
};

template <typename Handler>
class QuickJsonReader {
 public:
  QuickJsonReader(std::string_view text, Handler& handler)
      : at_(text.data()), end_(text.data() + text.size()), handler_(handler) {}

  QuickJson Read();

 private:
  // kOn: a value has ended (or, from AfterValue, the next one starts at at_); kOpened: a
  // container has opened and its first value starts at at_.
  enum class Step { kOn, kOpened, kStopped, kUnsure };
  static constexpr std::size_t kUnknownSize = static_cast<std::size_t>(-1);  // as nlohmann's

  void SkipSpace() {
    while (at_ != end_ && (*at_ == ' ' || *at_ == '\t' || *at_ == '\n' || *at_ == '\r')) ++at_;
  }
  bool Take(char expected) {
    if (at_ == end_ || *at_ != expected) return false;
    ++at_;
    return true;
  }
  static Step Called(bool on) { return on ? Step::kOn : Step::kStopped; }
  Step StartValue();
  Step AfterValue();
  Step Member();
  Step Scalar();
  Step Number();
  Step Literal(std::string_view word);
  bool String();
  bool Escape();
  bool Hex4(uint32_t& code);
  bool UnicodeEscape();
  bool Utf8Sequence();

  const char* at_;
  const char* const end_;
  Handler& handler_;
  std::string text_;  // the string being read, handed to string() or key()
  std::array<bool, kQuickJsonDepth> in_object_{};  // the containers open, innermost last
  std::size_t depth_ = 0;
  bool done_ = false;  // the outermost value has ended
};

template <typename Handler>
QuickJson ReadQuickJson(std::string_view text, Handler& handler) {
  return QuickJsonReader<Handler>(text, handler).Read();
}

// ---- Implementation -----------------------------------------------------------------------------

template <typename Handler>
QuickJson QuickJsonReader<Handler>::Read() {
  SkipSpace();
  while (!done_) {
    Step step = StartValue();
    if (step == Step::kOpened) continue;
    if (step == Step::kOn) step = AfterValue();
    if (step == Step::kStopped) return QuickJson::kStopped;
    if (step == Step::kUnsure) return QuickJson::kUnsure;
  }
  SkipSpace();
  return at_ == end_ ? QuickJson::kRead : QuickJson::kUnsure;
}

// Reads a value's start: a scalar whole (kOn), an empty container whole (kOn), or a container's
// opening and its first member's name (kOpened).
template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::StartValue() {
  if (at_ == end_) return Step::kUnsure;
  const char opening = *at_;
  if (opening != '{' && opening != '[') return Scalar();
  ++at_;
  const bool object = opening == '{';
  if (!(object ? handler_.start_object(kUnknownSize) : handler_.start_array(kUnknownSize))) {
    return Step::kStopped;
  }
  SkipSpace();
  if (Take(object ? '}' : ']'))
    return Called(object ? handler_.end_object() : handler_.end_array());
  if (depth_ == kQuickJsonDepth) return Step::kUnsure;
  in_object_[depth_++] = object;
  if (!object) return Step::kOpened;
  const Step named = Member();
  return named == Step::kOn ? Step::kOpened : named;
}

// After a value: closes the containers it ends, and reads the separator (and the next member's
// name) before the next value.
template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::AfterValue() {
  for (;;) {
    SkipSpace();
    if (depth_ == 0) {
      done_ = true;
      return Step::kOn;
    }
    const bool object = in_object_[depth_ - 1];
    if (Take(',')) {
      SkipSpace();
      return object ? Member() : Step::kOn;
    }
    if (!Take(object ? '}' : ']')) return Step::kUnsure;
    --depth_;
    if (!(object ? handler_.end_object() : handler_.end_array())) return Step::kStopped;
  }
}

// A member's name and its colon, up to where its value starts.
template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::Member() {
  if (!Take('"') || !String()) return Step::kUnsure;
  if (!handler_.key(text_)) return Step::kStopped;
  SkipSpace();
  if (!Take(':')) return Step::kUnsure;
  SkipSpace();
  return Step::kOn;
}

template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::Scalar() {
  switch (*at_) {
    case '"':
      ++at_;
      if (!String()) return Step::kUnsure;
      return Called(handler_.string(text_));
    case 't':
      return Literal("true");
    case 'f':
      return Literal("false");
    case 'n':
      return Literal("null");
    default:
      return Number();
  }
}

template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::Literal(std::string_view word) {
  if (static_cast<std::size_t>(end_ - at_) < word.size() ||
      std::string_view(at_, word.size()) != word) {
    return Step::kUnsure;
  }
  at_ += word.size();
  if (word == "null") return Called(handler_.null());
  return Called(handler_.boolean(word == "true"));
}

// A whole number from 0 to 2^64-1, as nlohmann reads it: no leading zero, no sign. A fraction,
// an exponent or a larger number (which nlohmann reads as a double) is left to nlohmann: the
// character after the digits must end the number.
template <typename Handler>
typename QuickJsonReader<Handler>::Step QuickJsonReader<Handler>::Number() {
  const char* const first = at_;
  uint64_t value = 0;
  while (at_ != end_ && *at_ >= '0' && *at_ <= '9') {
    if (__builtin_mul_overflow(value, 10u, &value) ||
        __builtin_add_overflow(value, static_cast<uint64_t>(*at_ - '0'), &value)) {
      return Step::kUnsure;
    }
    ++at_;
  }
  if (at_ == first || (*first == '0' && at_ - first > 1)) return Step::kUnsure;
  if (at_ != end_ && (*at_ == '.' || *at_ == 'e' || *at_ == 'E')) return Step::kUnsure;
  return Called(handler_.number_unsigned(value));
}

// The rest of a string after its opening quote, into text_: runs of plain characters are copied
// whole.
template <typename Handler>
bool QuickJsonReader<Handler>::String() {
  text_.clear();
  for (;;) {
    const char* run = at_;
    while (at_ != end_) {
      const auto c = static_cast<unsigned char>(*at_);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++at_;
    }
    text_.append(run, at_);
    if (at_ == end_) return false;
    const auto c = static_cast<unsigned char>(*at_);
    if (c == '"') {
      ++at_;
      return true;
    }
    if (c < 0x20) return false;  // a control character must be escaped
    if (!(c == '\\' ? Escape() : Utf8Sequence())) return false;
  }
}

template <typename Handler>
bool QuickJsonReader<Handler>::Escape() {
  ++at_;  // the backslash
  if (at_ == end_) return false;
  constexpr std::string_view kLetters = "\"\\/bfnrt";
  constexpr std::string_view kMeant = "\"\\/\b\f\n\r\t";
  const char letter = *at_++;
  if (letter == 'u') return UnicodeEscape();
  const std::size_t which = kLetters.find(letter);
  if (which == std::string_view::npos) return false;  // not an escape: nlohmann's error
  text_.push_back(kMeant[which]);
  return true;
}

// The four hex digits of a \u escape.
template <typename Handler>
bool QuickJsonReader<Handler>::Hex4(uint32_t& code) {
  if (end_ - at_ < 4) return false;
  code = 0;
  for (int i = 0; i < 4; ++i, ++at_) {
    const char digit = *at_;
    uint32_t value = 0;
    if (digit >= '0' && digit <= '9') {
      value = static_cast<uint32_t>(digit - '0');
    } else if ((digit | 0x20) >= 'a' && (digit | 0x20) <= 'f') {
      value = static_cast<uint32_t>((digit | 0x20) - 'a' + 10);
    } else {
      return false;
    }
    code = code << 4 | value;
  }
  return true;
}

// After "\u": a character of the Basic Multilingual Plane, or a surrogate pair for one past it,
// written as UTF-8, as nlohmann does (U+0000 too). A lone or reversed surrogate is nlohmann's
// error.
template <typename Handler>
bool QuickJsonReader<Handler>::UnicodeEscape() {
  uint32_t code = 0;
  if (!Hex4(code) || (code >= 0xDC00 && code <= 0xDFFF)) return false;
  if (code >= 0xD800 && code <= 0xDBFF) {
    uint32_t low = 0;
    if (end_ - at_ < 2 || at_[0] != '\\' || at_[1] != 'u') return false;
    at_ += 2;
    if (!Hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
  }
  const auto byte = [this](uint32_t value) { text_.push_back(static_cast<char>(value)); };
  if (code < 0x80) {
    byte(code);
  } else if (code < 0x800) {
    byte(0xC0 | code >> 6);
    byte(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    byte(0xE0 | code >> 12);
    byte(0x80 | (code >> 6 & 0x3F));
    byte(0x80 | (code & 0x3F));
  } else {
    byte(0xF0 | code >> 18);
    byte(0x80 | (code >> 12 & 0x3F));
    byte(0x80 | (code >> 6 & 0x3F));
    byte(0x80 | (code & 0x3F));
  }
  return true;
}

// One character of two to four bytes, well formed as RFC 3629 says and nlohmann checks: no
// overlong form, no surrogate, nothing past U+10FFFF.
template <typename Handler>
bool QuickJsonReader<Handler>::Utf8Sequence() {
  const auto lead = static_cast<unsigned char>(*at_);
  unsigned char low = 0x80;  // the second byte's range; every later one is 0x80-0xBF
  unsigned char high = 0xBF;
  std::size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return false;
  }
  if (static_cast<std::size_t>(end_ - at_) < length) return false;
  for (std::size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(at_[i]);
    if (next < (i == 1 ? low : 0x80) || next > (i == 1 ? high : 0xBF)) return false;
  }
  text_.append(at_, length);
  at_ += length;
  return true;
}

}  // namespace idem::cli

#endif  // IDEM_TOOLS_QUICK_JSON_H_
