#include "storage/rocksdb/record_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace idem::storage {
namespace {

using std::chrono::microseconds;

Record FullRecord() {
  Record r;
  r.key = std::string("k\0\xff", 3);
  r.type = "pay";
  r.state = State::kFailed;
  r.retryable = true;
  r.result = std::string(300, 'r');  // a multi-byte varint length
  r.fingerprint = "f00d";
  r.checkpoint = std::string("c\0p", 3);
  r.token = 0x0123456789abcdefULL;
  r.attempts = 77;
  r.created = FromMicros(-5);  // before 1970 survives too
  r.updated = FromMicros(1'800'000'000'000'001);
  r.lease_deadline = FromMicros(1'800'000'010'000'000);
  r.expires = FromMicros(1'802'592'000'000'000);
  r.holder = {.pid = 4242,
              .process_start = 987654321,
              .pid_scope = 0xfedcba9876543210ULL,
              .request_id = ~0ULL,
              .took_over = true};
  return r;
}

void ExpectRoundTrip(const Record& r) {
  auto decoded = DecodeRecord(r.key, EncodeRecord(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
}

TEST(RecordCodec, RoundTripsEveryField) { ExpectRoundTrip(FullRecord()); }

// The record whose bytes the tests below spell out, in `state`, with a type.
Record DocumentedRecord(State state) {
  Record r;
  r.state = state;
  r.holder = {.pid = 300, .process_start = 5, .pid_scope = 9, .request_id = 6, .took_over = true};
  r.token = 0x1122334455667788ULL;
  r.attempts = 3;
  r.expires = FromMicros(0x0102);
  r.created = FromMicros(0x0100);         // 2 before expires
  r.updated = FromMicros(0x0105);         // 5 after created
  r.lease_deadline = FromMicros(0x0104);  // 1 before updated
  r.type = "t";
  return r;
}

// The exact bytes of version 4 (docs/format.md), so that an encoder change cannot alter the
// format unnoticed: a round trip alone would not catch a change made to both sides.
TEST(RecordCodec, EncodesTheDocumentedBytes) {
  Record r = DocumentedRecord(State::kPending);
  r.checkpoint = std::string(200, 'c');  // a two-byte varint length: 0xc8 0x01
  const std::string header = std::string(
      "\x04"                              // version
      "\x02\x01\0\0\0\0\0\0"              // expires
      "\x00"                              // state: pending
      "\x4e"                              // flags: took_over, holder, type, checkpoint
      "\x88\x77\x66\x55\x44\x33\x22\x11"  // token
      "\x03"                              // attempts
      "\x03"                              // created - expires = -2, zigzag 3
      "\x0a"                              // updated - created = 5, zigzag 10
      "\x01"                              // lease_deadline - updated = -1, zigzag 1
      "\x06\0\0\0\0\0\0\0"                // holder: request_id
      "\x09\0\0\0\0\0\0\0"                // pid_scope
      "\xac\x02"                          // pid 300
      "\x05",                             // process_start
      kFixedHeaderSize + 23);
  const std::string fields =
      std::string("\x01t\xc8\x01", 4) + std::string(200, 'c');  // type, checkpoint
  EXPECT_EQ(EncodeRecord(r), header + fields);

  // Done, without a holder, with only a result: the flags say so, and nothing else follows.
  Record done = r;
  done.state = State::kDone;
  done.holder = {.took_over = true};
  done.type.clear();
  done.checkpoint.clear();
  done.result = "ok";
  const std::string done_value = EncodeRecord(done);
  EXPECT_EQ(done_value, std::string("\x04\x02\x01\0\0\0\0\0\0\x01\x22", 11) +
                            header.substr(11, 12) + std::string("\x02ok", 3));
}

// Version 3, as releases before version 4 wrote it: every field, the holder's fixed ones in the
// fixed part.
TEST(RecordCodec, EncodesTheDocumentedBytesOfVersionThree) {
  Record r = DocumentedRecord(State::kDone);
  r.result = std::string(200, 'r');
  const std::string header = std::string(
      "\x03"                              // version
      "\x02\x01\0\0\0\0\0\0"              // expires
      "\x01"                              // state: done
      "\x02"                              // flags: took_over
      "\x88\x77\x66\x55\x44\x33\x22\x11"  // token
      "\x06\0\0\0\0\0\0\0"                // request_id
      "\x09\0\0\0\0\0\0\0"                // pid_scope
      "\x03"                              // attempts
      "\x03"                              // created - expires = -2, zigzag 3
      "\x0a"                              // updated - created = 5, zigzag 10
      "\x01"                              // lease_deadline - updated = -1, zigzag 1
      "\xac\x02"                          // pid 300
      "\x05",                             // process_start
      kFixedHeaderSizeV3 + 7);
  const std::string fields = std::string("\x01t\0\xc8\x01", 5) + std::string(200, 'r') +
                             std::string("\0", 1);  // type, fingerprint, result, checkpoint
  const std::string v3 = EncodeRecordAtOlderVersion(r, kRecordFormatVersion3);
  EXPECT_EQ(v3, header + fields);
  auto decoded = DecodeRecord(r.key, v3);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
}

// Version 3 writes the times as differences: times as far apart as a time point allows, either
// way round, come back exact.
TEST(RecordCodec, RoundTripsTimesAtTheEndsOfTheirRange) {
  Record r = FullRecord();
  r.created = FromMicros(util::kMaxMicros);
  r.expires = FromMicros(util::kMinMicros);
  r.updated = FromMicros(util::kMinMicros);
  r.lease_deadline = FromMicros(util::kMaxMicros);
  r.attempts = ~uint32_t{0};
  r.holder.pid = ~uint32_t{0};
  r.holder.process_start = ~uint64_t{0};
  ExpectRoundTrip(r);
}

// A typical done record (a day's retention, a 30 s lease, done 1.5 ms after it was claimed):
// its header is 32 bytes in version 4, which keeps no holder for a done record and writes only
// its non-empty text field, against 55 in version 3 (which also wrote the lengths of three empty
// fields) and 75 in version 2: 26 bytes fewer than version 3 in all. A pending claim keeps its
// holder (23 bytes here) and has no text field.
TEST(RecordCodec, VersionFourIsSmallerThanVersionsThreeAndTwo) {
  Record r;
  r.state = State::kDone;
  r.token = 1'764'000'000'000'000;
  r.attempts = 1;
  r.created = FromMicros(1'764'000'000'000'000);
  r.updated = r.created + microseconds(1'500);
  r.lease_deadline = r.created + std::chrono::seconds(30);
  r.expires = r.created + std::chrono::hours(24);
  r.result = std::string(90, 'r');
  const std::size_t result_size = 1 + r.result.size();
  EXPECT_EQ(EncodeRecord(r).size(), 32 + result_size);

  Record claimed = r;
  claimed.state = State::kPending;
  claimed.result.clear();
  claimed.holder = {.pid = 41'234,
                    .process_start = 8'812'345,
                    .pid_scope = 0x1234567890abcdefULL,
                    .request_id = 0xfedcba0987654321ULL};
  EXPECT_EQ(EncodeRecord(claimed).size(), 32 + 16 + 3 + 4);
  r.holder = claimed.holder;  // as version 3 and 2 kept it
  EXPECT_EQ(EncodeRecordAtOlderVersion(r, kRecordFormatVersion3).size(), 55 + 3 + result_size);
  EXPECT_EQ(EncodeRecordAtOlderVersion(r, kRecordFormatVersion2).size(), 75 + 3 + result_size);
}

// A version 4 flag no release defines is damage, as an unknown state is.
TEST(RecordCodec, AnUnknownFlagIsCorruption) {
  Record r;
  r.key = "k";
  std::string value = EncodeRecord(r);
  value[10] = static_cast<char>(value[10] | 0x80);
  auto decoded = DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
  EXPECT_NE(decoded.status().message().find("unknown flags"), std::string::npos)
      << decoded.status().message();
  // Version 3 knew only two flags: the holder's flag of version 4 is damage there.
  value = EncodeRecordAtOlderVersion(r, kRecordFormatVersion3);
  value[10] = 4;
  EXPECT_EQ(DecodeRecord("k", value).status().code(), Status::Code::kCorruption);
}

// A value cut anywhere, or with a byte more, is damage: the flags say what follows the times.
TEST(RecordCodec, EveryCutOfAVersionFourValueIsCorruption) {
  const Record r = FullRecord();
  const std::string value = EncodeRecord(r);
  for (std::size_t size = 0; size < value.size(); ++size) {
    EXPECT_FALSE(DecodeRecord(r.key, std::string_view(value).substr(0, size)).ok()) << size;
  }
  EXPECT_FALSE(DecodeRecord(r.key, value + "x").ok());
}

// A number of the header longer than its type allows is damage, not a value taken modulo.
TEST(RecordCodec, AnOverlongNumberIsCorruption) {
  Record r;
  r.key = "k";
  std::string value = EncodeRecord(r);
  // attempts (a varint32) at the end of the fixed part: 5 bytes whose last holds bit 35.
  value.replace(kFixedHeaderSize, 1, "\xff\xff\xff\xff\x1f", 5);
  auto decoded = DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
  EXPECT_NE(decoded.status().message().find("too long"), std::string::npos)
      << decoded.status().message();
}

// A time the value names but a time point cannot hold is damage, and the message names it.
TEST(RecordCodec, ATimeOutsideTheRangeOfATimePointIsCorruption) {
  Record r = FullRecord();
  r.expires = FromMicros(util::kMaxMicros);
  r.created = FromMicros(util::kMinMicros);
  const std::string value = EncodeRecord(r);
  const auto with_expires = [&](int64_t expires) {
    std::string damaged = value;
    util::StoreFixed64(damaged.data() + kExpiresOffset, static_cast<uint64_t>(expires));
    return DecodeRecord(r.key, damaged);
  };
  for (const auto& [expires, named] :
       {std::pair<int64_t, const char*>{util::kMaxMicros + 1, "expires time"},
        // created is stored as its difference from expires: a microsecond earlier expiry puts
        // it a microsecond before the first time point.
        {util::kMaxMicros - 1, "created time"}}) {
    auto decoded = with_expires(expires);
    ASSERT_FALSE(decoded.ok()) << named;
    EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
    EXPECT_NE(decoded.status().message().find(named), std::string::npos)
        << decoded.status().message();
    EXPECT_NE(decoded.status().message().find("outside the range of a time point"),
              std::string::npos)
        << decoded.status().message();
  }
}

// The storage decodes into records whose buffers it reuses: nothing of what a record held may
// survive into the decoded one.
TEST(RecordCodec, DecodingIntoAUsedRecordLeavesNothingOfIt) {
  Record used = FullRecord();
  used.timed_out = true;
  Record small;
  small.key = "x";
  small.state = State::kDone;
  ASSERT_TRUE(DecodeRecordInto("x", EncodeRecord(small), used).ok());
  EXPECT_EQ(used, small);
}

TEST(RecordCodec, ByteSwapReversesTheBytes) {
  EXPECT_EQ(ByteSwap(uint64_t{0x0102030405060708}), uint64_t{0x0807060504030201});
  EXPECT_EQ(ByteSwap(uint32_t{0x01020304}), uint32_t{0x04030201});
}

TEST(RecordCodec, RoundTripsEveryStateAndEmptyFields) {
  for (State state : {State::kPending, State::kDone, State::kFailed}) {
    Record r;
    r.key = "x";
    r.state = state;
    ExpectRoundTrip(r);
  }
}

TEST(RecordCodec, ExpiryIsReadableAtItsFixedOffset) {
  const Record r = FullRecord();
  EXPECT_EQ(PeekExpiresMicros(EncodeRecord(r)), 1'802'592'000'000'000);
  EXPECT_FALSE(PeekExpiresMicros("short"));
}

// A version above this library's is a newer release's record: kNewerVersion, never misread. No
// release wrote version 0: that is damage.
TEST(RecordCodec, AnUnknownFormatVersionIsNeverMisread) {
  std::string value = EncodeRecord(FullRecord());
  value[0] = 5;
  auto decoded = DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kNewerVersion);
  EXPECT_NE(decoded.status().message().find("version 5"), std::string::npos);
  EXPECT_FALSE(PeekExpiresMicros(value));
  value[0] = 0;
  decoded = DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
  EXPECT_FALSE(PeekExpiresMicros(value));
}

// Stores written before version 4 hold version 3 values, before version 3 version 2 values,
// and those written by idem 0.1 version 1 values (version 2's header without the pid scope).
// They read back whole, version 1 with an unknown scope (so its holders wait for their leases);
// every cut of them is damage.
TEST(RecordCodec, ReadsVersionsOneToThree) {
  const Record r = FullRecord();
  const std::string v3 = EncodeRecordAtOlderVersion(r, kRecordFormatVersion3);
  const std::string v2 = EncodeRecordAtOlderVersion(r, kRecordFormatVersion2);
  for (const std::string& value : {v3, v2}) {
    auto decoded = DecodeRecord(r.key, value);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r);
  }

  const std::string v1 = EncodeRecordAtOlderVersion(r, kRecordFormatVersion1);
  EXPECT_EQ(v1, std::string(1, '\1') + v2.substr(1, kFixedHeaderSizeV1 - 1) +
                    v2.substr(kFixedHeaderSizeV2));
  auto decoded = DecodeRecord(r.key, v1);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  Record expected = r;
  expected.holder.pid_scope = 0;
  EXPECT_EQ(*decoded, expected);
  for (const std::string& older : {v1, v2, v3}) {
    EXPECT_EQ(PeekExpiresMicros(older), PeekExpiresMicros(EncodeRecord(r)));
    for (std::size_t size = 0; size < older.size(); ++size) {
      EXPECT_FALSE(DecodeRecord("k", std::string_view(older).substr(0, size)).ok()) << size;
    }
  }
}

}  // namespace
}  // namespace idem::storage
