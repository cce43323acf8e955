// Bytes as lowercase hexadecimal digits, and back: for fingerprints, request ids, tokens, and
// the \xNN escapes of text made safe to show.

#ifndef IDEM_UTIL_HEX_H_
#define IDEM_UTIL_HEX_H_

#include <optional>
#include <string>
#include <string_view>

namespace idem::util {

inline constexpr char kHexDigits[] = "0123456789abcdef";

// The value of hex digit `c` (either case), or -1 when it is not one.
inline int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Appends the two lowercase hex digits of `byte` ("0a").
inline void AppendHexByte(std::string& out, unsigned char byte) {
  out += kHexDigits[byte >> 4];
  out += kHexDigits[byte & 0xF];
}

// Appends `bytes` as lowercase hex, two digits a byte.
void AppendHex(std::string& out, std::string_view bytes);

// `bytes` as lowercase hex, two digits a byte.
std::string ToHex(std::string_view bytes);

// The bytes that `hex` spells (pairs of digits, either case: "00ff41"), or nullopt when it is
// not an even number of hex digits.
std::optional<std::string> FromHex(std::string_view hex);

// Appends `byte` escaped as \xNN (lowercase digits): how idem shows a byte that must not reach
// a log line or a terminal as it is.
inline void AppendEscapedByte(std::string& out, unsigned char byte) {
  out += "\\x";
  AppendHexByte(out, byte);
}

}  // namespace idem::util

#endif  // IDEM_UTIL_HEX_H_
