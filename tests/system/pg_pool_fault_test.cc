// PgPool (storage/postgres/pg_pool.h) under faults, against a real PostgreSQL 15
// (tests/support/pg_server.h): a server restart mid-call, a killed session, a statement timeout, a
// server that stops answering, a wrong password, a closed port, a deadlock, fork().

#include <sys/wait.h>
#include <unistd.h>

#include <latch>
#include <thread>

#include "idem/retry.h"
#include "storage/postgres/pg_pool.h"
#include "support/pg_pool_test_util.h"
#include "support/tcp_proxy.h"

namespace idem::storage {
namespace {

using idem_test::TcpProxy;

TEST(PgPool, CarriesOnAfterTheServerRestarts) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()),
              {.size = 1, .request_timeout = seconds(20), .failover_timeout = seconds(30)});
  ASSERT_GT(BackendPid(pool), 0);

  // An idle connection the restart ended is noticed before it is used: even a transaction that
  // must not be sent twice goes through, on a new connection.
  ASSERT_OK(server->Restart(PgServer::Shutdown::kImmediate));
  EXPECT_GT(BackendPid(pool, /*resendable=*/false), 0);
  EXPECT_EQ(pool.stats().connections_made, 2u);
  EXPECT_EQ(pool.stats().resends, 0u);

  // Mid-call: the caller gets its answer after a reconnect, or a retryable error; never a hang.
  Result<std::vector<PgRows>> during = Status::Unavailable("not run");
  const Clock::time_point start = Clock::now();
  std::thread caller([&] {
    during = pool.Run(Transaction({{"SELECT pg_sleep(2)", {}}, {"SELECT 42::bigint", {}}}));
  });
  ASSERT_TRUE(WaitUntilRunning(*server, "SELECT pg_sleep(2)"));
  ASSERT_OK(server->Restart(PgServer::Shutdown::kImmediate));
  caller.join();
  std::cout << "restart mid-call: " << (during.ok() ? "OK" : during.status().ToString())
            << " after " << Since(start).count() << " ms\n";
  ASSERT_TRUE(during.ok() || IsRetryable(during.status())) << during.status().ToString();
  EXPECT_LT(Since(start), seconds(30));
  if (during.ok()) {
    EXPECT_EQ(during->at(1).Int(0, 0).value(), 42);
    EXPECT_GE(pool.stats().resends, 1u);
  }
  EXPECT_GT(BackendPid(pool), 0);
}

// A session ended under a call (pg_terminate_backend): a resendable transaction is sent again
// on a new connection; one that is not returns kUnavailable, saying its outcome is unknown.
TEST(PgPool, ResendsOnlyWhatMayBeResent) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1});
  for (const bool resendable : {true, false}) {
    SCOPED_TRACE(resendable ? "resendable" : "not resendable");
    const int64_t before = BackendPid(pool);
    bool sent_once_resent = true;
    ASSERT_OK(pool.Run(Transaction({{"SELECT 1", {}}}), &sent_once_resent).status());
    EXPECT_FALSE(sent_once_resent);
    Result<std::vector<PgRows>> result = Status::Unavailable("not run");
    bool resent = false;
    std::thread caller([&] {
      result = pool.Run(
          Transaction({{"SELECT pg_sleep(1.5)", {}}, {"SELECT pg_backend_pid()", {}}}, resendable),
          &resent);
    });
    ASSERT_TRUE(WaitUntilRunning(*server, "SELECT pg_sleep(1.5)"));
    ASSERT_OK(server->Admin("SELECT pg_terminate_backend(" + std::to_string(before) + ")"));
    caller.join();
    if (resendable) {
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_NE(result->at(1).Int(0, 0).value(), before);
      EXPECT_EQ(pool.stats().resends, 1u);
      EXPECT_TRUE(resent) << "the caller is told that its transaction was sent twice";
    } else {
      ASSERT_FALSE(result.ok());
      EXPECT_EQ(result.status().code(), Status::Code::kUnavailable);
      EXPECT_NE(result.status().message().find("may or may not have been committed"),
                std::string::npos)
          << result.status().message();
      EXPECT_EQ(pool.stats().resends, 1u);
    }
  }
}

TEST(PgPool, StatementTimeoutIsTimedOutAndKeepsTheConnection) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 1, .request_timeout = seconds(1)});
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> slow = pool.Run(Transaction({{"SELECT pg_sleep(30)", {}}}));
  const milliseconds took = Since(start);
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), Status::Code::kTimedOut) << slow.status().ToString();
  EXPECT_NE(slow.status().message().find("statement timeout (SQLSTATE 57014)"), std::string::npos)
      << slow.status().message();
  EXPECT_GE(took, seconds(1));
  EXPECT_LT(took, seconds(5));
  EXPECT_GT(BackendPid(pool), 0);
  EXPECT_EQ(pool.stats().connections_made, 1u);
  EXPECT_EQ(pool.stats().cancels, 0u);
}

// A server that stops answering without closing anything (frozen behind a proxy): the call
// ends at its timeout, the query is cancelled, and the connection is never used again.
TEST(PgPool, NoAnswerIsTimedOutAndTheConnectionDropped) {
  IDEM_START_PG_OR_SKIP(server);
  TcpProxy proxy(server->port());
  PgPool pool(Conninfo(UriAtPort(*server, proxy.port())),
              {.size = 1, .request_timeout = milliseconds(500)});
  ASSERT_GT(BackendPid(pool), 0);
  proxy.Freeze(true);
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> frozen = pool.Run(Transaction({{"SELECT 1", {}}}));
  const milliseconds took = Since(start);
  ASSERT_FALSE(frozen.ok());
  EXPECT_EQ(frozen.status().code(), Status::Code::kTimedOut);
  EXPECT_NE(frozen.status().message().find("no answer within 1500 ms"), std::string::npos)
      << frozen.status().message();
  EXPECT_GE(took, milliseconds(1500));
  EXPECT_LT(took, seconds(5));
  EXPECT_EQ(pool.stats().cancels, 1u);
  proxy.Freeze(false);
  EXPECT_GT(BackendPid(pool), 0);
  EXPECT_EQ(pool.stats().connections_made, 2u);
}

TEST(PgPool, AWrongPasswordIsRefusedAtOnceWithoutShowingIt) {
  IDEM_START_PG_OR_SKIP(server);
  const std::string wrong = "Wrong" + server->password();
  PgPool pool(Conninfo(server->UriWithPassword(wrong)),
              {.size = 1, .failover_timeout = seconds(20)});
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> refused = pool.Run(Transaction({{"SELECT 1", {}}}));
  ASSERT_FALSE(refused.ok());
  const std::string& message = refused.status().message();
  std::cout << refused.status().ToString() << "\n";
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  EXPECT_FALSE(IsRetryable(refused.status()));
  EXPECT_LT(Since(start), seconds(5));  // not retried for the failover timeout
  EXPECT_NE(message.find("\"127.0.0.1\", port " + std::to_string(server->port())),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("for user \"idem\""), std::string::npos) << message;
  EXPECT_NE(message.find("28P01"), std::string::npos) << message;
  EXPECT_EQ(message.find(wrong), std::string::npos) << message;
  EXPECT_EQ(message.find(server->password()), std::string::npos) << message;
  EXPECT_EQ(pool.stats().connections_made, 0u);
}

// Nothing listens on the port (no server needed): kUnavailable once the failover timeout has
// been spent reconnecting, naming the host, the port and libpq's reason.
TEST(PgPool, AClosedPortIsUnavailableWithinTheFailoverTimeout) {
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string port = std::to_string(ntohs(address.sin_port));
  ::close(sock);
  PgPool pool(Conninfo("postgresql://idem:Sup3rKept5ecret@127.0.0.1:" + port + "/postgres"),
              {.size = 1, .request_timeout = seconds(1), .failover_timeout = milliseconds(1500)});
  const Clock::time_point start = Clock::now();
  Result<std::vector<PgRows>> result = pool.Run(Transaction({{"SELECT 1", {}}}));
  const milliseconds took = Since(start);
  ASSERT_FALSE(result.ok());
  const std::string& message = result.status().message();
  std::cout << result.status().ToString() << " after " << took.count() << " ms\n";
  EXPECT_EQ(result.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(message.find("postgresql://idem@127.0.0.1:" + port + "/postgres: cannot connect: "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Connection refused"), std::string::npos) << message;
  EXPECT_NE(message.find("(failover timeout: 1500 ms)"), std::string::npos) << message;
  EXPECT_EQ(message.find("Sup3rKept5ecret"), std::string::npos) << message;
  EXPECT_GE(took, milliseconds(900));  // it kept trying
  EXPECT_LT(took, seconds(3));
}

// Two transactions that lock two rows in opposite orders: the server aborts one (40P01), which
// is run again; each commits exactly once.
TEST(PgPool, RunsADeadlockVictimAgain) {
  IDEM_START_PG_OR_SKIP(server);
  PgPool pool(Conninfo(server->Uri()), {.size = 2, .failover_timeout = seconds(20)});
  ASSERT_OK(pool.Run(Transaction({{"CREATE TABLE locks (id bigint PRIMARY KEY, n bigint)", {}},
                                  {"INSERT INTO locks VALUES (1, 0), (2, 0)", {}}}))
                .status());
  const auto crossing = [](int64_t first, int64_t second) {
    return Transaction({{"UPDATE locks SET n = n + 1 WHERE id = $1", {PgParam::Int8(first)}},
                        {"SELECT pg_sleep(0.3)", {}},
                        {"UPDATE locks SET n = n + 1 WHERE id = $1", {PgParam::Int8(second)}}});
  };
  std::latch ready(2);
  Status results[2];
  std::thread one([&] {
    ready.arrive_and_wait();
    results[0] = pool.Run(crossing(1, 2)).status();
  });
  std::thread two([&] {
    ready.arrive_and_wait();
    results[1] = pool.Run(crossing(2, 1)).status();
  });
  one.join();
  two.join();
  EXPECT_OK(results[0]);
  EXPECT_OK(results[1]);
  EXPECT_EQ(pool.stats().retries, 1u);
  ASSERT_OK_AND_ASSIGN(std::vector<PgRows> rows,
                       pool.Run(Transaction({{"SELECT sum(n)::bigint FROM locks", {}}})));
  EXPECT_EQ(rows[0].Int(0, 0).value(), 4);
}

// A child of fork() shares the parent's sockets: it must neither use nor close them.
TEST(PgPool, AForkedChildLeavesTheParentsConnectionAlone) {
  if (idem_test::UnderTsan()) GTEST_SKIP() << "forks a multi-threaded process";
  IDEM_START_PG_OR_SKIP(server);
  auto pool = std::make_unique<PgPool>(Conninfo(server->Uri()), PgPoolOptions{.size = 1});
  const int64_t backend = BackendPid(*pool);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const Status status = pool->Run(Transaction({{"SELECT 1", {}}})).status();
    pool.reset();  // the destructor must not end the parent's session
    ::_exit(status.code() == Status::Code::kUnavailable &&
                    status.message().find("before fork()") != std::string::npos
                ? 0
                : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
  EXPECT_EQ(BackendPid(*pool, /*resendable=*/false), backend);
  EXPECT_EQ(pool->stats().connections_made, 1u);
}

}  // namespace
}  // namespace idem::storage
