// Tokens stay within their documented range, 1 to 2^63-1, on each backend (backend.h): Import
// refuses a token that would leave the store none to hand out, a store that took the largest
// token it accepts still claims, and its export imports again.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Record;
using idem::State;
using idem_test::ClockedStore;

constexpr uint64_t kMaxToken = (uint64_t{1} << 63) - 1;
constexpr uint64_t kMaxImportedToken = kMaxToken - (uint64_t{1} << 48);

Record FailedRecord(const std::string& key, uint64_t token,
                    std::chrono::system_clock::time_point now) {
  Record record;
  record.key = key;
  record.state = State::kFailed;
  record.retryable = true;
  record.result = "declined";
  record.attempts = 1;
  record.token = token;
  record.created = record.updated = record.lease_deadline = now;
  record.expires = now + 1h;
  return record;
}

class TokenLimit : public idem_test::OnEachBackend {};

// 2^63-1 used to be taken: the next Begin then handed out 2^63 (PostgreSQL: read back as
// Corruption; RocksDB: a token the store's own export could not import).
TEST_P(TokenLimit, ImportRefusesATokenThatLeavesNoneToHandOut) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  for (const uint64_t token : {kMaxToken, kMaxImportedToken + 1}) {
    SCOPED_TRACE(token);
    auto refused = s.store->Import(std::vector<Record>{FailedRecord("top", token, now)});
    EXPECT_CODE(refused.status(), kInvalidArgument);
    EXPECT_NE(refused.status().message().find("is above 9223090561878065151 (2^63-1 less 2^48)"),
              std::string::npos)
        << refused.status().ToString();
    ASSERT_OK_AND_ASSIGN(auto nothing, s.store->Get("top"));
    EXPECT_FALSE(nothing.has_value());
  }
}

TEST_P(TokenLimit, AStoreThatTookTheLargestImportedTokenClaimsWithinTheRange) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  ASSERT_OK(
      s.store->Import(std::vector<Record>{FailedRecord("top", kMaxImportedToken, now)}).status());
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Begin("top"));
  ASSERT_EQ(again.outcome, idem::Outcome::kAcquired);
  EXPECT_GT(again.token, kMaxImportedToken);
  EXPECT_LE(again.token, kMaxToken);
  ASSERT_OK_AND_ASSIGN(auto other, s.store->Begin("other"));
  EXPECT_GT(other.token, kMaxImportedToken);
  ASSERT_OK(s.store->Complete("top", again.token, "ok"));
  ASSERT_OK_AND_ASSIGN(auto record, s.store->Get("top"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->token, again.token);
}

IDEM_ON_EACH_BACKEND(TokenLimit);

}  // namespace
