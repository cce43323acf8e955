#include "text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <ctime>
#include <limits>

#include "display_width.h"
#include "util/escape.h"
#include "util/hex.h"
#include "util/utf8.h"

namespace idem::cli {
namespace {

using util::ForEachUtf8Piece;
using util::Utf8Piece;

unsigned char FirstByte(const Utf8Piece& piece) {
  return static_cast<unsigned char>(piece.bytes.front());
}

void AppendJsonByteEscape(std::string& out, unsigned char byte) {
  out += "\\u00";
  util::AppendHexByte(out, byte);
}

// An ASCII character in a JSON string: the short escapes where JSON has them, \u00XX for the
// other controls and DEL.
void AppendJsonAscii(std::string& out, char c) {
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

constexpr std::string_view kEllipsis = "\u2026";

}  // namespace

std::size_t DisplayWidth(std::string_view s) {
  std::size_t columns = 0;
  ForEachUtf8Piece(s, [&columns](const Utf8Piece& piece) {
    columns += piece.valid ? static_cast<std::size_t>(CodePointWidth(piece.code_point)) : 1;
  });
  return columns;
}

std::string CutToWidth(std::string text, std::size_t width, bool already_cut) {
  if (!already_cut && DisplayWidth(text) <= width) return text;
  if (width == 0) return "";
  // Keeps whole characters filling at most width - 1 columns (the ellipsis takes the last one),
  // with the zero-width marks that follow the last one kept: a wide character that would
  // straddle the limit is dropped whole, and the cell is then a column short (padding fills it).
  std::size_t columns = 0;
  std::size_t end = 0;
  bool full = false;
  ForEachUtf8Piece(text, [&](const Utf8Piece& piece) {
    if (full) return;
    const std::size_t wide =
        piece.valid ? static_cast<std::size_t>(CodePointWidth(piece.code_point)) : 1;
    if (columns + wide > width - 1) {
      full = true;
      return;
    }
    columns += wide;
    end += piece.bytes.size();
  });
  text.resize(end);
  text += kEllipsis;
  return text;
}

// DisplayEscape(s) cut to `width` columns, without escaping more of a long `s` than it shows.
std::string DisplayCell(std::string_view s, std::size_t width) {
  // An escape takes at most 4 columns per byte, a code point of one column or more at least one
  // byte: 4 * width bytes fill `width` columns, unless zero-width marks take many of them; then
  // the cell ends with an ellipsis all the same.
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

std::string HumanBytes(uint64_t bytes) {
  constexpr std::array<std::string_view, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, unit == 0 ? 0 : 1, kUnits[unit]);
}

std::string HumanAge(std::chrono::system_clock::duration age) {
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(age).count();
  if (seconds < 0) seconds = 0;
  if (seconds < 120) return fmt::format("{}s", seconds);
  if (seconds < 2 * 3600) return fmt::format("{}m", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{}h", seconds / 3600);
  return fmt::format("{}d", seconds / 86400);
}

void TrimTrailingSpaces(std::string& line) { line.erase(line.find_last_not_of(' ') + 1); }

std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  ForEachUtf8Piece(s, [&out](const Utf8Piece& piece) {
    if (!piece.valid) {
      AppendJsonByteEscape(out, FirstByte(piece));
    } else if (piece.bytes.size() > 1) {
      out += piece.bytes;
    } else {
      AppendJsonAscii(out, piece.bytes.front());
    }
  });
  return out;
}

bool IsValidUtf8(std::string_view s) {
  bool valid = true;
  ForEachUtf8Piece(s, [&valid](const Utf8Piece& piece) { valid = valid && piece.valid; });
  return valid;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  ForEachUtf8Piece(s, [&out](const Utf8Piece& piece) {
    if (piece.valid) {
      out += piece.bytes;
      return;
    }
    // U+0080..U+00FF in UTF-8: two bytes.
    const unsigned char byte = FirstByte(piece);
    out += static_cast<char>(0xC0 | (byte >> 6));
    out += static_cast<char>(0x80 | (byte & 0x3F));
  });
  return out;
}

std::string FormatRfc3339(std::chrono::system_clock::time_point t) {
  // The calendar of <chrono>, not gmtime_r: no time_t on the way, so that a 32-bit time_t (a
  // build without _TIME_BITS=64 on armhf) cannot wrap the dates after 2038.
  const auto micros = std::chrono::floor<std::chrono::microseconds>(t);
  const auto day = std::chrono::floor<std::chrono::days>(micros);
  const std::chrono::year_month_day date(day);
  const std::chrono::hh_mm_ss<std::chrono::microseconds> time(micros - day);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", static_cast<int>(date.year()),
                     static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
                     time.hours().count(), time.minutes().count(), time.seconds().count(),
                     time.subseconds().count());
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

namespace {

// Reads an RFC 3339 date left to right, piece by piece.
class Rfc3339Reader {
 public:
  explicit Rfc3339Reader(std::string_view text) : text_(text) {}

  // `digits` decimal digits, or -1.
  int64_t Number(std::size_t digits) {
    if (at_ + digits > text_.size()) return -1;
    int64_t value = 0;
    for (std::size_t i = 0; i < digits; ++i) {
      const char c = text_[at_ + i];
      if (c < '0' || c > '9') return -1;
      value = value * 10 + (c - '0');
    }
    at_ += digits;
    return value;
  }
  // Whether the next character is one of `allowed`; taken if it is.
  bool Literal(std::string_view allowed) {
    if (at_ >= text_.size() || allowed.find(text_[at_]) == std::string_view::npos) return false;
    ++at_;
    return true;
  }
  // The fraction of a second, if any ('.' and at least one digit), in microseconds (digits past
  // the sixth are dropped); -1 for a '.' without digits.
  int64_t Micros() {
    if (!Literal(".")) return 0;
    int64_t micros = 0;
    std::size_t digits = 0;
    for (; at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; ++at_, ++digits) {
      if (digits < 6) micros = micros * 10 + (text_[at_] - '0');
    }
    if (digits == 0) return -1;
    for (; digits < 6; ++digits) micros *= 10;
    return micros;
  }
  // The offset from UTC, in minutes: 'Z', or a sign and hh:mm.
  std::optional<int64_t> OffsetMinutes() {
    if (Literal("Zz")) return 0;
    if (at_ >= text_.size() || (text_[at_] != '+' && text_[at_] != '-')) return std::nullopt;
    const int64_t sign = text_[at_++] == '-' ? -1 : 1;
    const int64_t hours = Number(2);
    if (hours < 0 || !Literal(":")) return std::nullopt;
    const int64_t minutes = Number(2);
    if (minutes < 0 || hours > 23 || minutes > 59) return std::nullopt;
    return sign * (hours * 60 + minutes);
  }
  bool AtEnd() const { return at_ == text_.size(); }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace

std::optional<TimePoint> ParseRfc3339(std::string_view text) {
  Rfc3339Reader read(text);
  const int64_t year = read.Number(4);
  if (year < 0 || !read.Literal("-")) return std::nullopt;
  const int64_t month = read.Number(2);
  if (month < 0 || !read.Literal("-")) return std::nullopt;
  const int64_t day = read.Number(2);
  if (day < 0 || !read.Literal("Tt ")) return std::nullopt;
  const int64_t hour = read.Number(2);
  if (hour < 0 || !read.Literal(":")) return std::nullopt;
  const int64_t minute = read.Number(2);
  if (minute < 0 || !read.Literal(":")) return std::nullopt;
  const int64_t second = read.Number(2);
  if (second < 0) return std::nullopt;
  const int64_t micros = read.Micros();
  if (micros < 0) return std::nullopt;
  const std::optional<int64_t> offset_minutes = read.OffsetMinutes();
  if (!offset_minutes || !read.AtEnd()) return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year(static_cast<int>(year)),
                                         std::chrono::month(static_cast<unsigned>(month)),
                                         std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 59) return std::nullopt;
  // Whole seconds first: years far from 1970 are refused before anything could overflow.
  const int64_t seconds =
      static_cast<int64_t>(std::chrono::sys_days(date).time_since_epoch() / std::chrono::days(1)) *
          86400 +
      hour * 3600 + minute * 60 + second - *offset_minutes * 60;
  // What a system_clock::time_point (nanoseconds in an int64) holds, with a second to spare.
  constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 1000000000 - 1;
  if (seconds > kLimit || seconds < -kLimit) return std::nullopt;
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(
      std::chrono::microseconds(seconds * 1000000 + micros)));
}

}  // namespace idem::cli
