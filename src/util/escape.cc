#include "util/escape.h"

#include <algorithm>

#include "util/hex.h"

namespace idem {
namespace {

bool IsControl(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte < 0x20 || byte == 0x7f;
}

}  // namespace

std::string EscapeControls(std::string_view text) {
  // The common case, nothing to escape, copies once.
  if (std::none_of(text.begin(), text.end(), IsControl)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (const char c : text) {
    if (!IsControl(c)) {
      out += c;
      continue;
    }
    util::AppendEscapedByte(out, static_cast<unsigned char>(c));
  }
  return out;
}

}  // namespace idem
