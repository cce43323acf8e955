// The throwaway PostgreSQL server of the tests (pg_server.h): it starts, answers over TCP with
// SCRAM, refuses a wrong password with libpq's message, comes back after an immediate shutdown
// with what was committed, and leaves no process and no directory behind, also when the test
// process dies without stopping it.

#include "support/pg_server.h"

#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "support/test_util.h"
#include "util/process.h"

namespace idem_test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct ConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;

struct ResultCloser {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResult = std::unique_ptr<PGresult, ResultCloser>;

// The single value `sql` returns, or the error text prefixed with "error: ".
std::string QueryValue(PGconn* conn, const char* sql) {
  PgResult result(PQexec(conn, sql));
  if (PQresultStatus(result.get()) != PGRES_TUPLES_OK || PQntuples(result.get()) != 1) {
    return std::string("error: ") + PQerrorMessage(conn);
  }
  return PQgetvalue(result.get(), 0, 0);
}

// Each process with its start time, so that a pid reused later is not taken for it.
std::map<pid_t, uint64_t> WithStartTimes(const std::vector<pid_t>& pids) {
  std::map<pid_t, uint64_t> processes;
  for (const pid_t pid : pids) {
    processes[pid] = idem::util::ProcessStartTime(pid).value_or(0);
  }
  return processes;
}

// The processes of `processes` that still run (a zombie has exited: it only waits for its
// parent to read its status).
std::vector<pid_t> StillRunning(const std::map<pid_t, uint64_t>& processes) {
  std::vector<pid_t> running;
  for (const auto& [pid, start] : processes) {
    if (idem::util::ProcessStartTime(pid) != start) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto comm_end = line.rfind(')');
    if (comm_end != std::string::npos && comm_end + 2 < line.size() && line[comm_end + 2] == 'Z') {
      continue;
    }
    running.push_back(pid);
  }
  return running;
}

TEST(PgServerTest, AnswersOverTcpWithScramAndStopsLeavingNothing) {
  IDEM_START_PG_OR_SKIP(server);
  RecordProperty("start_ms", static_cast<int>(server->start_time().count()));
  std::cout << "PostgreSQL started in " << server->start_time().count() << " ms\n";

  Conn conn(PQconnectdb(server->Uri().c_str()));
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  EXPECT_STREQ(PQhost(conn.get()), "127.0.0.1");
  EXPECT_EQ(PQconnectionUsedPassword(conn.get()), 1);
  EXPECT_EQ(QueryValue(conn.get(), "SELECT 1"), "1");
  const std::string version = QueryValue(conn.get(), "SHOW server_version");
  EXPECT_TRUE(!version.empty() && std::isdigit(static_cast<unsigned char>(version[0]))) << version;
  std::cout << "server_version " << version << "\n";
  EXPECT_EQ(QueryValue(conn.get(), "SHOW fsync"), "on");
  EXPECT_EQ(QueryValue(conn.get(), "SELECT current_user"), "idem");
  // What the role creates goes to its own schema.
  PgResult created(PQexec(conn.get(), "CREATE TABLE t (k text PRIMARY KEY)"));
  ASSERT_EQ(PQresultStatus(created.get()), PGRES_COMMAND_OK) << PQerrorMessage(conn.get());
  EXPECT_EQ(QueryValue(conn.get(), "SELECT 't'::regclass::text"), "t");
  EXPECT_EQ(QueryValue(conn.get(), "SELECT schemaname FROM pg_tables WHERE tablename = 't'"),
            "idem");

  // A wrong password is refused with libpq's message, which does not quote it.
  const std::string wrong = "wrong-" + server->password();
  Conn refused(PQconnectdb(server->UriWithPassword(wrong).c_str()));
  ASSERT_EQ(PQstatus(refused.get()), CONNECTION_BAD);
  const std::string message = PQerrorMessage(refused.get());
  EXPECT_NE(message.find("password authentication failed for user \"idem\""), std::string::npos)
      << message;
  EXPECT_EQ(message.find(wrong), std::string::npos) << message;

  // The postmaster and its children (checkpointer, writers, the backend of `conn`, ...).
  const std::map<pid_t, uint64_t> processes = WithStartTimes(server->Processes());
  EXPECT_GE(processes.size(), 4u);
  const std::string directory = server->directory();
  const int port = server->port();
  ASSERT_TRUE(std::filesystem::exists(directory));

  const auto stopping = Clock::now();
  server.reset();
  const auto stop_ms = std::chrono::duration_cast<milliseconds>(Clock::now() - stopping).count();
  RecordProperty("stop_ms", static_cast<int>(stop_ms));
  std::cout << "PostgreSQL stopped and removed in " << stop_ms << " ms\n";

  EXPECT_EQ(StillRunning(processes), std::vector<pid_t>{});
  EXPECT_FALSE(std::filesystem::exists(directory));
  const std::string ping = "host=127.0.0.1 port=" + std::to_string(port) + " connect_timeout=2";
  EXPECT_EQ(PQping(ping.c_str()), PQPING_NO_RESPONSE);
  // The session the fast shutdown ended knows it.
  PgResult after(PQexec(conn.get(), "SELECT 1"));
  EXPECT_NE(PQresultStatus(after.get()), PGRES_TUPLES_OK);
}

TEST(PgServerTest, RestartsAfterAnImmediateShutdownWithWhatWasCommitted) {
  IDEM_START_PG_OR_SKIP(server);
  {
    Conn conn(PQconnectdb(server->Uri().c_str()));
    ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
    PgResult written(PQexec(conn.get(), "CREATE TABLE kept (k int); INSERT INTO kept VALUES (42)"));
    ASSERT_EQ(PQresultStatus(written.get()), PGRES_COMMAND_OK) << PQerrorMessage(conn.get());
  }
  const pid_t before = server->pid();
  const auto restarting = Clock::now();
  ASSERT_OK(server->Restart(PgServer::Shutdown::kImmediate));
  std::cout << "PostgreSQL restarted (immediate shutdown, crash recovery) in "
            << std::chrono::duration_cast<milliseconds>(Clock::now() - restarting).count()
            << " ms\n";
  EXPECT_NE(server->pid(), before);
  // An immediate shutdown is a crash to the server: it recovered from its log.
  EXPECT_NE(server->LogTail(100).find("not properly shut down"), std::string::npos)
      << server->LogTail();

  Conn conn(PQconnectdb(server->Uri().c_str()));
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  EXPECT_EQ(QueryValue(conn.get(), "SELECT k FROM kept"), "42");
}

// A synchronous standby has every commit acknowledged by its primary; after the primary is
// killed outright (postmaster and children: nothing of it runs on), the standby, promoted,
// answers on the multi-host URI with what was committed and takes writes. The killed server's
// directory still goes with its object.
TEST(PgServerTest, PromotedSynchronousStandbyHasWhatTheKilledPrimaryCommitted) {
  IDEM_START_PG_OR_SKIP(primary);
  auto standby_started = primary->StartSynchronousStandby();
  ASSERT_TRUE(standby_started.ok()) << standby_started.status().ToString();
  std::unique_ptr<PgServer> standby = std::move(standby_started).value();
  std::cout << "synchronous standby started in " << standby->start_time().count() << " ms\n";
  const std::string uri = PgServer::MultiHostUri({primary.get(), standby.get()});
  EXPECT_EQ(uri, "postgresql://idem:" + primary->password() +
                     "@127.0.0.1:" + std::to_string(primary->port()) + ",127.0.0.1:" +
                     std::to_string(standby->port()) + "/postgres?target_session_attrs=read-write");
  {
    Conn conn(PQconnectdb(uri.c_str()));
    ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
    EXPECT_EQ(PQport(conn.get()), std::to_string(primary->port()));
    EXPECT_EQ(QueryValue(conn.get(), "SHOW synchronous_standby_names"), "*");
    PgResult written(PQexec(conn.get(), "CREATE TABLE kept (k int); INSERT INTO kept VALUES (42)"));
    ASSERT_EQ(PQresultStatus(written.get()), PGRES_COMMAND_OK) << PQerrorMessage(conn.get());
  }
  // A standby takes no writes.
  {
    Conn conn(PQconnectdb(standby->Uri().c_str()));
    ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
    EXPECT_EQ(QueryValue(conn.get(), "SELECT pg_is_in_recovery()"), "t");
    PgResult refused(PQexec(conn.get(), "INSERT INTO kept VALUES (1)"));
    EXPECT_EQ(PQresultStatus(refused.get()), PGRES_FATAL_ERROR);
  }

  const std::map<pid_t, uint64_t> processes = WithStartTimes(primary->Processes());
  EXPECT_GE(processes.size(), 5u);  // the walsender among them
  ASSERT_OK(primary->Stop(PgServer::Shutdown::kKill));
  EXPECT_EQ(primary->pid(), 0);
  EXPECT_EQ(StillRunning(processes), std::vector<pid_t>{});

  const auto promoting = Clock::now();
  ASSERT_OK(standby->Promote());
  std::cout << "standby promoted in "
            << std::chrono::duration_cast<milliseconds>(Clock::now() - promoting).count()
            << " ms\n";
  Conn conn(PQconnectdb(uri.c_str()));
  ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
  EXPECT_EQ(PQport(conn.get()), std::to_string(standby->port()));
  EXPECT_EQ(QueryValue(conn.get(), "SELECT k FROM kept"), "42");
  // No standby of its own to wait for: its commits return.
  EXPECT_EQ(QueryValue(conn.get(), "SHOW synchronous_standby_names"), "");
  PgResult written(PQexec(conn.get(), "INSERT INTO kept VALUES (43)"));
  EXPECT_EQ(PQresultStatus(written.get()), PGRES_COMMAND_OK) << PQerrorMessage(conn.get());

  const std::string directory = primary->directory();
  primary.reset();
  EXPECT_FALSE(std::filesystem::exists(directory));
}

// A test process that dies without stopping its server (a crash, SIGKILL, a failed ASSERT in a
// forked helper) takes the server with it: the server is told by the kernel, not by a
// destructor that never runs.
TEST(PgServerTest, DiesWithTheProcessThatStartedIt) {
  if (const std::optional<std::string> unavailable = PgServer::Unavailable()) {
    GTEST_SKIP() << *unavailable;
  }
  if (UnderTsan()) GTEST_SKIP() << "forks a multi-threaded process, which TSan's runtime cannot";
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(report[0]);
    auto started = PgServer::Start();
    if (!started.ok()) ::_exit(1);
    const std::unique_ptr<PgServer>& server = started.value();
    const std::string line = std::to_string(server->pid()) + " " + server->directory() + "\n";
    if (::write(report[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      ::_exit(2);
    }
    ::_exit(0);  // no destructor: the server is not stopped
  }
  ::close(report[1]);
  std::string line;
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;) line.append(buffer, n);
  ::close(report[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child could not start a server";
  std::istringstream fields(line);
  pid_t postmaster = 0;
  std::string directory;
  fields >> postmaster >> directory;
  ASSERT_GT(postmaster, 0) << line;

  const std::map<pid_t, uint64_t> server{
      {postmaster, idem::util::ProcessStartTime(postmaster).value_or(0)}};
  EXPECT_TRUE(WaitFor([&] { return StillRunning(server).empty(); }, std::chrono::seconds(30)))
      << "the server of a dead test process still runs (pid " << postmaster << ")";
  std::error_code error;
  std::filesystem::remove_all(directory, error);
}

// PgBouncer in transaction pooling mode: with one server connection, two clients' transactions
// take turns on the same server backend (session pooling would hold it for the first client).
TEST(PgBouncerTest, PoolsTransactionsOfTwoClientsOnOneServerConnection) {
  // Before starting a server for nothing.
  if (const std::optional<std::string> unavailable = PgBouncer::Unavailable()) {
    GTEST_SKIP() << *unavailable;
  }
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, /*pool_size=*/1);

  Conn first(PQconnectdb(bouncer->Uri().c_str()));
  ASSERT_EQ(PQstatus(first.get()), CONNECTION_OK) << PQerrorMessage(first.get());
  Conn second(PQconnectdb(bouncer->Uri().c_str()));
  ASSERT_EQ(PQstatus(second.get()), CONNECTION_OK) << PQerrorMessage(second.get());
  const std::string first_backend = QueryValue(first.get(), "SELECT pg_backend_pid()");
  const std::string second_backend = QueryValue(second.get(), "SELECT pg_backend_pid()");
  EXPECT_EQ(first_backend, second_backend);
  EXPECT_EQ(first_backend.rfind("error", 0), std::string::npos) << first_backend;
  EXPECT_EQ(QueryValue(second.get(), "SELECT current_user"), "idem");

  // Clients authenticate to PgBouncer with the role's password; a wrong one is refused, in
  // PgBouncer's words, not PostgreSQL's.
  Conn refused(PQconnectdb(bouncer->UriWithPassword("wrong").c_str()));
  EXPECT_EQ(PQstatus(refused.get()), CONNECTION_BAD);
  EXPECT_NE(std::string(PQerrorMessage(refused.get())).find("FATAL:  SASL authentication failed"),
            std::string::npos)
      << PQerrorMessage(refused.get());

  const std::map<pid_t, uint64_t> processes = WithStartTimes({bouncer->pid()});
  const std::string directory = bouncer->directory();
  const int port = bouncer->port();
  bouncer.reset();
  EXPECT_EQ(StillRunning(processes), std::vector<pid_t>{});
  EXPECT_FALSE(std::filesystem::exists(directory));
  const std::string ping = "host=127.0.0.1 port=" + std::to_string(port) + " connect_timeout=2";
  EXPECT_EQ(PQping(ping.c_str()), PQPING_NO_RESPONSE);
}

// What the PostgreSQL store's design relies on behind PgBouncer 1.18 in transaction pooling
// (docs/postgresql.md, once written): a pipelined transaction (BEGIN, SET LOCAL, a statement,
// COMMIT, one sync) goes through in one piece and its SET LOCAL ends with it; a named prepared
// statement is left on the shared server connection for the next client (so the store uses
// unnamed ones); an `options` startup parameter is refused (so the store sends none).
TEST(PgBouncerTest, CarriesPipelinedTransactionsButNoSessionState) {
  // Before starting a server for nothing.
  if (const std::optional<std::string> unavailable = PgBouncer::Unavailable()) {
    GTEST_SKIP() << *unavailable;
  }
  IDEM_START_PG_OR_SKIP(server);
  IDEM_START_PGBOUNCER_OR_SKIP(bouncer, server, /*pool_size=*/1);
  Conn first(PQconnectdb(bouncer->Uri().c_str()));
  ASSERT_EQ(PQstatus(first.get()), CONNECTION_OK) << PQerrorMessage(first.get());
  Conn second(PQconnectdb(bouncer->Uri().c_str()));
  ASSERT_EQ(PQstatus(second.get()), CONNECTION_OK) << PQerrorMessage(second.get());

  ASSERT_EQ(PQenterPipelineMode(first.get()), 1);
  for (const char* sql : {"BEGIN", "SET LOCAL synchronous_commit = off",
                          "SELECT current_setting('synchronous_commit')", "COMMIT"}) {
    ASSERT_EQ(PQsendQueryParams(first.get(), sql, 0, nullptr, nullptr, nullptr, nullptr, 0), 1)
        << PQerrorMessage(first.get());
  }
  ASSERT_EQ(PQpipelineSync(first.get()), 1);
  std::vector<std::string> answers;
  for (;;) {
    PgResult result(PQgetResult(first.get()));
    if (!result) continue;  // the end of one statement's results
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) break;
    ASSERT_TRUE(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
        << PQresultErrorMessage(result.get());
    answers.push_back(status == PGRES_TUPLES_OK ? PQgetvalue(result.get(), 0, 0) : "ok");
  }
  ASSERT_EQ(PQexitPipelineMode(first.get()), 1);
  EXPECT_EQ(answers, (std::vector<std::string>{"ok", "ok", "off", "ok"}));
  EXPECT_EQ(QueryValue(second.get(), "SELECT current_setting('synchronous_commit')"), "on");

  PgResult prepared(PQprepare(first.get(), "s1", "SELECT 1", 0, nullptr));
  ASSERT_EQ(PQresultStatus(prepared.get()), PGRES_COMMAND_OK) << PQerrorMessage(first.get());
  PgResult collided(PQprepare(second.get(), "s1", "SELECT 2", 0, nullptr));
  EXPECT_EQ(PQresultStatus(collided.get()), PGRES_FATAL_ERROR);
  EXPECT_NE(std::string(PQresultErrorMessage(collided.get())).find("\"s1\" already exists"),
            std::string::npos)
      << PQresultErrorMessage(collided.get());

  Conn with_options(PQconnectdb((bouncer->Uri() + "?options=-cwork_mem%3D8MB").c_str()));
  EXPECT_EQ(PQstatus(with_options.get()), CONNECTION_BAD);
  EXPECT_NE(std::string(PQerrorMessage(with_options.get()))
                .find("unsupported startup parameter: options"),
            std::string::npos)
      << PQerrorMessage(with_options.get());
}

}  // namespace
}  // namespace idem_test
