// Text from outside made safe to put in a message, a log line or on a terminal. Two rules, for
// two kinds of text:
// - data (keys, results, labels, fingerprints: any bytes): DisplayEscape, which is unambiguous,
//   so that the bytes can be told back from what is shown (`idem dump`, `idem get`, the
//   library's messages that name a key: EscapeKey quotes it and cuts it short);
// - paths and messages (RocksDB's, the server's): EscapeControls, which escapes only controls
//   and so is idempotent: a message built from escaped paths may pass through it again.

#ifndef IDEM_UTIL_ESCAPE_H_
#define IDEM_UTIL_ESCAPE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace idem {

// `text` with each control character (bytes 0x00-0x1f and 0x7f) written as \xNN, so that a path
// holding a newline cannot start a forged log line and one holding ESC cannot send a terminal
// escape sequence. Every other byte is kept (UTF-8 names stay readable), backslashes included:
// so escaping twice changes nothing, and a message built from escaped paths can be passed
// through it again safely.
std::string EscapeControls(std::string_view text);

// `text` for a human: printable ASCII and well-formed UTF-8 (util/utf8.h) are kept, a backslash
// becomes `\\`, and every other byte (controls, DEL, C1 controls, malformed UTF-8) becomes \xNN.
std::string DisplayEscape(std::string_view text);

// A key for messages and logs: in quotes, escaped as `idem dump` shows it (DisplayEscape:
// printable ASCII and UTF-8 as they are, a backslash doubled, other bytes as \xNN), cut to at
// most `max_bytes` of the key between two characters, then "...".
std::string EscapeKey(std::string_view key, std::size_t max_bytes = 64);

}  // namespace idem

#endif  // IDEM_UTIL_ESCAPE_H_
