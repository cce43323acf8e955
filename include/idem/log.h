// What a store says that no call returns (Options::log): a refused connection to its socket, a
// failover, a disk quota crossed, a disk error and its recovery. Each line has a severity, a
// stable event name (docs/operations.md, "Log events") and a one-line message.

#ifndef IDEM_LOG_H_
#define IDEM_LOG_H_

#include <cstddef>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace idem {

enum class LogSeverity {
  kInfo,     // a recovery or a change of owner: nothing to do
  kWarning,  // something refused or degraded that may need an operator: the store goes on
  kError,    // something that failed: writes may be stopped until it is fixed
};

// "info", "warning", "error".
constexpr std::string_view LogSeverityName(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "info";
    case LogSeverity::kWarning:
      return "warning";
    case LogSeverity::kError:
      return "error";
  }
  return "error";
}

// One line, valid during the sink's call only.
struct LogLine {
  LogSeverity severity = LogSeverity::kWarning;
  // snake_case, stable across releases ("foreign_uid", "disk_quota_reached"): match on it, not
  // on the message, whose wording may change.
  std::string_view event;
  // One line for people: control characters are escaped.
  std::string_view message;
};

// Options::log: a callable that takes either the whole line, void(const LogLine&), or only its
// message, void(std::string_view) (the form of releases before events). Null: the default,
// stderr. Called from background threads; must be thread-safe.
class LogSink {
 public:
  LogSink() = default;
  LogSink(std::nullptr_t) {}  // NOLINT: null stays null, as with std::function

  template <typename Sink>
  requires(std::is_invocable_v<Sink&, const LogLine&> && !std::is_same_v<Sink, LogSink>)
      LogSink(Sink sink)
      : sink_(std::move(sink)) {}  // NOLINT: any callable, implicitly

  template <typename Sink>
  requires(!std::is_invocable_v<Sink&, const LogLine&> &&
           std::is_invocable_v<Sink&, std::string_view>)
      LogSink(Sink sink)  // NOLINT: any callable, implicitly
      : sink_(MessageOnly(std::move(sink))) {}

  explicit operator bool() const { return static_cast<bool>(sink_); }
  void operator()(const LogLine& line) const { sink_(line); }

 private:
  // A null function pointer or std::function given as a message-only sink stays null.
  template <typename Sink>
  static std::function<void(const LogLine&)> MessageOnly(Sink sink) {
    if constexpr (std::is_pointer_v<Sink>) {
      if (sink == nullptr) return nullptr;
    } else if constexpr (std::is_same_v<Sink, std::function<void(std::string_view)>>) {
      if (!sink) return nullptr;
    }
    return [sink = std::move(sink)](const LogLine& line) mutable { sink(line.message); };
  }

  std::function<void(const LogLine&)> sink_;
};

}  // namespace idem

#endif  // IDEM_LOG_H_
