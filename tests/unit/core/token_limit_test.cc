// Tokens stay within their documented range, 1 to 2^63-1, on each backend (backend.h): Import
// takes every token up to 2^63-1 and none above, a store that took one near the top hands out the
// rest and then refuses to claim with an error that says why, and its export imports again.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Record;
using idem::State;
using idem_test::ClockedStore;

constexpr uint64_t kMaxToken = (uint64_t{1} << 63) - 1;

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

// Tokens are not kept above 2^63-1 (PostgreSQL's int8, the export format's limit).
TEST_P(TokenLimit, ImportRefusesATokenAboveTheLargest) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  for (const uint64_t token : {kMaxToken + 1, ~uint64_t{0}}) {
    SCOPED_TRACE(token);
    auto refused = s.store->Import(std::vector<Record>{FailedRecord("top", token, now)});
    EXPECT_CODE(refused.status(), kInvalidArgument);
    EXPECT_NE(refused.status().message().find("is above 9223372036854775807 (2^63-1)"),
              std::string::npos)
        << refused.status().ToString();
    ASSERT_OK_AND_ASSIGN(auto nothing, s.store->Get("top"));
    EXPECT_FALSE(nothing.has_value());
  }
}

// A store that imported a token near the top used to hand out tokens above 2^63-1 less 2^48,
// which its own export then could not import ("above the largest"). Now it hands out what is
// left, refuses the next claim, and every record it holds imports into another store.
TEST_P(TokenLimit, AStoreNearTheTopHandsOutTheRestThenRefusesAndItsRecordsImportBack) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  const auto now = s.clock->Now();
  constexpr uint64_t kImported = kMaxToken - 2;
  ASSERT_OK(s.store->Import(std::vector<Record>{FailedRecord("top", kImported, now)}).status());
  // What is left of the token space: 2 tokens in a store directory; none in PostgreSQL, whose
  // blocks of 1024 tokens end at 2^63-1 and start above the imported token.
  uint64_t last = kImported;
  std::string refusal;
  for (int i = 0; i < 4 && refusal.empty(); ++i) {
    const std::string key = "other " + std::to_string(i);
    auto claim = s.store->Begin(key);
    if (!claim.ok()) {
      refusal = claim.status().ToString();
      break;
    }
    ASSERT_EQ(claim->outcome, idem::Outcome::kAcquired);
    EXPECT_GT(claim->token, last);
    EXPECT_LE(claim->token, kMaxToken);
    last = claim->token;
    ASSERT_OK(s.store->Complete(key, claim->token, "ok"));
  }
  EXPECT_NE(refusal.find("2^63-1"), std::string::npos) << refusal;
  // The imported key is refused too, and kept as it was.
  auto again = s.store->Begin("top");
  EXPECT_FALSE(again.ok());
  ASSERT_OK_AND_ASSIGN(auto top, s.store->Get("top"));
  ASSERT_TRUE(top.has_value());
  EXPECT_EQ(top->token, kImported);
  EXPECT_EQ(top->state, State::kFailed);

  std::vector<Record> held;
  ASSERT_OK(s.store->Scan({}, [&](const Record& record) {
    held.push_back(record);
    return true;
  }));
  ClockedStore copy(GetParam());
  ASSERT_NE(copy.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto outcomes, copy.store->Import(held));
  ASSERT_EQ(outcomes.size(), held.size());
  for (const idem::ImportOutcome outcome : outcomes) {
    EXPECT_EQ(outcome, idem::ImportOutcome::kImported);
  }
  for (const Record& record : held) {
    ASSERT_OK_AND_ASSIGN(auto copied, copy.store->Get(record.key));
    ASSERT_TRUE(copied.has_value()) << record.key;
    EXPECT_EQ(copied->token, record.token) << record.key;
  }
}

IDEM_ON_EACH_BACKEND(TokenLimit);

}  // namespace
