#include "util/random.h"

#include <errno.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

namespace idem::util {

Status RandomBytes(void* out, std::size_t size) {
  auto* bytes = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < size) {
    // Requests over 256 bytes may return short, and a signal may interrupt a blocked call.
    const ssize_t n = ::getrandom(bytes + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(
          fmt::format("no random bytes from the kernel: getrandom: {}", std::strerror(errno)));
    }
    got += static_cast<std::size_t>(n);
  }
  return Status::OK();
}

uint64_t RandomSeed() {
  uint64_t value = 0;
  if (RandomBytes(&value, sizeof(value)).ok()) return value;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return static_cast<uint64_t>(now) * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(::getpid());
}

}  // namespace idem::util
