// What every command shares: where it writes and how it reports (Context), opening the store,
// the KEY argument, and the default output format.

#ifndef IDEM_TOOLS_CONTEXT_H_
#define IDEM_TOOLS_CONTEXT_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>

#include "cli.h"
#include "idem/store.h"

namespace idem::cli {

// Where a command writes and how it reports.
struct Context {
  std::string command;  // "dump", "get", ... for messages
  std::ostream& out;
  std::ostream& err;
  std::shared_ptr<const Clock> clock;  // null: the system clock
  std::string table;                   // --table: a PostgreSQL store's table; empty: the default
  // --timeout: Options::request_timeout, each wait for the store's owner or server; 0: the
  // library's default.
  std::chrono::milliseconds request_timeout{0};
  // --verbose: the store's info lines are shown too, and every line names its event.
  bool verbose = false;

  // How messages and output name the store at `path`: a directory as it is; a PostgreSQL URI
  // without its secrets (DisplayStoreName), and its table when --table names one. Not escaped.
  std::string StoreName(const std::string& path) const;

  // The options the commands open a store with: never created, never purged in the background,
  // on this context's clock, with `table` and `request_timeout` when given, and a log that
  // writes the store's warnings and errors (its info lines too when `verbose`) to `err`.
  Options StoreOptions(bool read_only) const;
  // The store at `path` (a directory, or a PostgreSQL URI) opened with StoreOptions(read_only).
  Result<std::unique_ptr<Store>> OpenStore(const std::string& path, bool read_only) const;

  // The time on this context's clock.
  std::chrono::system_clock::time_point Now() const;

  // "idem get: <message>" on err, one line whatever the message quotes; returns `code`. The
  // library escapes the keys and paths it puts in a message, but not every message that
  // reaches the command comes from code that does: EscapeControls keeps it on one line and
  // free of terminal escapes without escaping twice what is escaped already (DisplayEscape
  // would double its backslashes).
  int Fail(int code, std::string_view message) const;

  // Replaces the file at `path` with `text` atomically: written to a temporary file in the same
  // directory, synced, then renamed over it, so a reader sees the old or the new file, never a
  // part. The temporary file is removed on failure. Returns kExitOk, or kExitStoreError saying
  // what failed.
  int WriteFileAtomically(const std::string& path, std::string_view text) const;

  // A usage error: the message and where to look; returns kExitUsage.
  int Usage(std::string_view message) const;

  // The store at `path` could not be opened or used: kExitStoreError, saying why.
  int StoreError(const std::string& path, const Status& status) const;

  // Checks that the output was written; a closed pipe (`idem dump ... | head`) ends quietly.
  int FinishOutput(int code) const;

  bool OutIsTerminal() const;
  bool ErrIsTerminal() const;
};

// A stream buffer that forwards every write to `target` under a lock, so that a stream over it
// can be written from several threads, as std::cerr can. Each write (one fmt::print) goes whole.
class LockedStreamBuf final : public std::streambuf {
 public:
  explicit LockedStreamBuf(std::streambuf* target) : target_(target) {}

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* text, std::streamsize size) override;
  int sync() override;

 private:
  std::mutex mu_;
  std::streambuf* const target_;
};

// True when `status` says that the store's owner (or server) could not be asked: it did not
// answer in time, or cannot be reached (stopped, overloaded, exclusive): kExitOwnerUnreachable.
bool OwnerNotAsked(const Status& status);

// A file that replaces the file at `path` atomically once it is complete: written to a temporary
// file in the same directory (made with `mode`), synced, renamed over `path`, and the directory
// synced, so that a reader sees the old file or the whole new one, also after a power cut. The
// temporary file is removed when Commit is not reached or fails.
class AtomicFile {
 public:
  AtomicFile(const Context& ctx, std::string path, mode_t mode)
      : ctx_(ctx), path_(std::move(path)), mode_(mode) {}
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Makes the temporary file. kExitOk, or kExitStoreError after saying what failed.
  int Open();
  // Appends `text` (buffered). A failure is remembered for Commit.
  void Write(std::string_view text);
  // Writes what is buffered, syncs and renames. kExitOk, or kExitStoreError after saying what
  // failed (then `path` is as it was).
  int Commit();

 private:
  void Drain();

  const Context& ctx_;
  const std::string path_;
  const mode_t mode_;
  std::string temporary_;
  int fd_ = -1;
  int error_ = 0;  // errno of the first failure
  std::string buffer_;
};

// The key given on the command line, decoded from hex with --hex-key; nullopt after reporting a
// usage error.
std::optional<std::string> KeyArgument(const Context& ctx, const std::string& key, bool hex);

// `format` as given, or the default: table on a terminal, jsonl otherwise.
std::string ResolveFormat(const Context& ctx, const std::string& format);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_CONTEXT_H_
