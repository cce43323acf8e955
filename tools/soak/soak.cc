// idem_soak: many processes sharing one store, killed with SIGKILL at random moments.
//
//   idem_soak [--minutes M] [--workers N] [--keys K] [--dir DIR] [--max-kills N] [--lease-ms MS]
//             [--no-dead-holders] [--live-checks PERCENT] [--seed S] [--keep] [--sabotage]
//
// Runs rounds until M minutes have passed. Each round starts N worker processes (this program,
// fork + exec'd in worker mode, which open the store after exec) that race Store::Execute over
// the round's keys: K new ones plus a quarter as many reused from earlier rounds (replays). The
// function a worker runs appends "KEY PID TOKEN TOOK_OVER ATTEMPTS" to the round's run log
// before it returns the result "v-PID-TOKEN"; after Execute returns OK the worker appends
// "KEY RESULT PID E|R" (executed or replayed) to the round's ack log. Meanwhile the supervisor
// kills random workers and the store's current owner (the pid in STORE/owner.lock) with SIGKILL
// and starts replacements. When every worker has finished, it opens the store read-only (which
// never takes ownership) and checks the whole history:
//   - every acknowledged result is stored, done and equal, and all acks of a key agree;
//   - every key of every round is done, and its result is one that a logged run produced;
//   - no acknowledged key ran zero times;
//   - each key ran at most once more than the killed attempts that may have had it in flight
//     (a killed worker counts against the last key its function ran, so the bound is sound);
//   - the store holds no key the soak never used.
// Some rounds (--live-checks, default 33 percent) also check, right after a kill, while the
// workers run, that every result acknowledged so far can be read through a read-only handle. Exit
// 0: no violation; 1: some violation (the round's logs are kept in DIR); 2: bad arguments or setup
// failure.
//
// --no-dead-holders turns Options::take_over_dead_holders off, so that killed attempts are taken
// over only when their lease runs out. --sabotage checks the checker: about one worker answer in
// a hundred is made up and logged as an extra, unguarded run; the soak must then report
// violations (and exit 1).
//
//   idem_soak --worker STORE KEYS RUNLOG ACKLOG LOG LEASE_MS DEAD_HOLDERS(1|0)
//       The worker mode (not for direct use).

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "idem/idem.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- small helpers -----------------------------------------------------------------------------

// Appends `line` with one write(2) on an O_APPEND descriptor, so that lines of racing processes
// never interleave.
bool Append(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  return ok;
}

// The complete lines of a file (a last line without its newline, left by a killed writer, is
// dropped and counted in `partial`).
std::vector<std::string> ReadLines(const std::string& path, int* partial = nullptr) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  const std::string text = content.str();
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    const std::size_t newline = text.find('\n', start);
    if (newline == std::string::npos) break;
    lines.push_back(text.substr(start, newline - start));
    start = newline + 1;
  }
  if (partial != nullptr && start < text.size()) ++*partial;
  return lines;
}

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The pid written in STORE/owner.lock ("pid N"), or 0.
pid_t OwnerPid(const std::string& store) {
  std::ifstream file(store + "/owner.lock");
  std::string word;
  long pid = 0;
  if (!(file >> word >> pid) || word != "pid") return 0;
  return static_cast<pid_t>(pid);
}

// ---- worker mode -------------------------------------------------------------------------------

int WorkerMain(const std::vector<std::string>& args) {
  const std::string& store_path = args[0];
  const std::string& keys_path = args[1];
  const std::string& run_log = args[2];
  const std::string& ack_log = args[3];
  const std::string& log_path = args[4];
  const int lease_ms = std::stoi(args[5]);
  const bool dead_holders = args[6] == "1";
  const bool sabotage = std::getenv("IDEM_SOAK_SABOTAGE") != nullptr;
  const std::string me = std::to_string(::getpid());
  auto say = [&](const std::string& text) { Append(log_path, "[" + me + "] " + text + "\n"); };

  idem::Options options;
  options.default_lease = milliseconds(lease_ms);
  options.take_over_dead_holders = dead_holders;
  options.log = [&](std::string_view text) { say("log: " + std::string(text)); };
  std::unique_ptr<idem::Store> store;
  for (int tries = 1; !store; ++tries) {
    auto opened = idem::Store::Open(store_path, options);
    if (opened.ok()) {
      store = std::move(opened).value();
    } else {
      say("open failed: " + opened.status().ToString());
      if (tries == 3) return 4;
    }
  }

  idem::BeginOptions begin;
  begin.type = "soak";
  std::vector<std::string> keys = ReadLines(keys_path);
  std::mt19937_64 random(static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                         static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  std::shuffle(keys.begin(), keys.end(), random);
  for (const std::string& key : keys) {
    for (int tries = 1;; ++tries) {
      auto done = store->Execute(key, begin, [&](idem::Attempt& attempt) {
        const std::string token = std::to_string(attempt.token);
        if (!Append(run_log, key + " " + me + " " + token + " " + (attempt.took_over ? "1" : "0") +
                                 " " + std::to_string(attempt.attempts) + "\n")) {
          say("cannot append to the run log: " + std::string(std::strerror(errno)));
          std::_Exit(3);
        }
        // The "request" takes a moment, so that kills find attempts in flight.
        std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
        return idem::Result<std::string>("v-" + me + "-" + token);
      });
      if (done.ok()) {
        if (sabotage && random() % 100 == 0) {
          // Checks the checker: a run the store did not guard, and an answer it never gave.
          Append(run_log, key + " " + me + " 0 0 0\n");
          done->result = "v-" + me + "-0";
        }
        if (!Append(ack_log, key + " " + done->result + " " + me + " " +
                                 (done->replayed ? "R" : "E") + "\n")) {
          say("cannot append to the ack log: " + std::string(std::strerror(errno)));
          return 3;
        }
        break;
      }
      const auto code = done.status().code();
      // Retryable in this setting: a holder that died (or whose owner died) mid-call, an owner
      // that could not be reached within failover_timeout.
      const bool retryable =
          code == idem::Status::Code::kInProgress || code == idem::Status::Code::kUnavailable ||
          code == idem::Status::Code::kLeaseLost || code == idem::Status::Code::kTimedOut;
      say(std::string(retryable ? "retry " : "error ") + key + ": " + done.status().ToString());
      if (!retryable || tries >= 20) return 1;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  return 0;
}

// ---- supervisor --------------------------------------------------------------------------------

struct Settings {
  double minutes = 3;
  int workers = 4;
  int keys = 500;
  int max_kills = 4;
  int lease_ms = 1500;
  bool dead_holders = true;     // Options::take_over_dead_holders; off: only expired leases
  int live_check_percent = 33;  // of rounds that read acknowledged results while workers run
  bool sabotage = false;        // workers misbehave on purpose: the run must report violations
  uint64_t seed = 0;
  std::string dir;
  bool keep = false;        // keep every round's logs (a round with a violation keeps its own)
  bool remove_dir = false;  // the soak made the directory: remove it after a clean run
};

struct Run {
  pid_t pid = 0;
  std::string key;
  std::string token;
  bool took_over = false;
};

struct KeyState {
  int runs = 0;                    // runs logged, all rounds
  int inflight_kills = 0;          // killed processes whose last logged run was of this key
  std::string acked;               // the acknowledged result ("" before any ack)
  std::set<std::string> produced;  // results a logged run returned: "v-PID-TOKEN"
  bool reported = false;           // a violation was reported: not reported again every round
};

struct Totals {
  int rounds = 0;
  long new_keys = 0, reused_keys = 0, executions = 0, duplicates = 0, takeovers = 0;
  long worker_kills = 0, owner_kills = 0, failovers = 0, owner_changes = 0;
  long acks = 0, replays = 0, verified = 0, live_checks = 0, live_verified = 0;
  long live_errors = 0, retries = 0, partial_lines = 0, violations = 0, live_violations = 0;
  std::vector<double> failover_ms;
};

std::atomic<bool> interrupted{false};

class Supervisor {
 public:
  explicit Supervisor(Settings settings)
      : s_(std::move(settings)), random_(s_.seed), store_(s_.dir + "/store") {}

  int Main();

 private:
  // The state of the round being run.
  struct Round {
    int number = 0;
    std::string keys_path, run_log, ack_log;
    std::vector<pid_t> live;
    std::vector<pid_t> killed;
    int worker_kills = 0, owner_kills = 0, failovers = 0, owner_changes = 0;
    int failed_workers = 0;
    int runs = 0, duplicates = 0, acks = 0;  // from the round's logs
    pid_t owner = 0;                         // last owner seen in owner.lock
    pid_t killed_owner = 0;                  // an owner killed whose successor has not appeared yet
    Clock::time_point owner_killed;          // when
    Clock::time_point last_owner_kill;       // the latest owner kill, for diagnostics
  };

  bool Setup();
  int RunRound(int number);
  pid_t Spawn(const Round& round);
  void Reap(Round& round, bool block_all);
  void WatchOwner(Round& round);
  void Kill(Round& round, pid_t pid, bool owner);
  void LiveCheck(const Round& round);
  int Verify(Round& round, long* verified);
  void Check(const std::string& name, const KeyState& key,
             const std::unordered_map<std::string, idem::Record>& stored, const Round& round,
             long* verified);
  void Violation(const std::string& text, bool print = true);
  void PrintSummary(Clock::duration elapsed);

  Settings s_;
  std::mt19937_64 random_;
  std::string store_;
  std::string self_;      // this program, for exec
  std::string log_path_;  // the workers' log (stdout, stderr, messages)
  int log_fd_ = -1;       // opened once, given to every worker as stdout and stderr
  std::size_t log_offset_ = 0;
  std::unordered_map<std::string, KeyState> keys_;
  std::vector<std::string> acked_pool_;  // keys acknowledged in earlier rounds, for reuse
  Totals t_;
  int round_violations_ = 0;
  int printed_violations_ = 0;  // this round's
  std::vector<std::string> violation_lines_;
};

void Supervisor::Violation(const std::string& text, bool print) {
  ++round_violations_;
  ++t_.violations;
  if (print && ++printed_violations_ <= 20) violation_lines_.push_back("  VIOLATION: " + text);
}

bool Supervisor::Setup() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) {
    std::perror("readlink /proc/self/exe");
    return false;
  }
  self_.assign(buffer, static_cast<std::size_t>(n));
  std::error_code ec;
  std::filesystem::create_directories(s_.dir, ec);
  if (ec) {
    std::fprintf(stderr, "idem_soak: cannot create %s: %s\n", s_.dir.c_str(), ec.message().c_str());
    return false;
  }
  if (std::filesystem::exists(store_)) {
    std::fprintf(stderr, "idem_soak: %s exists already: give a fresh --dir\n", store_.c_str());
    return false;
  }
  log_path_ = s_.dir + "/workers.log";
  log_fd_ = ::open(log_path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd_ < 0) {
    std::perror("open workers.log");
    return false;
  }
  return true;
}

pid_t Supervisor::Spawn(const Round& round) {
  // Everything the child needs is made before fork: between fork and exec only async-signal-safe
  // calls (this process may have threads left by RocksDB).
  std::vector<std::string> args = {self_,
                                   "--worker",
                                   store_,
                                   round.keys_path,
                                   round.run_log,
                                   round.ack_log,
                                   log_path_,
                                   std::to_string(s_.lease_ms),
                                   s_.dead_holders ? "1" : "0"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the supervisor
    if (::getppid() != parent) ::_exit(126);
    ::setpgid(0, 0);  // a Ctrl-C at the terminal reaches the supervisor only
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::dup2(log_fd_, STDOUT_FILENO);
    ::dup2(log_fd_, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (pid < 0) {
    std::perror("fork");
    std::exit(2);
  }
  return pid;
}

// Collects workers that exited by themselves. With block_all, waits for every live worker.
void Supervisor::Reap(Round& round, bool block_all) {
  for (auto it = round.live.begin(); it != round.live.end();) {
    int status = 0;
    const pid_t got = ::waitpid(*it, &status, block_all ? 0 : WNOHANG);
    if (got == *it) {
      if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && !interrupted) {
        ++round.failed_workers;
        Violation("worker " + std::to_string(*it) + " ended with " +
                  (WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                     : "signal " + std::to_string(WTERMSIG(status))) +
                  " without being killed (see " + log_path_ + ")");
      }
      it = round.live.erase(it);
    } else {
      ++it;
    }
  }
}

// Follows owner.lock: counts owner changes, and the failover after a killed owner.
void Supervisor::WatchOwner(Round& round) {
  const pid_t owner = OwnerPid(store_);
  if (owner == 0 || owner == round.owner) return;
  if (round.owner != 0) ++round.owner_changes;
  round.owner = owner;
  if (round.killed_owner != 0 && owner != round.killed_owner) {
    ++round.failovers;
    t_.failover_ms.push_back(Seconds(Clock::now() - round.owner_killed) * 1000);
    round.killed_owner = 0;
  }
}

void Supervisor::Kill(Round& round, pid_t pid, bool owner) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);  // reaped at once: the pid is gone for the dead-holder check
  round.live.erase(std::find(round.live.begin(), round.live.end(), pid));
  round.killed.push_back(pid);
  if (owner) {
    ++round.owner_kills;
    round.killed_owner = pid;
    round.owner_killed = Clock::now();
    round.last_owner_kill = round.owner_killed;
  } else {
    ++round.worker_kills;
  }
}

// While the workers run: every result acknowledged so far (this round's ack log, read before
// the reader opens) must be readable, done and equal, through a read-only handle, which asks the
// live owner or, when it reaches none, reads the files "as of Open". A wrong answer is a
// violation, reported with what the reader was talking to and whether a fresh reader a moment
// later answers right; an error (say the owner was just killed) is counted.
void Supervisor::LiveCheck(const Round& round) {
  ++t_.live_checks;
  std::map<std::string, std::string> expected;
  for (const std::string& line : ReadLines(round.ack_log)) {
    const auto words = Split(line);
    if (words.size() >= 2) expected.emplace(words[0], words[1]);
  }
  const pid_t owner = OwnerPid(store_);
  const bool owner_alive = owner != 0 && ::kill(owner, 0) == 0;
  const auto opened_at = Clock::now();
  // Reads every expected key; returns the wrong ones (key -> what was read), or nullopt on an
  // error. `counters_zero`: the reader's counters are all zero, as those of a reader of the files
  // are (an owner's count its claims and replays, which a running round makes at once).
  auto read = [&](bool* counters_zero) -> std::optional<std::map<std::string, std::string>> {
    idem::Options options;
    options.read_only = true;
    options.log = [](std::string_view) {};
    auto reader = idem::Store::Open(store_, options);
    if (!reader.ok()) {
      ++t_.live_errors;
      violation_lines_.push_back("  live check: open failed: " + reader.status().ToString());
      return std::nullopt;
    }
    std::map<std::string, std::string> wrong;
    for (const auto& [key, result] : expected) {
      auto record = (*reader)->Get(key);
      if (!record.ok()) {
        ++t_.live_errors;
        violation_lines_.push_back("  live check: Get " + key + ": " + record.status().ToString());
        return std::nullopt;
      }
      if (!record->has_value()) {
        wrong[key] = "missing";
      } else if ((*record)->state != idem::State::kDone || (*record)->result != result) {
        wrong[key] = std::string(idem::DisplayState(**record)) + " '" + (*record)->result + "'";
      }
    }
    // Unreadable counters count as zero: this only labels a violation's report.
    const idem::Result<idem::Counters> c = (*reader)->GetCounters();
    *counters_zero = !c.ok() || (c->claims == 0 && c->replays == 0 && c->in_progress == 0);
    return wrong;
  };
  bool counters_zero = false;
  const auto wrong = read(&counters_zero);
  if (!wrong) return;
  t_.live_verified += static_cast<long>(expected.size() - wrong->size());
  if (wrong->empty()) return;

  std::map<std::string, int> kinds;
  for (const auto& [key, what] : *wrong) {
    ++kinds[what == "missing" ? "missing" : what.substr(0, what.find(' '))];
    Violation("", /*print=*/false);
    ++t_.live_violations;
  }
  std::string summary;
  for (const auto& [kind, count] : kinds) {
    summary += (summary.empty() ? "" : ", ") + std::to_string(count) + " " + kind;
  }
  const auto& [first_key, first_what] = *wrong->begin();
  char text[512];
  std::snprintf(text, sizeof(text),
                "live check: %zu of %zu acknowledged results read wrong (%s; e.g. %s acked %s, "
                "read %s); owner.lock said pid %d (%s) when the reader opened, %.0f ms after the "
                "last owner kill; the reader's counters were %s",
                wrong->size(), expected.size(), summary.c_str(), first_key.c_str(),
                expected.at(first_key).c_str(), first_what.c_str(), static_cast<int>(owner),
                owner_alive ? "alive" : "dead",
                round.last_owner_kill == Clock::time_point{}
                    ? -1.0
                    : Seconds(opened_at - round.last_owner_kill) * 1000,
                counters_zero ? "zero (it read the files, not the owner)" : "an owner's");
  violation_lines_.push_back(std::string("  VIOLATION: ") + text);
  // The same keys through a fresh reader: a stale reader, or results really lost?
  std::this_thread::sleep_for(milliseconds(200));
  bool again_zero = false;
  const auto again = read(&again_zero);
  if (again) {
    int still = 0;
    for (const auto& [key, what] : *wrong) still += again->contains(key) ? 1 : 0;
    violation_lines_.push_back("    a fresh reader 200 ms later reads " + std::to_string(still) +
                               " of them wrong (counters " + (again_zero ? "zero" : "an owner's") +
                               ")");
  }
}

int Supervisor::RunRound(int number) {
  Round round;
  round.number = number;
  char name[32];
  std::snprintf(name, sizeof(name), "round-%04d", number);
  const std::string prefix = s_.dir + "/" + name;
  round.keys_path = prefix + ".keys";
  round.run_log = prefix + ".runs";
  round.ack_log = prefix + ".acks";
  round_violations_ = 0;
  printed_violations_ = 0;
  violation_lines_.clear();

  // The keys: new ones, and some acknowledged in earlier rounds (their retries are replays).
  std::vector<std::string> keys;
  for (int i = 0; i < s_.keys; ++i) {
    char key[48];
    std::snprintf(key, sizeof(key), "r%04d-k%05d", number, i);
    keys.push_back(key);
    keys_[key];
  }
  const std::size_t reuse = std::min(acked_pool_.size(), static_cast<std::size_t>(s_.keys / 4));
  std::vector<std::string> reused;
  std::sample(acked_pool_.begin(), acked_pool_.end(), std::back_inserter(reused), reuse, random_);
  keys.insert(keys.end(), reused.begin(), reused.end());
  {
    std::string text;
    for (const auto& key : keys) text += key + "\n";
    std::ofstream(round.keys_path) << text;
  }
  t_.new_keys += s_.keys;
  t_.reused_keys += static_cast<long>(reused.size());

  const auto start = Clock::now();
  for (int i = 0; i < s_.workers; ++i) round.live.push_back(Spawn(round));

  // The kills: a random number, at random moments, of random workers and of the owner.
  const int kills = 1 + static_cast<int>(random_() % static_cast<uint64_t>(s_.max_kills));
  const bool live_check = static_cast<int>(random_() % 100) < s_.live_check_percent;
  const int live_check_after = static_cast<int>(random_() % static_cast<uint64_t>(kills));
  for (int k = 0; k < kills && !round.live.empty() && !interrupted; ++k) {
    const auto at = Clock::now() + milliseconds(5 + random_() % 150);
    while (Clock::now() < at && !round.live.empty()) {
      WatchOwner(round);
      Reap(round, false);
      std::this_thread::sleep_for(milliseconds(2));
    }
    if (round.live.empty()) break;
    const pid_t owner = OwnerPid(store_);
    const bool owner_alive =
        std::find(round.live.begin(), round.live.end(), owner) != round.live.end();
    if (owner_alive && random_() % 5 < 2) {
      Kill(round, owner, true);
    } else {
      Kill(round, round.live[random_() % round.live.size()], false);
    }
    // A replacement joins, at once or a moment later.
    if (random_() % 2 == 0) std::this_thread::sleep_for(milliseconds(random_() % 50));
    round.live.push_back(Spawn(round));
    if (live_check && k == live_check_after) LiveCheck(round);
  }

  // The survivors finish the round's keys.
  const auto stall = Clock::now() + std::chrono::minutes(3);
  while (!round.live.empty() && Clock::now() < stall && !interrupted) {
    WatchOwner(round);
    Reap(round, false);
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (!round.live.empty()) {
    if (!interrupted) {
      Violation("the round's workers did not finish within 3 minutes of the last kill");
    }
    for (pid_t pid : round.live) ::kill(pid, SIGKILL);
    Reap(round, true);
  }
  if (interrupted) return -1;
  if (round.killed_owner != 0) {
    // The killed owner's successor never showed up before the round ended (possible when the
    // others had finished); not counted as a failover.
    round.killed_owner = 0;
  }

  long verified = 0;
  Verify(round, &verified);
  t_.rounds++;
  t_.worker_kills += round.worker_kills;
  t_.owner_kills += round.owner_kills;
  t_.failovers += round.failovers;
  t_.owner_changes += round.owner_changes;

  // Retries the workers logged this round.
  int retries = 0;
  {
    std::ifstream log(log_path_, std::ios::binary);
    log.seekg(static_cast<std::streamoff>(log_offset_));
    std::string line;
    while (std::getline(log, line)) {
      log_offset_ += line.size() + 1;
      if (line.find("] retry ") != std::string::npos) ++retries;
    }
  }
  t_.retries += retries;

  std::printf(
      "round %4d  keys %zu+%zu  runs %d  dups %d  kills %dw+%do  failovers %d  acks %d  "
      "verified %ld  retries %d  violations %d  %.1f s\n",
      number, keys.size() - reused.size(), reused.size(), round.runs, round.duplicates,
      round.worker_kills, round.owner_kills, round.failovers, round.acks, verified, retries,
      round_violations_, Seconds(Clock::now() - start));
  for (const auto& line : violation_lines_) std::printf("%s\n", line.c_str());
  if (printed_violations_ > 20) std::printf("  ... and %d more\n", printed_violations_ - 20);
  std::fflush(stdout);

  if (round_violations_ == 0 && !s_.keep) {  // a failing round's logs stay for a post-mortem
    std::remove(round.keys_path.c_str());
    std::remove(round.run_log.c_str());
    std::remove(round.ack_log.c_str());
  }
  return round_violations_;
}

// Reads the round's logs into the history and checks the whole store against it. Returns the
// number of runs logged this round.
int Supervisor::Verify(Round& round, long* verified) {
  int partial = 0;
  const auto runs = ReadLines(round.run_log, &partial);
  const auto acks = ReadLines(round.ack_log, &partial);
  t_.partial_lines += partial;

  std::map<pid_t, std::string> last_run;  // per process, the key its function ran last
  for (const std::string& line : runs) {
    const auto w = Split(line);
    if (w.size() != 5) {
      Violation("malformed run log line '" + line + "'");
      continue;
    }
    auto found = keys_.find(w[0]);
    if (found == keys_.end()) {
      Violation("run of a key the soak never used: '" + line + "'");
      continue;
    }
    KeyState& key = found->second;
    ++round.runs;
    if (++key.runs > 1) {
      ++t_.duplicates;
      ++round.duplicates;
    }
    key.produced.insert("v-" + w[1] + "-" + w[2]);
    last_run[static_cast<pid_t>(std::stol(w[1]))] = w[0];
    ++t_.executions;
    if (w[3] == "1") ++t_.takeovers;
  }
  // A killed process may have had one key in flight: the last one its function ran (or none).
  for (pid_t pid : round.killed) {
    auto last = last_run.find(pid);
    if (last != last_run.end()) ++keys_[last->second].inflight_kills;
  }

  std::set<std::string> acked_this_round;
  for (const std::string& line : acks) {
    const auto w = Split(line);
    if (w.size() != 4) {
      Violation("malformed ack log line '" + line + "'");
      continue;
    }
    auto found = keys_.find(w[0]);
    if (found == keys_.end()) {
      Violation("ack of a key the soak never used: '" + line + "'");
      continue;
    }
    ++t_.acks;
    ++round.acks;
    if (w[3] == "R") ++t_.replays;
    KeyState& key = found->second;
    if (key.acked.empty()) {
      key.acked = w[1];
      acked_pool_.push_back(w[0]);
    } else if (key.acked != w[1]) {
      Violation("key " + w[0] + " was acknowledged with two results: " + key.acked + " and " +
                w[1] + " (pid " + w[2] + ")");
    }
    acked_this_round.insert(w[0]);
  }

  // The store, read by a read-only handle now that no worker runs (it reads the files).
  idem::Options options;
  options.read_only = true;
  auto reader = idem::Store::Open(store_, options);
  if (!reader.ok()) {
    Violation("cannot open the store read-only: " + reader.status().ToString());
    return static_cast<int>(runs.size());
  }
  std::unordered_map<std::string, idem::Record> stored;
  const auto scanned = (*reader)->Scan({}, [&](const idem::Record& record) {
    stored.emplace(record.key, record);
    return true;
  });
  if (!scanned.ok()) {
    Violation("scan failed: " + scanned.ToString());
    return static_cast<int>(runs.size());
  }
  for (const auto& [key, record] : stored) {
    if (!keys_.contains(key)) Violation("the store holds a key the soak never used: " + key);
  }
  // Every key of every round so far: all rounds ran to the end, so each must be done.
  for (auto& [name, key] : keys_) {
    if (key.reported) continue;
    const int before = round_violations_;
    Check(name, key, stored, round, verified);
    if (round_violations_ != before) key.reported = true;
  }
  // Every key of this round was acknowledged by the workers that finished it.
  std::ifstream keys_file(round.keys_path);
  std::string name;
  while (std::getline(keys_file, name)) {
    if (!acked_this_round.contains(name)) {
      Violation("key " + name + " was never acknowledged in its round");
    }
  }
  return static_cast<int>(runs.size());
}

// One key of the history against the store.
void Supervisor::Check(const std::string& name, const KeyState& key,
                       const std::unordered_map<std::string, idem::Record>& stored,
                       const Round& round, long* verified) {
  {
    const auto found = stored.find(name);
    if (found == stored.end()) {
      Violation("key " + name + " is missing from the store" +
                (key.acked.empty() ? "" : " (acknowledged " + key.acked + ")"));
      return;
    }
    const idem::Record& record = found->second;
    if (record.state != idem::State::kDone) {
      Violation("key " + name + " is " + std::string(idem::DisplayState(record)) +
                ", not done, after its round ended");
      return;
    }
    if (!key.acked.empty()) {
      if (record.result != key.acked) {
        Violation("key " + name + " stores '" + record.result + "' but '" + key.acked +
                  "' was acknowledged");
        return;
      }
      ++*verified;
      ++t_.verified;
    }
    if (!key.produced.contains(record.result)) {
      Violation("key " + name + " stores '" + record.result + "', which no logged run returned");
    }
    if (!key.acked.empty() && key.runs == 0) {
      Violation("key " + name + " was acknowledged but never ran");
    }
    if (key.runs > 1 + key.inflight_kills) {
      Violation("key " + name + " ran " + std::to_string(key.runs) + " times with " +
                std::to_string(key.inflight_kills) + " killed attempts that may have had it " +
                "in flight (round " + std::to_string(round.number) + " killed " +
                std::to_string(round.killed.size()) + ")");
    }
  }
}

void Supervisor::PrintSummary(Clock::duration elapsed) {
  std::sort(t_.failover_ms.begin(), t_.failover_ms.end());
  auto at = [&](double q) {
    if (t_.failover_ms.empty()) return 0.0;
    return t_.failover_ms[static_cast<std::size_t>(q * (t_.failover_ms.size() - 1))];
  };
  std::printf(
      "\nidem soak: %.1f minutes, %d workers, %d new keys a round, lease %d ms%s, seed %" PRIu64
      "\n",
      Seconds(elapsed) / 60, s_.workers, s_.keys, s_.lease_ms,
      s_.dead_holders ? "" : " (no dead-holder takeover)", s_.seed);
  std::printf("  rounds                 %d\n", t_.rounds);
  std::printf("  keys                   %ld new, %ld reused\n", t_.new_keys, t_.reused_keys);
  std::printf("  executions             %ld (%ld took over a dead or expired attempt)\n",
              t_.executions, t_.takeovers);
  std::printf("  duplicates             %ld\n", t_.duplicates);
  std::printf("  kills                  %ld (workers %ld, owners %ld)\n",
              t_.worker_kills + t_.owner_kills, t_.worker_kills, t_.owner_kills);
  std::printf(
      "  failovers observed     %ld (new owner after median %.0f ms, max %.0f ms); "
      "owner changes %ld\n",
      t_.failovers, at(0.5), at(1.0), t_.owner_changes);
  std::printf("  acknowledgements       %ld (%ld replays), %ld worker retries\n", t_.acks,
              t_.replays, t_.retries);
  std::printf(
      "  acknowledged results   %zu keys, all re-verified after every round (%ld checks); "
      "%ld checked during %ld live checks (%ld errors)\n",
      acked_pool_.size(), t_.verified, t_.live_verified, t_.live_checks, t_.live_errors);
  if (t_.partial_lines > 0) {
    std::printf("  partial log lines      %ld (left by killed workers)\n", t_.partial_lines);
  }
  std::printf("  violations             %ld", t_.violations);
  if (t_.live_violations > 0) {
    std::printf(" (%ld of them stale reads in live checks, %ld after rounds)", t_.live_violations,
                t_.violations - t_.live_violations);
  }
  std::printf("\n");
  std::fflush(stdout);
}

int Supervisor::Main() {
  if (!Setup()) return 2;
  std::printf(
      "idem soak: %.1f minutes, %d workers, %d new keys a round, up to %d kills a round, "
      "lease %d ms, seed %" PRIu64 "\n  store %s, worker log %s\n",
      s_.minutes, s_.workers, s_.keys, s_.max_kills, s_.lease_ms, s_.seed, store_.c_str(),
      log_path_.c_str());
  if (s_.sabotage) std::printf("  --sabotage: workers misbehave on purpose, violations expected\n");
  std::fflush(stdout);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(s_.minutes * 60));
  for (int number = 1; Clock::now() < end && !interrupted; ++number) {
    if (RunRound(number) < 0) break;
  }
  PrintSummary(Clock::now() - start);
  if (interrupted) std::printf("  (interrupted)\n");
  const bool clean = t_.violations == 0;
  if (clean && s_.remove_dir && !s_.keep) {
    std::error_code ec;
    std::filesystem::remove_all(s_.dir, ec);
  } else {
    std::printf("  files in %s\n", s_.dir.c_str());
  }
  return clean ? 0 : 1;
}

int Usage(FILE* out = stderr, int code = 2) {
  std::fprintf(out,
               "usage: idem_soak [--minutes M] [--workers N] [--keys K] [--dir DIR] "
               "[--max-kills N] [--lease-ms MS] [--no-dead-holders] [--live-checks PERCENT] "
               "[--seed S] [--keep] [--sabotage]\n"
               "(the options are described at the top of tools/soak/soak.cc and in "
               "scripts/soak.sh --help)\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--worker") {
    if (args.size() != 8) return Usage();
    return WorkerMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  Settings s;
  s.seed = std::random_device()();
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
        return args[++i];
      };
      if (a == "--minutes") {
        s.minutes = std::stod(value());
      } else if (a == "--workers") {
        s.workers = std::stoi(value());
      } else if (a == "--keys") {
        s.keys = std::stoi(value());
      } else if (a == "--dir") {
        s.dir = value();
      } else if (a == "--max-kills") {
        s.max_kills = std::stoi(value());
      } else if (a == "--lease-ms") {
        s.lease_ms = std::stoi(value());
      } else if (a == "--seed") {
        s.seed = std::stoull(value());
      } else if (a == "--live-checks") {
        s.live_check_percent = std::stoi(value());
      } else if (a == "--sabotage") {
        s.sabotage = true;
        ::setenv("IDEM_SOAK_SABOTAGE", "1", 1);  // inherited by the workers
      } else if (a == "--no-dead-holders") {
        s.dead_holders = false;
      } else if (a == "--keep") {
        s.keep = true;
      } else if (a == "-h" || a == "--help") {
        return Usage(stdout, 0);
      } else {
        std::fprintf(stderr, "idem_soak: unknown argument %s\n", a.c_str());
        return Usage();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "idem_soak: bad argument: %s\n", e.what());
    return Usage();
  }
  if (s.minutes <= 0 || s.workers < 2 || s.keys < 1 || s.max_kills < 1 || s.lease_ms < 100) {
    std::fprintf(stderr,
                 "idem_soak: need minutes > 0, workers >= 2, keys >= 1, max-kills >= 1, "
                 "lease-ms >= 100\n");
    return 2;
  }
  if (s.dir.empty()) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/idem_soak_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return 2;
    }
    s.dir = pattern;
    s.remove_dir = true;
  }
  struct sigaction action {};
  action.sa_handler = [](int) { interrupted = true; };
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  return Supervisor(s).Main();
}
