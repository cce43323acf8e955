#include "harness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace idem::bench {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

void WriteHex(char* out, uint64_t value, int digits) {
  for (int i = digits - 1; i >= 0; --i) {
    out[i] = kHexDigits[value & 0xF];
    value >>= 4;
  }
}

double PercentileMicros(std::vector<uint64_t>& nanos, double fraction) {
  if (nanos.empty()) return 0;
  const std::size_t index =
      std::min(nanos.size() - 1, static_cast<std::size_t>(fraction * nanos.size()));
  std::nth_element(nanos.begin(), nanos.begin() + index, nanos.end());
  return nanos[index] / 1000.0;
}

}  // namespace

KeyGenerator::KeyGenerator() : text_(36, '-') {
  static std::atomic<uint64_t> instances{0};
  thread_local std::mt19937_64 random{std::random_device{}()};
  // 42 bits tell generators apart: 12 from a per-process sequence and 30 random (so that two
  // processes, or two runs, starting in the same millisecond still differ).
  const uint64_t instance = instances.fetch_add(1) & 0xFFF;
  const uint64_t millis =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  high_ = (millis << 16) | 0x7000 | instance;
  counter_ = (uint64_t{0x2} << 62) | ((random() & 0x3FFFFFFF) << 32);
}

std::string_view KeyGenerator::Next() {
  const uint64_t low = counter_++;
  // 8-4-4-4-12 hex digits: high_ fills the first 16, low the last 16.
  char* out = text_.data();
  WriteHex(out, high_ >> 32, 8);
  WriteHex(out + 9, (high_ >> 16) & 0xFFFF, 4);
  WriteHex(out + 14, high_ & 0xFFFF, 4);
  WriteHex(out + 19, low >> 48, 4);
  WriteHex(out + 24, low & 0xFFFFFFFFFFFF, 12);
  return text_;
}

std::string_view ResultPayload() {
  static const std::string payload =
      R"({"status":"captured","amount":1999,"currency":"EUR","charge":"ch_3PqL0a2eZvKYlo2C1x7Hn"})";
  return payload;
}

Result<Measurement> RunClosedLoop(
    int threads, double seconds,
    const std::function<Result<std::unique_ptr<Worker>>(int thread)>& make_worker) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  Status first_error;                      // guarded by mu
  std::map<std::string, uint64_t> counts;  // guarded by mu
  std::vector<std::vector<uint64_t>> latencies(threads);
  std::vector<std::unique_ptr<Worker>> workers(threads);
  std::barrier ready(threads + 1);
  std::barrier done(threads + 1);

  auto fail = [&](Status status) {
    std::lock_guard lock(mu);
    if (first_error.ok()) first_error = std::move(status);
    stop.store(true);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Result<std::unique_ptr<Worker>> made = make_worker(t);
      if (made.ok()) {
        workers[t] = std::move(made).value();
      } else {
        fail(made.status());
      }
      auto& mine = latencies[t];
      mine.reserve(1 << 16);
      ready.arrive_and_wait();
      if (workers[t]) {
        while (!stop.load(std::memory_order_relaxed)) {
          const auto start = Clock::now();
          Status status = workers[t]->Op();
          const auto end = Clock::now();
          if (!status.ok()) {
            fail(std::move(status));
            break;
          }
          mine.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
        }
      }
      if (workers[t]) {
        std::lock_guard lock(mu);
        workers[t]->AddCounts(counts);
      }
      workers[t].reset();  // closes its connection on the thread that used it
      done.arrive_and_wait();
    });
  }
  ready.arrive_and_wait();
  const auto start = Clock::now();
  while (!stop.load() && SecondsSince(start) < seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.store(true);
  done.arrive_and_wait();
  const double elapsed = SecondsSince(start);
  for (auto& thread : pool) thread.join();
  Measurement m;
  m.counts = std::move(counts);
  if (!first_error.ok()) return first_error;

  std::vector<uint64_t> all;
  for (auto& mine : latencies) all.insert(all.end(), mine.begin(), mine.end());
  m.operations = all.size();
  m.seconds = elapsed;
  m.p50_us = PercentileMicros(all, 0.50);
  m.p99_us = PercentileMicros(all, 0.99);
  return m;
}

Status RunOnThreads(int threads, const std::function<Status(int thread)>& fn) {
  std::mutex mu;
  Status first_error;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Status status = fn(t);
      std::lock_guard lock(mu);
      if (!status.ok() && first_error.ok()) first_error = std::move(status);
    });
  }
  for (auto& thread : pool) thread.join();
  return first_error;
}

void ResultsFile::Add(std::string_view workload, std::string_view system, int threads,
                      const Measurement& m) {
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << workload << '\t' << system << '\t' << threads
       << '\t' << m.ops_per_second() << '\t' << std::setprecision(2) << m.p50_us << '\t' << m.p99_us
       << '\t' << m.operations << '\t' << std::setprecision(3) << m.seconds << '\t';
  bool first = true;
  for (const auto& [name, count] : m.counts) {
    line << (first ? "" : ",") << name << '=' << count;
    first = false;
  }
  Append(line.str());
  Print(workload, system, threads, m);
}

void ResultsFile::Print(std::string_view workload, std::string_view system, int threads,
                        const Measurement& m, std::string_view note) {
  std::cout << std::left << std::setw(12) << workload << std::setw(16) << system << std::right
            << std::setw(4) << threads << " threads " << std::setw(10) << std::fixed
            << std::setprecision(0) << m.ops_per_second() << " ops/s   p50 " << std::setw(8)
            << std::setprecision(1) << m.p50_us << " us   p99 " << std::setw(8) << m.p99_us
            << " us";
  for (const auto& [name, count] : m.counts) std::cout << "  " << name << '=' << count;
  if (!note.empty()) std::cout << "  (" << note << ')';
  std::cout << std::endl;
}

Measurement MedianRound(std::vector<Measurement> rounds) {
  if (rounds.empty()) return {};
  std::sort(rounds.begin(), rounds.end(), [](const Measurement& a, const Measurement& b) {
    return a.ops_per_second() < b.ops_per_second();
  });
  Measurement median = rounds[(rounds.size() - 1) / 2];
  median.counts["rounds"] = rounds.size();
  median.counts["ops_low"] = static_cast<uint64_t>(rounds.front().ops_per_second());
  median.counts["ops_high"] = static_cast<uint64_t>(rounds.back().ops_per_second());
  return median;
}

void ResultsFile::AddFigure(std::string_view workload, std::string_view system,
                            std::string_view name, double value, std::string_view unit) {
  std::ostringstream line;
  line << std::setprecision(6) << workload << '\t' << system << "\tfigure\t" << name << '\t'
       << value << '\t' << unit;
  Append(line.str());
  std::cout << std::left << std::setw(12) << workload << std::setw(16) << system << name << " = "
            << std::defaultfloat << std::setprecision(6) << value << ' ' << unit << std::endl;
}

void ResultsFile::Append(const std::string& line) {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << line << '\n';
}

Memory ReadMemory() {
  std::ifstream status("/proc/self/status");
  std::string line;
  Memory memory;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string name;
    uint64_t kib = 0;
    fields >> name >> kib;
    if (name == "VmHWM:") memory.peak_rss = kib * 1024;
    if (name == "VmRSS:") memory.rss = kib * 1024;
  }
  return memory;
}

BytesWritten ReadBytesWritten(const std::string& directory) {
  BytesWritten written;
  {
    std::ifstream io("/proc/self/io");
    std::string name;
    uint64_t value = 0;
    while (io >> name >> value) {
      if (name == "wchar:") written.handed_to_os = value;
    }
  }
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return written;
  ::syncfs(fd);
  struct stat info {};
  const bool known = ::fstat(fd, &info) == 0;
  ::close(fd);
  if (!known) return written;
  std::ifstream stat("/sys/dev/block/" + std::to_string(major(info.st_dev)) + ":" +
                     std::to_string(minor(info.st_dev)) + "/stat");
  uint64_t fields[7] = {};
  for (uint64_t& field : fields) stat >> field;
  if (stat) written.device = fields[6] * 512;  // the 7th field: sectors written
  return written;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ProcessCpuSeconds() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces, so start after its closing ')'):
  // state is field 3, utime field 14, stime field 15.
  std::istringstream fields(text.substr(text.rfind(')') + 1));
  std::string field;
  double ticks = 0;
  for (int number = 3; number <= 15 && fields >> field; ++number) {
    if (number >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double WaitUntilQuiet(std::chrono::seconds limit) {
  const auto start = Clock::now();
  int quiet_seconds = 0;
  while (quiet_seconds < 2 && Clock::now() - start < limit) {
    const double before = ProcessCpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    quiet_seconds = ProcessCpuSeconds() - before < 0.05 ? quiet_seconds + 1 : 0;
  }
  return SecondsSince(start);
}

}  // namespace idem::bench
