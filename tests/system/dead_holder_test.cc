// A claim whose process died is taken over at once, not after its lease; a live process's claim
// is not, whatever the judging process can or cannot see (another PID or time namespace, no
// /proc, no descriptor left); and Options::take_over_dead_holders = false waits for the lease.
// The namespace tests need root (CAP_SYS_ADMIN) and skip with a message without it.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <vector>

#include "idem/idem.h"
#include "support/namespaced_process.h"
#include "support/test_util.h"
#include "util/process.h"

namespace {

using idem::Outcome;
using idem_test::NamespacedProcess;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

// Runs a child that opens the store, claims `key` with a one-hour lease, reports, and then
// either dies by SIGKILL (killed = true) or stays alive until the returned pid is killed.
pid_t ClaimInChild(const std::string& path, const std::string& key, bool kill_it) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    char byte = 'n';
    {
      auto store = idem::Store::Open(path, TestOptions());
      if (store.ok()) {
        auto claim = (*store)->Begin(key, {.lease = std::chrono::hours(1)});
        if (claim.ok() && claim->outcome == Outcome::kAcquired) byte = 'y';
      }
      // Close the store (so the parent can open it: sharing between processes comes with the
      // sharing layer), but keep the process alive.
    }
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    if (kill_it) raise(SIGKILL);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  const bool ok = read(ready[0], &byte, 1) == 1 && byte == 'y';
  close(ready[0]);
  if (!ok) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return -1;
  }
  if (kill_it) waitpid(child, nullptr, 0);
  return child;
}

// What a child reports through its pipe.
constexpr char kAcquired = 'a';
constexpr char kInProgress = 'i';
constexpr char kClaimed = 'y';
constexpr char kError = 'e';
constexpr char kNotPermitted = idem_test::NamespacedProcess::kNotPermitted;

// Opens the store at `path` and begins `key`: kAcquired, kInProgress or kError.
char BeginOnce(const std::string& path, const std::string& key) {
  auto store = idem::Store::Open(path, TestOptions());
  if (!store.ok()) return kError;
  auto claim = (*store)->Begin(key);
  if (!claim.ok()) return kError;
  if (claim->outcome == Outcome::kAcquired) return kAcquired;
  return claim->outcome == Outcome::kInProgress ? kInProgress : kError;
}

// Opens the store at `path` and claims `key` for an hour: kClaimed or kError. The store is
// closed again, so that the next process opens it itself and judges the claim as its owner.
char ClaimForAnHour(const std::string& path, const std::string& key) {
  auto store = idem::Store::Open(path, TestOptions());
  if (!store.ok()) return kError;
  auto claim = (*store)->Begin(key, {.lease = std::chrono::hours(1)});
  return claim.ok() && claim->outcome == Outcome::kAcquired ? kClaimed : kError;
}

#define SKIP_UNLESS_PERMITTED(process)                                                          \
  if ((process).byte() == kNotPermitted) {                                                      \
    GTEST_SKIP() << "cannot make the namespaces (needs root: CAP_SYS_ADMIN, and a kernel with " \
                    "PID, mount and time namespaces)";                                          \
  }

TEST(DeadHolder, AClaimOfAKilledProcessIsTakenOverAtOnce) {
  TempDir dir;
  ASSERT_GT(ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/true), 0);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(claim.took_over);
  EXPECT_EQ(claim.record.attempts, 2u);
  EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(store->GetCounters()->takeovers, 1u);
}

TEST(DeadHolder, AClaimOfALiveProcessWaitsForItsLease) {
  TempDir dir;
  const pid_t child = ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/false);
  ASSERT_GT(child, 0);
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
    EXPECT_EQ(claim.outcome, Outcome::kInProgress);
    EXPECT_GT(claim.retry_after, std::chrono::minutes(59));
    EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(child));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(claim.took_over);
}

TEST(DeadHolder, TakingOverDeadHoldersCanBeTurnedOff) {
  TempDir dir;
  ASSERT_GT(ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/true), 0);
  idem::Options options = TestOptions();
  options.take_over_dead_holders = false;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
  EXPECT_EQ(claim.outcome, Outcome::kInProgress);
}

TEST(DeadHolder, ThisProcessesOwnClaimsAreAlive) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k", {.lease = std::chrono::hours(1)}));
  EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(getpid()));
  EXPECT_NE(claim.record.holder.process_start, 0u);
  ASSERT_OK_AND_ASSIGN(auto again, store->Begin("k"));
  EXPECT_EQ(again.outcome, Outcome::kInProgress);
}

TEST(DeadHolder, AReusedPidIsNotMistakenForTheHolder) {
  namespace util = idem::util;
  const idem::Holder self = util::ThisProcessHolder();
  ASSERT_NE(self.process_start, 0u);
  ASSERT_NE(self.pid_scope, 0u) << "this test needs a /proc of its own PID namespace";
  EXPECT_EQ(self.pid_scope, util::PidScope());
  EXPECT_FALSE(util::HolderIsDead(self));
  // The same pid with another start time is a different (earlier) process: dead.
  idem::Holder earlier = self;
  earlier.process_start += 1;
  EXPECT_TRUE(util::HolderIsDead(earlier));
  // Unknown holders are never declared dead.
  EXPECT_FALSE(util::HolderIsDead({}));
  // A pid beyond the kernel's pid_max exists nowhere.
  idem::Holder nowhere = self;
  nowhere.pid = 1u << 30;
  EXPECT_TRUE(util::HolderIsDead(nowhere));
  // ... but recorded in another scope (boot, PID or time namespace), or in an unknown one, it
  // may name a live process there: never dead.
  nowhere.pid_scope = self.pid_scope + 1;
  EXPECT_FALSE(util::HolderIsDead(nowhere));
  nowhere.pid_scope = 0;
  EXPECT_FALSE(util::HolderIsDead(nowhere));
  // A forked child is a holder of its own, and draws request ids of its own: not the ones its
  // parent draws next.
  int channel[2];
  ASSERT_EQ(pipe(channel), 0);
  const idem::Holder parent = util::ThisProcessHolder();
  EXPECT_EQ(parent.request_id, 0u);  // each Begin call sets its own
  static_cast<void>(util::RandomRequestId());
  const pid_t child = fork();
  if (child == 0) {
    const idem::Holder holder = util::ThisProcessHolder();
    const uint64_t answer[2] = {holder.pid != parent.pid ? 1u : 0u, util::RandomRequestId()};
    _exit(write(channel[1], answer, sizeof answer) == sizeof answer ? 0 : 1);
  }
  const uint64_t parents_next = util::RandomRequestId();
  uint64_t answer[2] = {};
  EXPECT_EQ(read(channel[0], answer, sizeof answer), static_cast<ssize_t>(sizeof answer));
  EXPECT_EQ(answer[0], 1u) << "the child passed for its parent";
  EXPECT_NE(answer[1], parents_next);
  EXPECT_NE(answer[1], 0u);
  waitpid(child, nullptr, 0);
  close(channel[0]);
  close(channel[1]);
}

}  // namespace

namespace {

// Two containers sharing a volume: the holder runs in a PID namespace of its own, so the pid
// it was recorded under names another process (or none) in the judge's namespace.
TEST(DeadHolder, AHolderInAnotherPidNamespaceWaitsForItsLease) {
  for (const bool own_proc : {true, false}) {
    SCOPED_TRACE(own_proc ? "the holder mounted its own /proc"
                          : "the holder sees the host's /proc");
    TempDir dir;
    NamespacedProcess holder({.pid = true, .mount_proc = own_proc},
                             [&] { return ClaimForAnHour(dir.StorePath(), "order-1"); });
    SKIP_UNLESS_PERMITTED(holder);
    ASSERT_EQ(holder.byte(), kClaimed);
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
    EXPECT_EQ(claim.outcome, Outcome::kInProgress);
    EXPECT_GT(claim.retry_after, std::chrono::minutes(59));
  }
}

// The other way round, as after an ownership failover from one container to another: the
// judge runs in a PID namespace where the holder's pid names nothing.
TEST(DeadHolder, AJudgeInAnotherPidNamespaceDoesNotTakeOverALiveClaim) {
  TempDir dir;
  const pid_t holder = ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/false);
  ASSERT_GT(holder, 0);
  NamespacedProcess judge({.pid = true, .mount_proc = true},
                          [&] { return BeginOnce(dir.StorePath(), "order-1"); });
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  SKIP_UNLESS_PERMITTED(judge);
  EXPECT_EQ(judge.byte(), kInProgress);
}

// A judge without /proc (hidden by its mount namespace) cannot prove anything: it waits for
// the lease, for a live holder and for a dead one alike.
TEST(DeadHolder, AJudgeWithoutProcWaitsForTheLease) {
  for (const bool holder_alive : {true, false}) {
    SCOPED_TRACE(holder_alive ? "live holder" : "dead holder");
    TempDir dir;
    const pid_t holder = ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/!holder_alive);
    ASSERT_GT(holder, 0);
    NamespacedProcess judge({.hide_proc = true},
                            [&] { return BeginOnce(dir.StorePath(), "order-1"); });
    if (holder_alive) {
      kill(holder, SIGKILL);
      waitpid(holder, nullptr, 0);
    }
    SKIP_UNLESS_PERMITTED(judge);
    EXPECT_EQ(judge.byte(), kInProgress);
  }
}

// In a time namespace, /proc reports every start time shifted by the boot-time offset: the
// live holder's start time reads differently there, which must not pass for a reused pid.
TEST(DeadHolder, AJudgeInAnotherTimeNamespaceDoesNotTakeOverALiveClaim) {
  TempDir dir;
  const pid_t holder = ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/false);
  ASSERT_GT(holder, 0);
  NamespacedProcess judge({.time = true}, [&] { return BeginOnce(dir.StorePath(), "order-1"); });
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  SKIP_UNLESS_PERMITTED(judge);
  EXPECT_EQ(judge.byte(), kInProgress);
}

// An owner out of file descriptors (an application that leaks them, a peer that opens
// thousands of connections) cannot read /proc: a live holder is not declared dead for that,
// and a dead one is still recognised (kill(pid, 0) needs no descriptor).
TEST(DeadHolder, AnOwnerOutOfDescriptorsTakesOverOnlyDeadHolders) {
  TempDir dir;
  const pid_t live = ClaimInChild(dir.StorePath(), "live", /*kill_it=*/false);
  ASSERT_GT(live, 0);
  ASSERT_GT(ClaimInChild(dir.StorePath(), "dead", /*kill_it=*/true), 0);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK(store->Begin("warm-up").status());  // RocksDB's files are open

  // Every descriptor taken, under a limit lowered so that this stays quick.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  std::vector<int> hog;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) hog.push_back(fd);
  const int open_errno = errno;
  auto live_claim = store->Begin("live");
  auto dead_claim = store->Begin("dead");
  for (int fd : hog) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_EQ(open_errno, EMFILE);
  kill(live, SIGKILL);
  waitpid(live, nullptr, 0);

  ASSERT_OK(live_claim.status());
  EXPECT_EQ(live_claim->outcome, Outcome::kInProgress);
  ASSERT_OK(dead_claim.status());
  EXPECT_EQ(dead_claim->outcome, Outcome::kAcquired);
  EXPECT_TRUE(dead_claim->took_over);
}

}  // namespace
