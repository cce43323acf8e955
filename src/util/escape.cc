#include "util/escape.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/hex.h"
#include "util/utf8.h"

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

std::string DisplayEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  util::ForEachUtf8Piece(text, [&out](const util::Utf8Piece& piece) {
    const char32_t cp = piece.code_point;
    const bool printable =
        piece.valid && (piece.bytes.size() == 1 ? (cp >= 0x20 && cp < 0x7F) : cp >= 0xA0);
    if (!printable) {
      // Every byte of a control character, or the one byte that starts no sequence.
      for (const char byte : piece.bytes) {
        util::AppendEscapedByte(out, static_cast<unsigned char>(byte));
      }
    } else if (cp == '\\') {
      out += "\\\\";
    } else {
      out += piece.bytes;
    }
  });
  return out;
}

std::string EscapeKey(std::string_view key, std::size_t max_bytes) {
  // Cut between characters, so that a long UTF-8 key does not end in a broken one's bytes.
  std::size_t shown = 0;
  bool full = false;
  util::ForEachUtf8Piece(key.substr(0, max_bytes + 4), [&](const util::Utf8Piece& piece) {
    full = full || shown + piece.bytes.size() > max_bytes;
    if (!full) shown += piece.bytes.size();
  });
  return fmt::format("\"{}{}\"", DisplayEscape(key.substr(0, shown)),
                     shown < key.size() ? "..." : "");
}

}  // namespace idem
