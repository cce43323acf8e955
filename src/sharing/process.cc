#include "sharing/process.h"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

namespace idem::sharing {
// From the kernel rather than a seeded generator: a forked child must never repeat its
// parent's ids, or its Begin could be mistaken for the parent's resent one.
uint64_t RandomRequestId() {
  uint64_t id = 0;
  while (id == 0) {  // 0 means "no request id"
    if (::getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id))) id = 0;
  }
  return id;
}

std::optional<uint64_t> ProcessStartTime(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line)) return std::nullopt;
  // Field 2 is the command name in parentheses and may hold spaces: count from the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  for (int index = 3; index < 22; ++index) fields >> field;  // fields 3 .. 21
  uint64_t start = 0;
  if (!(fields >> start)) return std::nullopt;
  return start;
}

Holder HolderFor(pid_t pid) {
  Holder holder;
  holder.pid = static_cast<uint32_t>(pid);
  holder.process_start = ProcessStartTime(pid).value_or(0);
  holder.request_id = RandomRequestId();
  return holder;
}

Holder ThisProcessHolder() {
  // Cached, but keyed by pid so that a forked child does not pass for its parent.
  static std::atomic<uint64_t> cached{0};  // (start time << 22) | pid; pids are < 2^22
  const pid_t pid = ::getpid();
  uint64_t packed = cached.load(std::memory_order_relaxed);
  if (static_cast<pid_t>(packed & ((1u << 22) - 1)) != pid) {
    packed = (ProcessStartTime(pid).value_or(0) << 22) | static_cast<uint64_t>(pid);
    cached.store(packed, std::memory_order_relaxed);
  }
  Holder holder;
  holder.pid = static_cast<uint32_t>(pid);
  holder.process_start = packed >> 22;
  holder.request_id = RandomRequestId();
  return holder;
}

bool HolderIsDead(const Holder& holder) {
  if (holder.pid == 0) return false;
  const std::optional<uint64_t> start = ProcessStartTime(static_cast<pid_t>(holder.pid));
  return !start || (holder.process_start != 0 && *start != holder.process_start);
}

}  // namespace idem::sharing
