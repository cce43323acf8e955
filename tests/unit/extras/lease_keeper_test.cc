// The lease keeper in-process, over a store whose Extend the test scripts: when it renews, what
// it does with each answer, that removing a lease waits for a renewal in flight, and that a
// renewal that hangs or fails slowly holds up neither its attempt's end nor other leases. Times
// are real (the keeper runs on the steady clock) but short, and every wait is for a condition.

#include "extras/lease_keeper.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using idem::LeaseKeeper;
using idem::LeaseStatus;
using idem::Status;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

// A store whose Extend answers from a script (then OK, or what AnswerAfterScript says), records
// each call, takes `delay` over each, and can be held inside a call until released. Every other
// call is unused by the keeper.
class ScriptedStore final : public idem::Store {
 public:
  struct Call {
    std::string key;
    uint64_t token;
    std::chrono::milliseconds lease;
    Steady::time_point at;
  };

  void Script(std::vector<Status> answers) {
    std::lock_guard lock(mu_);
    answers_.assign(answers.begin(), answers.end());
  }
  void AnswerAfterScript(Status answer) {
    std::lock_guard lock(mu_);
    after_script_ = std::move(answer);
  }
  void Delay(std::chrono::milliseconds delay) {
    std::lock_guard lock(mu_);
    delay_ = delay;
  }
  void HoldCalls(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
    changed_.notify_all();
  }
  // Waits until `n` calls were made (false after 10 s).
  bool WaitForCalls(std::size_t n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 10s, [&] { return calls_.size() >= n; });
  }
  // Waits until a call is inside Extend, held.
  bool WaitForHeldCall() {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, 10s, [&] { return inside_; });
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  bool inside() const {
    std::lock_guard lock(mu_);
    return inside_;
  }

  Status Extend(std::string_view key, uint64_t token, std::chrono::milliseconds lease) override {
    std::unique_lock lock(mu_);
    calls_.push_back({std::string(key), token, lease, Steady::now()});
    inside_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !hold_; });
    if (delay_ > 0ms) {
      const auto delay = delay_;
      lock.unlock();
      std::this_thread::sleep_for(delay);
      lock.lock();
    }
    inside_ = false;
    Status answer = after_script_;
    if (!answers_.empty()) {
      answer = answers_.front();
      answers_.pop_front();
    }
    changed_.notify_all();
    return answer;
  }

  idem::Result<idem::Claim> Begin(std::string_view, const idem::BeginOptions&) override {
    return Unused();
  }
  Status Complete(std::string_view, uint64_t, std::string_view) override { return Unused(); }
  Status Fail(std::string_view, uint64_t, std::string_view, idem::Failure) override {
    return Unused();
  }
  Status SaveCheckpoint(std::string_view, uint64_t, std::string_view) override { return Unused(); }
  idem::Result<std::optional<idem::Record>> Get(std::string_view) override { return Unused(); }
  Status Forget(std::string_view) override { return Unused(); }
  Status Scan(const idem::ScanOptions&, idem::FunctionRef<bool(const idem::Record&)>) override {
    return Unused();
  }
  idem::Result<uint64_t> Purge(const idem::PurgeOptions&) override { return Unused(); }
  idem::Result<idem::Counters> GetCounters() const override { return idem::Counters{}; }
  const idem::Options& options() const override { return options_; }

 private:
  static Status Unused() { return Status::InvalidArgument("not used by the lease keeper"); }

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Status> answers_;
  std::vector<Call> calls_;
  Status after_script_;
  std::chrono::milliseconds delay_{0};
  bool hold_ = false;
  bool inside_ = false;
  idem::Options options_;
};

TEST(LeaseKeeper, RenewsEveryThirdOfTheLeaseWhileTheGuardLivesAndNeverAfter) {
  ScriptedStore store;
  constexpr auto kLease = 150ms;
  LeaseStatus status(Steady::now() + kLease);
  const auto kept_at = Steady::now();
  std::size_t made = 0;
  {
    auto guard = LeaseKeeper::Instance().Keep(&store, "pay-1", 42, kLease, &status);
    ASSERT_TRUE(store.WaitForCalls(3));
    made = store.calls().size();
  }
  const auto calls = store.calls();
  ASSERT_GE(calls.size(), 3u);
  for (const auto& call : calls) {
    EXPECT_EQ(call.key, "pay-1");
    EXPECT_EQ(call.token, 42u);
    EXPECT_EQ(call.lease, kLease);
  }
  // Not before a third of the lease has passed since the last renewal (or the start).
  auto previous = kept_at;
  for (const auto& call : calls) {
    EXPECT_GE(call.at - previous, kLease / 3 - 5ms);
    previous = call.at;
  }
  EXPECT_TRUE(status.Held());
  // Once the guard is gone, no call is made any more: a later lease's renewals are the proof
  // that the keeper ran on meanwhile.
  ScriptedStore other;
  LeaseStatus other_status(Steady::now() + kLease);
  {
    auto guard = LeaseKeeper::Instance().Keep(&other, "pay-2", 7, kLease, &other_status);
    ASSERT_TRUE(other.WaitForCalls(2));
  }
  EXPECT_LE(store.calls().size(), made + 1);  // at most the one in flight as the guard went
}

TEST(LeaseKeeper, ARenewalSlowerThanAPeriodIsFollowedByTheNextAtOnce) {
  // The next renewal is due a third of the lease after the last one was sent, not after its
  // answer: the owner set the deadline when it ran the renewal, and a renewal held up longer
  // than a period (a synced write behind a busy disk) already ate into the lease.
  ScriptedStore store;
  constexpr auto kLease = 3000ms;
  LeaseStatus status(Steady::now() + kLease);
  store.HoldCalls(true);
  auto guard = LeaseKeeper::Instance().Keep(&store, "slow-disk", 5, kLease, &status);
  ASSERT_TRUE(store.WaitForHeldCall());
  std::this_thread::sleep_for(kLease / 3 + 300ms);
  const auto released = Steady::now();
  store.HoldCalls(false);
  ASSERT_TRUE(store.WaitForCalls(2));
  // Counted from the answer, the second would come a whole period (1 s) after the release.
  EXPECT_LT(store.calls()[1].at - released, kLease / 6);
  EXPECT_TRUE(status.Held());
}

TEST(LeaseKeeper, ALostLeaseStopsTheRenewalsAndIsNoLongerHeld) {
  for (const Status& lost :
       {Status::LeaseLost("taken over"), Status::NotFound("no record for key")}) {
    SCOPED_TRACE(lost.ToString());
    ScriptedStore store;
    store.Script({Status::OK(), lost});
    constexpr auto kLease = 90ms;
    LeaseStatus status(Steady::now() + kLease);
    auto guard = LeaseKeeper::Instance().Keep(&store, "pay", 1, kLease, &status);
    ASSERT_TRUE(store.WaitForCalls(2));
    ASSERT_TRUE(idem_test::WaitFor([&] { return !status.Held(); }, 5s));
    // Still no call after several periods: the keeper stopped this lease. Another lease run
    // meanwhile shows the keeper was running.
    ScriptedStore other;
    LeaseStatus other_status(Steady::now() + kLease);
    {
      auto other_guard = LeaseKeeper::Instance().Keep(&other, "other", 2, kLease, &other_status);
      ASSERT_TRUE(other.WaitForCalls(4));
    }
    EXPECT_EQ(store.calls().size(), 2u);
  }
}

TEST(LeaseKeeper, AFailedRenewalIsRetriedSoonAndTheLeaseStaysHeldMeanwhile) {
  ScriptedStore store;
  // A long lease: without the retry, the next renewal would come a second later.
  constexpr auto kLease = 3000ms;
  store.Script({Status::TimedOut("the owner did not answer"), Status::Unavailable("failing over"),
                Status::OK()});
  LeaseStatus status(Steady::now() + kLease);
  auto guard = LeaseKeeper::Instance().Keep(&store, "slow", 9, kLease, &status);
  ASSERT_TRUE(store.WaitForCalls(3));
  const auto calls = store.calls();
  EXPECT_LT(calls[1].at - calls[0].at, LeaseKeeper::kRetryFailedRenewal + 500ms);
  EXPECT_LT(calls[2].at - calls[1].at, LeaseKeeper::kRetryFailedRenewal + 500ms);
  EXPECT_TRUE(status.Held());  // a failure that is not a loss keeps what was held
}

TEST(LeaseKeeper, RemovingALeaseWaitsForItsRenewalInFlight) {
  ScriptedStore store;
  constexpr auto kLease = 60ms;
  LeaseStatus status(Steady::now() + kLease);
  store.HoldCalls(true);
  std::atomic<bool> removed{false};
  std::thread owner([&] {
    {
      auto guard = LeaseKeeper::Instance().Keep(&store, "held", 3, kLease, &status);
      store.WaitForHeldCall();
    }  // the guard goes while its renewal is in flight
    removed = true;
  });
  ASSERT_TRUE(store.WaitForHeldCall());
  // The guard's destructor waits while Extend runs: the store may be closed right after it.
  EXPECT_FALSE(idem_test::WaitFor([&] { return removed.load(); }, 200ms));
  EXPECT_TRUE(store.inside());
  store.HoldCalls(false);
  owner.join();
  EXPECT_TRUE(removed);
  EXPECT_FALSE(store.inside());
}

TEST(LeaseKeeper, ARenewalThatFailsSlowerThanAPeriodDoesNotHoldUpTheGuard) {
  // A server that does not answer: each renewal fails only at the store's deadline, longer than
  // a renewal period, so the next one is due as soon as it ends. The guard still goes as soon as
  // the renewal in flight ends, not when the store answers again.
  ScriptedStore store;
  constexpr auto kLease = 150ms;
  store.AnswerAfterScript(Status::TimedOut("no answer within the request timeout"));
  store.Delay(kLease);
  LeaseStatus status(Steady::now() + kLease);
  std::atomic<bool> removed{false};
  std::thread owner([&] {
    {
      auto guard = LeaseKeeper::Instance().Keep(&store, "frozen", 4, kLease, &status);
      store.WaitForCalls(2);
    }
    removed = true;
  });
  const bool removed_in_time = idem_test::WaitFor([&] { return removed.load(); }, 3s);
  // Whatever happened, end the renewals so that the test ends.
  store.AnswerAfterScript(Status::LeaseLost("taken over"));
  store.Delay(0ms);
  owner.join();
  EXPECT_TRUE(removed_in_time) << "the guard waited while renewals kept failing slowly";
}

TEST(LeaseKeeper, AStoppedGuardDoesNotWaitForItsRenewalInFlight) {
  ScriptedStore store;
  constexpr auto kLease = 60ms;
  LeaseStatus status(Steady::now() + kLease);
  store.HoldCalls(true);
  {
    auto kept = LeaseKeeper::Instance().Keep(&store, "held", 8, kLease, &status);
    ASSERT_TRUE(store.WaitForHeldCall());
    const auto stopping = Steady::now();
    kept.Stop();  // the claim's release goes out now, not when the renewal ends
    EXPECT_LT(Steady::now() - stopping, 100ms);
    EXPECT_TRUE(store.inside());
    store.HoldCalls(false);
  }  // the destructor waits for the renewal that was in flight
  EXPECT_FALSE(store.inside());
  const std::size_t calls = store.calls().size();
  std::this_thread::sleep_for(kLease * 2);
  EXPECT_EQ(store.calls().size(), calls);  // stopped: no renewal after
  EXPECT_EQ(calls, 1u);
}

TEST(LeaseKeeper, ARenewalThatHangsDoesNotHoldUpOtherLeases) {
  // One frozen store (its Extend hangs) must not cost the attempts on other stores their leases.
  ScriptedStore frozen;
  frozen.HoldCalls(true);
  constexpr auto kLease = 90ms;
  LeaseStatus frozen_status(Steady::now() + kLease);
  auto frozen_guard = LeaseKeeper::Instance().Keep(&frozen, "frozen", 1, kLease, &frozen_status);
  ASSERT_TRUE(frozen.WaitForHeldCall());
  ScriptedStore other;
  LeaseStatus other_status(Steady::now() + kLease);
  {
    auto other_guard = LeaseKeeper::Instance().Keep(&other, "other", 2, kLease, &other_status);
    EXPECT_TRUE(other.WaitForCalls(4)) << "no renewal of another lease while one hangs";
    EXPECT_TRUE(other_status.Held());
    frozen_guard.Stop();
    frozen.HoldCalls(false);
  }
}

}  // namespace
