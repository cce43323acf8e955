// idem_soak's rounds: the worker processes, the kills, the failovers seen in owner.lock, and the
// lines printed for a round and for the run.

#include "supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace idem::soak {

using std::chrono::milliseconds;

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
    fmt::print(stderr, "idem_soak: cannot create {}: {}\n", s_.dir, ec.message());
    return false;
  }
  if (std::filesystem::exists(store_)) {
    fmt::print(stderr, "idem_soak: {} exists already: give a fresh --dir\n", store_);
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
    if (got != *it) {
      ++it;
      continue;
    }
    if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && !interrupted) {
      ++round.failed_workers;
      Violation(fmt::format("worker {} ended with {} without being killed (see {})", *it,
                            WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                              : fmt::format("signal {}", WTERMSIG(status)),
                            log_path_));
    }
    it = round.live.erase(it);
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

// The round's files and keys: new ones, and some acknowledged in earlier rounds (their retries
// are replays).
Supervisor::Round Supervisor::StartRound(int number) {
  Round round;
  round.number = number;
  const std::string prefix = fmt::format("{}/round-{:04}", s_.dir, number);
  round.keys_path = prefix + ".keys";
  round.run_log = prefix + ".runs";
  round.ack_log = prefix + ".acks";
  round_violations_ = 0;
  printed_violations_ = 0;
  violation_lines_.clear();

  std::vector<std::string> keys;
  for (int i = 0; i < s_.keys; ++i) {
    keys.push_back(fmt::format("r{:04}-k{:05}", number, i));
    keys_[keys.back()];
  }
  const std::size_t reuse = std::min(acked_pool_.size(), static_cast<std::size_t>(s_.keys / 4));
  std::vector<std::string> reused;
  std::sample(acked_pool_.begin(), acked_pool_.end(), std::back_inserter(reused), reuse, random_);
  keys.insert(keys.end(), reused.begin(), reused.end());
  std::string text;
  for (const auto& key : keys) text += key + "\n";
  std::ofstream(round.keys_path) << text;
  round.new_keys = static_cast<std::size_t>(s_.keys);
  round.reused_keys = reused.size();
  t_.new_keys += s_.keys;
  t_.reused_keys += static_cast<long>(reused.size());
  return round;
}

// A random number of kills, at random moments, of random workers and of the owner, each
// followed by a replacement; one of them, in some rounds, by a live check.
void Supervisor::KillAtRandom(Round& round) {
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
}

// The survivors finish the round's keys; after 3 minutes they are killed, and that is a
// violation. A killed owner whose successor never showed up before the end (possible when the
// others had finished) is not counted as a failover.
void Supervisor::AwaitWorkers(Round& round) {
  const auto stall = Clock::now() + std::chrono::minutes(3);
  while (!round.live.empty() && Clock::now() < stall && !interrupted) {
    WatchOwner(round);
    Reap(round, false);
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (round.live.empty()) return;
  if (!interrupted) {
    Violation("the round's workers did not finish within 3 minutes of the last kill");
  }
  for (pid_t pid : round.live) ::kill(pid, SIGKILL);
  Reap(round, true);
}

// The retries the workers logged since the last call.
int Supervisor::CountRetries() {
  int retries = 0;
  std::ifstream log(log_path_, std::ios::binary);
  log.seekg(static_cast<std::streamoff>(log_offset_));
  std::string line;
  while (std::getline(log, line)) {
    log_offset_ += line.size() + 1;
    if (line.find("] retry ") != std::string::npos) ++retries;
  }
  return retries;
}

// Adds the round to the totals, prints its line and violations, and removes its logs when it
// found nothing (a failing round's logs stay for a post-mortem).
void Supervisor::EndRound(const Round& round, long verified, Clock::time_point start) {
  t_.rounds++;
  t_.worker_kills += round.worker_kills;
  t_.owner_kills += round.owner_kills;
  t_.failovers += round.failovers;
  t_.owner_changes += round.owner_changes;
  const int retries = CountRetries();
  t_.retries += retries;

  fmt::print(
      "round {:4}  keys {}+{}  runs {}  dups {}  kills {}w+{}o  failovers {}  acks {}  "
      "verified {}  retries {}  violations {}  {:.1f} s\n",
      round.number, round.new_keys, round.reused_keys, round.runs, round.duplicates,
      round.worker_kills, round.owner_kills, round.failovers, round.acks, verified, retries,
      round_violations_, Seconds(Clock::now() - start));
  for (const auto& line : violation_lines_) fmt::print("{}\n", line);
  if (printed_violations_ > 20) fmt::print("  ... and {} more\n", printed_violations_ - 20);
  std::fflush(stdout);

  if (round_violations_ == 0 && !s_.keep) {
    std::remove(round.keys_path.c_str());
    std::remove(round.run_log.c_str());
    std::remove(round.ack_log.c_str());
  }
}

// Returns the round's violations, or -1 when interrupted.
int Supervisor::RunRound(int number) {
  Round round = StartRound(number);
  const auto start = Clock::now();
  for (int i = 0; i < s_.workers; ++i) round.live.push_back(Spawn(round));
  KillAtRandom(round);
  AwaitWorkers(round);
  if (interrupted) return -1;
  long verified = 0;
  Verify(round, &verified);
  EndRound(round, verified, start);
  return round_violations_;
}

void Supervisor::PrintSummary(Clock::duration elapsed) {
  std::sort(t_.failover_ms.begin(), t_.failover_ms.end());
  auto at = [&](double q) {
    if (t_.failover_ms.empty()) return 0.0;
    return t_.failover_ms[static_cast<std::size_t>(q * (t_.failover_ms.size() - 1))];
  };
  const auto line = [](std::string_view name, const std::string& value) {
    fmt::print("  {:<23}{}\n", name, value);
  };
  fmt::print(
      "\nidem soak: {:.1f} minutes, {} workers, {} new keys a round, lease {} ms{}, seed {}\n",
      Seconds(elapsed) / 60, s_.workers, s_.keys, s_.lease_ms,
      s_.dead_holders ? "" : " (no dead-holder takeover)", s_.seed);
  line("rounds", fmt::format("{}", t_.rounds));
  line("keys", fmt::format("{} new, {} reused", t_.new_keys, t_.reused_keys));
  line("executions",
       fmt::format("{} ({} took over a dead or expired attempt)", t_.executions, t_.takeovers));
  line("duplicates", fmt::format("{}", t_.duplicates));
  line("kills", fmt::format("{} (workers {}, owners {})", t_.worker_kills + t_.owner_kills,
                            t_.worker_kills, t_.owner_kills));
  line("failovers observed",
       fmt::format("{} (new owner after median {:.0f} ms, max {:.0f} ms); owner changes {}",
                   t_.failovers, at(0.5), at(1.0), t_.owner_changes));
  line("acknowledgements",
       fmt::format("{} ({} replays), {} worker retries", t_.acks, t_.replays, t_.retries));
  line("acknowledged results",
       fmt::format("{} keys, all re-verified after every round ({} checks); {} checked during {} "
                   "live checks ({} errors)",
                   acked_pool_.size(), t_.verified, t_.live_verified, t_.live_checks,
                   t_.live_errors));
  if (t_.partial_lines > 0) {
    line("partial log lines", fmt::format("{} (left by killed workers)", t_.partial_lines));
  }
  std::string violations = fmt::format("{}", t_.violations);
  if (t_.live_violations > 0) {
    violations += fmt::format(" ({} of them stale reads in live checks, {} after rounds)",
                              t_.live_violations, t_.violations - t_.live_violations);
  }
  line("violations", violations);
  std::fflush(stdout);
}

int Supervisor::Main() {
  if (!Setup()) return 2;
  fmt::print(
      "idem soak: {:.1f} minutes, {} workers, {} new keys a round, up to {} kills a round, "
      "lease {} ms, seed {}\n  store {}, worker log {}\n",
      s_.minutes, s_.workers, s_.keys, s_.max_kills, s_.lease_ms, s_.seed, store_, log_path_);
  if (s_.sabotage) fmt::print("  --sabotage: workers misbehave on purpose, violations expected\n");
  std::fflush(stdout);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(s_.minutes * 60));
  for (int number = 1; Clock::now() < end && !interrupted; ++number) {
    if (RunRound(number) < 0) break;
  }
  PrintSummary(Clock::now() - start);
  if (interrupted) fmt::print("  (interrupted)\n");
  const bool clean = t_.violations == 0;
  if (clean && s_.remove_dir && !s_.keep) {
    std::error_code ec;
    std::filesystem::remove_all(s_.dir, ec);
  } else {
    fmt::print("  files in {}\n", s_.dir);
  }
  return clean ? 0 : 1;
}

}  // namespace idem::soak
