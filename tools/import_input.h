// The input of `idem import`, read once, a line at a time, in bounded memory: a line is never
// held longer than the longest line the format allows for the store's limits (LongestLine), so
// an input of any size, or one endless line, costs no more than that.

#ifndef IDEM_TOOLS_IMPORT_INPUT_H_
#define IDEM_TOOLS_IMPORT_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "idem/options.h"

namespace idem::cli {

// The longest line of a record or table value that a store with these limits can take
// (docs/format.md, "Export format"): every byte field at its limit, written in the widest way
// the format allows (a JSON escape \u00XX, 6 characters, for each byte), plus kLineOverhead for
// the field names, the numbers, the times and the holder, and the spaces JSON allows between
// them.
std::size_t LongestLine(const Options& limits);
inline constexpr std::size_t kLineOverhead = 64 << 10;

class ImportInput {
 public:
  enum class Read {
    kLine,     // `line` holds the next line that is not blank
    kEnd,      // the input ended
    kTooLong,  // the line `number` is longer than the bound: not read further
    kError,    // reading failed (error())
  };

  // Standard input for "-", otherwise the file `name`; lines longer than `longest` are refused.
  ImportInput(const std::string& name, std::size_t longest);
  ~ImportInput();
  ImportInput(const ImportInput&) = delete;
  ImportInput& operator=(const ImportInput&) = delete;

  // False (errno in error()) when the file cannot be opened.
  bool Open();
  // The next line that is not empty nor only spaces and tabs, without its "\n" (nor a "\r"
  // before it), and its number (from 1).
  Read Next(std::string& line, uint64_t& number);

  int error() const { return error_; }
  // The bytes of the lines returned so far, and the input's size when it is a regular file.
  uint64_t bytes_taken() const { return bytes_taken_; }
  std::optional<uint64_t> size() const { return size_; }
  // The input as messages name it: "standard input", or the file's name, escaped.
  std::string Shown() const;

 private:
  // Refills buffer_ from the descriptor; false at the end or on an error (error_ set).
  bool Fill();

  const std::string name_;
  const std::size_t longest_;
  int fd_ = -1;
  bool owns_fd_ = false;
  int error_ = 0;
  std::string buffer_;  // read but not yet taken, from buffer_start_ on
  std::size_t buffer_start_ = 0;
  uint64_t number_ = 0;  // the number of the last line started
  uint64_t bytes_taken_ = 0;
  std::optional<uint64_t> size_;
};

}  // namespace idem::cli

#endif  // IDEM_TOOLS_IMPORT_INPUT_H_
