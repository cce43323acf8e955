// The exact bytes of the protocol (sharing/protocol.h, docs/format.md), first pinned at version 12
// before the encoder and decoder were remade as one struct per op
// (docs/design/protocol-ops-plan.md, "Proving the bytes unchanged"): every request, with every
// field set to a distinct value, and one answer per answer codec, an error, a refusal and a
// goodbye. The same file, unedited, must pass before and after the refactor, so it uses only the
// APIs that survive it: EncodeRequest of a Request, DecodeRequest, the answer codecs and the
// response envelope.
//
// Never edit a literal here to make the test pass. A change of these bytes is a change of the
// protocol: it needs a new kProtocolVersion and docs/format.md, and then new literals. An op added
// without its golden fails TheRequestGoldensCoverEveryOp.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sharing/protocol.h"
#include "util/hex.h"
#include "util/time.h"

namespace idem::sharing {
namespace {

using std::chrono::milliseconds;

// Table writes of every kind (conditional or not, put or delete) and two required keys, one of
// them at version 0 (still never written).
const WriteSet& GoldenWrites() {
  static const WriteSet writes = [] {
    WriteSet w;
    w.Put("balances", "acct-1", "value-1", 0x2122232425262728);
    w.Delete("log", "entry-2");
    w.Put("balances", "acct-3", "value-3");
    w.Delete("log", "entry-4", 0x31);
    w.Require("limits", "acct-5", 0x4142434445464748);
    w.Require("limits", "acct-6", 0);
    return w;
  }();
  return writes;
}

engine::TransitionCall GoldenComplete() {
  return engine::TransitionCall{.key = "complete-key",
                                .request = {.kind = engine::TransitionKind::kComplete,
                                            .token = 0x5152535455565758,
                                            .payload = "complete-result",
                                            .failure = Failure::kTerminal,
                                            .lease = milliseconds(0x0607)},
                                .durability = Durability::kBuffered};
}

struct RequestGolden {
  const char* name;
  Request request;
  std::string_view hex;  // the bytes of EncodeRequest(request), version 12
};

std::vector<RequestGolden> RequestGoldens() {
  std::vector<RequestGolden> goldens;
  goldens.push_back({"Begin",
                     BeginMessage{engine::BeginCall{.key = "begin-key",
                                                    .type = "begin-type",
                                                    .fingerprint = "begin-fingerprint",
                                                    .lease = milliseconds(0x1101),
                                                    .retention = milliseconds(0x220002),
                                                    .request_id = 0x0102030405060708,
                                                    .durability = Durability::kPeriodic}},
                     "0f0109000000626567696e2d6b65790a000000626567696e2d74797065110000"
                     "00626567696e2d66696e6765727072696e740111000000000000020022000000"
                     "0000080706050403020102"});
  goldens.push_back(
      {"Transition, a Fail without writes",
       TransitionMessage{engine::TransitionCall{.key = "fail-key",
                                                .request = {.kind = engine::TransitionKind::kFail,
                                                            .token = 0x1112131415161718,
                                                            .payload = "fail-error",
                                                            .failure = Failure::kTerminal,
                                                            .lease = milliseconds(0x3303)},
                                                .durability = Durability::kBuffered},
                         {}},
       "0f0201080000006661696c2d6b657918171615141312110a0000006661696c2d"
       "6572726f72010333000000000000010000000000000000"});
  // A Complete with GoldenWrites(), whichever of its two places holds them.
  const char* const kCompleteWithWrites =
      "0f02000c000000636f6d706c6574652d6b657958575655545352510f00000063"
      "6f6d706c6574652d726573756c74010706000000000000010400000008000000"
      "62616c616e63657306000000616363742d31010700000076616c75652d310128"
      "27262524232221030000006c6f6707000000656e7472792d3200000800000062"
      "616c616e63657306000000616363742d33010700000076616c75652d33000300"
      "00006c6f6707000000656e7472792d3400013100000000000000020000000600"
      "00006c696d69747306000000616363742d354847464544434241060000006c69"
      "6d69747306000000616363742d360000000000000000";
  // A client's Complete: the call points at its writes.
  engine::TransitionCall complete = GoldenComplete();
  complete.writes = &GoldenWrites();
  goldens.push_back({"Transition, a Complete with writes (call.writes)",
                     TransitionMessage{complete, {}}, kCompleteWithWrites});
  // The same Complete as the owner decodes it: the writes in the message, none in the call. The
  // same bytes.
  goldens.push_back({"Transition, a Complete with writes (writes)",
                     TransitionMessage{GoldenComplete(), GoldenWrites()}, kCompleteWithWrites});
  goldens.push_back({"Get", GetMessage{"get-key"}, "0f03070000006765742d6b6579"});
  goldens.push_back({"Forget", ForgetMessage{"forget-key", Durability::kPeriodic},
                     "0f040a000000666f726765742d6b657902000000000000000000000000000000"
                     "0000"});
  goldens.push_back({"Forget as read",
                     ForgetMessage{"forget-key", Durability::kSync,
                                   engine::AsRead{.token = 0x2122232425262728,
                                                  .updated = util::FromMicros(1700000000000009)}},
                     "0f040a000000666f726765742d6b65790001282726252423222109401e18240a"
                     "0600"});
  goldens.push_back({"Scan of a view",
                     ScanMessage{{.prefix = "scan-prefix", .start_after = "scan-prefix-after"},
                                 0x51525354,
                                 0x6162636465666768},
                     "0f050b0000007363616e2d707265666978110000007363616e2d707265666978"
                     "2d6166746572545352516867666564636261"});
  goldens.push_back(
      {"Purge counting its total",
       PurgeMessage{
           {.dry_run = true, .compact = true}, 0x7172737475767778, milliseconds(0x0908), true},
       "0f0678777675747372710101080900000000000001"});
  goldens.push_back(
      {"Purge, a dry run",
       PurgeMessage{{.dry_run = true}, 0x0a0b0c0d0e0f1011, milliseconds(0x1213), false},
       "0f0611100f0e0d0c0b0a0100131200000000000000"});
  goldens.push_back({"Counters", CountersMessage{}, "0f07"});
  goldens.push_back({"Backup",
                     BackupMessage{0x8182838485868788, milliseconds(0x0a0b), "/backups/golden"},
                     "0f0888878685848382810b0a0000000000000f0000002f6261636b7570732f67"
                     "6f6c64656e"});
  goldens.push_back({"GetValue", GetValueMessage{"values-table", "values-key"},
                     "0f090c00000076616c7565732d7461626c650a00000076616c7565732d6b6579"});
  goldens.push_back(
      {"ScanTable of a view",
       ScanTableMessage{"scan-table",
                        {.prefix = "table-prefix", .start_after = "table-prefix-after"},
                        0x91929394,
                        0xa1a2a3a4a5a6a7a8},
       "0f0a0a0000007363616e2d7461626c650c0000007461626c652d707265666978"
       "120000007461626c652d7072656669782d616674657294939291a8a7a6a5a4a3"
       "a2a1"});
  goldens.push_back({"ListTables", ListTablesMessage{}, "0f0b"});
  goldens.push_back({"OpenView", OpenViewMessage{}, "0f0c"});
  goldens.push_back({"CloseView", CloseViewMessage{0xb1b2b3b4b5b6b7b8}, "0f0db8b7b6b5b4b3b2b1"});
  const std::vector<TableKey> keys = {
      {"balances", "acct-1"}, {"balances", "acct-3"}, {"log", "entry-2"}};
  goldens.push_back({"Reserve",
                     ReserveMessage{engine::ReserveCall{.claim_key = "reserve-claim",
                                                        .token = 0xc1c2c3c4c5c6c7c8,
                                                        .keys = keys,
                                                        .hold = milliseconds(0x0c0d),
                                                        .wait = milliseconds(0x0e0f)}},
                     "0f0e0d000000726573657276652d636c61696dc8c7c6c5c4c3c2c10d0c000000"
                     "0000000f0e000000000000030000000800000062616c616e6365730600000061"
                     "6363742d310800000062616c616e63657306000000616363742d33030000006c"
                     "6f6707000000656e7472792d32"});
  goldens.push_back({"Unreserve", UnreserveMessage{"unreserve-claim", 0xd1d2d3d4d5d6d7d8},
                     "0f0f0f000000756e726573657276652d636c61696dd8d7d6d5d4d3d2d1"});
  goldens.push_back({"Writable", WritableMessage{}, "0f10"});
  goldens.push_back({"Stats", StatsMessage{}, "0f11"});
  return goldens;
}

// Each request's bytes are the recorded ones; its op byte is its place in Request plus one; and
// the recorded bytes decode to the same op, which encodes to them again.
TEST(ProtocolGolden, EveryRequestHasItsRecordedBytes) {
  ASSERT_EQ(kProtocolVersion, 15) << "a new version needs new goldens, recorded from its encoder";
  for (const RequestGolden& golden : RequestGoldens()) {
    SCOPED_TRACE(golden.name);
    const std::string encoded = EncodeRequest(golden.request);
    EXPECT_EQ(util::ToHex(encoded), golden.hex);
    ASSERT_GE(encoded.size(), 2u);
    EXPECT_EQ(static_cast<uint8_t>(encoded[0]), kProtocolVersion);
    EXPECT_EQ(static_cast<std::size_t>(static_cast<uint8_t>(encoded[1])),
              golden.request.index() + 1);

    const std::optional<std::string> recorded = util::FromHex(golden.hex);
    ASSERT_TRUE(recorded.has_value());
    const Result<Request> decoded = DecodeRequest(*recorded);  // views into *recorded
    if (!decoded.ok()) {
      ADD_FAILURE() << "the recorded bytes do not decode: " << decoded.status().ToString();
      continue;
    }
    EXPECT_EQ(decoded->index(), golden.request.index());
    EXPECT_EQ(util::ToHex(EncodeRequest(*decoded)), golden.hex);
  }
}

// Every alternative of Request has a golden: an op added without one fails here.
TEST(ProtocolGolden, TheRequestGoldensCoverEveryOp) {
  std::set<std::size_t> covered;
  for (const RequestGolden& golden : RequestGoldens()) covered.insert(golden.request.index());
  std::set<std::size_t> every;
  for (std::size_t i = 0; i < std::variant_size_v<Request>; ++i) every.insert(i);
  EXPECT_EQ(covered, every);
}

// Records with every field distinct and non-default; times in whole microseconds.
Record GoldenRecord() {
  Record r;
  r.key = "record-key";
  r.type = "record-type";
  r.state = State::kFailed;
  r.timed_out = true;
  r.result = "record-result";
  r.fingerprint = "record-fingerprint";
  r.checkpoint = "record-checkpoint";
  r.token = 0x1a1b1c1d1e1f2021;
  r.attempts = 0x22232425;
  r.retryable = true;
  r.holder = {.pid = 0x26272829,
              .process_start = 0x2a2b2c2d2e2f3031,
              .pid_scope = 0x3233343536373839,
              .request_id = 0x3a3b3c3d3e3f4041,
              .took_over = true};
  r.created = util::FromMicros(1700000000000001);
  r.updated = util::FromMicros(1700000000000002);
  r.lease_deadline = util::FromMicros(1700000000000003);
  r.expires = util::FromMicros(1700000000000004);
  return r;
}

Record OtherRecord() {
  Record r;
  r.key = "other-key";
  r.type = "other-type";
  r.state = State::kDone;
  r.result = "other-result";
  r.token = 7;
  r.attempts = 1;
  r.holder.took_over = true;
  r.created = util::FromMicros(-1);
  r.updated = util::FromMicros(5);
  r.expires = util::FromMicros(0x0102030405);
  return r;
}

// Decodes an answer body and encodes it again.
using BodyRoundTrip = std::function<Result<std::string>(std::string_view body)>;

template <class Decode, class Encode>
BodyRoundTrip RoundTrip(Decode decode, Encode encode) {
  return [decode, encode](std::string_view body) -> Result<std::string> {
    auto value = decode(body);
    if (!value.ok()) return value.status();
    return encode(*value);
  };
}

struct ResponseGolden {
  const char* name;
  std::string frame;  // EncodeResponse or EncodeClosing
  std::string_view hex;
  ResponseKind kind;
  Status::Code code;
  BodyRoundTrip body;  // empty: an answer without a body
};

std::vector<ResponseGolden> ResponseGoldens() {
  const ResponseKind answer = ResponseKind::kAnswer;
  const Status::Code ok = Status::Code::kOk;
  std::vector<ResponseGolden> goldens;
  const Record record = GoldenRecord();
  const Claim claim{.outcome = Outcome::kMismatch,
                    .token = 0x4243444546474849,
                    .took_over = true,
                    .retry_after = milliseconds(0x4a4b),
                    .record = record};
  goldens.push_back({"Claim", EncodeResponse(Status::OK(), EncodeClaim(claim)),
                     "0f000000000000044948474645444342014b4a0000000000000a000000726563"
                     "6f72642d6b657902010b0000007265636f72642d74797065120000007265636f"
                     "72642d66696e6765727072696e740d0000007265636f72642d726573756c7411"
                     "0000007265636f72642d636865636b706f696e7421201f1e1d1c1b1a25242322"
                     "0101401e18240a060002401e18240a060003401e18240a060004401e18240a06"
                     "002928272631302f2e2d2c2b2a393837363534333241403f3e3d3c3b3a01",
                     answer, ok, RoundTrip(DecodeClaim, EncodeClaim)});
  goldens.push_back({"a record", EncodeResponse(Status::OK(), EncodeOptionalRecord(record)),
                     "0f000000000000010a0000007265636f72642d6b657902010b0000007265636f"
                     "72642d74797065120000007265636f72642d66696e6765727072696e740d0000"
                     "007265636f72642d726573756c74110000007265636f72642d636865636b706f"
                     "696e7421201f1e1d1c1b1a252423220101401e18240a060002401e18240a0600"
                     "03401e18240a060004401e18240a06002928272631302f2e2d2c2b2a39383736"
                     "3534333241403f3e3d3c3b3a01",
                     answer, ok, RoundTrip(DecodeOptionalRecord, EncodeOptionalRecord)});
  goldens.push_back({"no record", EncodeResponse(Status::OK(), EncodeOptionalRecord(std::nullopt)),
                     "0f00000000000000", answer, ok,
                     RoundTrip(DecodeOptionalRecord, EncodeOptionalRecord)});
  const engine::ScanPage page{.records = {record, OtherRecord()}, .more = true};
  goldens.push_back({"engine::ScanPage", EncodeResponse(Status::OK(), EncodeScanPage(page)),
                     "0f000000000000020000000a0000007265636f72642d6b657902010b00000072"
                     "65636f72642d74797065120000007265636f72642d66696e6765727072696e74"
                     "0d0000007265636f72642d726573756c74110000007265636f72642d63686563"
                     "6b706f696e7421201f1e1d1c1b1a252423220101401e18240a060002401e1824"
                     "0a060003401e18240a060004401e18240a06002928272631302f2e2d2c2b2a39"
                     "3837363534333241403f3e3d3c3b3a01090000006f746865722d6b657901000a"
                     "0000006f746865722d74797065000000000c0000006f746865722d726573756c"
                     "740000000007000000000000000100000000ffffffffffffffff050000000000"
                     "0000000000000000000005040302010000000000000000000000000000000000"
                     "00000000000000000000000000000101",
                     answer, ok, RoundTrip(DecodeScanPage, EncodeScanPage)});
  goldens.push_back({"a table value",
                     EncodeResponse(Status::OK(), EncodeTableValue({"table-value", 0x4c4d4e4f})),
                     "0f000000000000010b0000007461626c652d76616c75654f4e4d4c00000000", answer, ok,
                     RoundTrip(DecodeTableValue, EncodeTableValue)});
  goldens.push_back({"a deleted table value",
                     EncodeResponse(Status::OK(), EncodeTableValue({std::nullopt, 0x50})),
                     "0f000000000000005000000000000000", answer, ok,
                     RoundTrip(DecodeTableValue, EncodeTableValue)});
  const engine::TablePage table_page{
      .values = {{"page-key-1", {"page-value-1", 0x5152}}, {"page-key-2", {std::nullopt, 3}}},
      .more = true};
  goldens.push_back({"engine::TablePage", EncodeResponse(Status::OK(), EncodeTablePage(table_page)),
                     "0f000000000000020000000a000000706167652d6b65792d31010c0000007061"
                     "67652d76616c75652d3152510000000000000a000000706167652d6b65792d32"
                     "00030000000000000001",
                     answer, ok, RoundTrip(DecodeTablePage, EncodeTablePage)});
  goldens.push_back({"Granted", EncodeResponse(Status::OK(), EncodeGranted(true)),
                     "0f00000000000001", answer, ok, RoundTrip(DecodeGranted, EncodeGranted)});
  goldens.push_back({"ViewId", EncodeResponse(Status::OK(), EncodeViewId(0x535455565758595a)),
                     "0f0000000000005a59585756555453", answer, ok,
                     RoundTrip(DecodeViewId, EncodeViewId)});
  goldens.push_back({"TableNames",
                     EncodeResponse(Status::OK(), EncodeTableNames({"balances", "log"})),
                     "0f000000000000020000000800000062616c616e636573030000006c6f67", answer, ok,
                     RoundTrip(DecodeTableNames, EncodeTableNames)});
  // The one literal that may change within a version: a counter added to idem::kCounters adds
  // its (number, value) pair and raises the count (docs/format.md: numbered fields). Not live
  // and not pid: they do not travel (the client fills them in).
  OwnerCounters counters;
  counters.counters = {.claims = 0x61,
                       .replays = 0x62,
                       .in_progress = 0x63,
                       .takeovers = 0x64,
                       .failed = 0x65,
                       .mismatches = 0x66,
                       .lease_lost = 0x67,
                       .purged = 0x6869,
                       .quota_refusals = 0x6a,
                       .quota_exceeded = 0x6b,
                       .completes = 0x6c,
                       .fails = 0x6d,
                       .terminal_fails = 0x6e,
                       .io_errors = 0x6f,
                       .corruption_errors = 0x70,
                       .timeout_errors = 0x71,
                       .busy_errors = 0x72,
                       .unavailable_errors = 0x73,
                       .stalls = 0x74};
  counters.since = util::FromMicros(1700000000000005);
  // The histograms: buckets then sum, begin's from 0x81, complete's from 0x91.
  for (std::size_t row = 0; row < kLatencyCount; ++row) {
    LatencyHistogram& histogram = counters.latencies.*kLatencies[row].field;
    const uint64_t base = row == 0 ? 0x81 : 0x91;
    for (std::size_t b = 0; b < kLatencyBucketCount; ++b) histogram.buckets[b] = base + b;
    histogram.sum_nanoseconds = base + kLatencyBucketCount;
  }
  goldens.push_back({"Counters", EncodeResponse(Status::OK(), EncodeCounters(counters)),
                     "0f00000000000013000000016100000000000000026200000000000000036300"
                     "0000000000000464000000000000000565000000000000000666000000000000"
                     "00076700000000000000086968000000000000096a000000000000000a6b0000"
                     "00000000000b6c000000000000000c6d000000000000000d6e00000000000000"
                     "0e6f000000000000000f70000000000000001071000000000000001172000000"
                     "0000000012730000000000000013740000000000000005401e18240a06008100"
                     "0000000000008200000000000000830000000000000084000000000000008500"
                     "0000000000008600000000000000870000000000000088000000000000008900"
                     "0000000000008a000000000000008b000000000000008c000000000000008d00"
                     "0000000000008e000000000000008f0000000000000091000000000000009200"
                     "0000000000009300000000000000940000000000000095000000000000009600"
                     "0000000000009700000000000000980000000000000099000000000000009a00"
                     "0000000000009b000000000000009c000000000000009d000000000000009e00"
                     "0000000000009f00000000000000",
                     answer, ok, RoundTrip(DecodeCounters, EncodeCounters)});
  goldens.push_back(
      {"PurgeProgress with its total",
       EncodeResponse(Status::OK(),
                      EncodePurgeProgress({.count = 0x6c6d, .done = false, .total = 0x6e6f70})),
       "0f0000000000006d6c0000000000000001706f6e0000000000", answer, ok,
       RoundTrip(DecodePurgeProgress, EncodePurgeProgress)});
  goldens.push_back(
      {"PurgeProgress without a total",
       EncodeResponse(Status::OK(), EncodePurgeProgress({.count = 0x7172, .done = true})),
       "0f00000000000072710000000000000100", answer, ok,
       RoundTrip(DecodePurgeProgress, EncodePurgeProgress)});
  engine::Backend::Stats kept{.counted = true};
  kept.stats.records = 0x75;
  kept.stats.by_state = {{"done", 0x76}, {"pending", 0x77}};
  kept.stats.by_type = {{"pay", 0x78}};
  kept.stats.oldest_pending.emplace();
  kept.stats.oldest_pending->key = "oldest-key";
  kept.stats.oldest_pending->created = util::FromMicros(1700000000000006);
  kept.stats.at = util::FromMicros(1700000000000007);
  kept.stats.precision = milliseconds(60000);
  kept.stats.engine = EngineHealth{.writes_stopped = true,
                                   .pending_compaction_bytes = 0x79,
                                   .live_table_bytes = 0x7a,
                                   .total_table_bytes = 0x7b,
                                   .damaged_table_files = 0x7c,
                                   .damage = "bad"};
  goldens.push_back({"Stats kept by the owner", EncodeResponse(Status::OK(), EncodeStats(kept)),
                     "0f0000000000000175000000000000000200000004000000646f6e6576000000"
                     "000000000700000070656e64696e677700000000000000010000000300000070"
                     "61797800000000000000010a0000006f6c646573742d6b657906401e18240a06"
                     "0007401e18240a060060ea000000000000010179000000000000007a00000000"
                     "0000007b000000000000007c0000000000000003000000626164",
                     answer, ok, RoundTrip(DecodeStats, EncodeStats)});
  goldens.push_back({"Stats not kept", EncodeResponse(Status::OK(), EncodeStats({})),
                     "0f0000000000000000", answer, ok, RoundTrip(DecodeStats, EncodeStats)});
  goldens.push_back(
      {"OK without a body", EncodeResponse(Status::OK()), "0f000000000000", answer, ok, {}});
  goldens.push_back({"an error",
                     EncodeResponse(Status::Conflict("a key changed")),
                     "0f0d0d00000061206b6579206368616e67656400",
                     answer,
                     Status::Code::kConflict,
                     {}});
  goldens.push_back({"a refusal",
                     EncodeClosing(ResponseKind::kRefusal, Status::Busy("the owner is busy")),
                     "0f0711000000746865206f776e6572206973206275737901",
                     ResponseKind::kRefusal,
                     Status::Code::kBusy,
                     {}});
  goldens.push_back({"a goodbye",
                     EncodeClosing(ResponseKind::kGoodbye, Status::Unavailable("idle too long")),
                     "0f0b0d00000069646c6520746f6f206c6f6e6702",
                     ResponseKind::kGoodbye,
                     Status::Code::kUnavailable,
                     {}});
  return goldens;
}

// Each response's bytes are the recorded ones, and the recorded bytes decode (envelope, then
// body) to what encodes to them again.
TEST(ProtocolGolden, EveryResponseHasItsRecordedBytes) {
  ASSERT_EQ(kProtocolVersion, 15) << "a new version needs new goldens, recorded from its encoder";
  for (const ResponseGolden& golden : ResponseGoldens()) {
    SCOPED_TRACE(golden.name);
    EXPECT_EQ(util::ToHex(golden.frame), golden.hex);

    const std::optional<std::string> recorded = util::FromHex(golden.hex);
    ASSERT_TRUE(recorded.has_value());
    Status status;
    ResponseKind kind = ResponseKind::kAnswer;
    const Result<std::string_view> body = DecodeResponse(*recorded, status, kind);
    if (!body.ok()) {
      ADD_FAILURE() << "the recorded bytes do not decode: " << body.status().ToString();
      continue;
    }
    EXPECT_EQ(kind, golden.kind);
    EXPECT_EQ(status.code(), golden.code);
    std::string again;
    if (kind != ResponseKind::kAnswer) {
      again = EncodeClosing(kind, status);
    } else if (golden.body) {
      const Result<std::string> reencoded = golden.body(*body);
      if (!reencoded.ok()) {
        ADD_FAILURE() << "the recorded body does not decode: " << reencoded.status().ToString();
        continue;
      }
      again = EncodeResponse(status, *reencoded);
    } else {
      EXPECT_EQ(*body, "");
      again = EncodeResponse(status);
    }
    EXPECT_EQ(util::ToHex(again), golden.hex);
  }
}

}  // namespace
}  // namespace idem::sharing
