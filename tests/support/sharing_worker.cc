// A process that shares a store with the sharing tests, driven by its arguments:
//   sharing_worker execute STORE FIRST LAST RUNLOG ACKLOG
//       Execute keys "key-FIRST" .. "key-LAST" in an order of its own; the function appends
//       "KEY\n" to RUNLOG each time it really runs, and after Execute returns OK the worker
//       appends "KEY RESULT\n" to ACKLOG. Prints "done" and exits 0 when all are done.
//   sharing_worker hold STORE KEY
//       Claims KEY with a one-hour lease, prints "held TOKEN", then waits to be killed.
//   sharing_worker open STORE auto|exclusive
//       Opens the store, prints "open" or the status, then waits to be killed.
//   sharing_worker transfer STORE THREADS FULL_SPEED PAUSE_MS MOST
//       Owns the store (buffered writes), opens the accounts of transfer_load.h, prints "ready",
//       then runs transfers on THREADS threads at that pace (transfer_load.h's Pace) until killed
//       (prints the error if one fails).
//   sharing_worker snapshot STORE
//       Opens the store read-only and starts a Store::ScanSnapshot through its owner; at the first
//       record prints "in snapshot", then waits to be killed (an exporter that dies mid-export).
//   sharing_worker read STORE KEY
//       Opens the store read-only and gets KEY (5 s for the owner to answer), prints
//       "<status or 'found'/'absent'> in <milliseconds> ms" and exits.
// Every line printed is flushed at once: the test reads them from a pipe.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "transfer_load.h"

namespace {

void Append(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    std::perror("append");
    std::_Exit(3);
  }
  ::close(fd);
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Execute(const std::string& store_path, int first, int last, const std::string& run_log,
            const std::string& ack_log) {
  idem::Options options;
  options.default_lease = std::chrono::seconds(2);
  auto store = idem::Store::Open(store_path, options);
  if (!store.ok()) {
    Say("open failed: " + store.status().ToString());
    return 1;
  }
  std::vector<int> keys;
  for (int i = first; i <= last; ++i) keys.push_back(i);
  std::shuffle(keys.begin(), keys.end(), std::mt19937(static_cast<unsigned>(::getpid())));
  for (int i : keys) {
    const std::string key = "key-" + std::to_string(i);
    for (;;) {
      auto done = (*store)->Execute(key, {.type = "test"}, [&](idem::Attempt&) {
        Append(run_log, key + "\n");
        return idem::Result<std::string>("result-" + key);
      });
      if (done.ok()) {
        Append(ack_log, key + " " + done->result + "\n");
        break;
      }
      // Another worker died holding the key, or the owner went away mid-call: try again.
      if (done.status().code() != idem::Status::Code::kInProgress &&
          done.status().code() != idem::Status::Code::kUnavailable &&
          done.status().code() != idem::Status::Code::kLeaseLost) {
        Say("execute failed: " + done.status().ToString());
        return 1;
      }
    }
  }
  Say("done");
  return 0;
}

int RunTransfers(const std::string& store_path, int threads, const idem_test::Pace& pace) {
  idem::Options options;
  options.durability = idem::Durability::kBuffered;
  auto store = idem::Store::Open(store_path, options);
  if (!store.ok()) {
    Say("open failed: " + store.status().ToString());
    return 1;
  }
  if (const idem::Status opened = idem_test::OpenAccounts(**store); !opened.ok()) {
    Say("open accounts failed: " + opened.ToString());
    return 1;
  }
  idem_test::TransferLoad load(**store, "worker", threads, pace);
  Say("ready");
  for (;;) {
    if (load.failed()) {
      Say("transfer failed: " + load.error());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 6 && args[0] == "execute") {
    return Execute(args[1], std::stoi(args[2]), std::stoi(args[3]), args[4], args[5]);
  }
  if (args.size() == 6 && args[0] == "transfer") {
    return RunTransfers(args[1], std::stoi(args[2]),
                        {.full_speed = std::stoull(args[3]),
                         .pause = std::chrono::milliseconds(std::stoll(args[4])),
                         .most = std::stoull(args[5])});
  }
  if (args.size() == 2 && args[0] == "snapshot") {
    idem::Options options;
    options.read_only = true;
    auto store = idem::Store::Open(args[1], options);
    if (!store.ok()) {
      Say("open failed: " + store.status().ToString());
      return 1;
    }
    const idem::Status scanned = (*store)->ScanSnapshot(
        [](const idem::Record&) {
          Say("in snapshot");
          for (;;) ::pause();
          return false;
        },
        [](std::string_view, std::string_view, const idem::TableValue&) { return false; });
    Say(scanned.ToString());
    return 1;
  }
  if (args.size() == 3 && args[0] == "hold") {
    auto store = idem::Store::Open(args[1]);
    if (!store.ok()) {
      Say("open failed: " + store.status().ToString());
      return 1;
    }
    auto claim = (*store)->Begin(args[2], {.lease = std::chrono::hours(1)});
    if (!claim.ok() || claim->outcome != idem::Outcome::kAcquired) {
      Say("begin failed");
      return 1;
    }
    Say("held " + std::to_string(claim->token));
    for (;;) ::pause();
  }
  if (args.size() == 3 && args[0] == "open") {
    idem::Options options;
    options.sharing = args[2] == "exclusive" ? idem::Sharing::kExclusive : idem::Sharing::kAuto;
    options.failover_timeout = std::chrono::milliseconds(500);
    auto store = idem::Store::Open(args[1], options);
    Say(store.ok() ? "open" : store.status().ToString());
    for (;;) ::pause();
  }
  if (args.size() == 3 && args[0] == "read") {
    const auto start = std::chrono::steady_clock::now();
    idem::Options options;
    options.read_only = true;
    options.failover_timeout = std::chrono::seconds(5);
    options.request_timeout = std::chrono::seconds(5);
    auto store = idem::Store::Open(args[1], options);
    std::string outcome;
    if (!store.ok()) {
      outcome = store.status().ToString();
    } else {
      auto record = (*store)->Get(args[2]);
      outcome = !record.ok() ? record.status().ToString() : *record ? "found" : "absent";
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    Say(outcome + " in " + std::to_string(took.count()) + " ms");
    return 0;
  }
  std::fprintf(stderr, "usage: see the comment at the top of sharing_worker.cc\n");
  return 2;
}
