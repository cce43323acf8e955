// The seed corpus of the fuzz targets: valid encodings of each kind of input, in the layout that
// fuzz/fuzz_checks.h reads, so that the fuzzers start from inputs that get past the first checks.
// Made from the library's current encoders and constants: fuzz_make_seeds writes them to
// fuzz/corpus/<target>/<name>, and tests/system/fuzz_regression_test.cc checks that the files there
// are these (a format or protocol version change leaves them stale until they are written again).

#ifndef IDEM_FUZZ_SEEDS_H_
#define IDEM_FUZZ_SEEDS_H_

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "backend/record_counts.h"
#include "cli.h"
#include "export_format.h"
#include "idem/record.h"
#include "sharing/protocol.h"
#include "storage/rocksdb/record_codec.h"

namespace idem::fuzz {

struct Seed {
  std::string target;  // the fuzz target's corpus directory: record_decoder, frame_decoder,
                       // record_counts, import_line, cli
  std::string name;
  std::string bytes;
};

namespace seeds_internal {

using namespace std::chrono_literals;
using idem::Record;
using idem::State;

inline std::vector<Record> SampleRecords() {
  const auto t = std::chrono::system_clock::time_point(1'796'000'000'000'000us);
  Record pending;
  pending.key = "order-1";
  pending.type = "pay";
  pending.fingerprint = std::string(32, '\x5a');
  pending.checkpoint = "charged card";
  pending.token = 7;
  pending.attempts = 2;
  pending.holder = {.pid = 4242, .process_start = 123456, .request_id = 99, .took_over = true};
  pending.created = t;
  pending.updated = t + 1s;
  pending.lease_deadline = t + 31s;
  pending.expires = t + 24h;

  Record done = pending;
  done.key = std::string("\x00\xff key", 6);
  done.state = State::kDone;
  done.result = "{\"status\":200}";
  done.checkpoint.clear();

  Record failed = pending;
  failed.key = "refund-9";
  failed.type = "refund";
  failed.state = State::kFailed;
  failed.retryable = true;
  failed.result = "card declined";

  Record empty;  // every field at its default
  empty.key = "k";
  return {pending, done, failed, empty};
}

inline std::string WithKey(const Record& record) {
  std::string input(1, static_cast<char>(record.key.size()));
  input += record.key;
  input += idem::storage::EncodeRecord(record);
  return input;
}

// A response frame for the frame target: selector (1 + body kind), then the frame.
inline std::string Response(uint8_t body_kind, std::string_view body) {
  return std::string(1, static_cast<char>(1 + body_kind)) +
         idem::sharing::EncodeResponse(idem::Status::OK(), body);
}

inline std::string Words(std::initializer_list<std::string_view> words) {
  std::string input;
  for (std::string_view word : words) {
    if (!input.empty()) input += '\0';
    input += word;
  }
  return input;
}

}  // namespace seeds_internal

inline std::vector<Seed> MakeSeeds() {
  using namespace seeds_internal;
  std::vector<Seed> seeds;
  const auto add = [&seeds](std::string target, std::string name, std::string bytes) {
    seeds.push_back({std::move(target), std::move(name), std::move(bytes)});
  };
  const std::vector<Record> records = SampleRecords();

  // record_decoder: u8 key length, key, value.
  const char* record_names[] = {"pending", "done", "failed", "defaults"};
  for (std::size_t i = 0; i < records.size(); ++i) {
    add("record_decoder", record_names[i], WithKey(records[i]));
  }
  // Values of the older versions still read: 3, 2, and 1 (idem 0.1).
  for (const uint8_t version :
       {idem::storage::kRecordFormatVersion3, idem::storage::kRecordFormatVersion2,
        idem::storage::kRecordFormatVersion1}) {
    std::string older(1, static_cast<char>(records[0].key.size()));
    older += records[0].key;
    older += idem::storage::EncodeRecordAtOlderVersion(records[0], version);
    add("record_decoder", "pending_v" + std::to_string(version), older);
  }

  // frame_decoder: selector 0 and a request, or selector 1 + body kind and a response.
  namespace sharing = idem::sharing;
  const std::string frames = "frame_decoder";
  const std::string request_prefix(1, '\0');
  idem::engine::BeginCall begin{.key = "order-1",
                                .type = "pay",
                                .fingerprint = "fp",
                                .lease = 30s,
                                .retention = 24h,
                                .request_id = 77};
  add(frames, "request_begin",
      request_prefix + sharing::EncodeRequest(sharing::BeginMessage{begin}));
  idem::engine::TransitionCall transition{.key = "order-1"};
  transition.request = {.kind = idem::engine::TransitionKind::kFail,
                        .token = 7,
                        .payload = "declined",
                        .failure = idem::Failure::kTerminal};
  add(frames, "request_transition",
      request_prefix + sharing::EncodeRequest(sharing::TransitionMessage{transition, {}}));
  transition.request = {.kind = idem::engine::TransitionKind::kExtend, .token = 7, .lease = 5s};
  add(frames, "request_extend",
      request_prefix + sharing::EncodeRequest(sharing::TransitionMessage{transition, {}}));
  idem::WriteSet writes;
  writes.Put("balances", "alice", "10", 3);
  writes.Delete("balances", "bob");
  writes.Require("balances", "carol", 2);
  transition.request = {
      .kind = idem::engine::TransitionKind::kComplete, .token = 7, .payload = "charged"};
  transition.writes = &writes;
  add(frames, "request_complete_with_writes",
      request_prefix + sharing::EncodeRequest(sharing::TransitionMessage{transition, {}}));
  transition.writes = nullptr;
  add(frames, "request_get_value",
      request_prefix + sharing::EncodeRequest(sharing::GetValueMessage{"balances", "alice"}));
  add(frames, "request_list_tables",
      request_prefix + sharing::EncodeRequest(sharing::ListTablesMessage{}));
  add(frames, "request_scan_table",
      request_prefix + sharing::EncodeRequest(sharing::ScanTableMessage{
                           "balances", {.prefix = "a", .start_after = ""}, 100}));
  add(frames, "request_get",
      request_prefix + sharing::EncodeRequest(sharing::GetMessage{"order-1"}));
  add(frames, "request_forget",
      request_prefix +
          sharing::EncodeRequest(sharing::ForgetMessage{"order-1", idem::Durability::kBuffered}));
  sharing::ScanMessage scan{.options = {.prefix = "order-", .start_after = "order-1"},
                            .limit = 100};
  add(frames, "request_scan", request_prefix + sharing::EncodeRequest(scan));
  sharing::PurgeMessage purge;
  purge.options.dry_run = true;
  purge.ticket = 99;
  purge.wait = 1000ms;
  purge.count_total = true;
  add(frames, "request_purge", request_prefix + sharing::EncodeRequest(purge));
  add(frames, "request_counters",
      request_prefix + sharing::EncodeRequest(sharing::CountersMessage{}));
  sharing::BackupMessage backup;
  backup.ticket = 98;
  backup.wait = 1000ms;
  backup.destination = "/var/backups/idem/2026-12-01";
  add(frames, "request_backup", request_prefix + sharing::EncodeRequest(backup));
  sharing::ReserveMessage reserve{.call = {.claim_key = "order-1",
                                           .token = 7,
                                           .keys = {{"balances", "alice"}, {"balances", "bob"}},
                                           .hold = 30s,
                                           .wait = 20ms}};
  add(frames, "request_reserve", request_prefix + sharing::EncodeRequest(reserve));
  add(frames, "request_unreserve",
      request_prefix + sharing::EncodeRequest(sharing::UnreserveMessage{"order-1", 7}));
  add(frames, "request_forget_as_read",
      request_prefix + sharing::EncodeRequest(sharing::ForgetMessage{
                           "order-1", idem::Durability::kSync,
                           engine::AsRead{.token = 7, .updated = records[0].updated}}));
  add(frames, "request_writable",
      request_prefix + sharing::EncodeRequest(sharing::WritableMessage{}));
  add(frames, "request_stats", request_prefix + sharing::EncodeRequest(sharing::StatsMessage{}));

  idem::Claim claim{.outcome = idem::Outcome::kInProgress,
                    .token = 7,
                    .took_over = true,
                    .retry_after = 1500ms,
                    .record = records[0]};
  add(frames, "response_claim", Response(0, sharing::EncodeClaim(claim)));
  add(frames, "response_record", Response(1, sharing::EncodeOptionalRecord(records[1])));
  add(frames, "response_no_record", Response(1, sharing::EncodeOptionalRecord({})));
  idem::engine::ScanPage page{.records = {records[0], records[2]}, .more = true};
  add(frames, "response_scan_page", Response(2, sharing::EncodeScanPage(page)));
  idem::OwnerCounters counters;
  counters.counters = {.claims = 3, .replays = 2, .in_progress = 1, .purged = 9};
  counters.since = std::chrono::system_clock::time_point(std::chrono::seconds(1764464523));
  add(frames, "response_counters", Response(3, sharing::EncodeCounters(counters)));
  add(frames, "response_purge_progress",
      Response(4, sharing::EncodePurgeProgress({.count = 12, .done = true, .total = 15})));
  add(frames, "response_purge_counting",
      Response(4, sharing::EncodePurgeProgress({.count = 0, .done = false})));
  idem::engine::Backend::Stats stats{.counted = true};
  stats.stats.records = 3;
  stats.stats.by_state = {{"done", 2}, {"pending", 1}};
  stats.stats.by_type = {{"pay", 3}};
  stats.stats.oldest_pending = records[0];
  stats.stats.precision = 60s;
  stats.stats.engine = idem::EngineHealth{.live_table_bytes = 4096};
  add(frames, "response_stats", Response(5, sharing::EncodeStats(stats)));
  add(frames, "response_refusal",
      std::string(1, '\1') +
          sharing::EncodeClosing(sharing::ResponseKind::kRefusal,
                                 idem::Status::Busy("only uid 1000 may use this store")));
  add(frames, "response_goodbye",
      std::string(1, '\1') +
          sharing::EncodeClosing(sharing::ResponseKind::kGoodbye,
                                 idem::Status::Unavailable("idle for 60000 ms")));
  add(frames, "response_error",
      std::string(1, '\1') +
          sharing::EncodeResponse(idem::Status::LeaseLost("token 7 is not current")));

  // cli: the arguments after "idem", separated by NUL bytes.
  const std::string cli = "cli";
  add(cli, "help", Words({"--help"}));
  add(cli, "version", Words({"--version"}));
  add(cli, "dump", Words({"dump", "store"}));
  add(cli, "dump_flags",
      Words({"dump", "store", "--state", "pending", "--type", "pay", "--prefix", "order-",
             "--format", "jsonl", "--limit", "5"}));
  add(cli, "dump_help", Words({"dump", "--help"}));
  add(cli, "get", Words({"get", "store", "order-1", "--format", "table"}));
  add(cli, "get_hex", Words({"get", "store", "00ff41", "--hex-key"}));
  add(cli, "get_dash_key", Words({"get", "store", "--", "-key"}));
  add(cli, "stats", Words({"stats", "store", "--format=prometheus"}));
  add(cli, "purge", Words({"purge", "store", "--dry-run", "--quiet"}));
  add(cli, "forget", Words({"forget", "store", "order-1"}));
  add(cli, "backup", Words({"backup", "store", "store.backup"}));
  add(cli, "export", Words({"export", "store", "--output", "records.jsonl"}));
  add(cli, "import", Words({"import", "store", "records.jsonl", "--skip-existing"}));
  add(cli, "unknown", Words({"frobnicate", "store"}));

  // record_counts: the counts of the sample records, as an owner keeps them.
  idem::backend::RecordCounts counts;
  for (const Record& record : records) {
    counts.Move(record.key, static_cast<const Record*>(nullptr), &record, records[0].created);
  }
  add("record_counts", "sample", counts.Encode());
  add("record_counts", "empty", idem::backend::RecordCounts().Encode());

  // import_line: the sample records and a table value as `idem export` writes them, and the
  // shortest line a person writes.
  for (std::size_t i = 0; i < records.size(); ++i) {
    add("import_line", record_names[i], idem::cli::RecordToExportJson(records[i]));
  }
  add("import_line", "table_value",
      idem::cli::TableValueToExportJson("balances", std::string("al\xffice", 6),
                                        idem::TableValue{.value = "11", .version = 2}));
  add("import_line", "short", R"({"key":"order-2","state":"done","result":"ok"})");
  // Shapes for the two JSON readers (tools/quick_json.h, and nlohmann's for what it leaves):
  // escapes, UTF-8 of two to four bytes, nesting, the largest whole number; then \u escapes with
  // a surrogate pair, and a negative number and a fraction, which only nlohmann reads.
  add("import_line", "quick_shapes",
      "{\"key\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t\","
      "\"state\":\"done\",\"token\":18446744073709551615,\"extra\":[[[]],{},true,false,null]}");
  add("import_line", "nlohmann_shapes",
      R"({"key":"caf\u00e9 \ud83d\ude00","state":"done","attempts":-1,"token":1.5e3})");
  return seeds;
}

}  // namespace idem::fuzz

#endif  // IDEM_FUZZ_SEEDS_H_
