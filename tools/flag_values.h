// The values of `idem`'s flags that CLI11 cannot check alone: --limit's whole numbers and the
// durations of --timeout and --older-than, parsed from their text.

#ifndef IDEM_TOOLS_FLAG_VALUES_H_
#define IDEM_TOOLS_FLAG_VALUES_H_

#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>
#include <string_view>

namespace idem::cli {

// --limit N: a decimal whole number from 1 to 2^63-1. Checked on the text, before CLI11 converts
// it: CLI11 2.1 reads a number too large for int64_t as the largest one (so
// --limit 99999999999999999999 meant "no limit"), and reads 0x10 as 16.
CLI::Validator LimitValidator();

// A duration: a whole number of milliseconds, seconds, minutes, hours or days ("500ms", "2s",
// "1m", "1h", "30d"; a bare number is seconds), from 1 ms to `longest`. Nullopt when `text` is
// not one.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text,
                                                       std::chrono::milliseconds longest);

// --timeout: from 1 ms to a day; --older-than: to ten years.
inline constexpr std::chrono::milliseconds kLongestTimeout = std::chrono::days(1);
inline constexpr std::chrono::milliseconds kLongestAge = std::chrono::days(3650);

// Checks that a flag's text is a ParseDuration duration up to `longest`; `range` says which in
// the message.
CLI::Validator DurationValidator(std::chrono::milliseconds longest, std::string_view range);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_FLAG_VALUES_H_
