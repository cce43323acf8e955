// `idem stats --format prometheus`: the records' gauges, the engine's, the owner's gauges and
// counters, each family with its HELP and TYPE lines.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "stats_report.h"
#include "text.h"

namespace idem::cli {
namespace {

// A Prometheus label value: valid UTF-8 with \, " and newline escaped.
std::string PrometheusLabel(std::string_view value) {
  std::string out;
  for (char c : ToValidUtf8(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// "1764464523.123456": seconds since the Unix epoch, to the microsecond.
std::string SecondsSinceEpoch(std::chrono::system_clock::time_point t) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  return fmt::format("{}.{:06}", micros / 1000000, micros % 1000000);
}

// One histogram as Prometheus's histogram type: the cumulative `le` buckets in seconds (the
// last +Inf, equal to _count), _sum in seconds and _count.
void WriteLatencyPrometheus(std::ostream& out, std::string_view store, const LatencyInfo& latency,
                            const LatencyHistogram& histogram) {
  const std::string metric = fmt::format("idem_{}_duration_seconds", latency.name);
  fmt::print(out, "# HELP {0} {1} Timed by the store's owners, the current one idem_owner_pid.\n",
             metric, latency.help);
  fmt::print(out, "# TYPE {} histogram\n", metric);
  uint64_t calls = 0;
  for (std::size_t bucket = 0; bucket < kLatencyBucketCount; ++bucket) {
    calls += histogram.buckets[bucket];
    const std::string le =
        bucket < std::size(kLatencyBounds)
            ? fmt::format("{}", std::chrono::duration<double>(kLatencyBounds[bucket]).count())
            : "+Inf";
    fmt::print(out, "{}_bucket{{{},le=\"{}\"}} {}\n", metric, store, le, calls);
  }
  fmt::print(out, "{}_sum{{{}}} {}\n", metric, store,
             static_cast<double>(histogram.sum_nanoseconds) / 1e9);
  fmt::print(out, "{}_count{{{}}} {}\n", metric, store, calls);
}

}  // namespace

// The owner's gauges and, when it answered, its counters.
void WriteOwnerPrometheus(std::ostream& out, const std::string& name, const StatsReport& stats) {
  const std::string store = fmt::format("store=\"{}\"", PrometheusLabel(name));
  const auto family = [&out](std::string_view name, std::string_view type, std::string_view help) {
    fmt::print(out, "# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
  };
  const auto sample = [&out, &store](std::string_view name, const auto& value) {
    fmt::print(out, "{}{{{}}} {}\n", name, store, value);
  };
  family("idem_owner_live", "gauge",
         "1 when the store's owner answered (the idem_*_total counters are its), 0 otherwise.");
  sample("idem_owner_live", stats.owner.live ? 1 : 0);
  family("idem_owner_unreachable", "gauge",
         "1 when a process owns the store but could not be asked for its counters (stopped, "
         "overloaded or exclusive), or whether one does could not be told.");
  sample("idem_owner_unreachable", stats.owner_unreachable ? 1 : 0);
  // Counts exist only in a live owner: with none, no sample rather than a false zero.
  family("idem_build_info", "gauge", "1, with the version of the idem command that wrote these.");
  fmt::print(out, "idem_build_info{{{},version=\"{}\"}} 1\n", store, IDEM_VERSION);
  if (!stats.owner.live) return;
  if (stats.owner.pid != 0) {
    family("idem_owner_pid", "gauge", "Process id of the store's owner.");
    sample("idem_owner_pid", stats.owner.pid);
  }
  family("idem_owner_start_time_seconds", "gauge",
         "When the owner took the store, in seconds since the Unix epoch.");
  sample("idem_owner_start_time_seconds", SecondsSinceEpoch(stats.owner.since));
  for (const CounterInfo& counter : kCounters) {
    const std::string metric = fmt::format("idem_{}_total", counter.name);
    family(metric, "counter",
           fmt::format("{} Counted by the store's owners, the current one idem_owner_pid.",
                       counter.help));
    sample(metric, stats.owner.counters.*counter.field);
  }
  for (const LatencyInfo& latency : kLatencies) {
    WriteLatencyPrometheus(out, store, latency, stats.owner.latencies.*latency.field);
  }
}

void WriteStatsPrometheus(std::ostream& out, const std::string& name, const StatsReport& stats) {
  const std::string store = fmt::format("store=\"{}\"", PrometheusLabel(name));
  const auto family = [&out](std::string_view name, std::string_view type, std::string_view help) {
    fmt::print(out, "# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
  };
  // One sample: `name{store="..."<more labels>} value`.
  const auto sample = [&out, &store](std::string_view name, std::string_view more_labels,
                                     const auto& value) {
    fmt::print(out, "{}{{{}{}}} {}\n", name, store, more_labels, value);
  };
  family("idem_records", "gauge",
         "Live records by state (timeout: pending with an expired lease).");
  for (std::string_view state : kDisplayStates) {
    sample("idem_records", fmt::format(",state=\"{}\"", state), stats.CountInState(state));
  }
  family("idem_records_by_type", "gauge", "Live records by type label.");
  for (const auto& [type, count] : stats.by_type) {
    sample("idem_records_by_type", fmt::format(",type=\"{}\"", PrometheusLabel(type)), count);
  }
  family("idem_timed_out_records", "gauge",
         "Pending records whose lease has passed (stuck or abandoned).");
  sample("idem_timed_out_records", "", stats.CountInState("timeout"));
  if (stats.oldest_pending) {
    family("idem_oldest_pending_created_timestamp_seconds", "gauge",
           "Creation time of the oldest pending record, in seconds since the Unix epoch.");
    sample("idem_oldest_pending_created_timestamp_seconds", "",
           SecondsSinceEpoch(stats.oldest_pending->created));
  }
  if (stats.disk_bytes) {
    family("idem_disk_bytes", "gauge", "Bytes of all files under the store directory.");
    sample("idem_disk_bytes", "", *stats.disk_bytes);
  }
  family("idem_records_precision_seconds", "gauge",
         "0: records counted one by one; else kept by the owner, done and failed to this.");
  sample("idem_records_precision_seconds", "", stats.precision.count() / 1000.0);
  if (stats.engine) {
    const auto gauge = [&](std::string_view metric, std::string_view help, uint64_t value) {
      family(metric, "gauge", help);
      sample(metric, "", value);
    };
    gauge("idem_engine_writes_stopped", "1 while RocksDB takes no writes (a full disk, a stall).",
          stats.engine->writes_stopped ? 1 : 0);
    gauge("idem_engine_pending_compaction_bytes",
          "Bytes RocksDB estimates compaction will rewrite.",
          stats.engine->pending_compaction_bytes);
    gauge("idem_engine_live_table_bytes", "Bytes of the table files the database uses now.",
          stats.engine->live_table_bytes);
    gauge("idem_engine_total_table_bytes", "Bytes of all table files (pinned ones included).",
          stats.engine->total_table_bytes);
    gauge("idem_engine_damaged_table_files",
          "Table files the owner found damaged: restore from a backup.",
          stats.engine->damaged_table_files);
  }
  WriteOwnerPrometheus(out, name, stats);
}

}  // namespace idem::cli
