// The benchmark's driver: closed-loop runs on N threads with per-operation latencies, the
// request ids and results that every system is given, and the results file format.
//
// A small driver of our own rather than Google Benchmark: every measurement here is a fixed
// wall-clock window over N threads that each hold their own connection (a SQLite handle, a Redis
// socket, a client of another process's store), that count outcomes (in-progress answers,
// double claims), and that report p50/p99 per operation; Google Benchmark's model (an iteration
// count it picks, one timing per iteration batch, fixtures rebuilt per thread count) fits none of
// it, and its output would still need this post-processing.

#ifndef IDEM_BENCH_HARNESS_H_
#define IDEM_BENCH_HARNESS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::bench {

// 36-character request ids shaped like idem::NewRequestId (UUIDv7 text: milliseconds first,
// so ids made later sort later), but made without a system call or a random draw per id, so
// that making the key costs the same few nanoseconds for every system measured. Each generator
// is unique per (process, instance); not thread-safe: one per thread.
class KeyGenerator {
 public:
  KeyGenerator();
  // The next id; the view stays valid until the next call.
  std::string_view Next();

 private:
  std::string text_;
  uint64_t high_;     // 48-bit milliseconds, version nibble, 12 bits of instance
  uint64_t counter_;  // variant bits, 30 bits of instance, then the counter
};

// The ~100-byte result every system stores.
std::string_view ResultPayload();

// What one closed-loop measurement produced.
struct Measurement {
  uint64_t operations = 0;
  double seconds = 0;
  double p50_us = 0;
  double p99_us = 0;
  std::map<std::string, uint64_t> counts;  // per-outcome counters ("in_progress", ...)
  double ops_per_second() const { return seconds > 0 ? operations / seconds : 0; }
};

// One thread's loop body. Op() does one operation and returns its status; a non-OK status
// stops the whole measurement, which then fails with it.
class Worker {
 public:
  virtual ~Worker() = default;
  virtual Status Op() = 0;
  // Adds this worker's outcome counters into `counts` after the run.
  virtual void AddCounts(std::map<std::string, uint64_t>& /*counts*/) const {}
};

// Runs `threads` workers made by `make_worker(thread_index)` (called on the worker's own
// thread, outside the timed window) for `seconds`, each calling Op() in a loop.
Result<Measurement> RunClosedLoop(
    int threads, double seconds,
    const std::function<Result<std::unique_ptr<Worker>>(int thread)>& make_worker);

// Of one pair's measurements taken in rounds, the round of median throughput (the slower of
// the two middle ones for an even count), its counts joined by `rounds` and the lowest and
// highest throughput of the rounds (`ops_low`, `ops_high`, operations per second).
Measurement MedianRound(std::vector<Measurement> rounds);

// Runs fn(thread) on `threads` threads and returns the first error.
Status RunOnThreads(int threads, const std::function<Status(int thread)>& fn);

// Appends one result row to the results file (tab-separated, read by bench/report.py):
// workload, system, threads, ops/s, p50 us, p99 us, operations, seconds, extra key=value pairs.
class ResultsFile {
 public:
  explicit ResultsFile(std::string path) : path_(std::move(path)) {}
  void Add(std::string_view workload, std::string_view system, int threads, const Measurement& m);
  // Prints a measurement to stdout only, as Add does, followed by `note`.
  static void Print(std::string_view workload, std::string_view system, int threads,
                    const Measurement& m, std::string_view note = {});
  // A single figure (a time, a size): `value` in `unit`.
  void AddFigure(std::string_view workload, std::string_view system, std::string_view name,
                 double value, std::string_view unit);

 private:
  void Append(const std::string& line);
  std::string path_;
};

// Peak and current resident set size of this process, in bytes (/proc/self/status).
struct Memory {
  uint64_t peak_rss = 0;
  uint64_t rss = 0;
};
Memory ReadMemory();

// What a workload writes, two ways:
//   handed_to_os   the bytes this process passed to write(2) and its kin (/proc/self/io wchar):
//                  records, logs, table files and the zeros written ahead of logs, as asked;
//   device         the bytes the disk under `directory` wrote (/sys/dev/block/M:N/stat, sectors
//                  written), after syncfs(2): what wears a flash device, page rewrites after each
//                  sync and the file system's journal included, and so is any other process's
//                  writing to that disk meanwhile. (/proc/self/io's write_bytes is not used: with
//                  large folios the kernel charges a whole folio, up to 1 MiB, for a 100-byte
//                  write into it, while the disk wrote a few kilobytes.)
struct BytesWritten {
  uint64_t handed_to_os = 0;
  uint64_t device = 0;
};
BytesWritten ReadBytesWritten(const std::string& directory);

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start);

// CPU time (user + system) this process has used so far, all threads, in seconds.
double ProcessCpuSeconds();
// Returns once the process has used less than 5% of one core for two seconds in a row (its
// background threads, RocksDB's compactions, have gone quiet), or after `limit`. Returns the
// seconds waited.
double WaitUntilQuiet(std::chrono::seconds limit);

}  // namespace idem::bench

#endif  // IDEM_BENCH_HARNESS_H_
