#include "progress_line.h"

namespace idem::cli {

bool ProgressLine::Due() const {
  return shown_ && (!written_ || std::chrono::steady_clock::now() - last_ >= kInterval);
}

void ProgressLine::Show(std::string_view text) {
  if (!shown_) return;
  if (written_) err_ << "\r\033[K";
  err_ << text;
  err_.flush();
  written_ = true;
  last_ = std::chrono::steady_clock::now();
}

void ProgressLine::Erase() {
  if (!written_) return;
  err_ << "\r\033[K";
  err_.flush();
  written_ = false;
}

}  // namespace idem::cli
