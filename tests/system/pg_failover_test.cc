// Failover of a store kept in PostgreSQL (issue 13): a primary and a synchronous streaming
// standby on loopback, callers running Store::Execute through the multi-host URI with kSync;
// mid-run the primary is killed (SIGKILL, postmaster and children) and the standby promoted.
// The callers carry on against the promoted standby, retrying what failed meanwhile under the
// same key. Afterwards: no acknowledged result is lost, every key is done with the result its
// callers were given, and no key's function ran a second time before the first run's lease
// could have passed.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "idem/idem.h"
#include "idem/sql.h"
#include "support/pg_server.h"
#include "support/test_util.h"
#include "util/backoff.h"

namespace idem_test {
namespace {

using namespace std::chrono_literals;
using idem::Store;
using std::chrono::milliseconds;
using SystemClock = std::chrono::system_clock;
using SteadyClock = std::chrono::steady_clock;

constexpr int kCallers = 8;
constexpr int kKeys = 1000;
constexpr milliseconds kLease{2000};
// How long a caller keeps retrying one key before the test gives up on it.
constexpr milliseconds kCallerPatience{30'000};
// The primary is killed once this share of all calls has been acknowledged.
constexpr double kKillAfter = 0.3;

std::string KeyName(int key) { return "failover-" + std::to_string(key); }

// One run of a key's function.
struct FnRun {
  int key = 0;
  int number = 0;  // unique across the test: the run's result names it
  // When the Execute call that ran the function began, and when the function began: on the
  // system clock, which the server's lease deadlines are on.
  SystemClock::time_point call_start;
  SystemClock::time_point fn_start;
};

// One acknowledged call: Execute returned OK with this result.
struct Ack {
  int key = 0;
  std::string result;
  SteadyClock::time_point call_start;
  SteadyClock::time_point at;
};

// What the callers saw, shared by them.
struct Journal {
  std::mutex mu;
  std::vector<FnRun> runs;
  std::vector<Ack> acks;
  std::map<std::string, int> retried_errors;  // code name -> count
  std::vector<std::string> failures;          // keys given up on, with the last error
  std::atomic<int> acknowledged{0};
  std::atomic<int> retries{0};
  std::atomic<int> callers_that_saw_errors{0};
  // Callers whose every key was acknowledged before any call of theirs failed: on a busy
  // machine one caller can run far ahead of the others and be done before the kill.
  std::atomic<int> callers_done_without_errors{0};
  std::atomic<int> next_run{0};
  std::atomic<bool> stop{false};  // the test failed: callers stop at once
};

// Tells the callers to stop when the test leaves their scope early (a failed ASSERT), so that
// joining them does not wait for every key.
struct StopCallersOnExit {
  std::atomic<bool>& stop;
  ~StopCallersOnExit() { stop = true; }
};

// Calls Execute on `key` until it is acknowledged, retrying retryable errors (as a caller of
// idem should: the same key makes the retry safe) for at most kCallerPatience. `saw_errors`:
// whether this caller has been counted in journal.callers_that_saw_errors.
void ExecuteUntilAcknowledged(Store& store, int key, Journal& journal, bool& saw_errors) {
  const auto give_up = SteadyClock::now() + kCallerPatience;
  idem::util::Backoff backoff(10ms, 500ms);
  while (!journal.stop) {
    const auto call_start = SystemClock::now();
    const auto call_start_steady = SteadyClock::now();
    idem::Result<idem::Execution> execution =
        store.Execute(KeyName(key), {.lease = kLease}, [&](idem::Attempt&) {
          const auto fn_start = SystemClock::now();
          const int number = journal.next_run++;
          {
            std::lock_guard lock(journal.mu);
            journal.runs.push_back(
                {.key = key, .number = number, .call_start = call_start, .fn_start = fn_start});
          }
          return idem::Result<std::string>("run-" + std::to_string(number));
        });
    if (execution.ok()) {
      std::lock_guard lock(journal.mu);
      journal.acks.push_back({.key = key,
                              .result = execution->result,
                              .call_start = call_start_steady,
                              .at = SteadyClock::now()});
      ++journal.acknowledged;
      return;
    }
    const idem::Status& status = execution.status();
    if (!idem::IsRetryable(status) || SteadyClock::now() >= give_up) {
      std::lock_guard lock(journal.mu);
      journal.failures.push_back(KeyName(key) + ": " + status.ToString());
      return;
    }
    {
      std::lock_guard lock(journal.mu);
      ++journal.retried_errors[std::string(idem::CodeName(status.code()))];
    }
    ++journal.retries;
    if (!std::exchange(saw_errors, true)) ++journal.callers_that_saw_errors;
    std::this_thread::sleep_for(backoff.Next());
  }
}

long long Millis(SteadyClock::duration duration) {
  return std::chrono::duration_cast<milliseconds>(duration).count();
}

// Runs the callers against a primary and its synchronous standby, kills the primary once
// kKillAfter of the calls are acknowledged, and promotes the standby: at once, or, with
// `promote_when_every_caller_failed`, only once every caller still calling has had a call fail
// (which takes longer than the store's `failover_timeout`). Then checks what the top of this file
// says.
void RunFailover(milliseconds failover_timeout, bool promote_when_every_caller_failed) {
  IDEM_START_PG_OR_SKIP(primary);
  auto standby_started = primary->StartSynchronousStandby();
  ASSERT_TRUE(standby_started.ok()) << standby_started.status().ToString();
  std::unique_ptr<PgServer> standby = std::move(standby_started).value();
  const std::string uri = PgServer::MultiHostUri({primary.get(), standby.get()});

  idem::Options options;
  options.durability = idem::Durability::kSync;  // waits for the synchronous standby
  options.default_lease = kLease;
  options.pool_size = kCallers;
  options.auto_purge_interval = 0ms;
  options.failover_timeout = failover_timeout;
  auto opened = Store::Open(uri, options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> store = std::move(opened).value();

  // Two callers per key, one walking the keys up and one down, so that most keys are run by one
  // and replayed to the other, and some are asked by both at once; every caller is
  // acknowledged the same result for a key.
  Journal journal;
  constexpr int kGroups = kCallers / 2;
  const auto started = SteadyClock::now();
  {
    std::vector<std::jthread> callers;
    for (int caller = 0; caller < kCallers; ++caller) {
      callers.emplace_back([&, caller] {
        std::vector<int> keys;
        for (int key = caller % kGroups; key < kKeys; key += kGroups) keys.push_back(key);
        if (caller >= kGroups) std::reverse(keys.begin(), keys.end());
        bool saw_errors = false;
        for (const int key : keys) ExecuteUntilAcknowledged(*store, key, journal, saw_errors);
        if (!saw_errors) ++journal.callers_done_without_errors;
      });
    }
    const StopCallersOnExit stop_callers{journal.stop};

    const int kill_after = static_cast<int>(kKillAfter * 2 * kKeys);
    ASSERT_TRUE(WaitFor([&] { return journal.acknowledged >= kill_after; }, 30s))
        << journal.acknowledged << " calls acknowledged";
    const auto killed = SteadyClock::now();
    const int acknowledged_before_kill = journal.acknowledged;
    ASSERT_OK(primary->Stop(PgServer::Shutdown::kKill));
    const auto dead = SteadyClock::now();
    if (promote_when_every_caller_failed) {
      // Every caller still calling has had a call fail.
      ASSERT_TRUE(WaitFor(
          [&] {
            return journal.callers_that_saw_errors + journal.callers_done_without_errors ==
                   kCallers;
          },
          30s))
          << journal.callers_that_saw_errors << " of " << kCallers << " callers saw errors, "
          << journal.callers_done_without_errors << " were done before the kill";
    }
    const auto promoting = SteadyClock::now();
    ASSERT_OK(standby->Promote());
    const auto promoted = SteadyClock::now();
    for (std::jthread& thread : callers) thread.join();
    const auto finished = SteadyClock::now();

    // The kill came mid-run: calls were acknowledged on both sides of it.
    EXPECT_LT(acknowledged_before_kill, 2 * kKeys);
    SteadyClock::time_point first_ack_after_kill = SteadyClock::time_point::max();
    for (const Ack& ack : journal.acks) {
      if (ack.call_start > killed) first_ack_after_kill = std::min(first_ack_after_kill, ack.at);
    }
    ASSERT_NE(first_ack_after_kill, SteadyClock::time_point::max());

    int keys_run_twice = 0;
    std::map<int, std::vector<const FnRun*>> runs_by_key;
    for (const FnRun& run : journal.runs) runs_by_key[run.key].push_back(&run);
    for (auto& [key, runs] : runs_by_key) keys_run_twice += runs.size() > 1 ? 1 : 0;
    std::cout << "calls: " << journal.acks.size() << " acknowledged (" << acknowledged_before_kill
              << " before the kill), " << journal.runs.size() << " runs of " << kKeys << " keys, "
              << keys_run_twice << " keys run more than once, " << journal.retries
              << " retries by the callers (";
    for (const auto& [code, count] : journal.retried_errors)
      std::cout << code << " " << count << " ";
    std::cout << ")\nkill: " << Millis(dead - killed)
              << " ms, until promoting: " << Millis(promoting - dead)
              << " ms, promotion: " << Millis(promoted - promoting)
              << " ms; kill to the first acknowledgement of a call begun after it: "
              << Millis(first_ack_after_kill - killed)
              << " ms; the whole run: " << Millis(finished - started) << " ms\n";
    ::testing::Test::RecordProperty("failover_ms",
                                    static_cast<int>(Millis(first_ack_after_kill - killed)));

    EXPECT_EQ(journal.failures, std::vector<std::string>{});
    // What the pool resends within failover_timeout, callers never see, unless the outage
    // outlasted a lease and the other caller of a key took it over meanwhile.
    if (!promote_when_every_caller_failed && promoted - killed < kLease / 2) {
      EXPECT_EQ(journal.retries, 0);
    }

    // A key's function runs again only when its claim could be taken over: after the lease
    // deadline, by the server's clock. The run's Begin read that clock after its Execute call
    // began (and a renewal only moves the deadline later), so the next run starts at least a
    // lease after that call began, by the same clock (the server runs on this host; both read
    // CLOCK_REALTIME). kClockSlack covers only the rounding of the server's timestamps to
    // microseconds and of this host's to its clock's resolution.
    constexpr milliseconds kClockSlack{5};
    std::optional<milliseconds> shortest_gap;
    for (auto& [key, runs] : runs_by_key) {
      std::sort(runs.begin(), runs.end(),
                [](const FnRun* a, const FnRun* b) { return a->fn_start < b->fn_start; });
      for (std::size_t i = 1; i < runs.size(); ++i) {
        const auto gap =
            std::chrono::duration_cast<milliseconds>(runs[i]->fn_start - runs[i - 1]->call_start);
        shortest_gap = std::min(shortest_gap.value_or(gap), gap);
        EXPECT_GE(gap, kLease - kClockSlack)
            << KeyName(key) << ": run " << runs[i]->number << " began " << gap.count()
            << " ms after the call of run " << runs[i - 1]->number << " began";
      }
    }
    if (shortest_gap) {
      std::cout << "a key's next run began at least " << shortest_gap->count()
                << " ms after the call of its run before (lease: " << kLease.count() << " ms)\n";
    }
  }

  // On the promoted standby, by itself: every key done, with the result each of its callers was
  // acknowledged (so nothing acknowledged before the kill was lost, and no caller was given a
  // result that a second run replaced).
  std::map<int, std::vector<std::string>> acked_results;
  for (const Ack& ack : journal.acks) acked_results[ack.key].push_back(ack.result);
  auto checked = Store::Open(standby->Uri(), options);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  int done = 0;
  for (int key = 0; key < kKeys; ++key) {
    ASSERT_OK_AND_ASSIGN(std::optional<idem::Record> record, (*checked)->Get(KeyName(key)));
    ASSERT_TRUE(record.has_value()) << KeyName(key) << " has no record";
    EXPECT_EQ(record->state, idem::State::kDone) << KeyName(key);
    done += record->state == idem::State::kDone ? 1 : 0;
    EXPECT_EQ(acked_results[key].size(), 2u) << KeyName(key);
    for (const std::string& result : acked_results[key]) {
      EXPECT_EQ(result, record->result) << KeyName(key);
    }
  }
  EXPECT_EQ(done, kKeys);
}

// An outage shorter than the store's failover_timeout: the pool reconnects to the promoted
// standby and resends what was in flight; callers see errors only where two of them met on a
// key whose lease ran out meanwhile.
TEST(PgFailover, CallsInFlightCarryOnOnThePromotedStandby) {
  RunFailover(/*failover_timeout=*/10s, /*promote_when_every_caller_failed=*/false);
}

// An outage longer than the store's failover_timeout: every caller gets a retryable error and
// retries under the same key; keys whose first Begin or Complete was lost with the primary wait
// for their lease.
TEST(PgFailover, CallersRetryAcrossAFailoverLongerThanTheirTimeout) {
  RunFailover(/*failover_timeout=*/1s, /*promote_when_every_caller_failed=*/true);
}

// While the synchronous standby is down, every commit that waits for it hangs (until the
// standby is back, or a cancel commits it locally, unreplicated). Opening a store writes (it
// raises the token sequence to the clock, and notes the server's incarnation) but needs none of
// that to wait: a new process opens the store and reads it. A write that must be durable waits,
// as it should, and so does a process's first Begin, which reserves a block of tokens
// (issue 39).
TEST(PgFailover, AStoreOpensAndReadsWhileItsSynchronousStandbyIsDown) {
  IDEM_START_PG_OR_SKIP(primary);
  auto standby = primary->StartSynchronousStandby();
  ASSERT_TRUE(standby.ok()) << standby.status().ToString();
  idem::Options options;
  options.auto_purge_interval = 0ms;
  options.request_timeout = 3s;
  options.failover_timeout = 3s;
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(primary->Uri(), options));
    ASSERT_OK_AND_ASSIGN(idem::Claim claim, store->Begin("paid"));
    ASSERT_OK(store->Complete("paid", claim.token, "receipt"));
  }
  ASSERT_OK((*standby)->Stop(PgServer::Shutdown::kFast));

  const auto opening = SteadyClock::now();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(primary->Uri(), options));
  ASSERT_OK_AND_ASSIGN(std::optional<idem::Record> paid, store->Get("paid"));
  // Well within the request timeout, which a wait for the standby would have run into.
  EXPECT_LT(SteadyClock::now() - opening, options.request_timeout);
  ASSERT_TRUE(paid.has_value());
  EXPECT_EQ(paid->result, "receipt");
}

// SIGSTOP (or SIGCONT) to the server's walsenders: the synchronous standby stops receiving its
// log while the primary and the standby both run, as when the standby's disk or network stalls.
void SignalWalSenders(const PgServer& server, int signal) {
  int signalled = 0;
  for (const pid_t pid : server.Processes()) {
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
    std::string title;
    std::getline(cmdline, title);
    if (title.find("walsender") != std::string::npos && ::kill(pid, signal) == 0) ++signalled;
  }
  EXPECT_GT(signalled, 0) << "no walsender found";
}

// Options under which a call that waits for a stalled standby gives up soon.
idem::Options GivingUpWithinASecond() {
  idem::Options options;
  options.auto_purge_interval = 0ms;
  options.request_timeout = 1s;
  options.failover_timeout = 1s;
  return options;
}

// A Complete whose commit waited for the synchronous standby that had stalled returns no answer
// in time: idem cancels it, and PostgreSQL keeps the commit on the primary alone ("committed
// locally, but might not have been replicated"). A retry must not be answered from that commit:
// once the primary dies and the standby is promoted, the record there is still pending, and an
// answer given from the primary's copy would be lost (issue 39).
TEST(PgFailover, AResultTheStandbyNeverGotIsNeverAnsweredFromThePrimary) {
  IDEM_START_PG_OR_SKIP(primary);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgServer> standby, primary->StartSynchronousStandby());
  const idem::Options options = GivingUpWithinASecond();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(primary->Uri(), options));
  ASSERT_OK_AND_ASSIGN(idem::Claim claim, store->Begin("charge", {.lease = 2s}));
  ASSERT_EQ(claim.outcome, idem::Outcome::kAcquired);

  SignalWalSenders(*primary, SIGSTOP);
  const idem::Status completed = store->Complete("charge", claim.token, "charged");
  EXPECT_FALSE(completed.ok()) << "a commit the standby never got was acknowledged";
  // The retry: the primary has the done record, the standby does not.
  const auto retried = store->Begin("charge", {.lease = 2s});
  EXPECT_FALSE(retried.ok() && retried->outcome == idem::Outcome::kReplay)
      << "answered from a commit the standby never got: " << retried->record.result;
  if (!retried.ok()) {
    EXPECT_TRUE(idem::IsRetryable(retried.status())) << retried.status().ToString();
  }

  // The primary dies; the promoted standby never saw the Complete, and nobody was told it ran.
  ASSERT_OK(primary->Stop(PgServer::Shutdown::kKill));
  ASSERT_OK(standby->Promote());
  ASSERT_OK_AND_ASSIGN(auto promoted, Store::Open(standby->Uri(), options));
  ASSERT_OK_AND_ASSIGN(std::optional<idem::Record> record, promoted->Get("charge"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, idem::State::kPending);
}

// The same where the store last saw the server without a synchronous standby, so that its reads
// no longer wait for one (PgStorage::AnswerRead): the standby is configured while the store runs,
// the Complete is committed on the primary alone, and the retry's read, which finds the done
// record, learns of the standby and waits for it before answering. Once the standby has the log
// again, the same retry is answered.
TEST(PgFailover, AReadThatDidNotWaitForAStandbyConfiguredSinceWaitsBeforeItAnswers) {
  IDEM_START_PG_OR_SKIP(primary);
  const idem::Options options = GivingUpWithinASecond();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(primary->Uri(), options));
  // A replay without a standby: the store learns there is none.
  ASSERT_OK_AND_ASSIGN(idem::Claim first, store->Begin("first", {.lease = 2s}));
  ASSERT_OK(store->Complete("first", first.token, "done"));
  ASSERT_OK_AND_ASSIGN(idem::Claim replay, store->Begin("first", {.lease = 2s}));
  ASSERT_EQ(replay.outcome, idem::Outcome::kReplay);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgServer> standby, primary->StartSynchronousStandby());
  ASSERT_OK_AND_ASSIGN(idem::Claim claim, store->Begin("charge", {.lease = 2s}));
  ASSERT_EQ(claim.outcome, idem::Outcome::kAcquired);
  SignalWalSenders(*primary, SIGSTOP);
  EXPECT_FALSE(store->Complete("charge", claim.token, "charged").ok())
      << "a commit the standby never got was acknowledged";
  const auto retried = store->Begin("charge", {.lease = 2s});
  EXPECT_FALSE(retried.ok() && retried->outcome == idem::Outcome::kReplay)
      << "answered from a commit the standby never got: " << retried->record.result;
  if (!retried.ok()) {
    EXPECT_TRUE(idem::IsRetryable(retried.status())) << retried.status().ToString();
  }

  SignalWalSenders(*primary, SIGCONT);
  ASSERT_OK_AND_ASSIGN(idem::Claim answered, store->Begin("charge", {.lease = 2s}));
  EXPECT_EQ(answered.outcome, idem::Outcome::kReplay);
  EXPECT_EQ(answered.record.result, "charged");
}

// The same for ExecuteInTransaction, whose COMMIT ends the application's transaction: a COMMIT
// still waiting for the stalled standby at the call's deadline is cancelled by idem, and stays
// on the primary alone; neither the call nor its retry answers from it. (The transaction's
// statement_timeout does not cut that wait short: PostgreSQL turns it off before committing.)
TEST(PgFailover, AnApplicationsTransactionTheStandbyNeverGotIsNeverAcknowledged) {
  IDEM_START_PG_OR_SKIP(primary);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgServer> standby, primary->StartSynchronousStandby());
  const idem::Options options = GivingUpWithinASecond();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(primary->Uri(), options));

  // The claim is on the standby; the transaction's COMMIT will not be.
  const auto paid = store->ExecuteInTransaction(
      "pay", [&](idem::Attempt&, idem::SqlTransaction&) -> idem::Result<std::string> {
        SignalWalSenders(*primary, SIGSTOP);
        return std::string("paid");
      });
  EXPECT_FALSE(paid.ok()) << "a commit the standby never got was acknowledged: " << paid->result;
  const auto retried = store->ExecuteInTransaction(
      "pay", [&](idem::Attempt&, idem::SqlTransaction&) -> idem::Result<std::string> {
        return std::string("paid again");
      });
  EXPECT_FALSE(retried.ok()) << "answered from a commit the standby never got: " << retried->result;

  ASSERT_OK(primary->Stop(PgServer::Shutdown::kKill));
  ASSERT_OK(standby->Promote());
  ASSERT_OK_AND_ASSIGN(auto promoted, Store::Open(standby->Uri(), options));
  ASSERT_OK_AND_ASSIGN(std::optional<idem::Record> record, promoted->Get("pay"));
  if (record.has_value()) {
    EXPECT_NE(record->state, idem::State::kDone);
  }
}

}  // namespace
}  // namespace idem_test
