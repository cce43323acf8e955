// `idem stats`: records by state and type, the oldest pending one, disk size and the owner's
// counters, as a table, one JSON object or the Prometheus text format.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.h"
#include "idem/function_ref.h"
#include "json_writer.h"
#include "stats_report.h"
#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"

namespace idem::cli {
namespace {

uint64_t DirectorySize(const std::string& path) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += size;
    }
  }
  return total;
}

// The owner's latency histograms in `idem stats --format jsonl`, in integers: each histogram's
// bucket counts (not cumulative) under the bounds in nanoseconds (one bucket more: over the
// last), the calls and their sum; null when no owner answered.
void WriteLatencyJson(JsonWriter& json, const StatsReport& stats) {
  json.Key("latency");
  if (!stats.owner.live) {
    json.Null();
    return;
  }
  json.BeginObject();
  json.Key("bounds_ns");
  json.BeginArray();
  for (std::chrono::nanoseconds bound : kLatencyBounds) {
    json.Number(static_cast<uint64_t>(bound.count()));
  }
  json.EndArray();
  for (const LatencyInfo& latency : kLatencies) {
    const LatencyHistogram& histogram = stats.owner.latencies.*latency.field;
    json.Key(latency.name);
    json.BeginObject();
    json.Key("buckets");
    json.BeginArray();
    for (uint64_t bucket : histogram.buckets) json.Number(bucket);
    json.EndArray();
    json.Key("count");
    json.Number(histogram.count());
    json.Key("sum_ns");
    json.Number(histogram.sum_nanoseconds);
    json.EndObject();
  }
  json.EndObject();
}

// The owner's part of `idem stats --format jsonl`: whether it answered, who it is, its counts.
void WriteOwnerJson(JsonWriter& json, const StatsReport& stats) {
  json.Key("owner_live");
  json.Bool(stats.owner.live);
  json.Key("owner_unreachable");
  json.Bool(stats.owner_unreachable);
  json.Key("owner");
  if (stats.owner.live) {
    json.BeginObject();
    json.Key("pid");
    if (stats.owner.pid != 0) {
      json.Number(static_cast<uint64_t>(stats.owner.pid));
    } else {
      json.Null();
    }
    json.Key("since");
    json.Time(stats.owner.since);
    json.EndObject();
  } else {
    json.Null();
  }
  // The owner's counts; null when no owner answered (nobody counted, or they are unknown).
  json.Key("counters");
  if (stats.owner.live) {
    json.BeginObject();
    for (const CounterInfo& counter : kCounters) {
      json.Key(counter.name);
      json.Number(stats.owner.counters.*counter.field);
    }
    json.EndObject();
  } else {
    json.Null();
  }
  WriteLatencyJson(json, stats);
}

// The engine's health in `idem stats --format jsonl`; null for a store in PostgreSQL.
void WriteEngineJson(JsonWriter& json, const StatsReport& stats) {
  json.Key("engine");
  if (!stats.engine) {
    json.Null();
    return;
  }
  json.BeginObject();
  json.Key("writes_stopped");
  json.Bool(stats.engine->writes_stopped);
  json.Key("pending_compaction_bytes");
  json.Number(stats.engine->pending_compaction_bytes);
  json.Key("live_table_bytes");
  json.Number(stats.engine->live_table_bytes);
  json.Key("total_table_bytes");
  json.Number(stats.engine->total_table_bytes);
  json.Key("damaged_table_files");
  json.Number(stats.engine->damaged_table_files);
  json.Key("damage");
  json.String(stats.engine->damage);
  json.EndObject();
}

void WriteStatsJson(std::ostream& out, const std::string& name, const StatsReport& stats) {
  std::string text;
  JsonWriter json(text);
  json.BeginObject();
  json.Key("store");
  json.String(name);
  json.Key("records");
  json.Number(stats.records);
  json.Key("by_state");
  json.BeginObject();
  for (std::string_view state : kDisplayStates) {
    json.Key(state);
    json.Number(stats.CountInState(state));
  }
  json.EndObject();
  json.Key("by_type");
  json.BeginObject();
  for (const auto& [type, count] : stats.by_type) {
    json.Key(type);
    json.Number(count);
  }
  json.EndObject();
  json.Key("timed_out");
  json.Number(stats.CountInState("timeout"));
  json.Key("oldest_pending");
  if (stats.oldest_pending) {
    json.BeginObject();
    json.Key("key");
    json.String(stats.oldest_pending->key);
    json.Key("created");
    json.Time(stats.oldest_pending->created);
    json.EndObject();
  } else {
    json.Null();
  }
  json.Key("disk_bytes");
  if (stats.disk_bytes) {
    json.Number(*stats.disk_bytes);
  } else {
    json.Null();
  }
  json.Key("counted_at");
  json.Time(stats.at);
  json.Key("precision_ms");
  json.Number(static_cast<uint64_t>(stats.precision.count()));
  WriteEngineJson(json, stats);
  WriteOwnerJson(json, stats);
  json.EndObject();
  fmt::print(out, "{}\n", text);
}

// The engine's health in the table: "writes taken, table files 1.2 MiB live, ...", and what
// is damaged.
std::string EngineLine(const idem::EngineHealth& engine) {
  std::string line = fmt::format(
      "writes {}, table files {} live, {} in all, {} to compact",
      engine.writes_stopped ? "STOPPED" : "taken", HumanBytes(engine.live_table_bytes),
      HumanBytes(engine.total_table_bytes), HumanBytes(engine.pending_compaction_bytes));
  if (engine.damaged_table_files > 0) {
    line += fmt::format("; {} DAMAGED: {}", engine.damaged_table_files, engine.damage);
  }
  return line;
}

// A duration in three significant digits and the unit that suits it: "870 ns", "87.5 us",
// "2.5 ms", "1 s".
std::string HumanDuration(std::chrono::nanoseconds duration) {
  const auto ns = static_cast<double>(duration.count());
  if (ns < 1e3) return fmt::format("{:.3g} ns", ns);
  if (ns < 1e6) return fmt::format("{:.3g} us", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.3g} ms", ns / 1e6);
  return fmt::format("{:.3g} s", ns / 1e9);
}

// A histogram in the table: "p50 <= 100 us, p99 <= 2.5 ms, max <= 5 ms; 1234 calls, mean
// 87.5 us", each quantile the bound of the bucket it falls in; or "no calls".
std::string LatencyLine(const LatencyHistogram& histogram) {
  const uint64_t calls = histogram.count();
  if (calls == 0) return "no calls";
  const auto quantile = [&](double q) {
    // The bucket of the call ranked ceil(q * calls) from the fastest.
    const auto rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * calls)));
    uint64_t seen = 0;
    std::size_t bucket = 0;
    while (bucket + 1 < kLatencyBucketCount && (seen += histogram.buckets[bucket]) < rank) ++bucket;
    return bucket < std::size(kLatencyBounds)
               ? fmt::format("<= {}", HumanDuration(kLatencyBounds[bucket]))
               : fmt::format("> {}", HumanDuration(std::end(kLatencyBounds)[-1]));
  };
  return fmt::format("p50 {}, p99 {}, max {}; {} calls, mean {}", quantile(0.5), quantile(0.99),
                     quantile(1.0), calls,
                     HumanDuration(std::chrono::nanoseconds(histogram.sum_nanoseconds / calls)));
}

// The table's lines: a field (16 columns) and its value; an item indented under a heading, its
// name padded to `width` display columns.
template <typename Value>
void PrintField(std::ostream& out, std::string_view name, const Value& value) {
  fmt::print(out, "{:<16}{}\n", name, value);
}
template <typename Value>
void PrintItem(std::ostream& out, std::size_t width, std::string_view name, const Value& value) {
  fmt::print(out, "  {}{}\n", PadRight(std::string(name), width), value);
}

// The owner's part of the table: its counters and latency histograms, or why there are none.
void WriteOwnerTable(std::ostream& out, const StatsReport& stats, std::size_t item_width) {
  if (stats.owner.live) {
    PrintField(
        out, "counters",
        fmt::format("of the owner, pid {}, since {} ({} ago)",
                    stats.owner.pid != 0 ? std::to_string(stats.owner.pid) : "unknown",
                    FormatLocalTime(stats.owner.since), HumanAge(stats.now - stats.owner.since)));
    for (const CounterInfo& counter : kCounters) {
      PrintItem(out, item_width, counter.name, stats.owner.counters.*counter.field);
    }
    PrintField(out, "latency",
               "of the same owners (the bounds of the buckets the quantiles fall in)");
    for (const LatencyInfo& latency : kLatencies) {
      PrintItem(out, item_width, latency.name, LatencyLine(stats.owner.latencies.*latency.field));
    }
  } else if (stats.owner_unreachable) {
    PrintField(out, "counters", "unknown: the owner could not be asked (see the warning)");
  } else if (stats.in_postgres) {
    PrintField(out, "counters",
               "none: a store in PostgreSQL has no owner (each process counts its own)");
  } else {
    PrintField(out, "counters", "none: no process owns the store (the owner counts while it runs)");
  }
}

void WriteStatsTable(std::ostream& out, const std::string& name, const StatsReport& stats) {
  // A field (16 columns) and its value; an indented one (2 + 14, wider when a type needs it:
  // its name, two spaces, its count) under a heading. A type may be in any script: the names
  // are padded in display columns (PadRight, text.h).
  std::vector<std::pair<std::string, uint64_t>> types;  // two may look alike once cut
  std::size_t item_width = 14;
  for (const auto& [type, count] : stats.by_type) {
    std::string shown = type.empty() ? "(none)" : DisplayCell(type, 32);
    item_width = std::max(item_width, DisplayWidth(shown) + 2);
    types.emplace_back(std::move(shown), count);
  }
  const auto field = [&out](std::string_view name, const auto& value) {
    PrintField(out, name, value);
  };
  const auto item = [&out, item_width](std::string_view name, uint64_t count) {
    PrintItem(out, item_width, name, count);
  };
  field("store", DisplayEscape(name));
  if (stats.disk_bytes) {
    field("disk size",
          fmt::format("{} ({} bytes)", HumanBytes(*stats.disk_bytes), *stats.disk_bytes));
  } else {
    field("disk size", "- (a table in PostgreSQL: pg_total_relation_size on the server)");
  }
  if (stats.engine) field("engine", EngineLine(*stats.engine));
  field("records", stats.precision.count() == 0
                       ? fmt::format("{} (each read)", stats.records)
                       : fmt::format("{} (kept by the owner: done and failed to the {} s)",
                                     stats.records, stats.precision.count() / 1000));
  for (std::string_view state : kDisplayStates) item(state, stats.CountInState(state));
  if (stats.oldest_pending) {
    field("oldest pending",
          fmt::format("{}, created {} ({} ago)", DisplayCell(stats.oldest_pending->key, 48),
                      FormatLocalTime(stats.oldest_pending->created),
                      HumanAge(stats.now - stats.oldest_pending->created)));
  } else {
    field("oldest pending", "-");
  }
  fmt::print(out, "by type\n");
  if (stats.by_type.empty()) fmt::print(out, "  -\n");
  for (const auto& [shown, count] : types) item(shown, count);
  WriteOwnerTable(out, stats, item_width);
}

// Says on stderr that `missing` could not be read: the owner could not be asked (OwnerNotAsked).
void WarnOwnerNotAsked(const Context& ctx, const std::string& name, std::string_view missing,
                       const Status& status) {
  fmt::print(ctx.err, "idem stats: warning: {} of store {} are missing: {} (exit code {})\n",
             missing, DisplayEscape(name), EscapeControls(status.ToString()),
             static_cast<int>(kExitOwnerUnreachable));
  ctx.err.flush();
}

// Has `write` print to the terminal, or to the --output file (replaced atomically). Returns
// `code`, or the exit code of a failed write.
int Output(const Context& ctx, const StatsArgs& args, FunctionRef<void(std::ostream&)> write,
           int code) {
  if (args.output.empty()) {
    write(ctx.out);
    return ctx.FinishOutput(code);
  }
  std::ostringstream text;
  write(text);
  const int written = ctx.WriteFileAtomically(args.output, text.str());
  return written != kExitOk ? written : code;
}

// The store as the output names it: a directory by its canonical path, so that `s1`, `./s1` and
// the absolute path are one Prometheus series; a URI without its secrets.
std::string CanonicalName(const Context& ctx, const std::string& path) {
  if (util::IsPostgresUri(path)) return ctx.StoreName(path);
  std::error_code error;
  const std::filesystem::path canonical = std::filesystem::canonical(path, error);
  return ctx.StoreName(error ? path : canonical.string());
}

}  // namespace

int Stats(const Context& ctx, const StatsArgs& args) {
  const std::string& path = args.path;
  const std::string name = CanonicalName(ctx, path);
  // With --output the destination is a file, never the terminal: jsonl unless told.
  const std::string format = args.output.empty()   ? ResolveFormat(ctx, args.format)
                             : args.format.empty() ? "jsonl"
                                                   : args.format;
  StatsReport stats;
  stats.in_postgres = util::IsPostgresUri(path);
  auto store = ctx.OpenStore(path, /*read_only=*/true);
  Status read = store.status();
  if (store.ok()) {
    Result<idem::StoreStats> counted = (*store)->GetStats();
    if (counted.ok()) static_cast<idem::StoreStats&>(stats) = std::move(*counted);
    read = counted.status();
  }
  if (!read.ok()) {
    if (!OwnerNotAsked(read)) return ctx.StoreError(path, read);
    // Only the owner could give the records: nothing to count. For the textfile collector the
    // owner's gauges still say so, so that an alert fires rather than the metrics going stale.
    WarnOwnerNotAsked(ctx, name, "the records and the counters", read);
    if (format != "prometheus") return kExitOwnerUnreachable;
    stats.owner_unreachable = true;
    return Output(
        ctx, args, [&](std::ostream& out) { WriteOwnerPrometheus(out, name, stats); },
        kExitOwnerUnreachable);
  }
  // In PostgreSQL no process owns the store: this process's own counts would say nothing.
  if (!stats.in_postgres) {
    Result<OwnerCounters> owner = (*store)->GetOwnerCounters();
    if (owner.ok()) {
      stats.owner = *owner;
    } else if (OwnerNotAsked(owner.status())) {
      // The records are read; the counters are not: print what is known, and say so.
      stats.owner_unreachable = true;
      WarnOwnerNotAsked(ctx, name, "the counters", owner.status());
    } else {
      return ctx.StoreError(path, owner.status());
    }
  }
  stats.now = ctx.Now();
  store->reset();
  if (!stats.in_postgres) stats.disk_bytes = DirectorySize(path);
  const auto write = [&](std::ostream& out) {
    if (format == "prometheus") {
      WriteStatsPrometheus(out, name, stats);
    } else if (format == "jsonl") {
      WriteStatsJson(out, name, stats);
    } else {
      WriteStatsTable(out, name, stats);
    }
  };
  return Output(ctx, args, write, stats.owner_unreachable ? kExitOwnerUnreachable : kExitOk);
}

}  // namespace idem::cli
