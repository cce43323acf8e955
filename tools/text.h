// Text for people and for programs: UTF-8 checks, the escapes of the JSON and table formats,
// display widths and padding, and times. Every other file of the command writes text through
// these (cli.h declares the ones tests check: JsonEscape, ToValidUtf8, the time formats). The
// escape for people, DisplayEscape, is the library's (util/escape.h).

#ifndef IDEM_TOOLS_TEXT_H_
#define IDEM_TOOLS_TEXT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cli.h"

namespace idem::cli {

using TimePoint = std::chrono::system_clock::time_point;

// A time never set (the epoch).
inline bool IsUnset(TimePoint t) { return t.time_since_epoch().count() == 0; }

// Whether `s` is well-formed UTF-8 (the rule every escape here reads bytes by).
bool IsValidUtf8(std::string_view s);

// The time an RFC 3339 text names ("2026-11-30T01:02:03.123456Z", "2026-11-30T02:02:03+01:00";
// a space or a lowercase t or z also do), to the microsecond (finer digits are dropped); nullopt
// when it is not one, or lies outside what a time_point holds (years 1678 to 2261).
std::optional<TimePoint> ParseRfc3339(std::string_view text);

// The columns a terminal gives text: each code point counts CodePointWidth (display_width.h:
// 2 for CJK and other wide characters, 0 for combining marks), each byte that is not UTF-8
// counts 1 (the command shows it escaped). Every table of the command is sized by this measure.
std::size_t DisplayWidth(std::string_view s);

// `text` (valid UTF-8) cut to `width` columns, ending with an ellipsis when cut (or always,
// with already_cut: the caller dropped a tail already).
std::string CutToWidth(std::string text, std::size_t width, bool already_cut = false);

// DisplayEscape(s) cut to `width` columns, without escaping more of a long `s` than it shows.
std::string DisplayCell(std::string_view s, std::size_t width);

// `text` padded with spaces to `width` columns as DisplayWidth counts them, after it or before
// it. For cells that may hold text of any script (keys, types, results): fmt's width spec
// (`{:<14}`) counts CJK and emoji as two columns, as DisplayWidth does, but a combining mark as
// one (fmt 9), and one measure must serve a whole table. Text known to be ASCII (labels, numbers,
// times) is padded with fmt's spec.
std::string PadRight(std::string text, std::size_t width);
std::string PadLeft(std::string text, std::size_t width);

// An age in its largest whole unit, for people: "42s", "17m", "5h", "3d" (negative: "0s").
std::string HumanAge(std::chrono::system_clock::duration age);

// A size for people: "512 B", "1.2 MiB".
std::string HumanBytes(uint64_t bytes);

// Removes the spaces at the end of `line` (a padded last cell, an empty value).
void TrimTrailingSpaces(std::string& line);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_TEXT_H_
