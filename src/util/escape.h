// Text from outside (paths above all, and RocksDB's messages that quote them) made safe to put
// in a message or a log line.

#ifndef IDEM_UTIL_ESCAPE_H_
#define IDEM_UTIL_ESCAPE_H_

#include <string>
#include <string_view>

namespace idem {

// `text` with each control character (bytes 0x00-0x1f and 0x7f) written as \xNN, so that a path
// holding a newline cannot start a forged log line and one holding ESC cannot send a terminal
// escape sequence. Every other byte is kept (UTF-8 names stay readable), backslashes included:
// so escaping twice changes nothing, and a message built from escaped paths can be passed
// through it again safely. Keys have their own, stricter form (storage::EscapeKey).
std::string EscapeControls(std::string_view text);

}  // namespace idem

#endif  // IDEM_UTIL_ESCAPE_H_
