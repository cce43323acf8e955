// What `idem stats` reports (StatsReport), and its Prometheus text format
// (stats_prometheus.cc); command_stats.cc gathers it and writes the table and JSON.

#ifndef IDEM_TOOLS_STATS_REPORT_H_
#define IDEM_TOOLS_STATS_REPORT_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "idem/store.h"

namespace idem::cli {

constexpr std::array<std::string_view, 4> kDisplayStates = {"pending", "timeout", "done", "failed"};

// What the store answered (Store::GetStats), and what the command adds.
struct StatsReport : idem::StoreStats {
  // Bytes of the files under the store directory; none for a store in PostgreSQL (the server
  // knows: pg_total_relation_size).
  std::optional<uint64_t> disk_bytes;
  // A store in PostgreSQL: no owner, each process counts its own calls.
  bool in_postgres = false;
  // The owner's counters and who it is; live false: no owner answered (counters are zeros).
  OwnerCounters owner;
  // An owner holds the store but could not be asked (why, on stderr): its counters are unknown.
  bool owner_unreachable = false;
  std::chrono::system_clock::time_point now;  // when the report was made

  uint64_t CountInState(std::string_view state) const {
    const auto it = by_state.find(state);
    return it == by_state.end() ? 0 : it->second;
  }
};

// Writes `stats` of the store named `name` in Prometheus's text exposition format: all of it,
// or the owner's gauges and counters alone.
void WriteStatsPrometheus(std::ostream& out, const std::string& name, const StatsReport& stats);
void WriteOwnerPrometheus(std::ostream& out, const std::string& name, const StatsReport& stats);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_STATS_REPORT_H_
