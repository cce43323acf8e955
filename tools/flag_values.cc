#include "flag_values.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>

#include "text.h"
#include "util/escape.h"

namespace idem::cli {

CLI::Validator LimitValidator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const char* first = text.data();
        const char* last = text.data() + text.size();
        const auto [stop, error] = std::from_chars(first, last, value);
        if (first == last || error != std::errc() || stop != last || value < 1) {
          return fmt::format("'{}' is not a whole number from 1 to {}", DisplayEscape(text),
                             std::numeric_limits<int64_t>::max());
        }
        return "";
      },
      "N >= 1");
}

std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text,
                                                       std::chrono::milliseconds longest) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [stop, error] = std::from_chars(first, last, value);
  if (first == stop || error != std::errc() || value < 1) return std::nullopt;
  const std::string_view unit(stop, static_cast<std::size_t>(last - stop));
  // No unit is longer than a day: value is below longest / a day, so no product overflows.
  if (value > longest.count()) return std::nullopt;
  std::chrono::milliseconds duration;
  if (unit == "ms") {
    duration = std::chrono::milliseconds(value);
  } else if (unit == "s" || unit.empty()) {
    duration = std::chrono::seconds(value);
  } else if (unit == "m") {
    duration = std::chrono::minutes(value);
  } else if (unit == "h") {
    duration = std::chrono::hours(value);
  } else if (unit == "d") {
    duration = std::chrono::days(value);
  } else {
    return std::nullopt;
  }
  if (duration > longest) return std::nullopt;
  return duration;
}

CLI::Validator DurationValidator(std::chrono::milliseconds longest, std::string_view range) {
  return CLI::Validator(
      [longest, range](std::string& text) -> std::string {
        if (ParseDuration(text, longest)) return "";
        return fmt::format(
            "'{}' is not a duration from {} (500ms, 2s, 1m, 1h, 30d; a bare number is seconds)",
            DisplayEscape(text), range);
      },
      "DURATION");
}

}  // namespace idem::cli
