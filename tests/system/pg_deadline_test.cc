// Every call on a store kept in PostgreSQL ends by its deadline, whatever the server or the
// network does: a frozen server (SIGSTOP to all its processes: the kernel still accepts
// connections and data, nothing answers), a network that stops forwarding without closing
// anything (a proxy that drops the traffic: no reset), a connection whose peer vanished while a
// new one would work (half-open), and an Execute whose lease renewals hang on a frozen server.
// Against a real server (tests/support/pg_server.h); request_timeout is 1 s, failover_timeout the
// default 10 s, so that a call still bounded only by the latter shows.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "idem/idem.h"
#include "idem/retry.h"
#include "support/pg_server.h"
#include "support/tcp_proxy.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Status;
using idem::Store;
using idem_test::PgServer;
using idem_test::TcpProxy;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kRequestTimeout = 1s;
// The longest a call may take on a server that does not answer: the request timeout, plus the
// second by which the client's wait outlasts the server's statement_timeout (which, when the
// server runs, comes first and keeps the connection), plus a margin for a loaded machine.
constexpr milliseconds kCallBound = kRequestTimeout + 1s + 1500ms;

std::unique_ptr<Store> Open(const std::string& uri, int pool_size = 8) {
  idem::Options options;
  options.auto_purge_interval = 0ms;
  options.request_timeout = kRequestTimeout;
  options.pool_size = pool_size;
  auto store = Store::Open(uri, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// The server's URI with the proxy's port in place of the server's.
std::string ThroughProxy(const PgServer& server, const TcpProxy& proxy) {
  std::string uri = server.Uri();
  const std::string port = ":" + std::to_string(server.port()) + "/";
  const std::size_t at = uri.find(port);
  EXPECT_NE(at, std::string::npos) << uri;
  if (at != std::string::npos)
    uri.replace(at, port.size(), ":" + std::to_string(proxy.port()) + "/");
  return uri;
}

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// Runs `call` (returning a Status), and checks that it failed with a retryable status that says
// the server did not answer, by kCallBound.
template <class Call>
void ExpectEndsByTheDeadline(std::string_view what, Call call) {
  SCOPED_TRACE(what);
  const auto start = Clock::now();
  const Status status = call();
  const milliseconds took = Since(start);
  std::cout << what << ": " << status.ToString() << " after " << took.count() << " ms\n";
  EXPECT_LT(took, kCallBound);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == Status::Code::kTimedOut ||
              status.code() == Status::Code::kUnavailable)
      << status.ToString();
  EXPECT_TRUE(idem::IsRetryable(status)) << status.ToString();
}

// Each of the store's calls, on a server that does not answer. The first finds a connection in
// the pool; it is closed when it times out, so later ones (the pool made one connection only,
// calls being one at a time) connect anew.
void ExpectEveryCallEndsByTheDeadline(Store& store, uint64_t token) {
  ExpectEndsByTheDeadline("Begin", [&] { return store.Begin("new-key").status(); });
  ExpectEndsByTheDeadline("Get", [&] { return store.Get("held").status(); });
  ExpectEndsByTheDeadline("Extend", [&] { return store.Extend("held", token, 5s); });
  ExpectEndsByTheDeadline("Complete", [&] { return store.Complete("held", token, "done"); });
}

// Waits until the store answers again (the server resumed, or the network came back).
bool AnswersAgain(Store& store) {
  return idem_test::WaitFor([&] { return store.Get("held").ok(); }, 20s);
}

TEST(PgDeadline, EveryCallOnAFrozenServerEndsByItsDeadline) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = Open(server->Uri(), /*pool_size=*/1);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const idem::Claim claim, store->Begin("held", {.lease = 1min}));
  ASSERT_OK(server->Freeze());
  ExpectEveryCallEndsByTheDeadline(*store, claim.token);
  ASSERT_OK(server->Thaw());
  EXPECT_TRUE(AnswersAgain(*store));
}

TEST(PgDeadline, EveryCallOnANetworkThatStopsForwardingEndsByItsDeadline) {
  IDEM_START_PG_OR_SKIP(server);
  TcpProxy proxy(server->port());
  auto store = Open(ThroughProxy(*server, proxy), /*pool_size=*/1);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const idem::Claim claim, store->Begin("held", {.lease = 1min}));
  // Nothing forwarded, nothing closed, in either direction; a new connection is accepted by the
  // proxy and gets no answer either.
  proxy.Freeze(true);
  ExpectEveryCallEndsByTheDeadline(*store, claim.token);
  proxy.Freeze(false);
  EXPECT_TRUE(AnswersAgain(*store));
}

TEST(PgDeadline, ACallOnAHalfOpenConnectionEndsByItsDeadlineAndTheNextConnectsAnew) {
  IDEM_START_PG_OR_SKIP(server);
  TcpProxy proxy(server->port());
  auto store = Open(ThroughProxy(*server, proxy), /*pool_size=*/2);
  ASSERT_NE(store, nullptr);
  ASSERT_OK_AND_ASSIGN(const idem::Claim claim, store->Begin("held", {.lease = 1min}));
  // The pool's connections lose their peer without a reset; the server is still there for new
  // ones. Each call that draws one of them times out, and it is never used again: after at most
  // one call per connection of the pool, calls go through.
  proxy.FreezeOpenConnections();
  bool answered = false;
  for (int call = 0; call < 3 && !answered; ++call) {
    const auto start = Clock::now();
    const idem::Result<std::optional<idem::Record>> got = store->Get("held");
    const milliseconds took = Since(start);
    std::cout << "Get " << call << ": " << got.status().ToString() << " after " << took.count()
              << " ms\n";
    EXPECT_LT(took, kCallBound);
    answered = got.ok();
    if (!answered) {
      EXPECT_EQ(got.status().code(), Status::Code::kTimedOut) << got.status().ToString();
    }
  }
  EXPECT_TRUE(answered);
  EXPECT_OK(store->Complete("held", claim.token, "done"));
}

// The report: an Execute whose fn ran while the server froze returned only when the
// server came back. Its lease renewals hung on the frozen server, one after the other, and the
// end of the attempt waited for them. Now the attempt's end waits for no renewal: the call ends
// by the deadline of its Complete.
TEST(PgDeadline, AnExecuteWhoseRenewalsHangOnAFrozenServerEndsByItsDeadline) {
  IDEM_START_PG_OR_SKIP(server);
  auto store = Open(server->Uri());
  ASSERT_NE(store, nullptr);
  // Should the call hang, the server resumes after a while, so that the test fails instead of
  // hanging.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    idem_test::WaitFor([&] { return done.load(); }, 30s);
    static_cast<void>(server->Thaw());
  });
  Clock::time_point fn_returned;
  const auto executed = store->Execute("pay", {.lease = 600ms}, [&](idem::Attempt&) {
    EXPECT_OK(server->Freeze());
    // Several renewal periods (200 ms), each renewal slower than a period (1-2 s).
    std::this_thread::sleep_for(1500ms);
    fn_returned = Clock::now();
    return idem::Result<std::string>(std::string("charged"));
  });
  const milliseconds took = Since(fn_returned);
  done = true;
  watchdog.join();
  std::cout << "Execute: " << executed.status().ToString() << " " << took.count()
            << " ms after fn returned\n";
  EXPECT_LT(took, kCallBound);
  ASSERT_FALSE(executed.ok());
  EXPECT_TRUE(idem::IsRetryable(executed.status())) << executed.status().ToString();
  ASSERT_OK(server->Thaw());
  EXPECT_TRUE(AnswersAgain(*store));
}

}  // namespace
