// idem_bench: idem against its anchors (raw RocksDB, a SQLite dedup table, a Redis lock; on
// PostgreSQL, hand-written SQL), side by side in one run, on the same keys (36-byte UUIDv7-shaped
// request ids) and ~100-byte results. scripts/bench.sh runs every workload, one process each, and
// turns the rows into docs/benchmarks.md; see bench/README.md.
//
// What it measures (each a closed loop of T threads for --seconds; throughput in operations per
// second and per-operation latency p50/p99; one "operation" is written next to each):
//   lifecycle   Begin then Complete on a fresh key (one operation = both calls), every system
//   replay      Begin on a key completed before (one operation = one Begin; idem's anchor is a
//               raw RocksDB Get; SQLite and Redis try to claim, then read the stored result)
//   contention  all T threads race on one key at a time (T consecutive Begins share a key); the
//               winner Completes. Counts acquired / in_progress / replay answers, and
//               double_claims: keys claimed more than once (must be 0 but for raw RocksDB,
//               which has no atomicity)
//   client      lifecycle from this process while another process owns the store: the child
//               `idem_bench --serve DIR` opens the store first, this process opens the same path
//               and becomes its client over the UNIX socket; with redis among --systems, Redis's
//               lifecycle too, in the same rounds (the anchor of the client's ratio)
//   scale       lifecycle (kBuffered, 1 and 4 threads) on an empty store; then --records records
//               are loaded (1% of them kept for an hour), the process waits until its
//               background threads go quiet (the load's compaction backlog is cleared), the
//               store's clock moves two hours on, and Store::Purge (removing that 1%) is timed
//               against a Store::Scan of everything; then lifecycle on that full store; and the
//               process's peak RSS, against Options::memory_budget (--memory-budget) and the RSS
//               right after opening an empty store
//   effects     lifecycle whose Complete also adds 1 to a balance, read first, in the same atomic
//               write (idem: an application table; raw RocksDB: a key beside the records); one
//               balance per thread, so no conflicts: the cost of the table write itself
//   fsync       the latency of a 4 KiB write + fdatasync in the data directory
//   wear        flash wear: the bytes each system writes per lifecycle, as the disk wrote them
//               and as handed to the OS (harness.h, BytesWritten), one thread,
//               --wear-lifecycles fresh keys, the store's close included
//   device      a small device: kPeriodic under --memory-budget, --records records loaded, then
//               lifecycles from one thread; peak RSS against the budget, size on disk
//   pg-purge    (needs --postgres) --pg-purge-records rows in idem's table on PostgreSQL, 1% of
//               them expired, written by SQL from one record idem wrote (a load through idem's
//               kSync calls would take minutes); after a VACUUM ANALYZE, as autovacuum would
//               have run on a table that grew over days, Store::Purge is timed against a
//               sequential scan of the same table (SELECT count(*), index scans off)
//   restore     --restore-records done records exported and imported into a new store by the idem
//               command, beside pg_dump and pg_restore of the same rows with --postgres
//               (bench/restore.h)
// The PostgreSQL systems (idem-pg, pg-sql, pg-sql-read-first) run in lifecycle and replay when
// --postgres names a server (scripts/bench.sh starts one); each measurement uses a table of its
// own, dropped first. Their rows also carry the statements the server ran (pg_stat_statements,
// when the server loaded it): `statements` and `server_exec_us`, their execution time there.
// With --rounds R, each figure of lifecycle, effects, replay and client is measured R times, the
// rounds interleaved across the systems, and the row recorded is the round of median throughput
// (with `rounds`, `ops_low` and `ops_high`: the range of the rounds). Rows go to --results
// (tab-separated) and to stdout, each round's to stdout only.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "harness.h"
#include "idem/idem.h"
#include "pg.h"
#include "restore.h"
#include "subjects.h"

extern char** environ;

namespace idem::bench {
namespace {

namespace fs = std::filesystem;

struct Flags {
  std::string workload;
  std::vector<std::string> systems;
  std::vector<int> threads = {1, 4, 16, 64};
  double seconds = 3;
  int rounds = 1;
  uint64_t records = 10'000'000;
  uint64_t replay_keys = 20'000;
  std::string dir = "bench-data";
  std::string results;
  int redis_port = 6379;
  std::string postgres;  // a libpq URI; empty: the PostgreSQL systems and workloads are skipped
  uint64_t pg_purge_records = 1'000'000;
  // idem's Options::pool_size on PostgreSQL; 0: as many connections as the run has threads,
  // as many as the hand-written anchors hold (one per thread).
  int pg_pool_size = 0;
  std::size_t memory_budget = Options{}.memory_budget;
  uint64_t wear_lifecycles = 100'000;
  uint64_t restore_records = 1'000'000;
  std::string pg_bin = "/usr/lib/postgresql/15/bin";  // pg_dump and pg_restore, for restore
  std::string serve;  // internal: be the owner process of this store until stdin closes
  int64_t serve_clock_offset_ms = 0;  // internal: the owner's clock runs this far ahead
};

// The configuration of one measurement's subject: `directory` for the stores on disk, a table
// named after `name` for the PostgreSQL systems.
SubjectConfig ConfigFor(const Flags& flags, const std::string& directory, std::string_view name,
                        int threads) {
  return SubjectConfig{.directory = directory,
                       .redis_port = flags.redis_port,
                       .postgres = flags.postgres,
                       .table = PgTableName(name),
                       .pg_pool_size = flags.pg_pool_size > 0 ? flags.pg_pool_size : threads,
                       .memory_budget = flags.memory_budget};
}

// Runs `measure` and, for a PostgreSQL system, adds to its counts the statements the server ran
// meanwhile.
Result<Measurement> MeasureCountingStatements(const Flags& flags, std::string_view system,
                                              const std::function<Result<Measurement>()>& measure) {
  if (!IsPostgresSystem(system)) return measure();
  IDEM_ASSIGN_OR_RETURN(auto admin, PgConnection::Connect(flags.postgres));
  IDEM_ASSIGN_OR_RETURN(PgStatementCounter counter, PgStatementCounter::Start(*admin));
  IDEM_ASSIGN_OR_RETURN(Measurement m, measure());
  IDEM_RETURN_IF_ERROR(counter.AddTo(m));
  return m;
}

// A fresh directory under --dir for one measurement.
Result<std::string> FreshDirectory(const Flags& flags, std::string_view name) {
  const fs::path path = fs::absolute(fs::path(flags.dir) / name);
  std::error_code error;
  fs::remove_all(path, error);
  fs::create_directories(path, error);
  if (error) return Status::IOError("cannot create " + path.string() + ": " + error.message());
  return path.string();
}

void RemoveDirectory(const std::string& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// ---- workloads ------------------------------------------------------------------------------

class LifecycleWorker final : public Worker {
 public:
  explicit LifecycleWorker(std::unique_ptr<Session> session) : session_(std::move(session)) {}
  Status Op() override {
    const std::string_view key = keys_.Next();
    IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, session_->Begin(key));
    if (answer.answer != Answer::kAcquired) {
      return Status::Failed("a fresh key " + std::string(key) + " was not acquired");
    }
    return session_->Complete(key, answer.token, ResultPayload());
  }

 private:
  std::unique_ptr<Session> session_;
  KeyGenerator keys_;
};

Result<Measurement> RunLifecycle(Subject& subject, int threads, double seconds) {
  return RunClosedLoop(threads, seconds, [&](int) -> Result<std::unique_ptr<Worker>> {
    IDEM_ASSIGN_OR_RETURN(auto session, subject.Connect());
    return std::unique_ptr<Worker>(std::make_unique<LifecycleWorker>(std::move(session)));
  });
}

// Measures each of `systems` at each of flags.threads (`measure`), flags.rounds times, and
// records for each pair the round of median throughput as `workload`. The rounds are
// interleaved (every pair once per round, the systems of a thread count one after another, each
// round starting one system further on), so that whatever else the machine runs slows the
// systems a ratio compares alike and no system always runs first, and the median leaves out a
// round that something stalled.
Status MeasureInRounds(
    const Flags& flags, ResultsFile& results, const std::string& workload,
    const std::vector<std::string>& systems,
    const std::function<Result<Measurement>(const std::string& system, int threads)>& measure) {
  std::map<std::pair<std::string, int>, std::vector<Measurement>> taken;
  for (int round = 1; round <= flags.rounds; ++round) {
    for (int threads : flags.threads) {
      for (std::size_t i = 0; i < systems.size(); ++i) {
        const std::string& system = systems[(i + round - 1) % systems.size()];
        IDEM_ASSIGN_OR_RETURN(Measurement m, MeasureCountingStatements(flags, system, [&] {
                                return measure(system, threads);
                              }));
        if (flags.rounds > 1) {
          ResultsFile::Print(
              workload, system, threads, m,
              "round " + std::to_string(round) + " of " + std::to_string(flags.rounds));
        }
        taken[{system, threads}].push_back(std::move(m));
      }
    }
  }
  for (const std::string& system : systems) {
    for (int threads : flags.threads) {
      results.Add(workload, system, threads, MedianRound(std::move(taken[{system, threads}])));
    }
  }
  return Status::OK();
}

// Each of flags.systems at each of flags.threads, in rounds, on a store of its own made fresh
// for each measurement: `run` measures the subject (`threads` threads), recorded as `workload`.
Status MeasureOnFreshStores(
    const Flags& flags, ResultsFile& results, const std::string& workload,
    const std::function<Result<Measurement>(Subject& subject, int threads)>& run) {
  return MeasureInRounds(
      flags, results, workload, flags.systems,
      [&](const std::string& system, int threads) -> Result<Measurement> {
        const std::string name = workload + "-" + system + "-" + std::to_string(threads);
        IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, name));
        Result<Measurement> m = [&]() -> Result<Measurement> {
          IDEM_ASSIGN_OR_RETURN(auto subject,
                                OpenSubject(system, ConfigFor(flags, dir, name, threads)));
          return run(*subject, threads);
        }();
        RemoveDirectory(dir);
        return m;
      });
}

Status Lifecycle(const Flags& flags, ResultsFile& results) {
  return MeasureOnFreshStores(flags, results, "lifecycle", [&](Subject& subject, int threads) {
    return RunLifecycle(subject, threads, flags.seconds);
  });
}

class EffectsWorker final : public Worker {
 public:
  EffectsWorker(std::unique_ptr<Session> session, int thread)
      : session_(std::move(session)), account_("acct-" + std::to_string(thread)) {}
  Status Op() override { return session_->RunAdding(keys_.Next(), ResultPayload(), account_); }

 private:
  std::unique_ptr<Session> session_;
  const std::string account_;
  KeyGenerator keys_;
};

Status Effects(const Flags& flags, ResultsFile& results) {
  return MeasureOnFreshStores(flags, results, "effects", [&](Subject& subject, int threads) {
    return RunClosedLoop(threads, flags.seconds,
                         [&](int thread) -> Result<std::unique_ptr<Worker>> {
                           IDEM_ASSIGN_OR_RETURN(auto session, subject.Connect());
                           return std::unique_ptr<Worker>(
                               std::make_unique<EffectsWorker>(std::move(session), thread));
                         });
  });
}

class ReplayWorker final : public Worker {
 public:
  ReplayWorker(std::unique_ptr<Session> session, const std::vector<std::string>& keys)
      : session_(std::move(session)), keys_(keys), random_(std::random_device{}()) {}
  Status Op() override {
    const std::string& key = keys_[random_() % keys_.size()];
    IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, session_->Begin(key));
    if (answer.answer != Answer::kReplay) {
      return Status::Failed("completed key " + key + " was not a replay");
    }
    return Status::OK();
  }

 private:
  std::unique_ptr<Session> session_;
  const std::vector<std::string>& keys_;
  std::mt19937_64 random_;
};

Status Replay(const Flags& flags, ResultsFile& results) {
  std::vector<std::string> keys;
  KeyGenerator generator;
  for (uint64_t i = 0; i < flags.replay_keys; ++i) keys.emplace_back(generator.Next());
  // Every system's store is loaded first and stays open through the rounds.
  std::map<std::string, std::unique_ptr<Subject>> subjects;
  std::vector<std::string> dirs;
  const auto measure_all = [&]() -> Status {
    for (const std::string& system : flags.systems) {
      const std::string name = "replay-" + system;
      IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, name));
      dirs.push_back(dir);
      const int most_threads = *std::max_element(flags.threads.begin(), flags.threads.end());
      IDEM_ASSIGN_OR_RETURN(subjects[system],
                            OpenSubject(system, ConfigFor(flags, dir, name, most_threads)));
      Subject& subject = *subjects[system];
      constexpr int kLoaders = 2;
      IDEM_RETURN_IF_ERROR(RunOnThreads(kLoaders, [&](int thread) -> Status {
        IDEM_ASSIGN_OR_RETURN(auto session, subject.Connect());
        for (std::size_t i = thread; i < keys.size(); i += kLoaders) {
          IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, session->Begin(keys[i]));
          IDEM_RETURN_IF_ERROR(session->Complete(keys[i], answer.token, ResultPayload()));
        }
        return Status::OK();
      }));
    }
    return MeasureInRounds(
        flags, results, "replay", flags.systems, [&](const std::string& system, int threads) {
          return RunClosedLoop(threads, flags.seconds, [&](int) -> Result<std::unique_ptr<Worker>> {
            IDEM_ASSIGN_OR_RETURN(auto session, subjects[system]->Connect());
            return std::unique_ptr<Worker>(
                std::make_unique<ReplayWorker>(std::move(session), keys));
          });
        });
  };
  const Status status = measure_all();
  subjects.clear();
  for (const std::string& dir : dirs) RemoveDirectory(dir);
  return status;
}

// The key of contention round `round`: UUID-shaped, 36 bytes, unique per run.
std::string RoundKey(uint64_t run, uint64_t round) {
  char text[40];
  std::snprintf(text, sizeof(text), "%08x-%04x-7%03x-8%03x-%012llx",
                static_cast<unsigned>(run >> 32), static_cast<unsigned>((run >> 16) & 0xFFFF),
                static_cast<unsigned>(run & 0xFFF), static_cast<unsigned>((round >> 48) & 0xFFF),
                static_cast<unsigned long long>(round & 0xFFFFFFFFFFFFULL));
  return text;
}

class ContentionWorker final : public Worker {
 public:
  ContentionWorker(std::unique_ptr<Session> session, std::atomic<uint64_t>& sequence, int threads,
                   uint64_t run)
      : session_(std::move(session)), sequence_(sequence), threads_(threads), run_(run) {}
  Status Op() override {
    const uint64_t round = sequence_.fetch_add(1) / threads_;
    const std::string key = RoundKey(run_, round);
    IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, session_->Begin(key));
    switch (answer.answer) {
      case Answer::kAcquired:
        ++acquired_;
        return session_->Complete(key, answer.token, ResultPayload());
      case Answer::kInProgress:
        ++in_progress_;
        return Status::OK();
      case Answer::kReplay:
        ++replay_;
        return Status::OK();
    }
    return Status::OK();
  }
  void AddCounts(std::map<std::string, uint64_t>& counts) const override {
    counts["acquired"] += acquired_;
    counts["in_progress"] += in_progress_;
    counts["replay"] += replay_;
  }

 private:
  std::unique_ptr<Session> session_;
  std::atomic<uint64_t>& sequence_;
  const int threads_;
  const uint64_t run_;
  uint64_t acquired_ = 0, in_progress_ = 0, replay_ = 0;
};

Status Contention(const Flags& flags, ResultsFile& results) {
  std::mt19937_64 random(std::random_device{}());
  for (const std::string& system : flags.systems) {
    for (int threads : flags.threads) {
      const std::string name = "contention-" + system + "-" + std::to_string(threads);
      IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, name));
      {
        IDEM_ASSIGN_OR_RETURN(auto subject,
                              OpenSubject(system, ConfigFor(flags, dir, name, threads)));
        std::atomic<uint64_t> sequence{0};
        const uint64_t run = random();
        IDEM_ASSIGN_OR_RETURN(
            Measurement m,
            RunClosedLoop(threads, flags.seconds, [&](int) -> Result<std::unique_ptr<Worker>> {
              IDEM_ASSIGN_OR_RETURN(auto session, subject->Connect());
              return std::unique_ptr<Worker>(
                  std::make_unique<ContentionWorker>(std::move(session), sequence, threads, run));
            }));
        // Every round's key was begun at least once, so it must have been acquired exactly once.
        const uint64_t rounds = (sequence.load() + threads - 1) / threads;
        m.counts["double_claims"] = m.counts["acquired"] - std::min(m.counts["acquired"], rounds);
        results.Add("contention", system, threads, m);
      }
      RemoveDirectory(dir);
    }
  }
  return Status::OK();
}

// Wall-clock time that the scale workload moves forward to expire records.
class ManualClock final : public idem::Clock {
 public:
  std::chrono::system_clock::time_point Now() const override {
    return std::chrono::system_clock::now() + std::chrono::milliseconds(offset_ms_.load());
  }
  void Advance(std::chrono::milliseconds by) { offset_ms_.fetch_add(by.count()); }
  std::chrono::milliseconds Offset() const { return std::chrono::milliseconds(offset_ms_.load()); }

 private:
  std::atomic<int64_t> offset_ms_{0};
};

// The owner process of the client workload: `idem_bench --serve DIR`.
int Serve(const Flags& flags) {
  Options options;
  options.durability = Durability::kBuffered;
  options.memory_budget = flags.memory_budget;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  auto clock = std::make_shared<ManualClock>();
  clock->Advance(std::chrono::milliseconds(flags.serve_clock_offset_ms));
  options.clock = clock;
  Result<std::unique_ptr<Store>> store = Store::Open(flags.serve, options);
  if (!store.ok()) {
    std::cerr << "idem_bench --serve: " << store.status().ToString() << std::endl;
    return 1;
  }
  std::cout << "ready" << std::endl;
  char buffer[64];
  while (::read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
  }
  return 0;
}

// A child process, its stdin and stdout piped to us.
class OwnerProcess {
 public:
  // `clock_offset`: how far ahead of the system clock the owner's clock runs.
  static Result<std::unique_ptr<OwnerProcess>> Start(
      const Flags& flags, const std::string& dir,
      std::chrono::milliseconds clock_offset = std::chrono::milliseconds(0)) {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      return Status::IOError("pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const std::string budget = std::to_string(flags.memory_budget);
    std::vector<std::string> args = {self,
                                     "--serve",
                                     dir,
                                     "--memory-budget",
                                     budget,
                                     "--serve-clock-offset-ms",
                                     std::to_string(clock_offset.count())};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    if (rc != 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      return Status::IOError("cannot start " + self + ": " + std::strerror(rc));
    }
    std::unique_ptr<OwnerProcess> owner(new OwnerProcess(pid, to_child[1]));
    std::string line;
    char c;
    while (::read(from_child[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(from_child[0]);
    if (line != "ready") {
      return Status::Unavailable("the owner process did not start (it said \"" + line + "\")");
    }
    return owner;
  }
  ~OwnerProcess() {
    ::close(stdin_);
    int status = 0;
    if (!killed_) ::waitpid(pid_, &status, 0);
  }
  pid_t pid() const { return pid_; }
  // Ends the owner with SIGKILL: it closes nothing.
  void Kill() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    killed_ = true;
  }

 private:
  OwnerProcess(pid_t pid, int stdin_fd) : pid_(pid), stdin_(stdin_fd) {}
  const pid_t pid_;
  const int stdin_;
  bool killed_ = false;
};

Status Client(const Flags& flags, ResultsFile& results) {
  IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, "client"));
  {
    IDEM_ASSIGN_OR_RETURN(auto owner, OwnerProcess::Start(flags, dir));
    Options options;
    options.durability = Durability::kBuffered;
    options.auto_purge_interval = std::chrono::milliseconds(0);
    IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(dir, options));
    // The owner writes its pid into the lock file; make sure we are the client, not the owner.
    std::ifstream lock_file(fs::path(dir) / "owner.lock");
    std::string word;
    pid_t owner_pid = 0;
    lock_file >> word >> owner_pid;
    if (owner_pid != owner->pid()) {
      return Status::Failed("the store's owner is pid " + std::to_string(owner_pid) +
                            ", not the serving child " + std::to_string(owner->pid()));
    }
    // Redis, when asked for, runs its lifecycle in the same rounds: the anchor of this ratio.
    std::map<std::string, std::unique_ptr<Subject>> subjects;
    subjects["idem-client"] = StoreSubject(*store);
    std::vector<std::string> systems = {"idem-client"};
    if (std::find(flags.systems.begin(), flags.systems.end(), "redis") != flags.systems.end()) {
      IDEM_ASSIGN_OR_RETURN(subjects["redis"],
                            OpenSubject("redis", ConfigFor(flags, dir, "client-redis", 1)));
      systems.push_back("redis");
    }
    IDEM_RETURN_IF_ERROR(MeasureInRounds(
        flags, results, "client", systems, [&](const std::string& system, int threads) {
          return RunLifecycle(*subjects[system], threads, flags.seconds);
        }));
  }
  RemoveDirectory(dir);
  return Status::OK();
}

// Store::GetStats on a store of `expected` live records, timed: the owner's kept counts (this
// process owns it, or `system` names a client of another process's owner). A wrong count fails.
Status MeasureStats(Store& store, uint64_t expected, const std::string& system,
                    ResultsFile& results) {
  const auto start = bench::Clock::now();
  IDEM_ASSIGN_OR_RETURN(StoreStats stats, store.GetStats());
  const double seconds = SecondsSince(start);
  if (stats.precision.count() == 0) {
    return Status::Failed("GetStats counted by reading: the owner keeps no counts");
  }
  if (stats.records != expected) {
    return Status::Failed("GetStats counted " + std::to_string(stats.records) +
                          " records where a scan read " + std::to_string(expected));
  }
  results.AddFigure("stats", system, "stats_seconds", seconds, "s");
  return Status::OK();
}

// Starts an owner in another process (`idem_bench --serve`, its clock `clock_offset` ahead) and
// waits until it has the store's records counted (GetStats through it no longer reads them); the
// seconds from its start are figure `figure`.
Result<std::unique_ptr<OwnerProcess>> StartCountedOwner(const Flags& flags, const std::string& dir,
                                                        std::chrono::milliseconds clock_offset,
                                                        const std::string& figure,
                                                        ResultsFile& results) {
  const auto start = bench::Clock::now();
  IDEM_ASSIGN_OR_RETURN(auto owner, OwnerProcess::Start(flags, dir, clock_offset));
  Options options;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(dir, options));
  for (;;) {
    IDEM_ASSIGN_OR_RETURN(StoreStats stats, store->GetStats());
    if (stats.precision.count() > 0) break;
    if (SecondsSince(start) > 600) return Status::Failed("the owner's start-up count took 600 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  results.AddFigure("stats", "idem-client", figure, SecondsSince(start), "s");
  return owner;
}

// GetStats through an owner in another process. The first owner takes the counts the last one
// kept at its clean close; killed, it keeps none, and the next one counts the records by a scan:
// how long each took to have them counted (from its start), then the call.
Status MeasureStatsThroughAnOwner(const Flags& flags, const std::string& dir, uint64_t expected,
                                  std::chrono::milliseconds clock_offset, ResultsFile& results) {
  {
    IDEM_ASSIGN_OR_RETURN(
        auto owner, StartCountedOwner(flags, dir, clock_offset, "count_at_start_seconds", results));
    owner->Kill();
  }
  IDEM_ASSIGN_OR_RETURN(auto owner, StartCountedOwner(flags, dir, clock_offset,
                                                      "count_after_a_kill_seconds", results));
  Options options;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(dir, options));
  return MeasureStats(*store, expected, "idem-client", results);
}

Status Scale(const Flags& flags, ResultsFile& results) {
  const std::vector<int> threads_list = {1, 4};
  Options options;
  options.durability = Durability::kBuffered;
  options.memory_budget = flags.memory_budget;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  auto clock = std::make_shared<ManualClock>();
  options.clock = clock;

  IDEM_ASSIGN_OR_RETURN(std::string empty_dir, FreshDirectory(flags, "scale-empty"));
  {
    IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(empty_dir, options));
    results.AddFigure("memory", "idem", "baseline_rss", ReadMemory().rss / 1048576.0, "MiB");
    auto subject = StoreSubject(*store);
    for (int threads : threads_list) {
      IDEM_ASSIGN_OR_RETURN(Measurement m, RunLifecycle(*subject, threads, flags.seconds));
      results.Add("scale-empty", "idem-buffered", threads, m);
    }
  }
  RemoveDirectory(empty_dir);

  IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, "scale-full"));
  uint64_t live_at_close = 0;
  {
    IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(dir, options));
    // Every 100th record is kept for an hour; the others for the default 30 days.
    constexpr int kLoaders = 2;
    std::atomic<uint64_t> short_lived{0};
    const auto load_start = bench::Clock::now();
    IDEM_RETURN_IF_ERROR(RunOnThreads(kLoaders, [&](int thread) -> Status {
      KeyGenerator keys;
      for (uint64_t i = thread; i < flags.records; i += kLoaders) {
        BeginOptions begin;
        if (i % 100 == 0) {
          begin.retention = std::chrono::hours(1);
          short_lived.fetch_add(1);
        }
        const std::string_view key = keys.Next();
        IDEM_ASSIGN_OR_RETURN(Claim claim, store->Begin(key, begin));
        IDEM_RETURN_IF_ERROR(store->Complete(key, claim.token, ResultPayload()));
      }
      return Status::OK();
    }));
    const double load_seconds = SecondsSince(load_start);
    results.AddFigure("scale", "idem-buffered", "records", static_cast<double>(flags.records),
                      "records");
    results.AddFigure("scale", "idem-buffered", "load_rate", flags.records / load_seconds,
                      "records/s");
    // A store that grew to this size over days carries no backlog; one loaded at full speed on
    // a small machine does: RocksDB compacts for a while after the load and meanwhile slows
    // every write to 16 MB/s. Purge and lifecycles are measured on the settled store.
    constexpr auto kSettleLimit = std::chrono::minutes(10);
    results.AddFigure("scale", "idem-buffered", "settle_seconds", WaitUntilQuiet(kSettleLimit),
                      "s");
    clock->Advance(std::chrono::hours(2));
    const auto purge_start = bench::Clock::now();
    IDEM_ASSIGN_OR_RETURN(uint64_t purged, store->Purge());
    const double purge_seconds = SecondsSince(purge_start);
    // Fewer is possible (a compaction may drop expired records first), more is a bug.
    if (purged > short_lived.load()) {
      return Status::Failed("purge removed " + std::to_string(purged) + " records; only " +
                            std::to_string(short_lived.load()) + " had expired");
    }
    results.AddFigure("purge", "idem-buffered", "purged", static_cast<double>(purged), "records");
    results.AddFigure("purge", "idem-buffered", "purge_seconds", purge_seconds, "s");

    const auto scan_start = bench::Clock::now();
    uint64_t scanned = 0;
    IDEM_RETURN_IF_ERROR(store->Scan({}, [&](const Record&) {
      ++scanned;
      return true;
    }));
    const double scan_seconds = SecondsSince(scan_start);
    results.AddFigure("purge", "idem-buffered", "scanned", static_cast<double>(scanned), "records");
    results.AddFigure("purge", "idem-buffered", "scan_seconds", scan_seconds, "s");
    // `idem stats` before the owner kept counts was this scan.
    results.AddFigure("stats", "idem-buffered", "scan_seconds", scan_seconds, "s");
    IDEM_RETURN_IF_ERROR(MeasureStats(*store, scanned, "idem-buffered", results));
    // Measured after the purge, so that the scan above covers the loaded records only.
    auto subject = StoreSubject(*store);
    for (int threads : threads_list) {
      IDEM_ASSIGN_OR_RETURN(Measurement m, RunLifecycle(*subject, threads, flags.seconds));
      results.Add("scale-full", "idem-buffered", threads, m);
    }

    const Memory memory = ReadMemory();
    results.AddFigure("memory", "idem", "peak_rss", memory.peak_rss / 1048576.0, "MiB");
    results.AddFigure("memory", "idem", "memory_budget", flags.memory_budget / 1048576.0, "MiB");
    IDEM_ASSIGN_OR_RETURN(const StoreStats at_close, store->GetStats());
    live_at_close = at_close.records;
  }
  IDEM_RETURN_IF_ERROR(
      MeasureStatsThroughAnOwner(flags, dir, live_at_close, clock->Offset(), results));
  RemoveDirectory(dir);
  return Status::OK();
}

// Flash wear: the bytes each system writes per lifecycle (harness.h, BytesWritten), from one
// thread, over --wear-lifecycles fresh keys and the store's close (what its open writes is left
// out). The
// stores use the default memory budget, so memtables fill and flush during the run, as they
// would over a device's day.
Status Wear(const Flags& flags, ResultsFile& results) {
  for (const std::string& system : flags.systems) {
    const std::string name = "wear-" + system;
    IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, name));
    BytesWritten before, after;
    {
      IDEM_ASSIGN_OR_RETURN(auto subject, OpenSubject(system, ConfigFor(flags, dir, name, 1)));
      IDEM_ASSIGN_OR_RETURN(auto session, subject->Connect());
      before = ReadBytesWritten(dir);
      KeyGenerator keys;
      for (uint64_t i = 0; i < flags.wear_lifecycles; ++i) {
        const std::string_view key = keys.Next();
        IDEM_ASSIGN_OR_RETURN(BeginAnswer answer, session->Begin(key));
        if (answer.answer != Answer::kAcquired) {
          return Status::Failed("a fresh key " + std::string(key) + " was not acquired");
        }
        IDEM_RETURN_IF_ERROR(session->Complete(key, answer.token, ResultPayload()));
      }
      session.reset();
      subject.reset();
      after = ReadBytesWritten(dir);
    }
    RemoveDirectory(dir);
    const auto per_lifecycle = [&](uint64_t from, uint64_t to) {
      return static_cast<double>(to - from) / static_cast<double>(flags.wear_lifecycles);
    };
    results.AddFigure("wear", system, "device_bytes_per_lifecycle",
                      per_lifecycle(before.device, after.device), "B");
    results.AddFigure("wear", system, "os_bytes_per_lifecycle",
                      per_lifecycle(before.handed_to_os, after.handed_to_os), "B");
  }
  return Status::OK();
}

// A small device's profile: kPeriodic under --memory-budget (scripts/bench.sh: 8 MiB), --records
// records loaded (flushes and compactions included), then lifecycles from one thread on the full
// store; the process's peak RSS against the budget, and the store's size on disk.
Status Device(const Flags& flags, ResultsFile& results) {
  Options options;
  options.durability = Durability::kPeriodic;
  options.memory_budget = flags.memory_budget;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, "device"));
  {
    IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(dir, options));
    results.AddFigure("device", "idem-periodic", "baseline_rss", ReadMemory().rss / 1048576.0,
                      "MiB");
    const auto load_start = bench::Clock::now();
    KeyGenerator keys;
    for (uint64_t i = 0; i < flags.records; ++i) {
      const std::string_view key = keys.Next();
      IDEM_ASSIGN_OR_RETURN(Claim claim, store->Begin(key));
      IDEM_RETURN_IF_ERROR(store->Complete(key, claim.token, ResultPayload()));
    }
    results.AddFigure("device", "idem-periodic", "load_rate",
                      static_cast<double>(flags.records) / SecondsSince(load_start), "records/s");
    results.AddFigure("device", "idem-periodic", "settle_seconds",
                      WaitUntilQuiet(std::chrono::minutes(10)), "s");
    auto subject = StoreSubject(*store);
    IDEM_ASSIGN_OR_RETURN(Measurement m, RunLifecycle(*subject, 1, flags.seconds));
    results.Add("device", "idem-periodic", 1, m);
    results.AddFigure("device", "idem-periodic", "records", static_cast<double>(flags.records),
                      "records");
    results.AddFigure("device", "idem-periodic", "peak_rss", ReadMemory().peak_rss / 1048576.0,
                      "MiB");
    results.AddFigure("device", "idem-periodic", "memory_budget", flags.memory_budget / 1048576.0,
                      "MiB");
  }
  // Measured once the store is closed: while it is open, a compaction or the owner's
  // housekeeping may delete a table file between the listing and its size.
  uint64_t disk_bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) disk_bytes += entry.file_size();
  }
  results.AddFigure("device", "idem-periodic", "disk_bytes", disk_bytes / 1048576.0, "MiB");
  RemoveDirectory(dir);
  return Status::OK();
}

Status PgPurge(const Flags& flags, ResultsFile& results) {
  const std::string table = PgTableName("purge");
  IDEM_ASSIGN_OR_RETURN(auto admin, PgConnection::Connect(flags.postgres));
  IDEM_RETURN_IF_ERROR(DropPgTables(*admin, table));
  Options options;
  options.table = table;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(flags.postgres, options));

  // One record written by idem, the template of every row: only the key and the expiry differ.
  // jsonb_populate_record copies the template's row with those two columns replaced, so the load
  // names no other column of idem's schema. Keys are UUIDv7-shaped (36 bytes) and ordered, as
  // idem::NewRequestId's; every 100th row expired an hour ago, the others keep the template's
  // expiry (the default 30 days).
  KeyGenerator keys;
  const std::string template_key(keys.Next());
  IDEM_ASSIGN_OR_RETURN(Claim claim, store->Begin(template_key));
  IDEM_RETURN_IF_ERROR(store->Complete(template_key, claim.token, ResultPayload()));
  const auto load_start = bench::Clock::now();
  IDEM_RETURN_IF_ERROR(
      admin
          ->Exec("INSERT INTO " + table + " SELECT r.* FROM " + table + " t, generate_series(1, " +
                     std::to_string(flags.pg_purge_records) +
                     ") g, "
                     "LATERAL jsonb_populate_record(t, jsonb_build_object("
                     "'key', '\\x' || encode(convert_to('0190a5c4-0000-7000-8000-' || "
                     "lpad(to_hex(g), 12, '0'), 'UTF8'), 'hex'), "
                     "'expires', CASE WHEN g % 100 = 0 THEN clock_timestamp() - interval '1 hour' "
                     "ELSE t.expires END)) r WHERE t.key = $1",
                 {template_key})
          .status());
  IDEM_RETURN_IF_ERROR(store->Forget(template_key));
  results.AddFigure("pg-purge", "idem-pg", "load_seconds", SecondsSince(load_start), "s");
  // PostgreSQL's own floor for the same work is one plain DELETE of the expired rows of a copy
  // of the table (its indexes too), through the same index on expiry. The copy is made now and
  // both tables are vacuumed and checkpointed alike, so that neither the DELETE nor the purge
  // finds its table fresher in the caches than the other's, or pays for the other's dirty pages.
  const std::string copy = table + "_copy";
  for (const std::string& sql : {"DROP TABLE IF EXISTS " + copy,
                                 "CREATE TABLE " + copy + " (LIKE " + table + " INCLUDING ALL)",
                                 "INSERT INTO " + copy + " SELECT * FROM " + table,
                                 "VACUUM ANALYZE " + table, "VACUUM ANALYZE " + copy}) {
    IDEM_RETURN_IF_ERROR(admin->Exec(sql).status());
  }
  // Needs a superuser (or pg_checkpoint): the benchmark's own server gives one; elsewhere the
  // background checkpointer may run during either measurement.
  static_cast<void>(admin->Exec("CHECKPOINT"));
  results.AddFigure("pg-purge", "idem-pg", "records", static_cast<double>(flags.pg_purge_records),
                    "records");
  IDEM_ASSIGN_OR_RETURN(
      double table_bytes,
      admin->Number("SELECT pg_total_relation_size($1::text::regclass)", {table}));
  results.AddFigure("pg-purge", "idem-pg", "table_mib", table_bytes / 1048576.0, "MiB");

  // A sequential scan of the heap: with index scans allowed, count(*) reads the smaller index on
  // expiry instead (index-only, the visibility map being set by the VACUUM). The planner may
  // still run it in parallel.
  for (const char* setting : {"SET enable_indexonlyscan = off", "SET enable_indexscan = off",
                              "SET enable_bitmapscan = off"}) {
    IDEM_RETURN_IF_ERROR(admin->Exec(setting).status());
  }
  const auto scan_start = bench::Clock::now();
  IDEM_ASSIGN_OR_RETURN(double scanned, admin->Number("SELECT count(*) FROM " + table));
  const double scan_seconds = SecondsSince(scan_start);
  results.AddFigure("pg-purge", "idem-pg", "scanned", scanned, "records");
  results.AddFigure("pg-purge", "idem-pg", "scan_seconds", scan_seconds, "s");

  IDEM_RETURN_IF_ERROR(admin->Exec("RESET ALL").status());
  const auto delete_start = bench::Clock::now();
  IDEM_ASSIGN_OR_RETURN(PgResultPtr deleted,
                        admin->Exec("DELETE FROM " + copy + " WHERE expires <= clock_timestamp()"));
  const double delete_seconds = SecondsSince(delete_start);
  IDEM_RETURN_IF_ERROR(admin->Exec("DROP TABLE " + copy).status());
  results.AddFigure("pg-purge", "idem-pg", "deleted", std::atof(PQcmdTuples(deleted.get())),
                    "records");
  results.AddFigure("pg-purge", "idem-pg", "delete_seconds", delete_seconds, "s");

  const auto purge_start = bench::Clock::now();
  IDEM_ASSIGN_OR_RETURN(uint64_t purged, store->Purge());
  const double purge_seconds = SecondsSince(purge_start);
  const uint64_t expired = flags.pg_purge_records / 100;
  if (purged != expired) {
    return Status::Failed("purge removed " + std::to_string(purged) + " records; " +
                          std::to_string(expired) + " had expired");
  }
  results.AddFigure("pg-purge", "idem-pg", "purged", static_cast<double>(purged), "records");
  results.AddFigure("pg-purge", "idem-pg", "purge_seconds", purge_seconds, "s");
  store.reset();
  return DropPgTables(*admin, table);
}

// bench/restore.h. Without --postgres, idem's side only.
Status RestoreWorkload(const Flags& flags, ResultsFile& results) {
  IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, "restore"));
  const Status status = Restore(RestoreConfig{.directory = dir,
                                              .records = flags.restore_records,
                                              .idem_command = IDEM_COMMAND_PATH,
                                              .postgres = flags.postgres,
                                              .pg_bin = flags.pg_bin},
                                results);
  RemoveDirectory(dir);
  return status;
}

Status Fsync(const Flags& flags, ResultsFile& results) {
  IDEM_ASSIGN_OR_RETURN(std::string dir, FreshDirectory(flags, "fsync"));
  const std::string path = dir + "/probe";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
  std::string block(4096, 'x');
  std::vector<double> micros;
  constexpr int kProbes = 200;
  for (int i = 0; i < kProbes; ++i) {
    const auto start = bench::Clock::now();
    if (::pwrite(fd, block.data(), block.size(), static_cast<off_t>(i) * 4096) !=
            static_cast<ssize_t>(block.size()) ||
        ::fdatasync(fd) != 0) {
      ::close(fd);
      return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
    }
    micros.push_back(SecondsSince(start) * 1e6);
  }
  ::close(fd);
  RemoveDirectory(dir);
  std::sort(micros.begin(), micros.end());
  results.AddFigure("fsync", "disk", "fsync_p50", micros[kProbes / 2], "us");
  results.AddFigure("fsync", "disk", "fsync_p99", micros[kProbes * 99 / 100], "us");
  return Status::OK();
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "idem_bench: idem against raw RocksDB, SQLite and Redis; see bench/README.md.\n"
      "Run it through scripts/bench.sh, which starts Redis and writes docs/benchmarks.md."};
  const std::vector<std::string> workloads = {"lifecycle", "replay", "contention", "client",
                                              "scale",     "fsync",  "pg-purge",   "effects",
                                              "wear",      "device", "restore"};
  app.add_option("--workload", flags.workload, "What to measure")->check(CLI::IsMember(workloads));
  app.add_option("--systems", flags.systems, "Systems, comma-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(AllSystems()));
  app.add_option("--threads", flags.threads, "Thread counts, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seconds", flags.seconds, "Length of each measurement")->capture_default_str();
  app.add_option("--rounds", flags.rounds,
                 "Rounds of each measurement, interleaved across the systems; the round of "
                 "median throughput is recorded")
      ->check(CLI::Range(1, 99))
      ->capture_default_str();
  app.add_option("--records", flags.records, "Records stored before the scale and purge runs")
      ->capture_default_str();
  app.add_option("--replay-keys", flags.replay_keys, "Completed keys the replay workload reads")
      ->capture_default_str();
  app.add_option("--dir", flags.dir, "Directory for the stores (on the disk to measure)")
      ->capture_default_str();
  app.add_option("--results", flags.results, "Append tab-separated result rows to this file");
  app.add_option("--redis-port", flags.redis_port, "Redis on 127.0.0.1")->capture_default_str();
  app.add_option("--postgres", flags.postgres,
                 "PostgreSQL server (libpq URI) for the PostgreSQL systems and pg-purge; the "
                 "benchmark creates and drops its idem_bench_* tables there");
  app.add_option("--pg-purge-records", flags.pg_purge_records, "Rows stored before pg-purge")
      ->capture_default_str();
  app.add_option("--pg-pool-size", flags.pg_pool_size,
                 "Options::pool_size of idem on PostgreSQL (connections per process); 0: one per "
                 "thread of the run, as the hand-written anchors hold")
      ->capture_default_str();
  app.add_option("--memory-budget", flags.memory_budget, "Options::memory_budget, bytes")
      ->capture_default_str();
  app.add_option("--wear-lifecycles", flags.wear_lifecycles,
                 "Lifecycles each system runs in the wear workload")
      ->capture_default_str();
  app.add_option("--restore-records", flags.restore_records,
                 "Records exported and restored by the restore workload")
      ->capture_default_str();
  app.add_option("--pg-bin", flags.pg_bin, "Directory of pg_dump and pg_restore (restore)")
      ->capture_default_str();
  app.add_option("--serve", flags.serve, "Internal: own this store until stdin closes");
  app.add_option("--serve-clock-offset-ms", flags.serve_clock_offset_ms,
                 "Internal: the owner's clock runs this many ms ahead of the system's");
  CLI11_PARSE(app, argc, argv);

  if (!flags.serve.empty()) return Serve(flags);
  if (flags.workload.empty()) {
    std::cerr << "idem_bench: --workload is required\n" << app.help();
    return 2;
  }
  const bool systems_named = !flags.systems.empty();
  if (!systems_named) flags.systems = AllSystems();
  // Without a server the PostgreSQL systems are left out, so the binary alone still runs.
  if (flags.postgres.empty()) {
    const auto without = std::remove_if(flags.systems.begin(), flags.systems.end(),
                                        [](const std::string& s) { return IsPostgresSystem(s); });
    if ((systems_named && without != flags.systems.end()) || flags.workload == "pg-purge") {
      std::cout << "idem_bench: no --postgres: skipping the PostgreSQL systems and workloads"
                << std::endl;
    }
    flags.systems.erase(without, flags.systems.end());
    if (flags.workload == "pg-purge") return 0;
  }
  ResultsFile results(flags.results);
  Status status;
  if (flags.workload == "lifecycle") status = Lifecycle(flags, results);
  if (flags.workload == "effects") status = Effects(flags, results);
  if (flags.workload == "replay") status = Replay(flags, results);
  if (flags.workload == "contention") status = Contention(flags, results);
  if (flags.workload == "client") status = Client(flags, results);
  if (flags.workload == "scale") status = Scale(flags, results);
  if (flags.workload == "fsync") status = Fsync(flags, results);
  if (flags.workload == "pg-purge") status = PgPurge(flags, results);
  if (flags.workload == "wear") status = Wear(flags, results);
  if (flags.workload == "device") status = Device(flags, results);
  if (flags.workload == "restore") status = RestoreWorkload(flags, results);
  if (!status.ok()) {
    std::cerr << "idem_bench --workload " << flags.workload << ": " << status.ToString()
              << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace idem::bench

int main(int argc, char** argv) { return idem::bench::Main(argc, argv); }
