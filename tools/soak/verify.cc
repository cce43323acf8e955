// After a round: the round's logs are added to the history, and the whole store is checked
// against it (main.cc lists the checks).

#include <fmt/format.h>

#include <fstream>

#include "supervisor.h"

namespace idem::soak {

void Supervisor::Violation(const std::string& text, bool print) {
  ++round_violations_;
  ++t_.violations;
  if (print && ++printed_violations_ <= 20) {
    violation_lines_.push_back(fmt::format("  VIOLATION: {}", text));
  }
}

// The history of the key a log line names, with the line's words in `w`; null after reporting a
// line without `words` words or a key the soak never used. `log`: "run" or "ack".
KeyState* Supervisor::LoggedKey(std::string_view log, const std::string& line, std::size_t words,
                                std::vector<std::string>& w) {
  w = Split(line);
  if (w.size() != words) {
    Violation(fmt::format("malformed {} log line '{}'", log, line));
    return nullptr;
  }
  auto found = keys_.find(w[0]);
  if (found == keys_.end()) {
    Violation(fmt::format("{} of a key the soak never used: '{}'", log, line));
    return nullptr;
  }
  return &found->second;
}

// The run log: "KEY PID TOKEN TOOK_OVER ATTEMPTS" a run of a worker's function.
void Supervisor::ReadRuns(Round& round, const std::vector<std::string>& runs) {
  std::map<pid_t, std::string> last_run;  // per process, the key its function ran last
  std::vector<std::string> w;
  for (const std::string& line : runs) {
    KeyState* const logged = LoggedKey("run", line, 5, w);
    if (logged == nullptr) continue;
    KeyState& key = *logged;
    ++round.runs;
    if (++key.runs > 1) {
      ++t_.duplicates;
      ++round.duplicates;
    }
    key.produced.insert(fmt::format("v-{}-{}", w[1], w[2]));
    last_run[static_cast<pid_t>(std::stol(w[1]))] = w[0];
    ++t_.executions;
    if (w[3] == "1") ++t_.takeovers;
  }
  // A killed process may have had one key in flight: the last one its function ran (or none).
  for (pid_t pid : round.killed) {
    auto last = last_run.find(pid);
    if (last != last_run.end()) ++keys_[last->second].inflight_kills;
  }
}

// The ack log: "KEY RESULT PID E|R" an acknowledged result. Returns the keys acknowledged.
std::set<std::string> Supervisor::ReadAcks(Round& round, const std::vector<std::string>& acks) {
  std::set<std::string> acked;
  std::vector<std::string> w;
  for (const std::string& line : acks) {
    KeyState* const logged = LoggedKey("ack", line, 4, w);
    if (logged == nullptr) continue;
    ++t_.acks;
    ++round.acks;
    if (w[3] == "R") ++t_.replays;
    KeyState& key = *logged;
    if (key.acked.empty()) {
      key.acked = w[1];
      acked_pool_.push_back(w[0]);
    } else if (key.acked != w[1]) {
      Violation(fmt::format("key {} was acknowledged with two results: {} and {} (pid {})", w[0],
                            key.acked, w[1], w[2]));
    }
    acked.insert(w[0]);
  }
  return acked;
}

// Every record, read by a read-only handle now that no worker runs (it reads the files); nullopt
// after reporting why not.
std::optional<std::unordered_map<std::string, Record>> Supervisor::ReadStore() {
  Options options;
  options.read_only = true;
  auto reader = Store::Open(store_, options);
  if (!reader.ok()) {
    Violation(fmt::format("cannot open the store read-only: {}", reader.status().ToString()));
    return std::nullopt;
  }
  std::unordered_map<std::string, Record> stored;
  const auto scanned = (*reader)->Scan({}, [&](const Record& record) {
    stored.emplace(record.key, record);
    return true;
  });
  if (!scanned.ok()) {
    Violation(fmt::format("scan failed: {}", scanned.ToString()));
    return std::nullopt;
  }
  return stored;
}

// Every key of this round was acknowledged by the workers that finished it.
void Supervisor::CheckRoundAcknowledged(const Round& round, const std::set<std::string>& acked) {
  std::ifstream keys_file(round.keys_path);
  std::string name;
  while (std::getline(keys_file, name)) {
    if (!acked.contains(name)) {
      Violation(fmt::format("key {} was never acknowledged in its round", name));
    }
  }
}

void Supervisor::Verify(Round& round, long* verified) {
  int partial = 0;
  const auto runs = ReadLines(round.run_log, &partial);
  const auto acks = ReadLines(round.ack_log, &partial);
  t_.partial_lines += partial;
  ReadRuns(round, runs);
  const std::set<std::string> acked_this_round = ReadAcks(round, acks);

  const auto stored = ReadStore();
  if (!stored) return;
  for (const auto& [key, record] : *stored) {
    if (!keys_.contains(key)) {
      Violation(fmt::format("the store holds a key the soak never used: {}", key));
    }
  }
  // Every key of every round so far: all rounds ran to the end, so each must be done.
  for (auto& [name, key] : keys_) {
    if (key.reported) continue;
    const int before = round_violations_;
    Check(name, key, *stored, round, verified);
    if (round_violations_ != before) key.reported = true;
  }
  CheckRoundAcknowledged(round, acked_this_round);
}

// One key of the history against the store.
void Supervisor::Check(const std::string& name, const KeyState& key,
                       const std::unordered_map<std::string, Record>& stored, const Round& round,
                       long* verified) {
  const auto found = stored.find(name);
  if (found == stored.end()) {
    Violation(fmt::format("key {} is missing from the store{}", name,
                          key.acked.empty() ? "" : fmt::format(" (acknowledged {})", key.acked)));
    return;
  }
  const Record& record = found->second;
  if (record.state != State::kDone) {
    Violation(
        fmt::format("key {} is {}, not done, after its round ended", name, DisplayState(record)));
    return;
  }
  if (!key.acked.empty()) {
    if (record.result != key.acked) {
      Violation(fmt::format("key {} stores '{}' but '{}' was acknowledged", name, record.result,
                            key.acked));
      return;
    }
    ++*verified;
    ++t_.verified;
  }
  if (!key.produced.contains(record.result)) {
    Violation(fmt::format("key {} stores '{}', which no logged run returned", name, record.result));
  }
  if (!key.acked.empty() && key.runs == 0) {
    Violation(fmt::format("key {} was acknowledged but never ran", name));
  }
  if (key.runs > 1 + key.inflight_kills) {
    Violation(fmt::format(
        "key {} ran {} times with {} killed attempts that may have had it in flight (round {} "
        "killed {})",
        name, key.runs, key.inflight_kills, round.number, round.killed.size()));
  }
}

}  // namespace idem::soak
