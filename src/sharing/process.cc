#include "sharing/process.h"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace idem::sharing {
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

uint64_t KernelRandom() {
  uint64_t value = 0;
  if (::getrandom(&value, sizeof(value), 0) == static_cast<ssize_t>(sizeof(value))) return value;
  // No getrandom (a very old kernel or a seccomp filter): the time and pid still differ
  // between a parent and its child.
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return static_cast<uint64_t>(now) * 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(::getpid());
}

ForkState& State() {
  static ForkState* const state = [] {
    auto* created = new ForkState();
    created->next_id = KernelRandom();
    pthread_atfork(nullptr, nullptr, [] {
      ForkState& child = State();
      child.generation.fetch_add(1);
      child.next_id = KernelRandom();
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

}  // namespace

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
  // Cached per fork generation, so that a forked child does not pass for its parent.
  ForkState& state = State();
  const uint64_t generation = state.generation.load(std::memory_order_acquire);
  uint64_t packed = state.self.load(std::memory_order_acquire);
  if (state.self_generation.load(std::memory_order_acquire) != generation) {
    const pid_t pid = ::getpid();
    packed = (ProcessStartTime(pid).value_or(0) << 22) | static_cast<uint64_t>(pid);
    state.self.store(packed, std::memory_order_release);
    state.self_generation.store(generation, std::memory_order_release);
  }
  Holder holder;
  holder.pid = static_cast<uint32_t>(packed & ((1u << 22) - 1));  // pids are below 2^22
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
