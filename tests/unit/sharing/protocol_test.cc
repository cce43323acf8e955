// The wire protocol's encoding of records and counters (sharing/wire_codec.h, docs/format.md):
// its own layout, independent of the on-disk record format, and strict about what it accepts.

#include "sharing/protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "util/time.h"

namespace idem::sharing {
namespace {

using util::FromMicros;

std::string Bytes(const char* bytes, std::size_t size) { return std::string(bytes, size); }

// A little-endian u32 length, then the bytes.
std::string Prefixed(std::string_view bytes) {
  const auto n = static_cast<uint32_t>(bytes.size());
  std::string out = {static_cast<char>(n & 0xFF), static_cast<char>((n >> 8) & 0xFF),
                     static_cast<char>((n >> 16) & 0xFF), static_cast<char>(n >> 24)};
  return out + std::string(bytes);
}

Record SampleRecord() {
  Record r;
  r.key = "k";
  r.state = State::kFailed;
  r.timed_out = false;
  r.type = "t";
  r.fingerprint = "f";
  r.result = "r";
  r.checkpoint = "c";
  r.token = 0x1122334455667788ULL;
  r.attempts = 3;
  r.retryable = true;
  r.created = FromMicros(-1);
  r.updated = FromMicros(7);
  r.lease_deadline = FromMicros(8);
  r.expires = FromMicros(0x0102);
  r.holder = {
      .pid = 0x01020304, .process_start = 5, .pid_scope = 9, .request_id = 6, .took_over = true};
  return r;
}

// The exact bytes of a record in protocol version 3 (docs/format.md), so that neither a change of
// the on-disk format (which the protocol carried until version 2) nor an encoder change can alter
// the protocol unnoticed: a round trip alone would not catch a change made to both sides.
TEST(Protocol, ARecordHasTheWiresOwnDocumentedLayout) {
  const std::string expected = std::string("\x01", 1) +  // present
                               Prefixed("k") +           // key
                               Bytes(
                                   "\x02"   // state: failed
                                   "\x00",  // timed_out
                                   2) +
                               Prefixed("t") + Prefixed("f") + Prefixed("r") +
                               Prefixed("c") +  // type ... checkpoint
                               Bytes(
                                   "\x88\x77\x66\x55\x44\x33\x22\x11"  // token
                                   "\x03\0\0\0"                        // attempts
                                   "\x01"                              // retryable
                                   "\xff\xff\xff\xff\xff\xff\xff\xff"  // created = -1 us
                                   "\x07\0\0\0\0\0\0\0"                // updated
                                   "\x08\0\0\0\0\0\0\0"                // lease_deadline
                                   "\x02\x01\0\0\0\0\0\0"              // expires
                                   "\x04\x03\x02\x01"                  // holder pid
                                   "\x05\0\0\0\0\0\0\0"                // process_start
                                   "\x09\0\0\0\0\0\0\0"                // pid_scope
                                   "\x06\0\0\0\0\0\0\0"                // request_id
                                   "\x01",                             // took_over
                                   8 + 4 + 1 + 4 * 8 + 4 + 3 * 8 + 1);
  EXPECT_EQ(EncodeOptionalRecord(SampleRecord()), expected);
}

TEST(Protocol, RecordsRoundTripInEveryBody) {
  Record timed_out = SampleRecord();
  timed_out.state = State::kPending;
  timed_out.timed_out = true;
  timed_out.key = std::string("\0\xff", 2);

  Result<std::optional<Record>> one = DecodeOptionalRecord(EncodeOptionalRecord(timed_out));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(**one, timed_out);
  Result<std::optional<Record>> none = DecodeOptionalRecord(EncodeOptionalRecord({}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  const Claim claim{.outcome = Outcome::kInProgress,
                    .token = 7,
                    .took_over = true,
                    .retry_after = std::chrono::milliseconds(1500),
                    .record = timed_out};
  Result<Claim> decoded_claim = DecodeClaim(EncodeClaim(claim));
  ASSERT_TRUE(decoded_claim.ok()) << decoded_claim.status().ToString();
  EXPECT_EQ(decoded_claim->record, timed_out);
  EXPECT_EQ(decoded_claim->retry_after, claim.retry_after);

  const engine::ScanPage page{.records = {SampleRecord(), timed_out, Record{}}, .more = true};
  Result<engine::ScanPage> decoded_page = DecodeScanPage(EncodeScanPage(page));
  ASSERT_TRUE(decoded_page.ok()) << decoded_page.status().ToString();
  EXPECT_EQ(decoded_page->records, page.records);
  EXPECT_TRUE(decoded_page->more);
}

// Each field the decoder checks, set out of its range in an otherwise valid record.
TEST(Protocol, ARecordWithAFieldOutOfRangeIsMalformed) {
  const std::string good = EncodeOptionalRecord(SampleRecord());
  const std::size_t state_at = 1 + 4 + 1;  // present, key
  const std::size_t timed_out_at = state_at + 1;
  const std::size_t retryable_at = timed_out_at + 1 + 4 * (4 + 1) + 8 + 4;
  const std::size_t created_at = retryable_at + 1;
  const std::size_t took_over_at = good.size() - 1;
  struct Case {
    const char* what;
    std::size_t at;
    std::string bytes;
  };
  for (const Case& c :
       {Case{"state 3", state_at, "\x03"}, Case{"timed_out 2", timed_out_at, "\x02"},
        Case{"retryable 2", retryable_at, "\x02"},
        // i64 max microseconds: beyond what a time_point holds
        Case{"created beyond a time_point", created_at, "\xff\xff\xff\xff\xff\xff\xff\x7f"},
        Case{"took_over 2", took_over_at, "\x02"}}) {
    std::string bad = good;
    bad.replace(c.at, c.bytes.size(), c.bytes);
    Result<std::optional<Record>> decoded = DecodeOptionalRecord(bad);
    ASSERT_FALSE(decoded.ok()) << c.what;
    EXPECT_EQ(decoded.status().code(), Status::Code::kUnavailable) << c.what;
  }
  for (std::size_t size = 0; size < good.size(); ++size) {
    EXPECT_FALSE(DecodeOptionalRecord(good.substr(0, size)).ok()) << "cut at " << size;
  }
  EXPECT_FALSE(DecodeOptionalRecord(good + "x").ok()) << "trailing byte";
}

// The latency histograms after the counters (version 15), all empty: per histogram, its buckets
// and its sum, each a u64.
const std::string kNoLatencies(idem::kLatencyCount*(idem::kLatencyBucketCount + 1) * 8, '\0');

// Counters travel as numbered fields: u32 count, then (u8 number, u64 value) for each; then
// (version 5) since when the owner has owned the store, in microseconds since the epoch; then
// (version 15) the latency histograms.
TEST(Protocol, CountersAreNumberedFieldsThenTheOwnersStartThenTheHistograms) {
  const Counters counters{.claims = 1,
                          .replays = 2,
                          .in_progress = 3,
                          .takeovers = 4,
                          .failed = 5,
                          .mismatches = 6,
                          .lease_lost = 7,
                          .purged = 0x0102,
                          .quota_refusals = 9,
                          .quota_exceeded = 10,
                          .completes = 11,
                          .fails = 12,
                          .terminal_fails = 13,
                          .io_errors = 14,
                          .corruption_errors = 15,
                          .timeout_errors = 16,
                          .busy_errors = 17,
                          .unavailable_errors = 18,
                          .stalls = 19};
  std::string expected = Bytes("\x13\0\0\0", 4);
  for (int id = 1; id <= 19; ++id) {
    expected += static_cast<char>(id);
    expected +=
        id == 8 ? Bytes("\x02\x01\0\0\0\0\0\0", 8) : static_cast<char>(id) + std::string(7, '\0');
  }
  expected += Bytes("\x03\x02\0\0\0\0\0\0", 8);  // since: 0x0203 us
  const std::size_t version_14_size = expected.size();
  std::string latencies = kNoLatencies;
  latencies[0] = '\x07';                                        // begin's first bucket: 7 calls
  latencies[(idem::kLatencyBucketCount + 1) * 8 - 8] = '\x2a';  // begin's sum: 42 ns
  expected += latencies;
  idem::OwnerCounters owner;
  owner.counters = counters;
  owner.since = std::chrono::system_clock::time_point(std::chrono::microseconds(0x0203));
  owner.latencies.begin.buckets[0] = 7;
  owner.latencies.begin.sum_nanoseconds = 42;
  EXPECT_EQ(EncodeCounters(owner), expected);
  Result<idem::OwnerCounters> decoded = DecodeCounters(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->counters, counters);
  EXPECT_EQ(decoded->since, owner.since);
  EXPECT_EQ(decoded->latencies, owner.latencies);
  // Version 14's answer, without the histograms, and version 4's, without the time, are
  // malformed, as is one cut inside a histogram.
  EXPECT_FALSE(DecodeCounters(expected.substr(0, version_14_size)).ok());
  EXPECT_FALSE(DecodeCounters(expected.substr(0, version_14_size - 8)).ok());
  EXPECT_FALSE(DecodeCounters(expected.substr(0, expected.size() - 8)).ok());
}

TEST(Protocol, CountersSkipUnknownNumbersAndRefuseRepeatedOnes) {
  // Number 200 (a counter of a later release) is skipped; absent counters read 0.
  const std::string since = std::string(8, '\0') + kNoLatencies;
  const std::string known_and_unknown = Bytes(
                                            "\x02\0\0\0"
                                            "\x02\x05\0\0\0\0\0\0\0"
                                            "\xc8\x09\0\0\0\0\0\0\0",
                                            4 + 2 * 9) +
                                        since;
  Result<idem::OwnerCounters> decoded = DecodeCounters(known_and_unknown);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->counters.replays, 5u);
  EXPECT_EQ(decoded->counters.claims, 0u);
  EXPECT_EQ(decoded->counters.purged, 0u);

  const std::string repeated = Bytes(
                                   "\x02\0\0\0"
                                   "\x02\x05\0\0\0\0\0\0\0"
                                   "\x02\x06\0\0\0\0\0\0\0",
                                   4 + 2 * 9) +
                               since;
  EXPECT_FALSE(DecodeCounters(repeated).ok());
  // A count that the body cannot hold.
  EXPECT_FALSE(DecodeCounters(Bytes("\xff\xff\xff\xff", 4)).ok());
  EXPECT_FALSE(DecodeCounters(known_and_unknown + "x").ok());
}

// Version 2 sent records in the store's disk format: an owner of version 3 refuses its requests
// naming both versions, and a client of version 3 reads a version 2 answer as a refusal.
TEST(Protocol, AVersionTwoPeerIsRefusedNamingTheVersions) {
  std::string request = EncodeRequest(GetMessage{"k"});
  ASSERT_EQ(RequestVersion(request), kProtocolVersion);
  ASSERT_GT(kProtocolVersion, 2);
  request[0] = '\x02';
  Result<Request> decoded = DecodeRequest(request);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(decoded.status().message().find("version 2"), std::string::npos)
      << decoded.status().message();

  std::string response = EncodeResponse(Status::OK(), EncodeOptionalRecord(SampleRecord()));
  response[0] = '\x02';
  Status status;
  ResponseKind kind = ResponseKind::kAnswer;
  Result<std::string_view> body = DecodeResponse(response, status, kind);
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  EXPECT_EQ(kind, ResponseKind::kRefusal);
  EXPECT_EQ(status.code(), Status::Code::kBusy);
  EXPECT_NE(
      status.message().find("protocol version 2, this process " + std::to_string(kProtocolVersion)),
      std::string::npos)
      << status.message();
}

// The numbers in a refusal are numbers, not the bytes they are kept in (u8 fields).
TEST(Protocol, AnUnknownOpIsNamedByItsNumber) {
  const char version = static_cast<char>(kProtocolVersion);
  Result<Request> decoded = DecodeRequest(std::string{version, '\x63'});
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "malformed request: unknown op 99");
  decoded = DecodeRequest(std::string{version, '\x03'});  // a Get without its key
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(),
            "malformed request: fields truncated or trailing bytes (op 3)");
}

// Version 6's Backup request (docs/format.md): its exact bytes, its round trip, and what the
// owner refuses in it (a destination that is not an absolute path, a negative wait).
TEST(Protocol, ABackupRequestHasItsDocumentedLayout) {
  BackupMessage backup;
  backup.ticket = 0x0102030405060708ULL;
  backup.wait = std::chrono::milliseconds(1000);
  backup.destination = "/b";
  const std::string expected = std::string(1, static_cast<char>(kProtocolVersion)) +
                               Bytes(
                                   "\x08"                              // op 8, Backup
                                   "\x08\x07\x06\x05\x04\x03\x02\x01"  // ticket
                                   "\xe8\x03\0\0\0\0\0\0",             // wait, ms
                                   17) +
                               Prefixed("/b");
  EXPECT_EQ(EncodeRequest(backup), expected);
  EXPECT_GE(kProtocolVersion, 6);
  Result<Request> decoded = DecodeRequest(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(std::holds_alternative<BackupMessage>(*decoded));
  const auto& message = std::get<BackupMessage>(*decoded);
  EXPECT_EQ(message.ticket, backup.ticket);
  EXPECT_EQ(message.wait, backup.wait);
  EXPECT_EQ(message.destination, "/b");

  for (const auto& [what, bad] :
       {std::pair<const char*, BackupMessage>{"relative",
                                              {.ticket = 1, .wait = {}, .destination = "b"}},
        {"empty", {.ticket = 1, .wait = {}, .destination = ""}},
        {"negative wait",
         {.ticket = 1, .wait = std::chrono::milliseconds(-1), .destination = "/b"}}}) {
    Result<Request> refused = DecodeRequest(EncodeRequest(bad));
    ASSERT_FALSE(refused.ok()) << what;
    EXPECT_EQ(refused.status().message(), "malformed request: a field is out of range (op 8)")
        << what;
  }
}

// Version 7's Purge request and job answer (docs/format.md): the request says whether the client
// wants the total, and an answer carries the total once the owner has counted it. Their exact
// bytes, their round trips, and the flags the owner and the client refuse above 1.
TEST(Protocol, APurgeAsksForItsTotalAndTheAnswerCarriesIt) {
  EXPECT_GE(kProtocolVersion, 7);
  PurgeMessage purge;
  purge.ticket = 0x0102030405060708ULL;
  purge.options.compact = true;
  purge.wait = std::chrono::milliseconds(1000);
  purge.count_total = true;
  const std::string expected = std::string(1, static_cast<char>(kProtocolVersion)) +
                               Bytes(
                                   "\x06"                              // op 6, Purge
                                   "\x08\x07\x06\x05\x04\x03\x02\x01"  // ticket
                                   "\x00\x01"                          // dry_run, compact
                                   "\xe8\x03\0\0\0\0\0\0"              // wait, ms
                                   "\x01",                             // count_total
                                   20);
  EXPECT_EQ(EncodeRequest(purge), expected);
  Result<Request> decoded = DecodeRequest(expected);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(std::holds_alternative<PurgeMessage>(*decoded));
  const auto& message = std::get<PurgeMessage>(*decoded);
  EXPECT_EQ(message.ticket, purge.ticket);
  EXPECT_FALSE(message.options.dry_run);
  EXPECT_TRUE(message.options.compact);
  EXPECT_EQ(message.wait, purge.wait);
  EXPECT_TRUE(message.count_total);
  purge.count_total = false;
  decoded = DecodeRequest(EncodeRequest(purge));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_FALSE(std::get<PurgeMessage>(*decoded).count_total);
  std::string two = expected;
  two.back() = '\x02';
  Result<Request> refused = DecodeRequest(two);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "malformed request: a field is out of range (op 6)");
  // Laid out as in version 6, without count_total: one byte short.
  refused = DecodeRequest(expected.substr(0, expected.size() - 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "malformed request: fields truncated or trailing bytes (op 6)");

  const std::string counting = Bytes(
      "\x05\0\0\0\0\0\0\0"     // count
      "\x00"                   // done
      "\x01"                   // has_total
      "\x20\x0c\0\0\0\0\0\0",  // total, 3104
      18);
  EXPECT_EQ(EncodePurgeProgress({.count = 5, .done = false, .total = 3104}), counting);
  Result<PurgeProgress> progress = DecodePurgeProgress(counting);
  ASSERT_TRUE(progress.ok()) << progress.status().ToString();
  EXPECT_EQ(progress->count, 5u);
  EXPECT_FALSE(progress->done);
  EXPECT_EQ(progress->total, std::optional<uint64_t>(3104));
  const std::string without_total = Bytes("\x05\0\0\0\0\0\0\0\x01\x00", 10);
  EXPECT_EQ(EncodePurgeProgress({.count = 5, .done = true}), without_total);
  progress = DecodePurgeProgress(without_total);
  ASSERT_TRUE(progress.ok()) << progress.status().ToString();
  EXPECT_TRUE(progress->done);
  EXPECT_EQ(progress->total, std::nullopt);
  // A has_total above 1, a total announced and missing, and a version 6 answer (no has_total).
  for (const std::string& bad : {Bytes("\x05\0\0\0\0\0\0\0\x01\x02", 10), counting.substr(0, 10),
                                 without_total.substr(0, 9)}) {
    EXPECT_EQ(DecodePurgeProgress(bad).status().code(), Status::Code::kUnavailable);
  }
}

// Version 10: read views. OpenView, CloseView, and the view a Scan and a ScanTable read.
TEST(Protocol, ReadViews) {
  EXPECT_GE(kProtocolVersion, 10);
  const std::string version(1, static_cast<char>(kProtocolVersion));
  EXPECT_EQ(EncodeRequest(OpenViewMessage{}), version + "\x0c");
  Result<Request> decoded = DecodeRequest(version + "\x0c");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::holds_alternative<OpenViewMessage>(*decoded));
  const std::string close = version + Bytes("\x0d\x01\x02\0\0\0\0\0\x80", 9);
  EXPECT_EQ(EncodeRequest(CloseViewMessage{0x8000000000000201}), close);
  decoded = DecodeRequest(close);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<CloseViewMessage>(*decoded).view, 0x8000000000000201u);
  EXPECT_FALSE(DecodeRequest(version + Bytes("\x0d\x01", 2)).ok());  // truncated id

  const std::string scan =
      version + Bytes("\x05\x01\0\0\0p\0\0\0\0\x07\0\0\0\x09\0\0\0\0\0\0\0", 22);
  EXPECT_EQ(EncodeRequest(ScanMessage{{.prefix = "p"}, 7, 9}), scan);
  decoded = DecodeRequest(scan);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<ScanMessage>(*decoded).view, 9u);
  decoded = DecodeRequest(EncodeRequest(ScanTableMessage{"t", {}, 5, 11}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<ScanTableMessage>(*decoded).view, 11u);
  // A Scan of version 9, without its view, is short.
  EXPECT_FALSE(DecodeRequest(version + Bytes("\x05\x01\0\0\0p\0\0\0\0\x07\0\0\0", 14)).ok());

  EXPECT_EQ(DecodeViewId(EncodeViewId(42)).value(), 42u);
  EXPECT_EQ(DecodeViewId(EncodeViewId(0)).status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(DecodeViewId("\x01").status().code(), Status::Code::kUnavailable);
}

}  // namespace
}  // namespace idem::sharing
