// PgServer: a throwaway PostgreSQL server for tests, from Debian's packages (postgresql-15).
//
// Start() makes a private directory, runs initdb in it, starts `postgres` on a free loopback
// port and a private UNIX-socket directory, waits until it accepts connections, and creates a
// login role `idem` with a random password (SCRAM over TCP) that owns the schema `idem`. The
// destructor stops the server (a fast shutdown, as `pg_ctl stop -m fast`), waits until every
// server process has exited, and removes the directory, also when the test failed.
//
// PostgreSQL refuses to run as root. Under root (as in CI) initdb and postgres run as the
// `postgres` system user that the package creates (or the user named by $IDEM_PG_USER), in a
// directory owned by that user.
//
// The server is the test process's child: a test killed outright takes it with it (it receives
// SIGQUIT, an immediate shutdown, when the thread that started it exits), leaving only its
// directory under $TMPDIR (idem_pg_*).
//
//   TEST(Pg, Works) {
//     IDEM_START_PG_OR_SKIP(server);
//     PGconn* conn = PQconnectdb(server->Uri().c_str());
//     ...
//   }
//
// For failover tests, StartSynchronousStandby makes a second server, a streaming standby of the
// first that every commit waits for; Stop(Shutdown::kKill) kills the primary outright, Promote
// makes the standby the primary, and MultiHostUri names both, so that libpq finds whichever
// accepts writes:
//
//   IDEM_START_PG_OR_SKIP(primary);
//   auto standby = primary->StartSynchronousStandby();      // a Result<unique_ptr<PgServer>>
//   const std::string uri = PgServer::MultiHostUri({primary.get(), standby->get()});
//   ...
//   primary->Stop(PgServer::Shutdown::kKill);
//   (*standby)->Promote();

#ifndef IDEM_TESTS_PG_SERVER_H_
#define IDEM_TESTS_PG_SERVER_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/status.h"

namespace idem_test {

class PgServer {
 public:
  // How the server is shut down: kFast (SIGINT, `pg_ctl stop -m fast`: ends the sessions, then
  // a checkpoint), kImmediate (SIGQUIT, `-m immediate`: no checkpoint, crash recovery at the
  // next start, as after a crash of the server) or kKill (SIGKILL to the postmaster and every
  // one of its processes at once, as `kill -9` or the OOM killer: nothing runs after it, not
  // even the postmaster's own handling of its children's deaths; sessions end with their
  // sockets).
  enum class Shutdown { kFast, kImmediate, kKill };

  // Why no server can be started on this machine, naming the package to install; nullopt when
  // one can. Checked by IDEM_START_PG_OR_SKIP before Start.
  static std::optional<std::string> Unavailable();

  // Starts a server. Errors name the step that failed and quote its output (initdb's, or the
  // server's log).
  static idem::Result<std::unique_ptr<PgServer>> Start();

  // Starts a streaming standby of this server, in a directory of its own (pg_basebackup -R, as
  // the same user), on its own port, with the same role and password, and makes it synchronous:
  // this server's `synchronous_standby_names` becomes '*' (ALTER SYSTEM, so it also holds after
  // a Restart), and this returns once the standby streams as the synchronous one. From then on
  // a commit with synchronous_commit = on (idem's kSync) returns only when the standby has
  // flushed it, and waits while the standby is down. The standby accepts connections but no
  // writes (hot standby) until Promote.
  idem::Result<std::unique_ptr<PgServer>> StartSynchronousStandby();
  // Makes this standby a primary (`pg_ctl promote`) and waits until it accepts writes.
  idem::Status Promote();

  // Stops the server (kFast) if it runs and removes its directory.
  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // A libpq URI for the role `idem` over TCP on 127.0.0.1 with its password (SCRAM), database
  // `postgres`; its tables go to the schema `idem` (first on its search_path).
  std::string Uri() const;
  // The same with `password` in place of the role's (empty: none), for tests of refusals.
  std::string UriWithPassword(std::string_view password) const;
  // One URI naming every server of `servers` (a primary and its standbys), in order, with the
  // first one's role and password and `target_session_attrs=read-write`: libpq tries the hosts
  // in order and keeps the first that accepts writes, so a client finds the promoted standby.
  static std::string MultiHostUri(const std::vector<const PgServer*>& servers);
  // Keyword/value connection string for the superuser `postgres` over the private UNIX socket
  // (trust authentication), database `postgres`.
  std::string AdminConninfo() const;

  const std::string& user() const { return user_; }
  const std::string& password() const { return password_; }
  int port() const { return port_; }
  const std::string& directory() const { return directory_; }
  const std::string& data_directory() const { return data_directory_; }
  const std::string& socket_directory() const { return socket_directory_; }
  // The postmaster's pid while it runs, else 0.
  pid_t pid() const { return pid_; }
  // The server's processes now: the postmaster and its children (backends, checkpointer, ...).
  std::vector<pid_t> Processes() const;

  // Stops every process of the server (SIGSTOP to the postmaster, then to each of its
  // children): a server frozen as by a debugger or a paused VM. The kernel still accepts
  // connections on its port and acknowledges what clients send; nothing answers. Thaw (SIGCONT
  // to each) resumes them; Stop, Restart and the destructor thaw a frozen server first.
  idem::Status Freeze();
  idem::Status Thaw();
  // Runs `sql` (one or more statements) as the superuser; an error names the statement.
  idem::Status Admin(std::string_view sql) const;

  // Shuts the server down as `mode` says and waits until its postmaster has exited (the
  // postmaster exits after all its children; after kKill, which they do not outlive either,
  // until each has). Idempotent. The directory stays.
  idem::Status Stop(Shutdown mode = Shutdown::kFast);
  // Stop(mode), then starts the server again on the same directory and port (crash recovery
  // after kImmediate) and waits until it accepts connections.
  idem::Status Restart(Shutdown mode);

  // SIGKILL to one backend (a session opened for it), as the OOM killer or a crash in an
  // extension would: the postmaster takes a child's death by a signal for a crash, ends every
  // other process, recovers from its log and takes connections again, without restarting (its
  // pid and pg_postmaster_start_time() stay). Returns once it accepts connections again.
  idem::Status CrashABackend();

  // The last `lines` lines of the server's log, for failure messages.
  std::string LogTail(int lines = 30) const;

  // How long Start took (initdb, server start, setup), for the tests' timing reports.
  std::chrono::milliseconds start_time() const { return start_time_; }

 private:
  PgServer() = default;

  // Makes directory_ (a new private directory) and names the data, socket and log paths in it.
  idem::Status MakeDirectories();
  // Launch on a free port (port_), trying another when one is taken before the server binds it.
  idem::Status LaunchOnFreePort();
  // Starts the postmaster on port_ and waits until it accepts connections.
  idem::Status Launch();
  // SIGKILL to the postmaster and all its processes; waits until none runs.
  idem::Status Kill();
  // The first column of the first row `sql` returns, run as the superuser.
  idem::Result<std::string> AdminValue(std::string_view sql) const;
  // Waits up to `timeout` until AdminValue(sql) returns `expected`; an error names `what`.
  idem::Status WaitForAdminValue(std::string_view what, std::string_view sql,
                                 std::string_view expected,
                                 std::chrono::milliseconds timeout) const;

  std::string bin_directory_;
  std::optional<uid_t> run_as_uid_;  // set when running as root
  std::optional<gid_t> run_as_gid_;
  std::string directory_;
  std::string data_directory_;
  std::string socket_directory_;
  std::string log_path_;
  std::string user_ = "idem";
  std::string password_;
  int port_ = 0;
  pid_t pid_ = 0;
  std::vector<pid_t> frozen_;  // the processes Freeze stopped
  std::chrono::milliseconds start_time_{0};
};

// A PgBouncer (Debian's pgbouncer) in transaction pooling mode in front of a PgServer, on its own
// loopback port, as the same unprivileged user, with the same lifecycle: the destructor stops it
// (SIGTERM, an immediate shutdown: its clients are disconnected) and removes its directory. It
// authenticates the server's role with the same password (SCRAM on both sides). The PgServer
// must outlive it.
class PgBouncer {
 public:
  // Why none can be started here (naming the package), or nullopt.
  static std::optional<std::string> Unavailable();

  // `pool_size`: server connections per user and database (default_pool_size).
  static idem::Result<std::unique_ptr<PgBouncer>> Start(const PgServer& server, int pool_size = 4);

  ~PgBouncer();
  PgBouncer(const PgBouncer&) = delete;
  PgBouncer& operator=(const PgBouncer&) = delete;

  // The PgServer's Uri(), through PgBouncer.
  std::string Uri() const;
  std::string UriWithPassword(std::string_view password) const;
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& directory() const { return directory_; }

  idem::Status Stop();
  std::string LogTail(int lines = 30) const;

 private:
  PgBouncer() = default;

  std::string user_;
  std::string password_;
  std::string directory_;
  std::string log_path_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace idem_test

// The same for a PgBouncer in front of `server` (declared by IDEM_START_PG_OR_SKIP).
#define IDEM_START_PGBOUNCER_OR_SKIP(name, server, pool_size)                                      \
  if (const std::optional<std::string> name##_unavailable = ::idem_test::PgBouncer::Unavailable(); \
      name##_unavailable) {                                                                        \
    GTEST_SKIP() << *name##_unavailable;                                                           \
  }                                                                                                \
  auto name##_started = ::idem_test::PgBouncer::Start(*(server), (pool_size));                     \
  ASSERT_TRUE(name##_started.ok()) << name##_started.status().ToString();                          \
  std::unique_ptr<::idem_test::PgBouncer> name = std::move(name##_started).value()

// Declares `std::unique_ptr<idem_test::PgServer> name` holding a started server, or skips the
// test (GTEST_SKIP, naming the package) when PostgreSQL is not installed, or fails it when the
// server does not start.
#define IDEM_START_PG_OR_SKIP(name)                                                               \
  if (const std::optional<std::string> name##_unavailable = ::idem_test::PgServer::Unavailable(); \
      name##_unavailable) {                                                                       \
    GTEST_SKIP() << *name##_unavailable;                                                          \
  }                                                                                               \
  auto name##_started = ::idem_test::PgServer::Start();                                           \
  ASSERT_TRUE(name##_started.ok()) << name##_started.status().ToString();                         \
  std::unique_ptr<::idem_test::PgServer> name = std::move(name##_started).value()

#endif  // IDEM_TESTS_PG_SERVER_H_
