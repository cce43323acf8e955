#include "import_input.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "text.h"
#include "util/escape.h"

namespace idem::cli {
namespace {

// What one read asks for.
constexpr std::size_t kChunk = 64 << 10;
// The widest a byte is written in a JSON string: \u00XX.
constexpr std::size_t kWidestByte = 6;

}  // namespace

std::size_t LongestLine(const Options& limits) {
  // A record's line is the longest: a table value has only a key and a value.
  const std::size_t bytes =
      limits.max_key_size + 2 * limits.max_label_size + 2 * limits.max_result_size;
  return kWidestByte * bytes + kLineOverhead;
}

ImportInput::ImportInput(const std::string& name, std::size_t longest)
    : name_(name), longest_(longest) {}

ImportInput::~ImportInput() {
  if (owns_fd_) ::close(fd_);
}

bool ImportInput::Open() {
  if (name_ == "-") {
    fd_ = STDIN_FILENO;
    return true;
  }
  fd_ = ::open(name_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    error_ = errno;
    return false;
  }
  owns_fd_ = true;
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  return true;
}

bool ImportInput::Fill() {
  buffer_.erase(0, buffer_start_);
  buffer_start_ = 0;
  const std::size_t had = buffer_.size();
  buffer_.resize(had + kChunk);
  ssize_t n;
  do {
    n = ::read(fd_, buffer_.data() + had, kChunk);
  } while (n < 0 && errno == EINTR);
  buffer_.resize(had + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  if (n < 0) error_ = errno;
  return n > 0;
}

ImportInput::Read ImportInput::Next(std::string& line, uint64_t& number) {
  for (;;) {
    ++number_;
    number = number_;
    // The line is looked for in what is buffered, reading more until its end is there; it never
    // grows past the bound, whatever follows.
    std::size_t searched = buffer_start_;
    std::size_t end;
    bool at_end_of_input = false;
    while ((end = buffer_.find('\n', searched)) == std::string::npos) {
      searched = buffer_.size();
      if (searched - buffer_start_ > longest_) return Read::kTooLong;
      const std::size_t offset = searched - buffer_start_;
      if (!Fill()) {
        if (error_ != 0) return Read::kError;
        at_end_of_input = true;
        end = buffer_.size();
        break;
      }
      searched = buffer_start_ + offset;
    }
    if (end - buffer_start_ > longest_ + 1) return Read::kTooLong;  // +1: a "\r" before "\n"
    line.assign(buffer_, buffer_start_, end - buffer_start_);
    bytes_taken_ += std::min(end + 1, buffer_.size()) - buffer_start_;
    buffer_start_ = std::min(end + 1, buffer_.size());
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) return Read::kLine;
    if (at_end_of_input) return Read::kEnd;
  }
}

std::string ImportInput::Shown() const {
  return name_ == "-" ? "standard input" : DisplayEscape(name_);
}

}  // namespace idem::cli
