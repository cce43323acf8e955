// While the workers run: every result acknowledged so far (the round's ack log, read before the
// reader opens) must be readable, done and equal, through a read-only handle, which asks the
// live owner or, when it reaches none, reads the files "as of Open". A wrong answer is a
// violation, reported with what the reader was talking to and whether a fresh reader a moment
// later answers right; an error (say the owner was just killed) is counted.

#include <fmt/format.h>
#include <signal.h>

#include <thread>

#include "supervisor.h"

namespace idem::soak {

// Reads every expected key through a fresh read-only handle; nullopt on an error (counted, and
// said under the round's line).
std::optional<Supervisor::ReadBack> Supervisor::ReadAcknowledged(
    const std::map<std::string, std::string>& expected) {
  Options options;
  options.read_only = true;
  options.log = [](std::string_view) {};
  auto reader = Store::Open(store_, options);
  if (!reader.ok()) {
    ++t_.live_errors;
    violation_lines_.push_back(
        fmt::format("  live check: open failed: {}", reader.status().ToString()));
    return std::nullopt;
  }
  ReadBack read;
  for (const auto& [key, result] : expected) {
    auto record = (*reader)->Get(key);
    if (!record.ok()) {
      ++t_.live_errors;
      violation_lines_.push_back(
          fmt::format("  live check: Get {}: {}", key, record.status().ToString()));
      return std::nullopt;
    }
    if (!record->has_value()) {
      read.wrong[key] = "missing";
    } else if ((*record)->state != State::kDone || (*record)->result != result) {
      read.wrong[key] = fmt::format("{} '{}'", DisplayState(**record), (*record)->result);
    }
  }
  // All zero, as those of a reader of the files are (an owner counts its claims and replays,
  // which a running round makes at once). Unreadable counters count as zero: this only labels
  // a violation's report.
  const Result<Counters> c = (*reader)->GetCounters();
  read.counters_zero = !c.ok() || (c->claims == 0 && c->replays == 0 && c->in_progress == 0);
  return read;
}

// "N of M acknowledged results read wrong (2 missing, 1 pending; e.g. KEY acked R, read W)".
std::string Supervisor::LiveSummary(const std::map<std::string, std::string>& expected,
                                    const ReadBack& read) {
  std::map<std::string, int> kinds;
  for (const auto& [key, what] : read.wrong) {
    ++kinds[what == "missing" ? "missing" : what.substr(0, what.find(' '))];
  }
  std::string summary;
  for (const auto& [kind, count] : kinds) {
    summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", count, kind);
  }
  const auto& [first_key, first_what] = *read.wrong.begin();
  return fmt::format("{} of {} acknowledged results read wrong ({}; e.g. {} acked {}, read {})",
                     read.wrong.size(), expected.size(), summary, first_key, expected.at(first_key),
                     first_what);
}

void Supervisor::LiveCheck(const Round& round) {
  ++t_.live_checks;
  std::map<std::string, std::string> expected;
  for (const std::string& line : ReadLines(round.ack_log)) {
    const auto words = Split(line);
    if (words.size() >= 2) expected.emplace(words[0], words[1]);
  }
  const pid_t owner = OwnerPid(store_);
  const bool owner_alive = owner != 0 && ::kill(owner, 0) == 0;
  const auto opened_at = Clock::now();
  const std::optional<ReadBack> read = ReadAcknowledged(expected);
  if (!read) return;
  t_.live_verified += static_cast<long>(expected.size() - read->wrong.size());
  if (read->wrong.empty()) return;

  for (std::size_t i = 0; i < read->wrong.size(); ++i) {
    Violation("", /*print=*/false);
    ++t_.live_violations;
  }
  const double since_owner_kill = round.last_owner_kill == Clock::time_point{}
                                      ? -1.0
                                      : Seconds(opened_at - round.last_owner_kill) * 1000;
  violation_lines_.push_back(fmt::format(
      "  VIOLATION: live check: {}; owner.lock said pid {} ({}) when the reader opened, {:.0f} ms "
      "after the last owner kill; the reader's counters were {}",
      LiveSummary(expected, *read), owner, owner_alive ? "alive" : "dead", since_owner_kill,
      read->counters_zero ? "zero (it read the files, not the owner)" : "an owner's"));
  // The same keys through a fresh reader: a stale reader, or results really lost?
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::optional<ReadBack> again = ReadAcknowledged(expected);
  if (!again) return;
  int still = 0;
  for (const auto& [key, what] : read->wrong) still += again->wrong.contains(key) ? 1 : 0;
  violation_lines_.push_back(
      fmt::format("    a fresh reader 200 ms later reads {} of them wrong (counters {})", still,
                  again->counters_zero ? "zero" : "an owner's"));
}

}  // namespace idem::soak
