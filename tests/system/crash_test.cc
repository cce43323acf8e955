// Crash tests: a forked child process uses the store and is killed with SIGKILL at a random
// moment; the parent then reopens the store and checks that everything the child had
// acknowledged survived, and that an abandoned claim is taken over after its lease.
//
// The parent never has the store open while a child runs (sharing one store between processes
// is a separate feature), and forks before it opens any store, so the child starts from a
// single-threaded process. Labelled "concurrency" in CTest.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::State;
using idem_test::TempDir;
using idem_test::TestOptions;

std::string Key(uint32_t i) { return "k" + std::to_string(i); }
// What a crash round writes, and when it kills.
struct CrashPlan {
  idem::Durability durability = idem::Durability::kSync;
  int rounds = 5;
  std::size_t padding = 0;  // extra result bytes per key
  std::size_t memory_budget = idem::Options().memory_budget;
  int min_acks = 5;  // acknowledgements a child gets before it is killed
  int max_acks = 80;
};

std::string Value(uint32_t i, const CrashPlan& plan) {
  return "v" + std::to_string(i) + std::string(plan.padding, 'p');
}

idem::Options ChildOptions(const CrashPlan& plan) {
  idem::Options options = TestOptions();
  options.durability = plan.durability;
  options.memory_budget = plan.memory_budget;
  return options;
}

[[noreturn]] void ChildFail(const std::string& what, int code) {
  std::fprintf(stderr, "crash_test child: %s\n", what.c_str());
  std::fflush(stderr);
  _exit(code);
}

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The child of AcknowledgedResultsSurviveSigkill: Begin/Complete keys k<start>, k<start+1>, ...
// and after each acknowledged Complete write the key's index to `fd`. Runs until killed.
[[noreturn]] void RunWriterChild(const std::string& path, const CrashPlan& plan, uint32_t start,
                                 int fd) {
  auto opened = idem::Store::Open(path, ChildOptions(plan));
  if (!opened.ok()) ChildFail("Open: " + opened.status().ToString(), 2);
  std::unique_ptr<idem::Store> store = std::move(opened).value();
  for (uint32_t i = start;; ++i) {
    while (true) {
      // A short lease, so that a claim left by the previous (killed) child is taken over soon.
      auto claim = store->Begin(Key(i), {.type = "crash", .lease = 200ms});
      if (!claim.ok()) ChildFail("Begin: " + claim.status().ToString(), 3);
      if (claim->outcome == Outcome::kAcquired) {
        const idem::Status status = store->Complete(Key(i), claim->token, Value(i, plan));
        if (!status.ok()) ChildFail("Complete: " + status.ToString(), 4);
        break;
      }
      if (claim->outcome == Outcome::kReplay) {  // completed before the previous child died
        if (claim->record.result != Value(i, plan)) ChildFail("wrong replay for " + Key(i), 5);
        break;
      }
      if (claim->outcome != Outcome::kInProgress) {
        ChildFail("unexpected outcome " + std::string(idem::OutcomeName(claim->outcome)), 6);
      }
      std::this_thread::sleep_for(std::max<std::chrono::milliseconds>(claim->retry_after, 1ms));
    }
    if (!WriteAll(fd, &i, sizeof(i))) ChildFail("write to the pipe failed", 7);
  }
}

// Reads one uint32_t from `fd`, waiting at most `timeout`. Returns 1 on success, 0 at EOF, -1
// on timeout or error.
int ReadAck(int fd, uint32_t* value, std::chrono::milliseconds timeout) {
  char buffer[sizeof(uint32_t)];
  size_t got = 0;
  while (got < sizeof(buffer)) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return -1;
    const ssize_t n = ::read(fd, buffer + got, sizeof(buffer) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return got == 0 ? 0 : -1;
    got += static_cast<size_t>(n);
  }
  std::memcpy(value, buffer, sizeof(buffer));
  return 1;
}

// Waits for the child and describes how it ended.
std::string Reap(pid_t pid, bool* killed) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with status " + std::to_string(status);
}

void RunCrashRounds(const CrashPlan& plan) {
  TempDir dir;
  const std::string path = dir.StorePath();
  std::random_device device;
  const unsigned seed = device();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::set<uint32_t> acknowledged;
  uint32_t next = 0;

  for (int round = 0; round < plan.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0) << std::strerror(errno);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::close(fds[0]);
      RunWriterChild(path, plan, next, fds[1]);
    }
    ::close(fds[1]);

    // Let the child acknowledge a random number of keys, then kill it a moment later.
    const int target = std::uniform_int_distribution<int>(plan.min_acks, plan.max_acks)(random);
    int received = 0;
    bool child_died_early = false;
    while (received < target) {
      uint32_t index = 0;
      const int r = ReadAck(fds[0], &index, 30s);
      if (r != 1) {
        child_died_early = true;
        break;
      }
      acknowledged.insert(index);
      ++received;
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(random)));
    ::kill(pid, SIGKILL);
    // Acknowledgements written before the kill count too.
    while (true) {
      uint32_t index = 0;
      if (ReadAck(fds[0], &index, 30s) != 1) break;
      acknowledged.insert(index);
      ++received;
    }
    ::close(fds[0]);
    bool killed = false;
    const std::string how = Reap(pid, &killed);
    ASSERT_FALSE(child_died_early)
        << "the child stopped before " << target << " acknowledgements: " << how;
    ASSERT_TRUE(killed) << "child " << how;
    ASSERT_FALSE(acknowledged.empty());
    next = *acknowledged.rbegin() + 1;
  }

  // Every acknowledged result survived every crash.
  IDEM_ASSERT_OPEN(store, path, ChildOptions(plan));
  int checked = 0;
  for (uint32_t i : acknowledged) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key(i)));
    ASSERT_TRUE(got.has_value()) << Key(i) << " was acknowledged and then lost";
    EXPECT_EQ(got->state, State::kDone) << Key(i);
    EXPECT_EQ(got->result, Value(i, plan)) << Key(i);
    ASSERT_OK_AND_ASSIGN(auto replay, store->Begin(Key(i)));
    EXPECT_EQ(replay.outcome, Outcome::kReplay) << Key(i);
    ++checked;
  }
  // The keys were acknowledged in order, each round continuing where the last one stopped.
  EXPECT_EQ(acknowledged.size(), static_cast<size_t>(*acknowledged.rbegin()) + 1);
  EXPECT_GE(checked, plan.rounds * plan.min_acks);
}

TEST(Crash, AcknowledgedResultsSurviveSigkill) { RunCrashRounds({}); }

TEST(Crash, AcknowledgedBufferedResultsSurviveSigkill) {
  RunCrashRounds({.durability = idem::Durability::kBuffered, .rounds = 3});
}

// Killed while RocksDB flushes memtables and compacts table files (1 MiB memtables filled by
// 4 KiB results: a flush every ~250 keys, a compaction every few flushes), so kills land
// between a MANIFEST edit and the file deletions it allows. Every reopen must succeed (the
// manifest mark never mistakes a crash for a truncated MANIFEST) with everything acknowledged.
TEST(Crash, KilledWhileFlushingAndCompactingReopensWithEverything) {
  RunCrashRounds({.durability = idem::Durability::kBuffered,
                  .rounds = 12,
                  .padding = 4000,
                  .memory_budget = 2 << 20,
                  .min_acks = 100,
                  .max_acks = 1500});
}

// A child claims a key, saves a checkpoint, reports, and is killed while it "works" (either
// after a plain Begin or inside Execute, whose lease renewal dies with it). The parent sees the
// pending claim, and after the lease a Begin takes it over with the checkpoint.
void RunAbandonedClaim(bool use_execute) {
  TempDir dir;
  const std::string path = dir.StorePath();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0) << std::strerror(errno);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
    idem::Options options = TestOptions();
    options.default_lease = 500ms;
    auto opened = idem::Store::Open(path, options);
    if (!opened.ok()) ChildFail("Open: " + opened.status().ToString(), 2);
    std::unique_ptr<idem::Store> store = std::move(opened).value();
    const uint32_t ready = 1;
    if (use_execute) {
      auto execution =
          store->Execute("job", [&](idem::Attempt& attempt) -> idem::Result<std::string> {
            if (!attempt.SaveCheckpoint("step-1").ok()) ChildFail("SaveCheckpoint", 3);
            if (!WriteAll(fds[1], &ready, sizeof(ready))) ChildFail("write", 4);
            while (true) std::this_thread::sleep_for(1s);  // killed while working
          });
      ChildFail("Execute returned", 5);
    }
    auto claim = store->Begin("job");
    if (!claim.ok() || claim->outcome != Outcome::kAcquired) ChildFail("Begin", 3);
    if (!store->SaveCheckpoint("job", claim->token, "step-1").ok()) ChildFail("SaveCheckpoint", 3);
    if (!WriteAll(fds[1], &ready, sizeof(ready))) ChildFail("write", 4);
    while (true) std::this_thread::sleep_for(1s);  // killed while working
  }
  ::close(fds[1]);
  uint32_t value = 0;
  const int r = ReadAck(fds[0], &value, 30s);
  ::kill(pid, SIGKILL);
  ::close(fds[0]);
  bool killed = false;
  const std::string how = Reap(pid, &killed);
  ASSERT_EQ(r, 1) << "the child did not report: " << how;
  ASSERT_TRUE(killed) << how;

  IDEM_ASSERT_OPEN(store, path, TestOptions());
  ASSERT_OK_AND_ASSIGN(auto pending, store->Get("job"));
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->state, State::kPending);
  EXPECT_EQ(pending->checkpoint, "step-1");
  EXPECT_EQ(pending->attempts, 1u);

  // The lease (500 ms, renewed by Execute until the kill) runs out and a Begin takes over.
  std::optional<idem::Claim> takeover;
  const bool acquired = idem_test::WaitFor(
      [&] {
        auto claim = store->Begin("job");
        if (!claim.ok()) {
          ADD_FAILURE() << claim.status().ToString();
          return true;
        }
        if (claim->outcome == Outcome::kAcquired) {
          takeover = *claim;
          return true;
        }
        EXPECT_EQ(claim->outcome, Outcome::kInProgress);
        return false;
      },
      10s);
  ASSERT_TRUE(acquired);
  ASSERT_TRUE(takeover.has_value());
  EXPECT_TRUE(takeover->took_over);
  EXPECT_EQ(takeover->record.checkpoint, "step-1");
  EXPECT_EQ(takeover->record.attempts, 2u);
  EXPECT_GT(takeover->token, pending->token);
  ASSERT_OK(store->Complete("job", takeover->token, "recovered"));
}

TEST(Crash, AnAbandonedClaimIsTakenOverAfterItsLease) { RunAbandonedClaim(false); }

TEST(Crash, AKilledExecuteIsTakenOverAfterItsLease) { RunAbandonedClaim(true); }

// A process that used a store (so RocksDB's background threads ran in it) forks, and the child
// opens a store of its own and writes more than its memtables hold. With RocksDB's process-wide
// thread pool the child's flushes would never run (the pool's threads stayed in the parent) and
// its writes would stall for good; each store has pools of its own (storage_env.h).
TEST(Crash, AChildOfAProcessThatUsedAStoreCanFlush) {
  TempDir dir;
  const CrashPlan plan{
      .durability = idem::Durability::kBuffered, .padding = 4000, .memory_budget = 2 << 20};
  constexpr uint32_t kKeys = 2000;  // ~8 MiB of results: several flushes of 1 MiB memtables
  auto write_keys = [&plan](idem::Store& store, uint32_t count) -> idem::Status {
    for (uint32_t i = 0; i < count; ++i) {
      IDEM_ASSIGN_OR_RETURN(auto claim, store.Begin(Key(i)));
      IDEM_RETURN_IF_ERROR(store.Complete(Key(i), claim.token, Value(i, plan)));
    }
    return idem::Status::OK();
  };
  {
    IDEM_ASSERT_OPEN(store, dir.Sub("parent"), ChildOptions(plan));
    ASSERT_OK(write_keys(*store, kKeys));
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    auto opened = idem::Store::Open(dir.Sub("child"), ChildOptions(plan));
    if (!opened.ok()) ChildFail("Open: " + opened.status().ToString(), 2);
    const idem::Status written = write_keys(**opened, kKeys);
    if (!written.ok()) ChildFail("writing: " + written.ToString(), 3);
    _exit(0);
  }
  // The child needs well under a second; a stalled one is killed after 60 s.
  int status = 0;
  pid_t done = 0;
  for (int waited_ms = 0; waited_ms < 60'000 && done == 0; waited_ms += 10) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(10ms);
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    bool killed = false;
    Reap(pid, &killed);
    FAIL() << "the child's writes stalled for 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  IDEM_ASSERT_OPEN(store, dir.Sub("child"), ChildOptions(plan));
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key(kKeys - 1)));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, Value(kKeys - 1, plan));
}

}  // namespace
