// What the parts of idem_soak share (main.cc describes the soak): its settings, the files its
// processes write and read, and the worker mode.

#ifndef IDEM_TOOLS_SOAK_SOAK_H_
#define IDEM_TOOLS_SOAK_SOAK_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace idem::soak {

using Clock = std::chrono::steady_clock;

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

// Set by SIGINT and SIGTERM: the supervisor ends the round and prints the totals.
extern std::atomic<bool> interrupted;

// ---- Files (files.cc) ---------------------------------------------------------------------------

// Appends `line` with one write(2) on an O_APPEND descriptor, so that lines of racing processes
// never interleave.
bool Append(const std::string& path, const std::string& line);

// The complete lines of a file (a last line without its newline, left by a killed writer, is
// dropped and counted in `partial`).
std::vector<std::string> ReadLines(const std::string& path, int* partial = nullptr);

// The words of a log line.
std::vector<std::string> Split(const std::string& line);

// The pid written in STORE/owner.lock ("pid N"), or 0.
pid_t OwnerPid(const std::string& store);

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- Worker mode (worker.cc) ------------------------------------------------------------------

// `idem_soak --worker STORE KEYS RUNLOG ACKLOG LOG LEASE_MS DEAD_HOLDERS(1|0)`, given the seven
// arguments after --worker. Returns the process exit code.
int WorkerMain(const std::vector<std::string>& args);

}  // namespace idem::soak

#endif  // IDEM_TOOLS_SOAK_SOAK_H_
