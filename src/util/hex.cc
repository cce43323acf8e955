#include "util/hex.h"

namespace idem::util {
void AppendHex(std::string& out, std::string_view bytes) {
  out.reserve(out.size() + 2 * bytes.size());
  for (const char c : bytes) AppendHexByte(out, static_cast<unsigned char>(c));
}

std::string ToHex(std::string_view bytes) {
  std::string out;
  AppendHex(out, bytes);
  return out;
}

std::optional<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int high = HexDigitValue(hex[i]);
    const int low = HexDigitValue(hex[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes += static_cast<char>(high * 16 + low);
  }
  return bytes;
}

}  // namespace idem::util
