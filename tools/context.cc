#include "context.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "text.h"
#include "util/escape.h"
#include "util/hex.h"
#include "util/sync_directory.h"

namespace idem::cli {

LockedStreamBuf::int_type LockedStreamBuf::overflow(int_type c) {
  const std::lock_guard lock(mu_);
  return traits_type::eq_int_type(c, traits_type::eof())
             ? traits_type::not_eof(c)
             : target_->sputc(traits_type::to_char_type(c));
}

std::streamsize LockedStreamBuf::xsputn(const char* text, std::streamsize size) {
  const std::lock_guard lock(mu_);
  return target_->sputn(text, size);
}

int LockedStreamBuf::sync() {
  const std::lock_guard lock(mu_);
  return target_->pubsync();
}

int Context::Fail(int code, std::string_view message) const {
  // On a terminal the line may hold a command's progress (ProgressLine): the message replaces it.
  if (ErrIsTerminal()) err << "\r\033[K";
  fmt::print(err, "idem {}: {}\n", command, EscapeControls(message));
  err.flush();
  return code;
}

int Context::Usage(std::string_view message) const {
  return Fail(kExitUsage, fmt::format("{} (see 'idem {} --help')", message, command));
}

std::string Context::StoreName(const std::string& path) const {
  std::string name = DisplayStoreName(path);
  if (!table.empty()) name += fmt::format(" (table {})", table);
  return name;
}

int Context::StoreError(const std::string& path, const Status& status) const {
  const std::string shown = DisplayEscape(StoreName(path));
  if (status.code() == Status::Code::kNotFound) {
    return Fail(kExitStoreError, fmt::format("no idem store at {} ({})", shown, status.message()));
  }
  if (status.code() == Status::Code::kNewerVersion) {
    return Fail(kExitNewerVersion,
                fmt::format("store {} was written by a newer release of idem (this is {}): "
                            "upgrade idem to use it; nothing is damaged ({})",
                            shown, IDEM_VERSION, status.ToString()));
  }
  if (status.code() == Status::Code::kBusy) {
    // The status says why (another process holds it alone, an unfinished import, a limit).
    return Fail(kExitStoreError, fmt::format("store {} is busy ({})", shown, status.ToString()));
  }
  return Fail(kExitStoreError, fmt::format("cannot use store {}: {}", shown, status.ToString()));
}

int Context::FinishOutput(int code) const {
  out.flush();
  if (out.good()) return code;
  if (errno == EPIPE) return code;
  return Fail(kExitStoreError, "cannot write the output");
}

int Context::WriteFileAtomically(const std::string& path, std::string_view text) const {
  AtomicFile file(*this, path, 0644);
  if (const int opened = file.Open(); opened != kExitOk) return opened;
  file.Write(text);
  return file.Commit();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

int AtomicFile::Open() {
  temporary_ = fmt::format("{}.tmp-{}", path_, ::getpid());
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_);
  if (fd_ < 0) {
    const int error = errno;
    const std::string shown = DisplayEscape(temporary_);
    temporary_.clear();  // not ours to remove
    return ctx_.Fail(kExitStoreError,
                     fmt::format("cannot write {}: {}", shown, std::strerror(error)));
  }
  return kExitOk;
}

void AtomicFile::Drain() {
  std::string_view left = buffer_;
  while (!left.empty() && error_ == 0) {
    const ssize_t written = ::write(fd_, left.data(), left.size());
    if (written < 0 && errno != EINTR) error_ = errno;
    if (written > 0) left.remove_prefix(static_cast<std::size_t>(written));
  }
  buffer_.clear();
}

void AtomicFile::Write(std::string_view text) {
  buffer_ += text;
  if (buffer_.size() >= (1 << 20)) Drain();
}

int AtomicFile::Commit() {
  Drain();
  if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
  if (::close(fd_) != 0 && error_ == 0) error_ = errno;
  fd_ = -1;
  if (error_ == 0 && ::rename(temporary_.c_str(), path_.c_str()) != 0) error_ = errno;
  if (error_ != 0) {
    return ctx_.Fail(kExitStoreError, fmt::format("cannot write {}: {}", DisplayEscape(path_),
                                                  std::strerror(error_)));
  }
  temporary_.clear();
  // The new name is durable once the directory is synced.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::filesystem::path directory = parent.empty() ? std::filesystem::path(".") : parent;
  error_ = util::SyncDirectory(directory);
  if (error_ != 0) {
    return ctx_.Fail(
        kExitStoreError,
        fmt::format("wrote {}, but cannot sync its directory {}: {}", DisplayEscape(path_),
                    DisplayEscape(directory.string()), std::strerror(error_)));
  }
  return kExitOk;
}

std::chrono::system_clock::time_point Context::Now() const {
  return clock ? clock->Now() : std::chrono::system_clock::now();
}

bool Context::OutIsTerminal() const { return &out == &std::cout && ::isatty(STDOUT_FILENO) == 1; }
bool Context::ErrIsTerminal() const { return &err == &std::cerr && ::isatty(STDERR_FILENO) == 1; }

Options Context::StoreOptions(bool read_only) const {
  Options options;
  options.clock = clock;
  options.create_if_missing = false;
  options.read_only = read_only;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  if (!table.empty()) options.table = table;
  options.log = [command = command, &err = err, verbose = verbose](const LogLine& line) {
    if (line.severity == LogSeverity::kInfo && !verbose) return;
    const std::string event = verbose ? fmt::format(" [{}]", line.event) : std::string();
    // On a terminal the line may hold a command's progress (ProgressLine): the log line replaces
    // it, and the progress is drawn again at its next update.
    const char* erase = &err == &std::cerr && ::isatty(STDERR_FILENO) == 1 ? "\r\033[K" : "";
    // One write: from the store's threads too, err is written whole lines at a time (std::cerr,
    // or Run's LockedStreamBuf).
    fmt::print(err, "{}idem {}: {}: {}{}\n", erase, command, LogSeverityName(line.severity),
               line.message, event);
    err.flush();
  };
  if (request_timeout > std::chrono::milliseconds(0)) {
    // Waiting for a new owner or a server to come back is waiting for an answer too.
    options.request_timeout = request_timeout;
    options.failover_timeout = request_timeout;
  }
  return options;
}

bool OwnerNotAsked(const Status& status) {
  return status.code() == Status::Code::kUnavailable || status.code() == Status::Code::kTimedOut;
}

Result<std::unique_ptr<Store>> Context::OpenStore(const std::string& path, bool read_only) const {
  return Store::Open(path, StoreOptions(read_only));
}

std::optional<std::string> KeyArgument(const Context& ctx, const std::string& key, bool hex) {
  std::optional<std::string> bytes = hex ? util::FromHex(key) : std::optional<std::string>(key);
  if (!bytes) {
    ctx.Usage(
        fmt::format("--hex-key: '{}' is not hex (pairs of digits 0-9, a-f)", DisplayEscape(key)));
    return std::nullopt;
  }
  if (bytes->empty()) {
    ctx.Usage("KEY is empty");
    return std::nullopt;
  }
  return bytes;
}

std::string ResolveFormat(const Context& ctx, const std::string& format) {
  if (!format.empty()) return format;
  return ctx.OutIsTerminal() ? "table" : "jsonl";
}

}  // namespace idem::cli
