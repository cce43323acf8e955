// Shared helpers for the idem tests: a unique temporary directory, a manual clock, and a few
// assertion macros for Status and Result.

#ifndef IDEM_TESTS_TEST_UTIL_H_
#define IDEM_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "backend.h"
#include "idem/idem.h"

namespace idem_test {

using namespace std::chrono_literals;

// A unique directory under /tmp (or $TMPDIR), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/idem_test_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << pattern << ") failed";
      std::abort();
    }
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory itself.
  const std::string& path() const { return path_; }
  // A path inside the directory (not created).
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }
  // The usual place for a store in a test: <dir>/store (created by Store::Open).
  std::string StorePath() const { return Sub("store"); }

 private:
  std::string path_;
};

// Sets XDG_RUNTIME_DIR to `path` for this process and the processes it starts from now on, and
// puts the previous value back on destruction.
class RuntimeDirectoryOverride {
 public:
  explicit RuntimeDirectoryOverride(const std::string& path) {
    if (const char* previous = std::getenv("XDG_RUNTIME_DIR")) previous_ = previous;
    ::setenv("XDG_RUNTIME_DIR", path.c_str(), 1);
  }
  ~RuntimeDirectoryOverride() {
    if (previous_) {
      ::setenv("XDG_RUNTIME_DIR", previous_->c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }
  RuntimeDirectoryOverride(const RuntimeDirectoryOverride&) = delete;
  RuntimeDirectoryOverride& operator=(const RuntimeDirectoryOverride&) = delete;

 private:
  std::optional<std::string> previous_;
};

// Every test process (and the processes it starts) has a runtime directory of its own: a store
// whose directory cannot hold its socket serves it in the user's runtime directory
// (sharing/runtime_directory.h), and tests run in parallel must never meet in, or change, the
// machine's (/run/idem, /tmp/idem-0, /run/user/<uid>). Made before main; removed at the exit of
// the process that made it (not of a forked child).
inline const bool kPrivateRuntimeDirectory = [] {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/idem_runtime_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return false;
  static const std::string made = pattern;
  static const pid_t maker = ::getpid();
  ::setenv("XDG_RUNTIME_DIR", made.c_str(), 1);
  std::atexit([] {
    if (::getpid() != maker) return;
    std::error_code ignored;
    std::filesystem::remove_all(made, ignored);
  });
  return true;
}();

// A thread-safe manual clock for idem::Options::clock. Starts at a fixed time with microsecond
// precision (records store microseconds, so times read back compare equal).
class ManualClock : public idem::Clock {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  // 2026-03-01T00:00:00.123456Z
  static TimePoint DefaultStart() {
    return TimePoint(std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::seconds(1772323200) + std::chrono::microseconds(123456)));
  }

  explicit ManualClock(TimePoint start = DefaultStart()) { Set(start); }

  TimePoint Now() const override {
    return TimePoint(std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::microseconds(micros_.load(std::memory_order_acquire))));
  }

  void Advance(std::chrono::microseconds delta) {
    micros_.fetch_add(delta.count(), std::memory_order_acq_rel);
  }

  void Set(TimePoint t) {
    micros_.store(
        std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count(),
        std::memory_order_release);
  }

 private:
  std::atomic<int64_t> micros_{0};
};

// Options for tests: no background purge, and the given clock (null: the system clock).
inline idem::Options TestOptions(std::shared_ptr<const idem::Clock> clock = nullptr) {
  idem::Options options;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  options.clock = std::move(clock);
  return options;
}

// Opens a store; on failure records a test failure and returns null (use IDEM_ASSERT_OPEN).
inline std::unique_ptr<idem::Store> OpenStore(const std::string& path,
                                              const idem::Options& options = TestOptions()) {
  auto result = idem::Store::Open(path, options);
  if (!result.ok()) {
    ADD_FAILURE() << "Store::Open(" << path << ") failed: " << result.status().ToString();
    return nullptr;
  }
  return std::move(result).value();
}

// The record without its holder (which process made the claim): the contract tests compare
// records on everything else, and the holder is checked on its own.
inline idem::Record WithoutHolder(idem::Record record) {
  record.holder = idem::Holder{};
  return record;
}

// Polls `condition` every 10 ms until it holds or `timeout` passes; returns the last value.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A new store on a manual clock, for the state machine tests, on `backend` (backend.h).
struct ClockedStore {
  TempDir dir;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  idem::Options options;  // as the store was opened: with `clock` (and its table in PostgreSQL)
  std::string location;   // the store's directory or URI
  std::unique_ptr<idem::Store> store;

  explicit ClockedStore(idem::Options options = TestOptions())
      : ClockedStore(Backend::kRocksDb, std::move(options)) {}
  explicit ClockedStore(Backend backend, idem::Options opened = TestOptions()) {
    opened.clock = clock;
    location = NewStoreLocation(backend, dir.StorePath(), &opened);
    options = std::move(opened);
    store = OpenStore(location, options);
  }
  idem::Options Opts() const { return TestOptions(clock); }
};

// One store of a test on `backend` (backend.h), opened as often as the test likes: the same
// directory, or the same URI and table, at every Open.
class TestStore {
 public:
  explicit TestStore(Backend backend) {
    idem::Options options;
    location_ = NewStoreLocation(backend, dir_.StorePath(), &options);
    table_ = options.table;
  }

  // A handle with `options` (their table set to this store's); null after a test failure.
  std::unique_ptr<idem::Store> Open(idem::Options options = TestOptions()) const {
    options.table = table_;
    return OpenStore(location_, options);
  }
  idem::Result<std::unique_ptr<idem::Store>> TryOpen(idem::Options options = TestOptions()) const {
    options.table = table_;
    return idem::Store::Open(location_, options);
  }
  const std::string& location() const { return location_; }
  // The store as the idem command names it: its directory, or its URI and `--table NAME`.
  std::vector<std::string> CommandArgs() const {
    if (location_.find("://") == std::string::npos) return {location_};
    return {location_, "--table", table_};
  }

 private:
  TempDir dir_;
  std::string location_;  // the store's directory or URI
  std::string table_;     // its table in PostgreSQL
};

inline std::vector<std::string> ScanKeys(idem::Store& store,
                                         const idem::ScanOptions& options = {}) {
  std::vector<std::string> keys;
  const idem::Status status = store.Scan(options, [&](const idem::Record& record) {
    keys.push_back(record.key);
    return true;
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return keys;
}

// Sends SIGSTOP to process `pid` and waits until every one of its threads has stopped (kill
// returns before they have). False if it could not be stopped within 10 s.
inline bool StopProcess(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  return WaitFor([&] {
    std::error_code error;
    for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const auto name_end = line.rfind(')');
      if (name_end == std::string::npos || name_end + 2 >= line.size()) return false;
      if (line[name_end + 2] != 'T') return false;  // field 3, the state: T is stopped
    }
    return !error;
  });
}

// True when running under ThreadSanitizer (the build sets no macro we can rely on, so the
// environment variable IDEM_TSAN=1 also selects the smaller workloads).
inline bool UnderTsan() {
#if defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* value = std::getenv("IDEM_TSAN");
  return value != nullptr && *value != '\0' && std::string(value) != "0";
#endif
}

// True when the tests run under an emulator: scripts/cross.sh sets IDEM_UNDER_EMULATOR=1 for
// the tests of another architecture under qemu user mode, where everything costs ten to fifty
// times as long.
inline bool UnderEmulator() {
  const char* value = std::getenv("IDEM_UNDER_EMULATOR");
  return value != nullptr && *value != '\0' && std::string(value) != "0";
}

// True when built with AddressSanitizer (GCC defines the macro; clang answers __has_feature).
inline bool UnderAsan() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// `normal` normally, `small` under a sanitizer or an emulator: the plain build runs the whole
// workload, and the sanitizers check the same paths on a part of it (CI's AddressSanitizer pass
// is its longest stage).
inline int Scaled(int normal, int small) {
  return UnderTsan() || UnderAsan() || UnderEmulator() ? small : normal;
}

// Everything about the tree at `root` that a write could change: for each entry (the root
// included) its type and mode, owner, size, modification time to the nanosecond, and for a file
// a hash of its bytes. Two equal snapshots: nothing was written.
inline std::map<std::string, std::string> TreeSnapshot(const std::string& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> entries;
  const auto describe = [&](const fs::path& path) {
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) return;
    std::ostringstream text;
    text << std::oct << info.st_mode << std::dec << ' ' << info.st_uid << ' ' << info.st_size << ' '
         << info.st_mtim.tv_sec << '.' << info.st_mtim.tv_nsec;
    if (S_ISREG(info.st_mode)) {
      std::ifstream in(path, std::ios::binary);
      text << ' ' << std::hash<std::string>()(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    entries[fs::relative(path, root).string()] = text.str();
  };
  describe(root);
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end;
       it.increment(error)) {
    describe(it->path());
  }
  return entries;
}

// Collects the lines given to Options::log (or a server's log), from any thread.
class CapturedLog {
 public:
  idem::LogSink Sink() {
    return [this](const idem::LogLine& line) {
      std::lock_guard lock(mu_);
      lines_.push_back({line.severity, std::string(line.event), std::string(line.message)});
    };
  }
  // How many lines' messages hold `text`.
  int Count(std::string_view text) const {
    std::lock_guard lock(mu_);
    int count = 0;
    for (const auto& line : lines_) count += line.message.find(text) != std::string::npos;
    return count;
  }
  bool Contains(std::string_view text) const { return Count(text) > 0; }
  // How many lines are of `event` with `severity`.
  int CountEvent(std::string_view event, idem::LogSeverity severity) const {
    std::lock_guard lock(mu_);
    int count = 0;
    for (const auto& line : lines_) count += line.event == event && line.severity == severity;
    return count;
  }
  // Every line as "<severity> <event>: <message>", each ended by a newline (for a failure's
  // message).
  std::string All() const {
    std::lock_guard lock(mu_);
    std::string all;
    for (const auto& line : lines_) {
      all += std::string(idem::LogSeverityName(line.severity)) + " " + line.event + ": " +
             line.message + "\n";
    }
    return all;
  }

 private:
  struct Line {
    idem::LogSeverity severity;
    std::string event;
    std::string message;
  };
  mutable std::mutex mu_;
  std::vector<Line> lines_;
};

// A child process forked when this is made, before the test opens a store (a child forked from
// a process whose threads run may find one of their locks held for ever), that waits until
// Start() and then exits with what `body` returns: for a client process of the store the test
// then opens.
class WaitingChild {
 public:
  explicit WaitingChild(const std::function<int()>& body) {
    int go[2];
    if (::pipe(go) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(go[1]);
      char byte = 0;
      ::_exit(::read(go[0], &byte, 1) == 1 ? body() : 100);
    }
    ::close(go[0]);
    go_ = go[1];
  }
  ~WaitingChild() {
    if (go_ >= 0) ::close(go_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
  }
  WaitingChild(const WaitingChild&) = delete;
  WaitingChild& operator=(const WaitingChild&) = delete;

  bool started() const { return pid_ > 0; }
  void Start() {
    if (go_ >= 0 && ::write(go_, "g", 1) == 1) {
      ::close(go_);
      go_ = -1;
    }
  }
  // The child's exit code once it has ended; -1 when a signal ended it (or it never started).
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return -1;
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool reaped_ = false;
};

}  // namespace idem_test

// Readable names in gtest failure messages.
namespace idem {
inline void PrintTo(Outcome outcome, std::ostream* os) { *os << OutcomeName(outcome); }
inline void PrintTo(State state, std::ostream* os) { *os << StateName(state); }
inline void PrintTo(Status::Code code, std::ostream* os) { *os << CodeName(code); }
inline void PrintTo(const Status& status, std::ostream* os) { *os << status.ToString(); }
inline void PrintTo(const Record& r, std::ostream* os) {
  auto micros = [](Record::TimePoint t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  };
  *os << "{key=" << ::testing::PrintToString(r.key) << " type=" << ::testing::PrintToString(r.type)
      << " state=" << StateName(r.state) << " timed_out=" << r.timed_out
      << " result=" << ::testing::PrintToString(r.result)
      << " fingerprint=" << ::testing::PrintToString(r.fingerprint)
      << " checkpoint=" << ::testing::PrintToString(r.checkpoint) << " token=" << r.token
      << " attempts=" << r.attempts << " retryable=" << r.retryable
      << " created=" << micros(r.created) << " updated=" << micros(r.updated)
      << " lease_deadline=" << micros(r.lease_deadline) << " expires=" << micros(r.expires)
      << " holder={pid=" << r.holder.pid << " process_start=" << r.holder.process_start
      << " request_id=" << r.holder.request_id << " took_over=" << r.holder.took_over << "}}";
}
}  // namespace idem

#define IDEM_TEST_CONCAT_INNER_(a, b) a##b
#define IDEM_TEST_CONCAT_(a, b) IDEM_TEST_CONCAT_INNER_(a, b)

// EXPECT/ASSERT that a Status (or a Result's status()) is OK, printing it otherwise.
#define EXPECT_OK(expr)                                                  \
  do {                                                                   \
    const ::idem::Status idem_test_status_ = (expr);                     \
    EXPECT_TRUE(idem_test_status_.ok()) << idem_test_status_.ToString(); \
  } while (false)
#define ASSERT_OK(expr)                                                  \
  do {                                                                   \
    const ::idem::Status idem_test_status_ = (expr);                     \
    ASSERT_TRUE(idem_test_status_.ok()) << idem_test_status_.ToString(); \
  } while (false)

// EXPECT/ASSERT that a Status has the given code (an enumerator of idem::Status::Code, such as
// kLeaseLost).
#define EXPECT_CODE(expr, code_name)                                     \
  do {                                                                   \
    const ::idem::Status idem_test_status_ = (expr);                     \
    EXPECT_EQ(idem_test_status_.code(), ::idem::Status::Code::code_name) \
        << idem_test_status_.ToString();                                 \
  } while (false)
#define ASSERT_CODE(expr, code_name)                                     \
  do {                                                                   \
    const ::idem::Status idem_test_status_ = (expr);                     \
    ASSERT_EQ(idem_test_status_.code(), ::idem::Status::Code::code_name) \
        << idem_test_status_.ToString();                                 \
  } while (false)

// `ASSERT_OK_AND_ASSIGN(auto x, ResultExpr());` declares x from the value or fails the test.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  IDEM_TEST_AOA_IMPL_(IDEM_TEST_CONCAT_(idem_test_result_, __LINE__), lhs, expr)
#define IDEM_TEST_AOA_IMPL_(result, lhs, expr)                             \
  auto result = (expr);                                                    \
  ASSERT_TRUE(result.ok()) << #expr << ": " << result.status().ToString(); \
  lhs = std::move(result).value()

// `IDEM_ASSERT_OPEN(store, path, options);` declares `store` (a std::unique_ptr<idem::Store>).
#define IDEM_ASSERT_OPEN(var, ...)                \
  auto var = ::idem_test::OpenStore(__VA_ARGS__); \
  ASSERT_NE(var, nullptr)

#endif  // IDEM_TESTS_TEST_UTIL_H_
