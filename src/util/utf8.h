// Byte strings read as UTF-8: the one reading that idem's escapes (util/escape.h) and the
// command's columns and JSON share, so that they agree on what is malformed.

#ifndef IDEM_UTIL_UTF8_H_
#define IDEM_UTIL_UTF8_H_

#include <cstddef>
#include <string_view>

namespace idem::util {

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at s[i] (Unicode table 3-7:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0 when s[i] starts none.
std::size_t Utf8SequenceLength(std::string_view s, std::size_t i, char32_t* code_point);

// One piece of a byte string read as UTF-8: a well-formed sequence, or one byte that starts none.
struct Utf8Piece {
  std::string_view bytes;  // the sequence, or the one byte
  bool valid;
  char32_t code_point;  // when valid
};

// Calls `visit(piece)` for the pieces of `s` in order: each well-formed sequence whole, each
// other byte on its own (decoding resumes at the next byte).
template <typename Visit>
void ForEachUtf8Piece(std::string_view s, Visit&& visit) {
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t code_point = 0;
    const std::size_t length = Utf8SequenceLength(s, i, &code_point);
    const std::size_t taken = length == 0 ? 1 : length;
    visit(Utf8Piece{s.substr(i, taken), length != 0, code_point});
    i += taken;
  }
}

}  // namespace idem::util

#endif  // IDEM_UTIL_UTF8_H_
