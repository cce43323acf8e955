#include "context.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>

#include "text.h"
#include "util/escape.h"
#include "util/hex.h"

namespace idem::cli {

int Context::Fail(int code, std::string_view message) const {
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
    return Fail(kExitStoreError,
                fmt::format("store {} is held by another process ({})", shown, status.ToString()));
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
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Fail(kExitStoreError,
                fmt::format("cannot write {}: {}", DisplayEscape(temporary), std::strerror(errno)));
  }
  std::string_view left = text;
  int error = 0;
  while (!left.empty() && error == 0) {
    const ssize_t written = ::write(fd, left.data(), left.size());
    if (written < 0 && errno != EINTR) error = errno;
    if (written > 0) left.remove_prefix(static_cast<std::size_t>(written));
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    return Fail(kExitStoreError,
                fmt::format("cannot write {}: {}", DisplayEscape(path), std::strerror(error)));
  }
  return kExitOk;
}

std::chrono::system_clock::time_point Context::Now() const {
  return clock ? clock->Now() : std::chrono::system_clock::now();
}

bool Context::OutIsTerminal() const { return &out == &std::cout && ::isatty(STDOUT_FILENO) == 1; }
bool Context::ErrIsTerminal() const { return &err == &std::cerr && ::isatty(STDERR_FILENO) == 1; }

Result<std::unique_ptr<Store>> Context::OpenStore(const std::string& path, bool read_only) const {
  Options options;
  options.clock = clock;
  options.create_if_missing = false;
  options.read_only = read_only;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  if (!table.empty()) options.table = table;
  return Store::Open(path, options);
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
