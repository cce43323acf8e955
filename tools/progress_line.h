// ProgressLine: how far a long command has got, on standard error while it is a terminal: one
// line rewritten in place (a carriage return, then "erase to the end of the line"), at most every
// kInterval unless forced, and erased at the end, so that what stays on the screen is the
// command's own output. Nothing at all off a terminal (cron's mail, a pipe, a log file).

#ifndef IDEM_TOOLS_PROGRESS_LINE_H_
#define IDEM_TOOLS_PROGRESS_LINE_H_

#include <chrono>
#include <ostream>
#include <string_view>

namespace idem::cli {

class ProgressLine {
 public:
  static constexpr std::chrono::milliseconds kInterval{200};

  // `shown`: whether to write anything (the command decides: standard error is a terminal, no
  // --quiet).
  ProgressLine(std::ostream& err, bool shown) : err_(err), shown_(shown) {}
  ~ProgressLine() { Erase(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  bool shown() const { return shown_; }
  // Whether a line shown now would be: nothing shown yet, or kInterval since the last one.
  bool Due() const;
  // Replaces the line with `text` (when shown).
  void Show(std::string_view text);
  // Erases the line, if one was written.
  void Erase();

 private:
  std::ostream& err_;
  const bool shown_;
  bool written_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace idem::cli

#endif  // IDEM_TOOLS_PROGRESS_LINE_H_
