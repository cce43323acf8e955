#include "storage/record_codec.h"

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
  r.holder = {.pid = 4242, .process_start = 987654321, .request_id = ~0ULL, .took_over = true};
  return r;
}

TEST(RecordCodec, RoundTripsEveryField) {
  const Record r = FullRecord();
  auto decoded = DecodeRecord(r.key, EncodeRecord(r));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);
}

TEST(RecordCodec, RoundTripsEveryStateAndEmptyFields) {
  for (State state : {State::kPending, State::kDone, State::kFailed}) {
    Record r;
    r.key = "x";
    r.state = state;
    auto decoded = DecodeRecord("x", EncodeRecord(r));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, r);
  }
}

TEST(RecordCodec, ExpiryIsReadableAtItsFixedOffset) {
  const Record r = FullRecord();
  EXPECT_EQ(PeekExpiresMicros(EncodeRecord(r)), 1'802'592'000'000'000);
  EXPECT_FALSE(PeekExpiresMicros("short"));
}

TEST(RecordCodec, UnknownFormatVersionIsCorruptionNotMisread) {
  std::string value = EncodeRecord(FullRecord());
  value[0] = 2;
  auto decoded = DecodeRecord("k", value);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
  EXPECT_NE(decoded.status().message().find("version 2"), std::string::npos);
  EXPECT_FALSE(PeekExpiresMicros(value));
}

TEST(RecordCodec, EveryTruncationIsCorruption) {
  const std::string value = EncodeRecord(FullRecord());
  for (std::size_t size = 0; size < value.size(); ++size) {
    auto decoded = DecodeRecord("k", std::string_view(value).substr(0, size));
    ASSERT_FALSE(decoded.ok()) << "accepted a value cut to " << size << " bytes";
    EXPECT_EQ(decoded.status().code(), Status::Code::kCorruption);
  }
}

TEST(RecordCodec, TrailingBytesBadStateAndBadFlagsAreCorruption) {
  const std::string value = EncodeRecord(FullRecord());
  EXPECT_EQ(DecodeRecord("k", value + "x").status().code(), Status::Code::kCorruption);
  std::string bad_state = value;
  bad_state[9] = 3;
  EXPECT_EQ(DecodeRecord("k", bad_state).status().code(), Status::Code::kCorruption);
  std::string bad_flags = value;
  bad_flags[10] = 8;
  EXPECT_EQ(DecodeRecord("k", bad_flags).status().code(), Status::Code::kCorruption);
}

TEST(RecordCodec, CorruptionMessageNamesTheKeyPrintably) {
  auto decoded = DecodeRecord(std::string("a\0b", 3), "");
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("\"a\\x00b\""), std::string::npos)
      << decoded.status().message();
}

TEST(RecordCodec, TruncateToMicrosIsWhatRoundTrips) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::nanoseconds(1'234'567'891));
  EXPECT_EQ(TruncateToMicros(t), FromMicros(1'234'567));
  EXPECT_EQ(ToMicros(TruncateToMicros(t)), 1'234'567);
}

}  // namespace
}  // namespace idem::storage
