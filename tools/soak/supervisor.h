// idem_soak's supervisor: runs the rounds (supervisor.cc), checks the store against the history
// the workers logged after each round (verify.cc) and, in some rounds, while they run
// (live_check.cc).

#ifndef IDEM_TOOLS_SOAK_SUPERVISOR_H_
#define IDEM_TOOLS_SOAK_SUPERVISOR_H_

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "idem/idem.h"
#include "soak.h"

namespace idem::soak {

// What the history says of one key, over all rounds.
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

class Supervisor {
 public:
  explicit Supervisor(Settings settings)
      : s_(std::move(settings)), random_(s_.seed), store_(s_.dir + "/store") {}

  // Runs rounds until the time is up or a signal came; prints the totals. Returns the exit code.
  int Main();

 private:
  // The state of the round being run.
  struct Round {
    int number = 0;
    std::string keys_path, run_log, ack_log;
    std::size_t new_keys = 0, reused_keys = 0;
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
  // What a reader answered for the acknowledged results (live_check.cc).
  struct ReadBack {
    std::map<std::string, std::string> wrong;  // key -> what was read
    bool counters_zero = false;                // as a reader of the files has them, not an owner
  };

  // supervisor.cc: the rounds and the processes.
  bool Setup();
  int RunRound(int number);
  Round StartRound(int number);
  void KillAtRandom(Round& round);
  void AwaitWorkers(Round& round);
  void EndRound(const Round& round, long verified, Clock::time_point start);
  int CountRetries();
  pid_t Spawn(const Round& round);
  void Reap(Round& round, bool block_all);
  void WatchOwner(Round& round);
  void Kill(Round& round, pid_t pid, bool owner);
  void PrintSummary(Clock::duration elapsed);

  // verify.cc: the history against the store, after a round.
  void Verify(Round& round, long* verified);
  KeyState* LoggedKey(std::string_view log, const std::string& line, std::size_t words,
                      std::vector<std::string>& w);
  void ReadRuns(Round& round, const std::vector<std::string>& runs);
  std::set<std::string> ReadAcks(Round& round, const std::vector<std::string>& acks);
  std::optional<std::unordered_map<std::string, Record>> ReadStore();
  void CheckRoundAcknowledged(const Round& round, const std::set<std::string>& acked);
  void Check(const std::string& name, const KeyState& key,
             const std::unordered_map<std::string, Record>& stored, const Round& round,
             long* verified);
  void Violation(const std::string& text, bool print = true);

  // live_check.cc: acknowledged results read while the workers run.
  void LiveCheck(const Round& round);
  std::optional<ReadBack> ReadAcknowledged(const std::map<std::string, std::string>& expected);
  std::string LiveSummary(const std::map<std::string, std::string>& expected, const ReadBack& read);

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

}  // namespace idem::soak

#endif  // IDEM_TOOLS_SOAK_SUPERVISOR_H_
