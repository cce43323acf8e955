// Whole files as strings, for tests that plant or check a file's bytes.

#ifndef IDEM_TESTS_FILE_TEXT_H_
#define IDEM_TESTS_FILE_TEXT_H_

#include <fstream>
#include <iterator>
#include <string>

namespace idem_test {

// The bytes of file `path` (empty when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Makes `path` hold exactly `text`.
inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace idem_test

#endif  // IDEM_TESTS_FILE_TEXT_H_
