#include "pg_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "util/hex.h"
#include "util/random.h"

namespace idem_test {
namespace {

namespace fs = std::filesystem;
using idem::Status;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kPackage = "postgresql-15";
// A server starting on a loaded machine (initdb's files cold, crash recovery) takes a few
// seconds; anything near these limits is a server that will not come up.
constexpr milliseconds kInitdbTimeout{120'000};
constexpr milliseconds kReadyTimeout{60'000};
constexpr milliseconds kStopTimeout{60'000};
// A port found free may be taken before the server binds it: try a few others.
constexpr int kPortAttempts = 5;

std::string ErrnoText(int error) { return std::strerror(error); }

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(),
                                      [](unsigned char c) { return c >= '0' && c <= '9'; });
}

bool IsExecutable(const fs::path& path) { return ::access(path.c_str(), X_OK) == 0; }

bool HasServerBinaries(const fs::path& bin) {
  return IsExecutable(bin / "initdb") && IsExecutable(bin / "postgres");
}

// Where initdb and postgres are: $IDEM_PG_BINDIR, else Debian's /usr/lib/postgresql/N/bin (the
// highest N), else the directory on $PATH that has initdb.
std::optional<std::string> FindBinDirectory() {
  if (const char* configured = std::getenv("IDEM_PG_BINDIR"); configured && *configured) {
    if (HasServerBinaries(configured)) return std::string(configured);
    return std::nullopt;
  }
  std::optional<std::pair<int, std::string>> best;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", error)) {
    const std::string name = entry.path().filename().string();
    if (!AllDigits(name)) continue;
    const fs::path bin = entry.path() / "bin";
    const int version = std::stoi(name);
    if (HasServerBinaries(bin) && (!best || version > best->first)) {
      best = std::pair(version, bin.string());
    }
  }
  if (best) return best->second;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream directories(path);
    std::string directory;
    while (std::getline(directories, directory, ':')) {
      if (!directory.empty() && HasServerBinaries(directory)) return directory;
    }
  }
  return std::nullopt;
}

// The pgbouncer program: $IDEM_PGBOUNCER, else Debian's /usr/sbin/pgbouncer, else on $PATH.
std::optional<std::string> FindPgBouncer() {
  if (const char* configured = std::getenv("IDEM_PGBOUNCER"); configured && *configured) {
    if (IsExecutable(configured)) return std::string(configured);
    return std::nullopt;
  }
  if (IsExecutable("/usr/sbin/pgbouncer")) return std::string("/usr/sbin/pgbouncer");
  if (const char* path = std::getenv("PATH")) {
    std::stringstream directories(path);
    std::string directory;
    while (std::getline(directories, directory, ':')) {
      if (!directory.empty() && IsExecutable(fs::path(directory) / "pgbouncer")) {
        return (fs::path(directory) / "pgbouncer").string();
      }
    }
  }
  return std::nullopt;
}

struct RunAs {
  uid_t uid;
  gid_t gid;
  std::string name;
};

// The unprivileged user to run the server as when this process is root ($IDEM_PG_USER, else
// `postgres`); nullopt when not root. An error when root and no such user exists.
idem::Result<std::optional<RunAs>> FindRunAs() {
  if (::geteuid() != 0) return std::optional<RunAs>();
  const char* configured = std::getenv("IDEM_PG_USER");
  const std::string name = configured && *configured ? configured : "postgres";
  struct passwd entry {};
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || !found) {
    return Status::NotFound(
        "running as root, which PostgreSQL refuses: the tests run it as the "
        "user '" +
        name + "', which does not exist (package " + std::string(kPackage) +
        " creates 'postgres'; or set IDEM_PG_USER)");
  }
  if (entry.pw_uid == 0) {
    return Status::InvalidArgument("IDEM_PG_USER names '" + name + "', which is root");
  }
  return std::optional<RunAs>(RunAs{entry.pw_uid, entry.pw_gid, name});
}

// The user to run the server's programs as, from what PgServer keeps of FindRunAs's answer.
std::optional<RunAs> ServerUser(std::optional<uid_t> uid, std::optional<gid_t> gid) {
  if (!uid || !gid) return std::nullopt;
  return RunAs{*uid, *gid, "the server's user"};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string LastLines(const std::string& text, int lines) {
  std::deque<std::string> kept;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    kept.push_back(line);
    if (static_cast<int>(kept.size()) > lines) kept.pop_front();
  }
  std::string out;
  for (const std::string& kept_line : kept) out += kept_line + "\n";
  return out;
}

// Starts `argv` with stdout and stderr appended to `log_path` and stdin from /dev/null, as
// `run_as` when given. The child gets `death_signal` when the thread that started it exits (so
// when this process dies), so that a test killed outright leaves no server behind.
idem::Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log_path,
                          const std::optional<RunAs>& run_as, int death_signal) {
  // Everything the child needs is prepared here: between fork and exec, a child of a
  // multi-threaded process may only make async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork for " + argv[0] + ": " + ErrnoText(errno));
  if (pid == 0) {
    if (run_as) {
      if (::setgroups(0, nullptr) != 0 || ::setresgid(run_as->gid, run_as->gid, run_as->gid) != 0 ||
          ::setresuid(run_as->uid, run_as->uid, run_as->uid) != 0) {
        ::_exit(126);
      }
    }
    // After the change of user, which clears the death signal.
    if (::prctl(PR_SET_PDEATHSIG, death_signal) != 0 || ::getppid() != parent) ::_exit(126);
    const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log < 0 || null < 0 || ::dup2(null, 0) < 0 || ::dup2(log, 1) < 0 || ::dup2(log, 2) < 0) {
      ::_exit(126);
    }
    ::execv(args[0], args.data());
    const char message[] = "exec failed\n";
    [[maybe_unused]] const ssize_t written =
        ::write(2, message, sizeof message - 1);  // best effort
    ::_exit(127);
  }
  return pid;
}

// Waits up to `timeout` for child `pid` to exit and reaps it: its wait status, or nullopt when
// it still runs. Waits on a pidfd (no polling); polls where the kernel has none (before 5.3).
std::optional<int> WaitForExit(pid_t pid, milliseconds timeout) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    struct pollfd entry {
      pidfd, POLLIN, 0
    };
    int ready;
    do {
      ready = ::poll(&entry, 1, static_cast<int>(timeout.count()));
    } while (ready < 0 && errno == EINTR);
    ::close(pidfd);
    if (ready == 0) return std::nullopt;
  }
  const auto deadline = Clock::now() + timeout;
  for (milliseconds pause{1};; pause = std::min(pause * 2, milliseconds(50))) {
    int status = 0;
    const pid_t reaped = ::waitpid(pid, &status, pidfd >= 0 ? 0 : WNOHANG);
    if (reaped == pid) return status;
    if (reaped < 0 && errno != EINTR) return 0;  // not our child (already reaped)
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(pause);
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// A TCP port on 127.0.0.1 that nobody listens on now.
idem::Result<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError("socket: " + ErrnoText(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    return Status::IOError("binding a free port on 127.0.0.1: " + ErrnoText(error));
  }
  ::close(fd);
  return static_cast<int>(ntohs(address.sin_port));
}

// What /proc/PID/stat says of a process: its state (R, S, Z, ...), parent and start time (in
// clock ticks since boot, which tells it from a later process given the same pid).
struct ProcessStat {
  char state = '?';
  pid_t parent = 0;
  uint64_t start_time = 0;
};

std::optional<ProcessStat> ReadProcessStat(pid_t pid) {
  // "pid (comm) state ppid ..."; comm may hold spaces and parentheses; starttime is field 22.
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return std::nullopt;
  std::stringstream fields(stat.substr(comm_end + 1));
  ProcessStat parsed;
  fields >> parsed.state >> parsed.parent;
  std::string skipped;
  for (int field = 5; field < 22; ++field) fields >> skipped;
  fields >> parsed.start_time;
  if (!fields) return std::nullopt;
  return parsed;
}

// The processes whose parent is `parent` now, with what /proc says of each.
std::vector<std::pair<pid_t, ProcessStat>> ChildrenOf(pid_t parent) {
  std::vector<std::pair<pid_t, ProcessStat>> children;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (!AllDigits(name)) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    const std::optional<ProcessStat> stat = ReadProcessStat(pid);
    if (stat && stat->parent == parent) children.emplace_back(pid, *stat);
  }
  return children;
}

// True while the process that had `stat` at `pid` runs: not when the pid is free or taken by a
// later process, nor when it is a zombie (it has exited and only waits to be reaped).
bool StillRuns(pid_t pid, const ProcessStat& stat) {
  const std::optional<ProcessStat> now = ReadProcessStat(pid);
  return now && now->start_time == stat.start_time && now->state != 'Z';
}

// "postgresql://user[:password]@hosts/postgres"
std::string PostgresUri(std::string_view user, std::string_view password, std::string_view hosts) {
  return "postgresql://" + std::string(user) +
         (password.empty() ? "" : ":" + std::string(password)) + "@" + std::string(hosts) +
         "/postgres";
}

// A value for a keyword/value connection string, quoted.
std::string Quoted(std::string_view value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

Status MakeOwnedDirectory(const std::string& path, const std::optional<RunAs>& run_as) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError("mkdir " + path + ": " + ErrnoText(errno));
  }
  if (run_as && ::chown(path.c_str(), run_as->uid, run_as->gid) != 0) {
    return Status::IOError("chown " + path + " to " + run_as->name + ": " + ErrnoText(errno));
  }
  return Status::OK();
}

// A new private directory $TMPDIR/<prefix>XXXXXX (mode 0700), owned by `run_as` when given.
idem::Result<std::string> MakeTempDirectory(std::string_view prefix,
                                            const std::optional<RunAs>& run_as) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/" + std::string(prefix) + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IOError("mkdtemp " + pattern + ": " + ErrnoText(errno));
  }
  if (Status owned = MakeOwnedDirectory(pattern, run_as); !owned.ok()) {
    std::error_code ignored;
    fs::remove_all(pattern, ignored);
    return owned;
  }
  return pattern;
}

// Writes `text` to a new file `path` (mode 0600), owned by `run_as` when given.
Status WriteOwnedFile(const std::string& path, std::string_view text,
                      const std::optional<RunAs>& run_as) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("creating " + path + ": " + ErrnoText(errno));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  ::close(fd);
  if (!written) return Status::IOError("writing " + path + ": " + ErrnoText(error));
  if (run_as && ::chown(path.c_str(), run_as->uid, run_as->gid) != 0) {
    return Status::IOError("chown " + path + " to " + run_as->name + ": " + ErrnoText(errno));
  }
  return Status::OK();
}

// Appends `text` to the existing file `path`.
Status AppendToFile(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::app);
  out << text;
  out.close();
  if (!out) return Status::IOError("appending to " + path + ": " + ErrnoText(errno));
  return Status::OK();
}

// Polls `conninfo` with PQping until it answers (the program is ready), `pid` exits (an error
// quoting `log_path`), or `timeout` passes. There is nothing to wait on but the answer, so this
// polls, briefly at first.
Status WaitUntilAccepting(const std::string& what, const std::string& conninfo, pid_t& pid,
                          const std::string& log_path, milliseconds timeout) {
  const std::string ping = conninfo + " connect_timeout=2";
  const auto deadline = Clock::now() + timeout;
  for (milliseconds pause{2};; pause = std::min(pause * 2, milliseconds(50))) {
    if (PQping(ping.c_str()) == PQPING_OK) return Status::OK();
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = 0;
      return Status::IOError(what + " exited while starting (" + DescribeExit(status) +
                             "); its log:\n" + LastLines(ReadFile(log_path), 30));
    }
    if (Clock::now() >= deadline) {
      return Status::TimedOut(what + " did not accept connections within " +
                              std::to_string(timeout.count()) + " ms; its log:\n" +
                              LastLines(ReadFile(log_path), 30));
    }
    std::this_thread::sleep_for(pause);
  }
}

// Sends `signal` to child `pid`, waits for it to exit, and kills it when it does not in time.
Status StopChild(const std::string& what, pid_t& pid, int signal, const std::string& log_path) {
  if (pid == 0) return Status::OK();
  if (::kill(pid, signal) != 0) {
    return Status::IOError("signalling " + what + " (pid " + std::to_string(pid) +
                           "): " + ErrnoText(errno));
  }
  const std::optional<int> status = WaitForExit(pid, kStopTimeout);
  if (!status) {
    ::kill(pid, SIGKILL);
    WaitForExit(pid, kStopTimeout);
  }
  pid = 0;
  if (!status) {
    return Status::TimedOut(what + " did not stop within " + std::to_string(kStopTimeout.count()) +
                            " ms and was killed; its log:\n" + LastLines(ReadFile(log_path), 30));
  }
  return Status::OK();
}

// Runs a program to its end; an error quotes its output.
Status RunToEnd(const std::vector<std::string>& argv, const std::string& log_path,
                const std::optional<RunAs>& run_as, milliseconds timeout) {
  IDEM_ASSIGN_OR_RETURN(const pid_t pid, Spawn(argv, log_path, run_as, SIGKILL));
  const std::optional<int> status = WaitForExit(pid, timeout);
  if (!status) {
    ::kill(pid, SIGKILL);
    WaitForExit(pid, kStopTimeout);
    return Status::TimedOut(argv[0] + " did not finish within " + std::to_string(timeout.count()) +
                            " ms; its output:\n" + LastLines(ReadFile(log_path), 30));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return Status::IOError(argv[0] + " failed (" + DescribeExit(*status) + "); its output:\n" +
                           LastLines(ReadFile(log_path), 30));
  }
  return Status::OK();
}

}  // namespace

std::optional<std::string> PgServer::Unavailable() {
  if (!FindBinDirectory()) {
    return "PostgreSQL server binaries (initdb, postgres) not found in $IDEM_PG_BINDIR, "
           "/usr/lib/postgresql/*/bin or $PATH: install the Debian package " +
           std::string(kPackage) + " (scripts/install-deps.sh does)";
  }
  idem::Result<std::optional<RunAs>> run_as = FindRunAs();
  if (!run_as.ok()) return run_as.status().message();
  return std::nullopt;
}

idem::Result<std::unique_ptr<PgServer>> PgServer::Start() {
  const auto started = Clock::now();
  const std::optional<std::string> bin = FindBinDirectory();
  if (!bin) return Status::NotFound(*Unavailable());
  IDEM_ASSIGN_OR_RETURN(const std::optional<RunAs> run_as, FindRunAs());

  std::unique_ptr<PgServer> server(new PgServer());
  server->bin_directory_ = *bin;
  if (run_as) {
    server->run_as_uid_ = run_as->uid;
    server->run_as_gid_ = run_as->gid;
  }

  // From here on the destructor removes the directory, whatever fails.
  IDEM_RETURN_IF_ERROR(server->MakeDirectories());

  // Trust for the private socket (the superuser's setup), SCRAM for TCP (the tests' role).
  // --no-sync: a throwaway cluster need not survive a power cut before its first start; the
  // server itself runs with fsync on.
  IDEM_RETURN_IF_ERROR(
      RunToEnd({*bin + "/initdb", "--pgdata=" + server->data_directory_, "--username=postgres",
                "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C",
                "--no-sync", "--no-instructions"},
               server->directory_ + "/initdb.log", run_as, kInitdbTimeout));
  IDEM_RETURN_IF_ERROR(server->LaunchOnFreePort());

  std::string random(16, '\0');
  IDEM_RETURN_IF_ERROR(idem::util::RandomBytes(random.data(), random.size()));
  server->password_ = idem::util::ToHex(random);
  // The role owns a schema of its own name, first on its search_path ("$user", public): what
  // it creates goes there (PostgreSQL 15 no longer lets every role create in `public`).
  if (Status created =
          server->Admin("CREATE ROLE " + server->user_ + " LOGIN PASSWORD '" + server->password_ +
                        "'; CREATE SCHEMA " + server->user_ + " AUTHORIZATION " + server->user_);
      !created.ok()) {
    // The message quotes the statement: not its password.
    std::string message = created.message();
    for (std::size_t at; (at = message.find(server->password_)) != std::string::npos;) {
      message.replace(at, server->password_.size(), "<password>");
    }
    return Status(created.code(), message);
  }
  server->start_time_ = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  return server;
}

Status PgServer::MakeDirectories() {
  const std::optional<RunAs> run_as = ServerUser(run_as_uid_, run_as_gid_);
  IDEM_ASSIGN_OR_RETURN(directory_, MakeTempDirectory("idem_pg_", run_as));
  data_directory_ = directory_ + "/data";
  socket_directory_ = directory_ + "/socket";
  log_path_ = directory_ + "/server.log";
  // The socket's path must fit in sockaddr_un::sun_path (108 bytes).
  if (socket_directory_.size() + sizeof("/.s.PGSQL.65535") > 108) {
    return Status::InvalidArgument("the socket directory " + socket_directory_ +
                                   " is too long for a UNIX socket path; set a shorter TMPDIR");
  }
  return MakeOwnedDirectory(socket_directory_, run_as);
}

Status PgServer::LaunchOnFreePort() {
  Status launched;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    IDEM_ASSIGN_OR_RETURN(port_, FreePort());
    launched = Launch();
    if (launched.ok()) break;
    // Another process took the port between FreePort and the server's bind: try another.
    if (ReadFile(log_path_).find("could not bind") == std::string::npos) break;
  }
  return launched;
}

Status PgServer::Launch() {
  const std::optional<RunAs> run_as = ServerUser(run_as_uid_, run_as_gid_);
  // SIGQUIT on the death of the test: an immediate shutdown, which ends the server's children.
  // fsync=on is the default, said explicitly: what the tests claim about durability needs it.
  IDEM_ASSIGN_OR_RETURN(
      pid_, Spawn({bin_directory_ + "/postgres", "-D", data_directory_, "-c",
                   "listen_addresses=127.0.0.1", "-c", "port=" + std::to_string(port_), "-c",
                   "unix_socket_directories=" + socket_directory_, "-c", "fsync=on"},
                  log_path_, run_as, SIGQUIT));
  // Ready when it accepts a connection (PQping asks without logging in).
  Status ready = WaitUntilAccepting("postgres", AdminConninfo(), pid_, log_path_, kReadyTimeout);
  if (!ready.ok() && pid_ != 0) {
    const Status stopped = Stop(Shutdown::kImmediate);
    if (!stopped.ok()) ready = Status(ready.code(), ready.message() + "\n" + stopped.ToString());
  }
  return ready;
}

PgServer::~PgServer() {
  if (!frozen_.empty()) static_cast<void>(Thaw());  // a stopped server cannot shut down
  if (const Status stopped = Stop(Shutdown::kFast); !stopped.ok()) {
    ADD_FAILURE() << "stopping the test's PostgreSQL server: " << stopped.ToString();
  }
  if (!directory_.empty()) {
    std::error_code error;
    fs::remove_all(directory_, error);
    if (error) ADD_FAILURE() << "removing " << directory_ << ": " << error.message();
  }
}

std::string PgServer::Uri() const { return UriWithPassword(password_); }

std::string PgServer::UriWithPassword(std::string_view password) const {
  return PostgresUri(user_, password, "127.0.0.1:" + std::to_string(port_));
}

std::string PgServer::MultiHostUri(const std::vector<const PgServer*>& servers) {
  std::string hosts;
  for (const PgServer* server : servers) {
    hosts += (hosts.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(server->port_);
  }
  return PostgresUri(servers.at(0)->user_, servers.at(0)->password_, hosts) +
         "?target_session_attrs=read-write";
}

std::string PgServer::AdminConninfo() const {
  return "host=" + Quoted(socket_directory_) + " port=" + std::to_string(port_) +
         " user=postgres dbname=postgres";
}

std::vector<pid_t> PgServer::Processes() const {
  std::vector<pid_t> processes;
  if (pid_ == 0) return processes;
  processes.push_back(pid_);
  for (const auto& [child, stat] : ChildrenOf(pid_)) processes.push_back(child);
  return processes;
}

Status PgServer::Admin(std::string_view sql) const { return AdminValue(sql).status(); }

idem::Result<std::string> PgServer::AdminValue(std::string_view sql) const {
  PGconn* conn = PQconnectdb(AdminConninfo().c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    return Status::Unavailable("connecting as the superuser: " + message);
  }
  PGresult* result = PQexec(conn, std::string(sql).c_str());
  const ExecStatusType status = PQresultStatus(result);
  idem::Result<std::string> outcome = std::string();
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    outcome = Status::IOError("'" + std::string(sql) + "' failed: " + PQerrorMessage(conn));
  } else if (PQntuples(result) > 0 && PQnfields(result) > 0) {
    outcome = std::string(PQgetvalue(result, 0, 0));
  }
  PQclear(result);
  PQfinish(conn);
  return outcome;
}

Status PgServer::WaitForAdminValue(std::string_view what, std::string_view sql,
                                   std::string_view expected, milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  for (milliseconds pause{2};; pause = std::min(pause * 2, milliseconds(50))) {
    const idem::Result<std::string> value = AdminValue(sql);
    if (value.ok() && *value == expected) return Status::OK();
    if (Clock::now() >= deadline) {
      return Status::TimedOut(
          std::string(what) + ": '" + std::string(sql) + "' did not return '" +
          std::string(expected) + "' within " + std::to_string(timeout.count()) +
          " ms (last: " + (value.ok() ? "'" + *value + "'" : value.status().ToString()) +
          "); the server's log:\n" + LogTail());
    }
    std::this_thread::sleep_for(pause);
  }
}

idem::Result<std::unique_ptr<PgServer>> PgServer::StartSynchronousStandby() {
  const auto started = Clock::now();
  if (pid_ == 0) return Status::InvalidArgument("the primary of a standby must run");
  const std::string basebackup = bin_directory_ + "/pg_basebackup";
  if (!IsExecutable(basebackup)) {
    return Status::NotFound(basebackup + " not found (package " + std::string(kPackage) + ")");
  }
  const std::optional<RunAs> run_as = ServerUser(run_as_uid_, run_as_gid_);
  std::unique_ptr<PgServer> standby(new PgServer());
  standby->bin_directory_ = bin_directory_;
  standby->run_as_uid_ = run_as_uid_;
  standby->run_as_gid_ = run_as_gid_;
  standby->user_ = user_;  // the copy has the primary's roles
  standby->password_ = password_;
  IDEM_RETURN_IF_ERROR(standby->MakeDirectories());

  // As the superuser over this server's socket, where initdb's pg_hba.conf trusts replication
  // connections too. --write-recovery-conf leaves standby.signal and a primary_conninfo naming
  // that socket; --wal-method=stream copies the WAL written meanwhile; --checkpoint=fast does
  // not wait for the next scheduled checkpoint; --no-sync as initdb's (the copy is not what the
  // tests crash).
  IDEM_RETURN_IF_ERROR(
      RunToEnd({basebackup, "--pgdata=" + standby->data_directory_, "--dbname=" + AdminConninfo(),
                "--write-recovery-conf", "--wal-method=stream", "--checkpoint=fast", "--no-sync"},
               standby->directory_ + "/basebackup.log", run_as, kInitdbTimeout));
  // PostgreSQL 15's startup process may take a promote request just before it sleeps
  // wal_retrieve_retry_interval (default 5 s) waiting for WAL from the primary that is gone, and
  // promote only after the sleep (seen here: "received promote request", "waiting for WAL to
  // become available", 5 s of nothing). The tests time the store, not that sleep.
  IDEM_RETURN_IF_ERROR(AppendToFile(standby->data_directory_ + "/postgresql.auto.conf",
                                    "wal_retrieve_retry_interval = '100ms'\n"));
  // After the copy, so that the standby, once promoted, does not wait for a standby of its own.
  // Before the standby starts, so that this server's processes have had the standby's start to
  // read the new value (pg_stat_replication, polled below, shows the polling session's view,
  // not theirs). '*': any standby is the synchronous one.
  IDEM_RETURN_IF_ERROR(Admin("ALTER SYSTEM SET synchronous_standby_names = '*'"));
  IDEM_RETURN_IF_ERROR(Admin("SELECT pg_reload_conf()"));
  IDEM_RETURN_IF_ERROR(standby->LaunchOnFreePort());
  IDEM_RETURN_IF_ERROR(WaitForAdminValue(
      "waiting for the standby to stream as the synchronous one",
      "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'",
      "1", kReadyTimeout));
  standby->start_time_ = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  return standby;
}

Status PgServer::Promote() {
  // --wait: pg_ctl returns once the server has left recovery; it takes writes a moment later.
  IDEM_RETURN_IF_ERROR(
      RunToEnd({bin_directory_ + "/pg_ctl", "promote", "--pgdata=" + data_directory_, "--wait"},
               directory_ + "/promote.log", ServerUser(run_as_uid_, run_as_gid_), kReadyTimeout));
  return WaitForAdminValue("waiting for the promoted standby to take writes",
                           "SELECT pg_is_in_recovery()", "f", kReadyTimeout);
}

Status PgServer::Kill() {
  if (pid_ == 0) return Status::OK();
  // Stopped, the postmaster can neither start a process nor reap one: the list of its children
  // is complete, and none of their pids can be reused until they are killed.
  if (::kill(pid_, SIGSTOP) != 0) {
    return Status::IOError("stopping postgres (pid " + std::to_string(pid_) +
                           "): " + ErrnoText(errno));
  }
  const std::vector<std::pair<pid_t, ProcessStat>> children = ChildrenOf(pid_);
  for (const auto& [child, stat] : children) ::kill(child, SIGKILL);
  const Status killed = StopChild("postgres", pid_, SIGKILL, log_path_);
  // The children pass to init: wait until none runs (a zombie has exited).
  const auto deadline = Clock::now() + kStopTimeout;
  for (milliseconds pause{1};; pause = std::min(pause * 2, milliseconds(50))) {
    std::string running;
    for (const auto& [child, stat] : children) {
      if (StillRuns(child, stat)) running += " " + std::to_string(child);
    }
    if (running.empty()) return killed;
    if (Clock::now() >= deadline) {
      return Status::TimedOut("processes of the killed postgres still run after " +
                              std::to_string(kStopTimeout.count()) + " ms:" + running);
    }
    std::this_thread::sleep_for(pause);
  }
}

Status PgServer::CrashABackend() {
  PGconn* conn = PQconnectdb(AdminConninfo().c_str());
  PGresult* result = PQexec(conn, "SELECT pg_backend_pid()");
  const pid_t backend = PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1
                            ? static_cast<pid_t>(std::stol(PQgetvalue(result, 0, 0)))
                            : 0;
  const std::string error = PQerrorMessage(conn);
  PQclear(result);
  // The postmaster's other children, which its crash handling ends: once none runs, the crash
  // was seen (a connection accepted before that could be the old incarnation's).
  std::vector<std::pair<pid_t, ProcessStat>> others;
  for (const auto& child : ChildrenOf(pid_)) {
    if (child.first != backend) others.push_back(child);
  }
  const bool killed = backend > 0 && ::kill(backend, SIGKILL) == 0;
  const int kill_errno = errno;
  PQfinish(conn);
  if (backend == 0) return Status::IOError("finding a backend to kill: " + error);
  if (!killed) {
    return Status::IOError("killing backend " + std::to_string(backend) + ": " +
                           ErrnoText(kill_errno));
  }
  const auto deadline = Clock::now() + kStopTimeout;
  for (milliseconds pause{1};; pause = std::min(pause * 2, milliseconds(50))) {
    const bool any_left = std::ranges::any_of(
        others, [](const auto& child) { return StillRuns(child.first, child.second); });
    if (!any_left) break;
    if (Clock::now() >= deadline) {
      return Status::TimedOut("the server did not end its processes after backend " +
                              std::to_string(backend) + " was killed; its log:\n" + LogTail());
    }
    std::this_thread::sleep_for(pause);
  }
  return WaitForAdminValue("waiting for the server to recover from a crashed backend", "SELECT 1",
                           "1", kReadyTimeout);
}

Status PgServer::Freeze() {
  if (pid_ == 0) return Status::InvalidArgument("the server does not run");
  // The postmaster first: stopped, it starts no process that the list below would miss.
  if (::kill(pid_, SIGSTOP) != 0) {
    return Status::IOError("stopping postgres (pid " + std::to_string(pid_) +
                           "): " + ErrnoText(errno));
  }
  frozen_ = Processes();
  for (const pid_t process : frozen_) ::kill(process, SIGSTOP);
  return Status::OK();
}

Status PgServer::Thaw() {
  std::string failed;
  for (const pid_t process : frozen_) {
    if (::kill(process, SIGCONT) != 0 && errno != ESRCH) failed += " " + std::to_string(process);
  }
  frozen_.clear();
  if (!failed.empty()) return Status::IOError("cannot resume postgres processes:" + failed);
  return Status::OK();
}

Status PgServer::Stop(Shutdown mode) {
  if (!frozen_.empty()) IDEM_RETURN_IF_ERROR(Thaw());
  if (mode == Shutdown::kKill) return Kill();
  // The signals that `pg_ctl stop -m fast` and `-m immediate` send to the postmaster, which
  // exits after all its children.
  return StopChild("postgres", pid_, mode == Shutdown::kFast ? SIGINT : SIGQUIT, log_path_);
}

Status PgServer::Restart(Shutdown mode) {
  IDEM_RETURN_IF_ERROR(Stop(mode));
  return Launch();
}

std::string PgServer::LogTail(int lines) const { return LastLines(ReadFile(log_path_), lines); }

std::optional<std::string> PgBouncer::Unavailable() {
  if (!FindPgBouncer()) {
    return std::string(
        "pgbouncer not found in $IDEM_PGBOUNCER, /usr/sbin or $PATH: install the Debian package "
        "pgbouncer (scripts/install-deps.sh does)");
  }
  return PgServer::Unavailable();
}

idem::Result<std::unique_ptr<PgBouncer>> PgBouncer::Start(const PgServer& server, int pool_size) {
  const std::optional<std::string> program = FindPgBouncer();
  if (!program) return Status::NotFound(*Unavailable());
  // PgBouncer refuses to run as root, as PostgreSQL does.
  IDEM_ASSIGN_OR_RETURN(const std::optional<RunAs> run_as, FindRunAs());

  std::unique_ptr<PgBouncer> bouncer(new PgBouncer());
  bouncer->user_ = server.user();
  bouncer->password_ = server.password();
  IDEM_ASSIGN_OR_RETURN(bouncer->directory_, MakeTempDirectory("idem_pgbouncer_", run_as));
  bouncer->log_path_ = bouncer->directory_ + "/pgbouncer.log";
  // A plain password in the auth file lets PgBouncer answer the client's SCRAM and run its own
  // SCRAM exchange with the server.
  IDEM_RETURN_IF_ERROR(WriteOwnedFile(bouncer->directory_ + "/users.txt",
                                      "\"" + bouncer->user_ + "\" \"" + bouncer->password_ + "\"\n",
                                      run_as));
  Status launched;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    IDEM_ASSIGN_OR_RETURN(bouncer->port_, FreePort());
    const std::string config =
        bouncer->directory_ + "/pgbouncer." + std::to_string(attempt) + ".ini";
    IDEM_RETURN_IF_ERROR(WriteOwnedFile(config,
                                        "[databases]\n"
                                        "postgres = host=127.0.0.1 port=" +
                                            std::to_string(server.port()) +
                                            " dbname=postgres\n"
                                            "[pgbouncer]\n"
                                            "listen_addr = 127.0.0.1\n"
                                            "listen_port = " +
                                            std::to_string(bouncer->port_) +
                                            "\n"
                                            "unix_socket_dir =\n"
                                            "auth_type = scram-sha-256\n"
                                            "auth_file = " +
                                            bouncer->directory_ +
                                            "/users.txt\n"
                                            "pool_mode = transaction\n"
                                            "default_pool_size = " +
                                            std::to_string(pool_size) +
                                            "\n"
                                            "max_client_conn = 200\n"
                                            "logfile =\n"
                                            "pidfile =\n",
                                        run_as));
    IDEM_ASSIGN_OR_RETURN(bouncer->pid_,
                          Spawn({*program, config}, bouncer->log_path_, run_as, SIGTERM));
    launched = WaitUntilAccepting("pgbouncer",
                                  "host=127.0.0.1 port=" + std::to_string(bouncer->port_) +
                                      " user=" + bouncer->user_ + " dbname=postgres",
                                  bouncer->pid_, bouncer->log_path_, kReadyTimeout);
    if (launched.ok()) break;
    const Status stopped = bouncer->Stop();
    static_cast<void>(stopped);
    // Another process took the port between FreePort and PgBouncer's bind: try another.
    if (ReadFile(bouncer->log_path_).find("Address already in use") == std::string::npos) break;
  }
  IDEM_RETURN_IF_ERROR(launched);
  return bouncer;
}

PgBouncer::~PgBouncer() {
  if (const Status stopped = Stop(); !stopped.ok()) {
    ADD_FAILURE() << "stopping the test's PgBouncer: " << stopped.ToString();
  }
  if (!directory_.empty()) {
    std::error_code error;
    fs::remove_all(directory_, error);
    if (error) ADD_FAILURE() << "removing " << directory_ << ": " << error.message();
  }
}

std::string PgBouncer::Uri() const { return UriWithPassword(password_); }

std::string PgBouncer::UriWithPassword(std::string_view password) const {
  return "postgresql://" + user_ + (password.empty() ? "" : ":" + std::string(password)) +
         "@127.0.0.1:" + std::to_string(port_) + "/postgres";
}

// SIGTERM: PgBouncer's immediate shutdown (SIGINT would wait for its clients to leave).
Status PgBouncer::Stop() { return StopChild("pgbouncer", pid_, SIGTERM, log_path_); }

std::string PgBouncer::LogTail(int lines) const { return LastLines(ReadFile(log_path_), lines); }

}  // namespace idem_test
