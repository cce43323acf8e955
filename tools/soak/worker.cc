// idem_soak's worker mode: one process that races the others through the round's keys with
// Store::Execute, logging every run of its function and every acknowledged result.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "idem/idem.h"
#include "soak.h"

namespace idem::soak {
namespace {

using std::chrono::milliseconds;

class Worker {
 public:
  explicit Worker(const std::vector<std::string>& args)
      : store_path_(args[0]),
        keys_path_(args[1]),
        run_log_(args[2]),
        ack_log_(args[3]),
        log_path_(args[4]),
        lease_ms_(std::stoi(args[5])),
        dead_holders_(args[6] == "1"),
        sabotage_(std::getenv("IDEM_SOAK_SABOTAGE") != nullptr),
        me_(std::to_string(::getpid())),
        random_(static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                static_cast<uint64_t>(Clock::now().time_since_epoch().count())) {}

  int Main();

 private:
  void Say(std::string_view text) const { Append(log_path_, fmt::format("[{}] {}\n", me_, text)); }
  std::unique_ptr<Store> OpenStore();
  Result<std::string> Run(const std::string& key, const Attempt& attempt);
  std::optional<int> ExecuteKey(Store& store, const std::string& key);
  bool Acknowledge(const std::string& key, Execution& done);

  const std::string store_path_, keys_path_, run_log_, ack_log_, log_path_;
  const int lease_ms_;
  const bool dead_holders_;
  const bool sabotage_;  // about one answer in a hundred is made up (checks the checker)
  const std::string me_;
  std::mt19937_64 random_;
};

// The store, or null after three failed opens (each one said in the log).
std::unique_ptr<Store> Worker::OpenStore() {
  Options options;
  options.default_lease = milliseconds(lease_ms_);
  options.take_over_dead_holders = dead_holders_;
  options.log = [this](std::string_view text) { Say(fmt::format("log: {}", text)); };
  for (int tries = 1; tries <= 3; ++tries) {
    auto opened = Store::Open(store_path_, options);
    if (opened.ok()) return std::move(opened).value();
    Say(fmt::format("open failed: {}", opened.status().ToString()));
  }
  return nullptr;
}

// The function Execute runs: logs the run, then takes a moment, so that kills find attempts in
// flight.
Result<std::string> Worker::Run(const std::string& key, const Attempt& attempt) {
  if (!Append(run_log_, fmt::format("{} {} {} {} {}\n", key, me_, attempt.token,
                                    attempt.took_over ? "1" : "0", attempt.attempts))) {
    Say(fmt::format("cannot append to the run log: {}", std::strerror(errno)));
    std::_Exit(3);
  }
  std::this_thread::sleep_for(std::chrono::microseconds(random_() % 3000));
  return Result<std::string>(fmt::format("v-{}-{}", me_, attempt.token));
}

// Logs an acknowledged result (after, with --sabotage, now and then making one up).
bool Worker::Acknowledge(const std::string& key, Execution& done) {
  if (sabotage_ && random_() % 100 == 0) {
    // Checks the checker: a run the store did not guard, and an answer it never gave.
    Append(run_log_, fmt::format("{} {} 0 0 0\n", key, me_));
    done.result = fmt::format("v-{}-0", me_);
  }
  if (!Append(ack_log_,
              fmt::format("{} {} {} {}\n", key, done.result, me_, done.replayed ? "R" : "E"))) {
    Say(fmt::format("cannot append to the ack log: {}", std::strerror(errno)));
    return false;
  }
  return true;
}

// Executes one key until it is acknowledged: nullopt, or the exit code that ends the worker.
std::optional<int> Worker::ExecuteKey(Store& store, const std::string& key) {
  BeginOptions begin;
  begin.type = "soak";
  for (int tries = 1;; ++tries) {
    auto done = store.Execute(key, begin, [&](Attempt& attempt) { return Run(key, attempt); });
    if (done.ok()) {
      if (!Acknowledge(key, *done)) return 3;
      return std::nullopt;
    }
    const auto code = done.status().code();
    // Retryable in this setting: a holder that died (or whose owner died) mid-call, an owner
    // that could not be reached within failover_timeout.
    const bool retryable = code == Status::Code::kInProgress ||
                           code == Status::Code::kUnavailable || code == Status::Code::kLeaseLost ||
                           code == Status::Code::kTimedOut;
    Say(fmt::format("{} {}: {}", retryable ? "retry" : "error", key, done.status().ToString()));
    if (!retryable || tries >= 20) return 1;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

int Worker::Main() {
  const std::unique_ptr<Store> store = OpenStore();
  if (!store) return 4;
  std::vector<std::string> keys = ReadLines(keys_path_);
  std::shuffle(keys.begin(), keys.end(), random_);
  for (const std::string& key : keys) {
    if (const std::optional<int> code = ExecuteKey(*store, key)) return *code;
  }
  return 0;
}

}  // namespace

int WorkerMain(const std::vector<std::string>& args) { return Worker(args).Main(); }

}  // namespace idem::soak
