#include "util/process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "util/random.h"

namespace idem::util {
namespace {

// What a child of fork() must not share with its parent. Updated by the fork handler in the
// child, where only the forking thread exists.
struct ForkState {
  std::atomic<uint64_t> generation{0};  // how many forks separate this process from the first
  std::atomic<uint64_t> next_id{0};     // request-id sequence, seeded from the kernel
  // This process as a holder, computed once per generation: (start << 22) | pid.
  std::atomic<uint64_t> self{0};
  std::atomic<uint64_t> self_generation{~uint64_t{0}};
};

ForkState& State() {
  static ForkState* const state = [] {
    auto* created = new ForkState();
    created->next_id = RandomSeed();
    pthread_atfork(nullptr, nullptr, [] {
      ForkState& child = State();
      child.generation.fetch_add(1);
      child.next_id = RandomSeed();
    });
    return created;
  }();
  return *state;
}

// SplitMix64's finalizer: consecutive inputs give unrelated-looking outputs.
uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A small file of /proc read whole through one descriptor: `buffer` filled, the size returned;
// nullopt when it cannot be opened or read (no such file, no descriptor left: EMFILE).
// `directory`: a descriptor `path` is relative to, or AT_FDCWD.
std::optional<std::string_view> ReadProcFile(const char* path, char* buffer, std::size_t size,
                                             int directory = AT_FDCWD) {
  const int fd = ::openat(directory, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, buffer + got, size - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return std::string_view(buffer, got);
}

// True when the /proc mounted here belongs to this process's own PID namespace, so that
// /proc/PID names the process that kill(PID) names. A /proc of an ancestor namespace (a
// container that did not remount it) lists this process under other numbers: its "NSpid" line
// then holds one pid per namespace level instead of exactly one, equal to getpid().
bool ProcIsOfThisPidNamespace() {
  char buffer[8192];
  const std::optional<std::string_view> status =
      ReadProcFile("/proc/self/status", buffer, sizeof buffer);
  if (!status) return false;
  const std::size_t line = status->find("\nNSpid:");
  if (line == std::string_view::npos) return false;
  std::string_view rest = status->substr(line + 7);
  rest = rest.substr(0, rest.find('\n'));
  unsigned long pids[2] = {0, 0};
  int count = 0;
  for (;;) {
    const std::size_t digit = rest.find_first_of("0123456789");
    if (digit == std::string_view::npos) break;
    rest.remove_prefix(digit);
    unsigned long pid = 0;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (error != std::errc()) return false;
    if (count < 2) pids[count] = pid;
    ++count;
    rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
  }
  return count == 1 && pids[0] == static_cast<unsigned long>(::getpid());
}

// The identity of namespace file `path` (/proc/self/ns/...) folded into `hash`; false when it
// cannot be read. `missing_ok`: a kernel without that kind of namespace has no such file.
bool FoldNamespace(const char* path, bool missing_ok, uint64_t& hash) {
  struct stat info {};
  if (::stat(path, &info) != 0) {
    if (!(missing_ok && errno == ENOENT)) return false;
    info = {};
  }
  hash = Mix(hash ^ static_cast<uint64_t>(info.st_dev));
  hash = Mix(hash ^ static_cast<uint64_t>(info.st_ino));
  return true;
}

uint64_t ComputePidScope() {
  if (!ProcIsOfThisPidNamespace()) return 0;
  char buffer[64];
  const std::optional<std::string_view> boot_id =
      ReadProcFile("/proc/sys/kernel/random/boot_id", buffer, sizeof buffer);
  if (!boot_id || boot_id->size() < 32) return 0;
  uint64_t hash = 0x6964656d2d706964ULL;  // "idem-pid"
  for (const char c : *boot_id) hash = Mix(hash ^ static_cast<uint8_t>(c));
  if (!FoldNamespace("/proc/self/ns/pid", /*missing_ok=*/false, hash) ||
      !FoldNamespace("/proc/self/ns/time", /*missing_ok=*/true, hash)) {
    return 0;
  }
  return hash != 0 ? hash : 1;
}

// How often a process that could not tell its scope (or its own start time) tries again: the
// cause (no descriptor left, say) may pass, and each try costs a few system calls.
constexpr std::chrono::seconds kRetryUnknownAfter{1};

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64_t PidScope() {
  // Namespaces change only for children (unshare and setns of a PID or time namespace apply to
  // the processes created afterwards), so the scope is computed once per fork generation.
  // Concurrent first calls compute the same value.
  static std::atomic<uint64_t> scope{0};
  static std::atomic<uint64_t> scope_generation{~uint64_t{0}};
  static std::atomic<int64_t> last_failure{0};
  const uint64_t generation = ForkGeneration();
  if (scope_generation.load(std::memory_order_acquire) == generation) {
    return scope.load(std::memory_order_relaxed);
  }
  const int64_t failed_at = last_failure.load(std::memory_order_relaxed);
  if (failed_at != 0 &&
      SteadyNanos() - failed_at < std::chrono::nanoseconds(kRetryUnknownAfter).count()) {
    return 0;
  }
  const uint64_t computed = ComputePidScope();
  if (computed == 0) {
    last_failure.store(SteadyNanos(), std::memory_order_relaxed);
    return 0;
  }
  scope.store(computed, std::memory_order_relaxed);
  scope_generation.store(generation, std::memory_order_release);
  last_failure.store(0, std::memory_order_relaxed);
  return computed;
}

uint64_t ForkGeneration() { return State().generation.load(std::memory_order_relaxed); }

// A sequence seeded from the kernel, and reseeded in a child of fork(), so that a child never
// repeats its parent's ids (its Begin could pass for the parent's resent one) and the hot path
// makes no system call.
uint64_t RandomRequestId() {
  // Each thread takes a block of the sequence at a time, so that concurrent Begins do not
  // contend on one counter; a block taken before a fork is dropped in the child.
  constexpr uint64_t kStep = 0x9e3779b97f4a7c15ULL;
  constexpr uint64_t kBlock = 1024;
  thread_local uint64_t next = 0;
  thread_local uint64_t left = 0;
  thread_local uint64_t generation = ~uint64_t{0};
  if (left == 0 || generation != ForkGeneration()) {
    generation = ForkGeneration();
    next = State().next_id.fetch_add(kStep * kBlock, std::memory_order_relaxed);
    left = kBlock;
  }
  uint64_t id = 0;
  while (id == 0 && left > 0) {  // 0 means "no request id"
    id = Mix(next);
    next += kStep;
    --left;
  }
  return id != 0 ? id : RandomRequestId();
}

std::optional<uint64_t> ProcessStartTime(pid_t pid) {
  // Only a /proc of this PID namespace names the process that `pid` names here.
  if (pid <= 0 || PidScope() == 0) return std::nullopt;
  // Opened relative to a descriptor of /proc, not as "/proc/PID/stat": qemu user mode answers
  // an open of its own process's /proc/self/stat or /proc/PID/stat by path with a stat of its
  // own making, whose start time is not the kernel's, so that a process under qemu would read
  // another start time for itself than other processes read for it, and pass for dead.
  const int proc = ::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (proc < 0) return std::nullopt;
  char path[32];
  std::snprintf(path, sizeof path, "%d/stat", static_cast<int>(pid));
  char buffer[4096];
  const std::optional<std::string_view> stat = ReadProcFile(path, buffer, sizeof buffer, proc);
  ::close(proc);
  if (!stat) return std::nullopt;
  // Field 2 is the command name in parentheses and may hold spaces: count from the last ')'.
  const std::size_t close = stat->rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view rest = stat->substr(close + 1);
  for (int field = 3; field <= 22; ++field) {
    const std::size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(begin);
    const std::size_t end = std::min(rest.find(' '), rest.size());
    if (field == 22) {
      uint64_t start = 0;
      const auto [stop, error] = std::from_chars(rest.data(), rest.data() + end, start);
      if (error != std::errc() || stop != rest.data() + end) return std::nullopt;
      return start;
    }
    rest.remove_prefix(end);
  }
  return std::nullopt;
}

Holder HolderFor(pid_t pid) {
  Holder holder;
  if (pid > 0) {
    holder.pid = static_cast<uint32_t>(pid);
    holder.process_start = ProcessStartTime(pid).value_or(0);
    holder.pid_scope = PidScope();
  }
  return holder;
}

unsigned UsableCores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) {
    return static_cast<unsigned>(CPU_COUNT(&allowed));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Holder ThisProcessHolder() {
  // Cached per thread and fork generation, so that a forked child does not pass for its
  // parent and the hot path makes no system call. An identity that could not be read whole is
  // read again now and then.
  struct Cached {
    uint64_t generation = ~uint64_t{0};
    int64_t read_at = 0;
    Holder self;
  };
  thread_local Cached cached;
  const uint64_t generation = ForkGeneration();
  const bool whole = cached.self.process_start != 0 && cached.self.pid_scope != 0;
  if (cached.generation != generation ||
      (!whole &&
       SteadyNanos() - cached.read_at >= std::chrono::nanoseconds(kRetryUnknownAfter).count())) {
    const pid_t pid = ::getpid();
    cached.generation = generation;
    cached.read_at = SteadyNanos();
    cached.self = Holder{};
    cached.self.pid = static_cast<uint32_t>(pid);
    cached.self.process_start = ProcessStartTime(pid).value_or(0);
    cached.self.pid_scope = PidScope();
  }
  return cached.self;
}

bool HolderIsDead(const Holder& holder) {
  if (holder.pid == 0 || holder.pid > static_cast<uint32_t>(INT_MAX) || holder.pid_scope == 0) {
    return false;
  }
  // A pid read in another boot or another PID or time namespace names another process here,
  // or none: only the lease can tell.
  if (holder.pid_scope != PidScope()) return false;
  const auto pid = static_cast<pid_t>(holder.pid);
  if (::kill(pid, 0) != 0) return errno == ESRCH;  // EPERM: it exists, another user's
  // The pid is taken: by the holder, or by a later process that reused it. Only a start time
  // read and found different proves the second.
  if (holder.process_start == 0) return false;
  const std::optional<uint64_t> start = ProcessStartTime(pid);
  return start && *start != holder.process_start;
}

}  // namespace idem::util
