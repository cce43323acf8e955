// A store in PostgreSQL used by several hosts at once, against a real server: four processes,
// each with its own Store, race over 2,000 keys while workers are killed with SIGKILL and
// replaced; and the server restarted mid-run (pg_ctl restart -m immediate, a crash). Every key
// is acquired and completed, no acknowledged result is lost or changed, and a key's work runs
// again only after the lease of the run before could have passed (or, on one host, after its
// holder died).
//
// Hosts are emulated with PID namespaces (each worker in its own, with its own /proc, as a
// container is): a holder in another namespace is never judged dead by its pid, exactly as on
// another host. That needs root; elsewhere the workers share the host's namespace and the
// test checks the rule of one host instead (a killed holder's claim is taken over at once).
// The kernel gives a namespace's number (its inode, part of idem's pid scope) to a new one once
// the old one is gone: a worker started after another was killed may get the killed one's, and
// then rightly judges its holder dead (all its processes are). So a replacement is started
// before the kill, in a namespace of its own, and the check compares namespaces, not flags.

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/namespaced_process.h"
#include "support/pg_server.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem_test::NamespacedProcess;
using idem_test::Namespaces;
using idem_test::PgServer;
using idem_test::TempDir;

constexpr int kKeys = 2000;
constexpr std::chrono::milliseconds kLease = 2s;
// One key in kSlowEvery takes kSlowWork instead of kWork, so that a kill can land inside a run
// for certain (KillWhileItRunsAKey) and leave a claim behind.
constexpr int kSlowEvery = 50;
constexpr std::chrono::milliseconds kWork = 2ms;
constexpr std::chrono::milliseconds kSlowWork = 400ms;
constexpr char kWorkerDone = 'k';
constexpr char kWorkerFailed = 'f';

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Appends `line` with one write, so that a worker killed mid-way leaves whole lines only (and
// perhaps one partial last line, which the reader ignores).
void Append(int fd, const std::string& line) {
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(3);
}

// A worker: opens the store and runs Execute on every key, starting at its own offset, each
// until it succeeds (retrying what is retryable for up to a minute). Its log says when it called
// Execute ("call KEY MICROS": the Begin that acquires the key, and starts its lease on the
// server's clock, comes after), what it ran ("run KEY MICROS") and what it acknowledged ("ack KEY
// RESULT"), after the PID namespace it runs in ("namespace INODE").
char Worker(const std::string& uri, int worker, const std::string& log_path) {
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return kWorkerFailed;
  struct stat pid_namespace {};
  if (::stat("/proc/self/ns/pid", &pid_namespace) != 0) return kWorkerFailed;
  Append(fd, fmt::format("namespace {}\n", pid_namespace.st_ino));
  idem::Options options;
  options.execute_wait = 60s;
  auto store = idem::Store::Open(uri, options);
  if (!store.ok()) {
    Append(fd, "error " + store.status().ToString() + "\n");
    return kWorkerFailed;
  }
  for (int i = 0; i < kKeys; ++i) {
    const int number = (i + worker * kKeys / 4) % kKeys;
    const std::string key = fmt::format("key-{:04}", number);
    const auto work = number % kSlowEvery == kSlowEvery / 2 ? kSlowWork : kWork;
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      Append(fd, fmt::format("call {} {}\n", key, NowMicros()));
      auto done = (*store)->Execute(key, {.lease = kLease},
                                    [&](idem::Attempt&) -> idem::Result<std::string> {
                                      Append(fd, fmt::format("run {} {}\n", key, NowMicros()));
                                      std::this_thread::sleep_for(work);
                                      return fmt::format("w{}-{}", worker, key);
                                    });
      if (done.ok()) {
        Append(fd, fmt::format("ack {} {}\n", key, done->result));
        break;
      }
      if (!idem::IsRetryable(done.status()) || std::chrono::steady_clock::now() > give_up) {
        Append(fd, fmt::format("error {} {}\n", key, done.status().ToString()));
        return kWorkerFailed;
      }
      Append(fd, fmt::format("retry {} {}\n", key, done.status().ToString()));
    }
  }
  return kWorkerDone;
}

struct Run {
  int worker;
  int64_t start_micros;
  int64_t call_micros;  // when the worker called the Execute that ran it
};

// What the workers' logs say.
struct Logs {
  std::map<int, std::string> pid_namespace;                       // by worker
  std::map<std::string, std::vector<Run>> runs;                   // by key, in start order
  std::vector<std::pair<std::string, std::string>> acknowledged;  // key, result
  std::vector<std::string> errors;
  std::size_t run_count = 0;
  std::size_t retries = 0;  // calls that failed with a retryable error, then were made again
  std::string last_line;    // the last whole line of the last log read
};

Logs ReadLogs(const std::vector<std::string>& paths) {
  Logs logs;
  for (std::size_t worker = 0; worker < paths.size(); ++worker) {
    std::ifstream in(paths[worker]);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::map<std::string, int64_t> called;  // key -> the worker's last call of Execute on it
    std::size_t at = 0;
    for (std::size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
      logs.last_line = text.substr(at, end - at);
      std::istringstream line(logs.last_line);
      std::string what, key;
      line >> what >> key;
      if (what == "namespace") {
        logs.pid_namespace[static_cast<int>(worker)] = key;
      } else if (what == "call") {
        line >> called[key];
      } else if (what == "run") {
        int64_t micros = 0;
        line >> micros;
        logs.runs[key].push_back({static_cast<int>(worker), micros, called[key]});
        ++logs.run_count;
      } else if (what == "retry") {
        ++logs.retries;
      } else if (what == "ack") {
        std::string result;
        line >> result;
        logs.acknowledged.emplace_back(key, result);
      } else {
        logs.errors.push_back(text.substr(at, end - at));
      }
    }
  }
  for (auto& [key, runs] : logs.runs) {
    std::sort(runs.begin(), runs.end(),
              [](const Run& a, const Run& b) { return a.start_micros < b.start_micros; });
  }
  return logs;
}

// Whether processes in PID namespaces of their own can run here (root).
bool CanEmulateHosts() {
  NamespacedProcess probe({.pid = true, .mount_proc = true}, [] { return kWorkerDone; });
  return probe.byte() == kWorkerDone;
}

class Hosts {
 public:
  Hosts(const PgServer& server, const TempDir& dir, bool own_namespaces)
      : uri_(server.Uri()),
        dir_(dir),
        namespaces_{.pid = own_namespaces, .mount_proc = own_namespaces} {}

  // Starts worker number logs_.size() (its key offset and log follow from it).
  void Start() {
    const int worker = static_cast<int>(logs_.size());
    logs_.push_back(dir_.Sub(fmt::format("worker-{}.log", worker)));
    const std::string uri = uri_, log = logs_.back();
    workers_.push_back(std::make_unique<NamespacedProcess>(
        namespaces_, [uri, worker, log] { return Worker(uri, worker, log); }));
  }
  // Kills the worker as soon as it is seen running a slow key (its log's last line is the run
  // of one), so that it leaves a claim behind; false if it was not seen so within 20 s.
  bool KillWhileItRunsAKey(int worker) {
    const std::vector<std::string> log = {logs_[worker]};
    const bool seen = idem_test::WaitFor(
        [&] {
          std::istringstream line(ReadLogs(log).last_line);
          std::string what, key;
          line >> what >> key;
          return what == "run" && key.size() > 4 &&
                 std::stoi(key.substr(4)) % kSlowEvery == kSlowEvery / 2;
        },
        20s);
    workers_[worker]->Kill();
    killed_at_.emplace(worker, NowMicros());
    return seen;
  }
  // Waits until the workers ran `runs` keys in all (false after a minute).
  bool WaitForRuns(std::size_t runs) const {
    return idem_test::WaitFor([&] { return ReadLogs(logs_).run_count >= runs; }, 60s);
  }
  // Waits for every worker not killed to finish; false if one failed.
  bool Finish() {
    bool all_done = true;
    for (std::size_t worker = 0; worker < workers_.size(); ++worker) {
      if (killed_at_.count(static_cast<int>(worker)) > 0) continue;
      const char byte = workers_[worker]->byte();
      EXPECT_EQ(byte, kWorkerDone) << "worker " << worker;
      all_done = all_done && byte == kWorkerDone;
    }
    return all_done;
  }
  Logs Read() const { return ReadLogs(logs_); }
  const std::map<int, int64_t>& killed_at() const { return killed_at_; }

 private:
  const std::string uri_;
  const TempDir& dir_;
  const Namespaces namespaces_;
  std::vector<std::string> logs_;
  std::vector<std::unique_ptr<NamespacedProcess>> workers_;
  std::map<int, int64_t> killed_at_;  // worker -> when
};

// Checks the store against the logs: every key done with the result of its last run; every
// acknowledged result is the stored one; and each run after the first of its key started only
// once the run before could no longer hold the key: its lease had passed, or its worker had been
// killed and the rerun's worker runs in the killed one's PID namespace (one host's rule). The lease
// began at the Begin that acquired the key, after the worker called Execute: so no earlier than
// that call. The run's own start is no bound: how long fn's call follows the Begin is not bounded
// on a busy machine.
void CheckStoreAgainstLogs(const PgServer& server, const Hosts& hosts) {
  auto store = idem::Store::Open(server.Uri());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const Logs logs = hosts.Read();
  for (const std::string& error : logs.errors) ADD_FAILURE() << "worker: " << error;
  std::map<std::string, idem::Record> stored;
  ASSERT_TRUE((*store)
                  ->Scan({},
                         [&](const idem::Record& record) {
                           stored.emplace(record.key, record);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(stored.size(), static_cast<std::size_t>(kKeys));
  std::size_t reruns = 0;
  for (const auto& [key, record] : stored) {
    EXPECT_EQ(record.state, idem::State::kDone) << key;
    const auto runs = logs.runs.find(key);
    ASSERT_NE(runs, logs.runs.end()) << key << " is done but no worker ran it";
    EXPECT_EQ(record.result, fmt::format("w{}-{}", runs->second.back().worker, key)) << key;
    for (std::size_t i = 1; i < runs->second.size(); ++i) {
      ++reruns;
      const Run& before = runs->second[i - 1];
      const Run& after = runs->second[i];
      int64_t free_from = before.call_micros + std::chrono::microseconds(kLease).count();
      const auto killed = hosts.killed_at().find(before.worker);
      const bool same_namespace =
          logs.pid_namespace.count(before.worker) > 0 &&
          logs.pid_namespace.count(after.worker) > 0 &&
          logs.pid_namespace.at(before.worker) == logs.pid_namespace.at(after.worker);
      if (same_namespace && killed != hosts.killed_at().end()) {
        free_from = std::min(free_from, killed->second);
      }
      EXPECT_GE(after.start_micros, free_from)
          << key << " ran again " << (after.start_micros - before.start_micros) / 1000
          << " ms after worker " << before.worker << " began it ("
          << (after.start_micros - before.call_micros) / 1000
          << " ms after it called Execute), while its claim held";
    }
  }
  std::size_t lost = 0;
  for (const auto& [key, result] : logs.acknowledged) {
    const auto found = stored.find(key);
    if (found == stored.end() || found->second.result != result) ++lost;
    EXPECT_TRUE(found != stored.end() && found->second.result == result)
        << key << ": acknowledged " << result;
  }
  std::cout << logs.run_count << " runs of " << kKeys << " keys (" << reruns << " again), "
            << logs.acknowledged.size() << " acknowledged, " << lost << " lost, " << logs.retries
            << " calls retried\n";
}

TEST(PgHosts, FourProcessesRaceOverTwoThousandKeysWhileWorkersAreKilled) {
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  IDEM_START_PG_OR_SKIP(server);
  TempDir dir;
  const bool hosts_emulated = CanEmulateHosts();
  if (!hosts_emulated) {
    std::cout << "not root: the workers share this host's PID namespace (one host's rules)\n";
  }
  Hosts hosts(*server, dir, hosts_emulated);
  for (int i = 0; i < 4; ++i) hosts.Start();
  ASSERT_TRUE(hosts.WaitForRuns(300));
  hosts.Start();  // worker 4, to take worker 0's place (started first: see the top)
  EXPECT_TRUE(hosts.KillWhileItRunsAKey(0));
  ASSERT_TRUE(hosts.WaitForRuns(900));
  hosts.Start();  // worker 5, for worker 1
  EXPECT_TRUE(hosts.KillWhileItRunsAKey(1));
  ASSERT_TRUE(hosts.Finish());
  CheckStoreAgainstLogs(*server, hosts);
}

TEST(PgHosts, CallersCarryOnAfterTheServerCrashesAndRestartsMidRun) {
  if (idem_test::UnderTsan()) GTEST_SKIP() << "fork of a multi-threaded process under TSan";
  IDEM_START_PG_OR_SKIP(server);
  TempDir dir;
  Hosts hosts(*server, dir, /*own_namespaces=*/false);
  for (int i = 0; i < 4; ++i) hosts.Start();
  ASSERT_TRUE(hosts.WaitForRuns(500));
  ASSERT_LT(hosts.Read().run_count, static_cast<std::size_t>(kKeys)) << "the run was over";
  ASSERT_TRUE(server->Restart(PgServer::Shutdown::kImmediate).ok());
  ASSERT_TRUE(hosts.Finish());
  // No worker died: a run again means the first run's Complete never committed (the crash), and
  // its claim then had to pass its lease.
  CheckStoreAgainstLogs(*server, hosts);
}

}  // namespace
