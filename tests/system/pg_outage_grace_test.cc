// The renewal grace after an outage of the server of a store kept in PostgreSQL (issue 13,
// docs/semantics.md "Stalls and the renewal grace"): while the server restarts or fails over,
// no holder can renew its lease, and leases run out meanwhile. A waiter that reaches the server
// again before the holder does must not take the claim over at once: claims written before the
// server took writes again stay their holders' for Options::renewal_grace from then (from when
// idem first saw it), unless renewed, ended or taken over after the grace. Claims written after
// that moment have no grace, and renewal_grace 0 turns it off.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "idem/idem.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace idem_test {
namespace {

using namespace std::chrono_literals;
using idem::Claim;
using idem::Outcome;
using idem::Store;
using std::chrono::milliseconds;

constexpr milliseconds kLease{1000};
constexpr milliseconds kGrace{6000};

std::unique_ptr<Store> Open(const std::string& uri, milliseconds grace, const std::string& table) {
  idem::Options options;
  options.auto_purge_interval = 0ms;
  options.renewal_grace = grace;
  options.table = table;
  auto store = Store::Open(uri, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Waits until the server's clock (this host's: the server runs here) is past `claim`'s lease.
void SleepPastLease(const Claim& claim) {
  std::this_thread::sleep_until(claim.record.lease_deadline + 50ms);
}

// Claims "held" in a store with the grace and in one without, makes the server unavailable with
// `outage` (after which `uri` reaches the store again), and checks what a waiter is answered
// once the leases ran out.
template <typename Outage>
void CheckTheGraceAfter(const std::string& uri, Outage outage) {
  auto graced = Open(uri, kGrace, "graced");
  auto ungraced = Open(uri, 0ms, "ungraced");
  ASSERT_TRUE(graced && ungraced);
  ASSERT_OK_AND_ASSIGN(Claim held, graced->Begin("held", {.lease = kLease}));
  ASSERT_EQ(held.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(Claim held_ungraced, ungraced->Begin("held", {.lease = kLease}));
  ASSERT_EQ(held_ungraced.outcome, Outcome::kAcquired);

  outage();
  SleepPastLease(held);
  SleepPastLease(held_ungraced);

  // The lease ran out while the server was away: the claim is still its holder's.
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(Claim waiter, graced->Begin("held", {.lease = kLease}));
  EXPECT_EQ(waiter.outcome, Outcome::kInProgress);
  EXPECT_GT(waiter.retry_after, 0ms);
  EXPECT_LE(waiter.retry_after, kGrace);
  // Without the grace it is taken over at once.
  ASSERT_OK_AND_ASSIGN(Claim taker, ungraced->Begin("held", {.lease = kLease}));
  EXPECT_EQ(taker.outcome, Outcome::kAcquired);
  EXPECT_TRUE(taker.took_over);

  // A claim written after the server was seen taking writes again has no grace.
  ASSERT_OK_AND_ASSIGN(Claim fresh, graced->Begin("fresh", {.lease = kLease}));
  ASSERT_EQ(fresh.outcome, Outcome::kAcquired);
  SleepPastLease(fresh);
  ASSERT_OK_AND_ASSIGN(Claim fresh_taker, graced->Begin("fresh", {.lease = kLease}));
  EXPECT_EQ(fresh_taker.outcome, Outcome::kAcquired);
  EXPECT_TRUE(fresh_taker.took_over);

  // Meanwhile the grace held; the holder may still renew (its token is current), and then
  // completes. Had this test been slower than the grace, the claim would be lost: say so.
  ASSERT_LT(std::chrono::steady_clock::now() - asked, kGrace - 500ms)
      << "the machine was too slow to see the grace in force";
  ASSERT_OK_AND_ASSIGN(Claim still, graced->Begin("held", {.lease = kLease}));
  EXPECT_EQ(still.outcome, Outcome::kInProgress);
  ASSERT_OK(graced->Extend("held", held.token, kLease));
  ASSERT_OK(graced->Complete("held", held.token, "charged once"));
  ASSERT_OK_AND_ASSIGN(Claim replay, graced->Begin("held"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "charged once");
}

// A server restart (crash recovery after an immediate shutdown).
TEST(PgOutageGrace, AClaimWhoseLeaseRanOutAcrossARestartKeepsItsHolderForAGrace) {
  IDEM_START_PG_OR_SKIP(server);
  CheckTheGraceAfter(server->Uri(),
                     [&] { EXPECT_OK(server->Restart(PgServer::Shutdown::kImmediate)); });
}

// A crash restart: one backend killed with SIGKILL. The postmaster ends every session and
// recovers from its log without restarting, so pg_postmaster_start_time() stays the same.
TEST(PgOutageGrace, AClaimWhoseLeaseRanOutAcrossACrashRestartKeepsItsHolderForAGrace) {
  IDEM_START_PG_OR_SKIP(server);
  CheckTheGraceAfter(server->Uri(), [&] { EXPECT_OK(server->CrashABackend()); });
}

// A failover: the primary killed, its synchronous standby promoted. The standby started before
// the claim was written, so only its being another server tells the outage.
TEST(PgOutageGrace, AClaimWhoseLeaseRanOutAcrossAFailoverKeepsItsHolderForAGrace) {
  IDEM_START_PG_OR_SKIP(primary);
  auto standby_started = primary->StartSynchronousStandby();
  ASSERT_TRUE(standby_started.ok()) << standby_started.status().ToString();
  std::unique_ptr<PgServer> standby = std::move(standby_started).value();
  const std::string uri = PgServer::MultiHostUri({primary.get(), standby.get()});
  CheckTheGraceAfter(uri, [&] {
    EXPECT_OK(primary->Stop(PgServer::Shutdown::kKill));
    EXPECT_OK(standby->Promote());
  });
}

// The grace ends: a holder that never came back loses its claim to a waiter once it is over.
TEST(PgOutageGrace, AWaiterTakesOverOnceTheGraceIsOver) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = Open(server->Uri(), 2s, "short_grace");
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(Claim held, store->Begin("held", {.lease = kLease}));
  ASSERT_OK(server->Restart(PgServer::Shutdown::kImmediate));
  SleepPastLease(held);
  ASSERT_OK_AND_ASSIGN(Claim waiter, store->Begin("held", {.lease = kLease}));
  ASSERT_EQ(waiter.outcome, Outcome::kInProgress);
  std::this_thread::sleep_for(waiter.retry_after + 50ms);
  ASSERT_OK_AND_ASSIGN(Claim taker, store->Begin("held", {.lease = kLease}));
  EXPECT_EQ(taker.outcome, Outcome::kAcquired);
  EXPECT_TRUE(taker.took_over);
  EXPECT_CODE(store->Complete("held", held.token, "too late"), kLeaseLost);
}

}  // namespace
}  // namespace idem_test
