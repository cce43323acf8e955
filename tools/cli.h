// The `idem` command as a library function, so that tests run it in-process, and the text
// formats it writes (JSON Lines, the table, the Prometheus exposition), so that tests check them
// against the same rules.
//
//   idem dump PATH [--state S] [--type T] [--prefix P] [--format table|jsonl] [--limit N]
//   idem get PATH KEY [--format table|jsonl] [--hex-key]
//   idem stats PATH [--format table|jsonl|prometheus]
//   idem purge PATH [--dry-run] [--quiet]
//   idem forget PATH KEY [--hex-key]
//   idem backup PATH DEST
//   idem export PATH [--output FILE]
//   idem import PATH [FILE|-] [--skip-existing] [--create]
//
// See idem(1) (docs/idem.1) and docs/operations.md for what each command prints and when it is safe
// to run.

#ifndef IDEM_TOOLS_CLI_H_
#define IDEM_TOOLS_CLI_H_

#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "idem/options.h"
#include "idem/record.h"

namespace idem::cli {

// The process exit codes of every subcommand.
enum ExitCode : int {
  kExitOk = 0,
  kExitNotFound = 1,  // get/forget: no such record; dump: no record listed
  kExitUsage = 2,     // bad flags or arguments; a one-line hint is on stderr
  kExitStoreError =
      3,  // the store is missing, unreadable, corrupt or busy; the reason is on stderr
  kExitNewerVersion = 4,  // a newer release of idem wrote the store (or a record): upgrade idem
  // stats: a process owns the store but could not be asked for its counters (stopped, overloaded,
  // exclusive), or whether one does cannot be told (its lock file cannot be opened); what could
  // be read is printed, with a warning on stderr.
  kExitOwnerUnreachable = 5,
  // import: a line of the input was refused (malformed, or its key already in the store without
  // --skip-existing); the line number and the reason are on stderr, and nothing was written.
  kExitInputRefused = 6,
  // check: the store was read and problems were found; each is listed.
  kExitProblemsFound = 7,
};

// Runs `idem` with the given arguments (argv[0] is the program name). Normal output goes to
// `out`, diagnostics to `err`. Returns the exit code. Never throws.
//
// The default --format is `table` when `out` is std::cout and standard output is a terminal, and
// `jsonl` otherwise. Progress of a purge is shown only when `err` is std::cerr on a terminal.
// `clock` is the wall clock the store is opened with (leases, retention, purge) and ages are
// measured by; null (the command's) is the system clock. Tests pass a manual one.
int Run(int argc, char** argv, std::ostream& out, std::ostream& err,
        std::shared_ptr<const Clock> clock = nullptr);

// ---- Formats (exposed for tests) ------------------------------------------------------------

// `s` as the body of a JSON string (without the quotes). Well-formed UTF-8 is copied as is;
// `"`, `\` and control characters are escaped; each byte that is not part of well-formed UTF-8
// becomes \u00XX with the byte's value, so every line is valid JSON whatever the bytes.
std::string JsonEscape(std::string_view s);

// `s` with every byte that is not part of well-formed UTF-8 replaced by the UTF-8 encoding of
// U+00XX (XX: the byte's value). The JSON string JsonEscape writes decodes to exactly this.
std::string ToValidUtf8(std::string_view s);

// "2026-11-30T01:02:03.123456Z": RFC 3339, UTC, microseconds.
std::string FormatRfc3339(std::chrono::system_clock::time_point t);

// "2026-11-30 02:02:03": local time (per TZ), to the second.
std::string FormatLocalTime(std::chrono::system_clock::time_point t);

// One JSON Lines object (no trailing newline) with the fields key, type, state, result,
// fingerprint, checkpoint, token, attempts, created, updated, lease_deadline, expires, in that
// order. A time at the epoch (never set) is written as null.
std::string RecordToJson(const Record& record);

// One line of `idem export` (no trailing newline): every exported field of the record, in
// util::kRecordFields' order (key, type, state as stored, result, fingerprint, checkpoint, token,
// attempts, retryable, created, updated, lease_deadline, expires, holder {pid, process_start,
// pid_scope, request_id, took_over}). Byte strings that are well-formed UTF-8 are JSON strings;
// others are {"hex":"..."}. Times as RecordToJson writes them.
std::string RecordToExportJson(const Record& record);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_CLI_H_
