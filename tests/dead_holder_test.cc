// A claim whose process died is taken over at once, not after its lease; a live process's claim
// is not; and Options::take_over_dead_holders = false waits for the lease.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sharing/process.h"
#include "test_util.h"

namespace {

using idem::Outcome;
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

TEST(DeadHolder, AClaimOfAKilledProcessIsTakenOverAtOnce) {
  TempDir dir;
  ASSERT_GT(ClaimInChild(dir.StorePath(), "order-1", /*kill_it=*/true), 0);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
  EXPECT_TRUE(claim.took_over);
  EXPECT_EQ(claim.record.attempts, 2u);
  EXPECT_EQ(claim.record.holder.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(store->GetCounters().takeovers, 1u);
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
  namespace sharing = idem::sharing;
  const auto start = sharing::ProcessStartTime(getpid());
  ASSERT_TRUE(start.has_value());
  const uint32_t pid = static_cast<uint32_t>(getpid());
  EXPECT_FALSE(sharing::HolderIsDead({.pid = pid, .process_start = *start}));
  // The same pid with another start time is a different (earlier) process: dead.
  EXPECT_TRUE(sharing::HolderIsDead({.pid = pid, .process_start = *start + 1}));
  // Unknown holders are never declared dead.
  EXPECT_FALSE(sharing::HolderIsDead({}));
  // A pid beyond the kernel's pid_max exists nowhere.
  EXPECT_TRUE(sharing::HolderIsDead({.pid = 1u << 30, .process_start = 1}));
  // A forked child is a holder of its own.
  int channel[2];
  ASSERT_EQ(pipe(channel), 0);
  const idem::Holder parent = sharing::ThisProcessHolder();
  const pid_t child = fork();
  if (child == 0) {
    const idem::Holder holder = sharing::ThisProcessHolder();
    const bool distinct = holder.pid != parent.pid && holder.request_id != parent.request_id;
    const char byte = distinct ? 'y' : 'n';
    _exit(write(channel[1], &byte, 1) == 1 ? 0 : 1);
  }
  char byte = 0;
  EXPECT_EQ(read(channel[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'y');
  waitpid(child, nullptr, 0);
  close(channel[0]);
  close(channel[1]);
}

}  // namespace
