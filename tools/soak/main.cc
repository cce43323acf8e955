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
//
// The parts: main.cc (the arguments), worker.cc (the worker mode), supervisor.cc (the rounds,
// kills and totals), verify.cc (the checks after a round), live_check.cc (the checks while the
// workers run), files.cc (the logs and owner.lock).

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "soak.h"
#include "supervisor.h"

namespace idem::soak {
namespace {

int Usage(FILE* out = stderr, int code = 2) {
  fmt::print(out,
             "usage: idem_soak [--minutes M] [--workers N] [--keys K] [--dir DIR] "
             "[--max-kills N] [--lease-ms MS] [--no-dead-holders] [--live-checks PERCENT] "
             "[--seed S] [--keep] [--sabotage]\n"
             "(the options are described at the top of tools/soak/main.cc and in "
             "scripts/soak.sh --help)\n");
  return code;
}

// Reads the supervisor's arguments into `s`. Returns the exit code when the program must stop
// (--help, a bad argument), nullopt when it may run. Throws std::exception on a bad number.
std::optional<int> ParseArguments(const std::vector<std::string>& args, Settings& s) {
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
      fmt::print(stderr, "idem_soak: unknown argument {}\n", a);
      return Usage();
    }
  }
  return std::nullopt;
}

// A fresh directory under $TMPDIR (or /tmp) when none was given, removed after a clean run.
bool MakeDirectory(Settings& s) {
  if (!s.dir.empty()) return true;
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/idem_soak_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return false;
  }
  s.dir = pattern;
  s.remove_dir = true;
  return true;
}

int SupervisorMain(const std::vector<std::string>& args) {
  Settings s;
  s.seed = std::random_device()();
  try {
    if (const std::optional<int> code = ParseArguments(args, s)) return *code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "idem_soak: bad argument: {}\n", e.what());
    return Usage();
  }
  if (s.minutes <= 0 || s.workers < 2 || s.keys < 1 || s.max_kills < 1 || s.lease_ms < 100) {
    fmt::print(stderr,
               "idem_soak: need minutes > 0, workers >= 2, keys >= 1, max-kills >= 1, "
               "lease-ms >= 100\n");
    return 2;
  }
  if (!MakeDirectory(s)) return 2;
  struct sigaction action {};
  action.sa_handler = [](int) { interrupted = true; };
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  return Supervisor(s).Main();
}

}  // namespace
}  // namespace idem::soak

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "--worker") {
    if (args.size() != 8) return idem::soak::Usage();
    return idem::soak::WorkerMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  return idem::soak::SupervisorMain(args);
}
