// A stalled owner (SIGSTOP: a debugger, a frozen VM, a long pause) and a new owner after a
// failover do not hand a live claim to someone else: claims whose lease ran out while their
// holders could not renew keep them for Options::renewal_grace. And Attempt::LeaseHeld tells
// the running function when its lease may be gone.
// The owner is a tests/support/sharing_worker.cc process, stopped and resumed with signals.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "idem/idem.h"
#include "support/owner_process.h"
#include "support/test_util.h"

namespace {

using idem::Outcome;
using idem_test::OwnerProcess;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

// Stopped for longer than the lease and the stall threshold.
constexpr auto kStall = 1500ms;

TEST(Stall, AClaimWhoseLeaseRanOutWhileTheOwnerWasStoppedIsKeptForItsHolder) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1", {.lease = 500ms}));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);

  owner.Stop();
  std::this_thread::sleep_for(kStall);
  owner.Continue();

  // The lease ran out during the stall, when its holder could not renew: another Begin waits.
  ASSERT_OK_AND_ASSIGN(auto other, store->Begin("order-1"));
  EXPECT_EQ(other.outcome, Outcome::kInProgress);
  EXPECT_GT(other.retry_after, 0ms);
  EXPECT_LE(other.retry_after, TestOptions().renewal_grace);
  // The holder renews within the grace and keeps its claim.
  ASSERT_OK(store->Extend("order-1", claim.token, 10s));
  ASSERT_OK_AND_ASSIGN(auto again, store->Begin("order-1"));
  EXPECT_EQ(again.outcome, Outcome::kInProgress);
  ASSERT_OK(store->Complete("order-1", claim.token, "charge-1"));
}

// The grace is for claims whose renewals were impossible: without a stall an expired lease is
// taken over at once, and a claim made after the owner began is not covered by its grace.
TEST(Stall, WithoutAStallAnExpiredLeaseIsTakenOverAtOnce) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1", {.lease = 200ms}));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  std::this_thread::sleep_for(400ms);
  ASSERT_OK_AND_ASSIGN(auto other, store->Begin("order-1"));
  EXPECT_EQ(other.outcome, Outcome::kAcquired);
  EXPECT_TRUE(other.took_over);
}

// After a failover the new owner gives the claims written before it a grace: their holders
// renew with it only now.
TEST(Stall, ANewOwnerKeepsExpiredClaimsForTheirHoldersForTheGrace) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1", {.lease = 300ms}));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  owner.Kill();
  std::this_thread::sleep_for(600ms);  // the lease runs out while there is no owner

  // This call fails over: this process becomes the owner, then judges the claim.
  ASSERT_OK_AND_ASSIGN(auto other, store->Begin("order-1"));
  EXPECT_EQ(other.outcome, Outcome::kInProgress);
  EXPECT_LE(other.retry_after, TestOptions().renewal_grace);
  ASSERT_OK(store->Extend("order-1", claim.token, 10s));
  ASSERT_OK(store->Complete("order-1", claim.token, "charge-1"));
}

// A caller that does not want the grace turns it off: expired means taken over.
TEST(Stall, AZeroGraceTakesOverAtOnceAfterAFailover) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  idem::Options options = TestOptions();
  options.renewal_grace = 0ms;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("order-1", {.lease = 300ms}));
  owner.Kill();
  std::this_thread::sleep_for(600ms);
  ASSERT_OK_AND_ASSIGN(auto other, store->Begin("order-1"));
  EXPECT_EQ(other.outcome, Outcome::kAcquired);
}

// Waits up to `timeout` for `condition`.
template <class Condition>
bool Eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto give_up_at = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= give_up_at) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Execute across an owner's stall: the function runs once, a concurrent Execute of the same
// key waits for it instead of taking it over, and the function can see its lease go and come
// back.
TEST(Stall, ExecuteRunsOnceAcrossAStallAndTheAttemptSeesItsLease) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  idem::Options options = TestOptions();
  options.execute_wait = 30s;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);

  std::atomic<int> runs{0};
  std::atomic<bool> started{false}, stalled{false}, resumed{false};
  std::atomic<bool> held_at_start{false}, lost_in_stall{false}, back_after{false};
  std::thread first([&] {
    auto execution = store->Execute("order-1", {.lease = 600ms}, [&](idem::Attempt& attempt) {
      ++runs;
      held_at_start = attempt.LeaseHeld();
      started = true;
      Eventually([&] { return stalled.load(); }, 30s);
      lost_in_stall = Eventually([&] { return !attempt.LeaseHeld(); }, 5s);
      Eventually([&] { return resumed.load(); }, 30s);
      back_after = Eventually([&] { return attempt.LeaseHeld(); }, 5s);
      return idem::Result<std::string>("charge-1");
    });
    EXPECT_TRUE(execution.ok()) << execution.status().ToString();
  });
  ASSERT_TRUE(Eventually([&] { return started.load(); }, 30s));
  std::thread second([&] {
    auto execution = store->Execute("order-1", {.lease = 600ms}, [&](idem::Attempt&) {
      ++runs;
      return idem::Result<std::string>("charge-2");
    });
    ASSERT_TRUE(execution.ok()) << execution.status().ToString();
    EXPECT_TRUE(execution->replayed);
    EXPECT_EQ(execution->result, "charge-1");
  });
  std::this_thread::sleep_for(50ms);  // the second Execute is polling
  owner.Stop();
  stalled = true;
  std::this_thread::sleep_for(kStall);
  owner.Continue();
  resumed = true;
  first.join();
  second.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(held_at_start.load());
  EXPECT_TRUE(lost_in_stall.load())
      << "LeaseHeld stayed true through a stall longer than the lease";
  EXPECT_TRUE(back_after.load()) << "the lease was not renewed after the stall";
}

// An Execute whose owner stops while fn runs: each lease renewal then waits out
// request_timeout, longer than a renewal period, and the next is due as soon as it ends. The
// attempt's end waited for the keeper, whose lock went from one renewal to the next, until the
// owner resumed (issue 39); now Execute ends by the deadline of its Complete.
TEST(Stall, AnExecuteWhoseRenewalsHangOnAStoppedOwnerEndsByItsDeadline) {
  TempDir dir;
  OwnerProcess owner(dir.StorePath());
  ASSERT_TRUE(owner.ready());
  idem::Options options = TestOptions();
  options.request_timeout = 1s;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);
  // Should the call hang, the owner resumes after a while, so that the test fails instead.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    Eventually([&] { return done.load(); }, 30s);
    owner.Continue();
  });
  std::chrono::steady_clock::time_point fn_returned;
  auto execution = store->Execute("order-1", {.lease = 600ms}, [&](idem::Attempt&) {
    owner.Stop();
    std::this_thread::sleep_for(1500ms);  // renewals every 200 ms, each taking 1 s
    fn_returned = std::chrono::steady_clock::now();
    return idem::Result<std::string>("charge-1");
  });
  const auto took = std::chrono::steady_clock::now() - fn_returned;
  done = true;
  watchdog.join();
  EXPECT_LT(took, options.request_timeout + 1500ms);
  ASSERT_FALSE(execution.ok());
  EXPECT_EQ(execution.status().code(), idem::Status::Code::kTimedOut)
      << execution.status().ToString();
}

}  // namespace
