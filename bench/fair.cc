// idem_fair_bench: how fairly conflicting Executes of two processes sharing a store directory are
// served (docs/semantics.md, "Conflicts and fairness"; docs/benchmarks.md, "Fair conflicts").
//
//   idem_fair_bench DIRECTORY [SECONDS]
//
// Makes two stores under DIRECTORY (which must not hold them yet), and on each runs for SECONDS
// (default 3) the owner of the store (this process) and a client (a child process reaching the
// store through the owner's socket):
//   1. hot key: one thread in each process increments one key in Execute after Execute; prints
//      each process's commits per second, and how many of its Executes gave up (kConflict after
//      Options::conflict_retries);
//   2. wide transaction: the client increments 40 keys in one Execute after another while one
//      thread in each process increments a single one of them; prints the wide transaction's
//      commits, runs of fn per commit, and how many gave up.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWideKeys = 40;

// What one process did: Executes committed, given up, and runs of fn.
struct Tally {
  long committed = 0;
  long gave_up = 0;
  long runs = 0;
};

// Adds 1 to each of `keys` of table "t" in one Execute; counts it in `tally`.
void IncrementAll(idem::Store& store, const std::string& request,
                  const std::vector<std::string>& keys, Tally& tally) {
  auto execution = store.Execute(request, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
    ++tally.runs;
    for (const std::string& key : keys) {
      IDEM_ASSIGN_OR_RETURN(idem::TableValue now, attempt.Read("t", key));
      IDEM_RETURN_IF_ERROR(
          attempt.Put("t", key, std::to_string(std::stoll(now.value.value_or("0")) + 1)));
    }
    return std::string("ok");
  });
  if (execution.ok()) {
    ++tally.committed;
  } else if (execution.status().code() == idem::Status::Code::kConflict) {
    ++tally.gave_up;
  } else {
    std::fprintf(stderr, "Execute failed: %s\n", execution.status().ToString().c_str());
    std::exit(1);
  }
}

// Increments keys from `keys` (one at a time, at random) until `stop`.
Tally SingleKeyWriter(idem::Store& store, const std::string& prefix,
                      const std::vector<std::string>& keys, Clock::time_point stop) {
  std::mt19937 random(std::random_device{}());
  Tally tally;
  for (long n = 0; Clock::now() < stop; ++n) {
    IncrementAll(store, prefix + std::to_string(n), {keys[random() % keys.size()]}, tally);
  }
  return tally;
}

// Runs `workload(store, is_owner, stop)` in this process (the owner) and in a child (the client)
// for `seconds` on a new store at `path`; returns the owner's and the client's tallies.
template <class Workload>
std::pair<Tally, Tally> InTwoProcesses(const std::string& path, int seconds, Workload workload) {
  int go[2];
  int result[2];
  if (pipe(go) != 0 || pipe(result) != 0) std::exit(1);
  // Forked before the store is opened here: the child inherits no store threads.
  const pid_t child = fork();
  if (child == 0) {
    Clock::time_point stop;
    if (read(go[0], &stop, sizeof stop) != sizeof stop) _exit(1);
    auto store = idem::Store::Open(path, idem::Options());
    if (!store.ok()) _exit(2);
    const Tally tally = workload(**store, false, stop);
    if (write(result[1], &tally, sizeof tally) != sizeof tally) _exit(3);
    _exit(0);
  }
  auto store = idem::Store::Open(path, idem::Options());
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  // The client opens meanwhile; both stop at one time on the machine's monotonic clock.
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(300);
  const Clock::time_point stop = start + std::chrono::seconds(seconds);
  if (write(go[1], &stop, sizeof stop) != sizeof stop) std::exit(1);
  std::this_thread::sleep_until(start);
  const Tally owner = workload(**store, true, stop);
  Tally client;
  if (read(result[0], &client, sizeof client) != sizeof client) std::exit(1);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::exit(1);
  return {owner, client};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY [SECONDS]\n", argv[0]);
    return 2;
  }
  const std::string directory = argv[1];
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 3;

  const auto [owner, client] = InTwoProcesses(
      directory + "/hot", seconds, [](idem::Store& store, bool is_owner, Clock::time_point stop) {
        return SingleKeyWriter(store, is_owner ? "owner-" : "client-", {"hot"}, stop);
      });
  std::printf("hot key, commits/s: owner %.0f, client %.0f (gave up: owner %ld, client %ld)\n",
              1.0 * owner.committed / seconds, 1.0 * client.committed / seconds, owner.gave_up,
              client.gave_up);

  std::vector<std::string> keys;
  for (int i = 0; i < kWideKeys; ++i) keys.push_back("k" + std::to_string(i));
  const auto [singles, wide] = InTwoProcesses(
      directory + "/wide", seconds, [&](idem::Store& store, bool is_owner, Clock::time_point stop) {
        if (is_owner) return SingleKeyWriter(store, "owner-", keys, stop);
        // The client: a single-key writer beside the wide transactions.
        std::thread single([&] { SingleKeyWriter(store, "client-", keys, stop); });
        Tally tally;
        for (long n = 0; Clock::now() < stop; ++n) {
          IncrementAll(store, "wide-" + std::to_string(n), keys, tally);
        }
        single.join();
        return tally;
      });
  std::printf(
      "wide transaction (%d keys, in the client): %ld committed, %.1f runs of fn per commit, %ld "
      "gave up; owner's single-key writer: %.0f commits/s\n",
      kWideKeys, wide.committed, wide.committed > 0 ? 1.0 * wide.runs / wide.committed : 0.0,
      wide.gave_up, 1.0 * singles.committed / seconds);
  return 0;
}
