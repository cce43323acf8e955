// Execute and ExecuteInTransaction when what fn returns cannot be stored: a result over
// Options::max_result_size, or staged writes the store refuses. The claim is failed (terminally
// when fn's effects may be done outside the store, retryably when they were rolled back), never
// left pending for the next caller to wait out and run fn again. On each backend (backend.h).

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "idem/idem.h"
#include "idem/sql.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Attempt;
using idem::Result;
using idem::State;
using idem_test::Backend;
using idem_test::ClockedStore;
using idem_test::TestOptions;

bool Contains(const idem::Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

// A store that refuses results over 100 bytes; a caller that finds the key in progress gives up
// after 1 s (today's bug made it wait that long, then answer kInProgress).
idem::Options SmallLimit() {
  idem::Options options = TestOptions();
  options.max_result_size = 100;
  options.execute_wait = 1s;
  return options;
}

class ResultLimit : public idem_test::OnEachBackend {};

TEST_P(ResultLimit, AnOversizedResultFailsTheClaimTerminally) {
  ClockedStore s(GetParam(), SmallLimit());
  ASSERT_NE(s.store, nullptr);
  int runs = 0;
  const auto oversized = [&](Attempt&) -> Result<std::string> {
    ++runs;
    return std::string(101, 'r');
  };
  auto first = s.store->Execute("k", oversized);
  EXPECT_CODE(first.status(), kInvalidArgument);
  EXPECT_TRUE(Contains(first.status(), "result is 101 bytes; the limit is 100"))
      << first.status().ToString();
  EXPECT_TRUE(Contains(first.status(), "terminal")) << first.status().ToString();

  ASSERT_OK_AND_ASSIGN(auto record, s.store->Get("k"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, State::kFailed);
  EXPECT_FALSE(record->retryable);
  EXPECT_NE(record->result.find("result is 101 bytes; the limit is 100"), std::string::npos)
      << record->result;

  // The next caller gets the failure at once; fn does not run again.
  const auto started = std::chrono::steady_clock::now();
  auto second = s.store->Execute("k", oversized);
  EXPECT_CODE(second.status(), kFailed);
  EXPECT_TRUE(Contains(second.status(), "101 bytes")) << second.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms);
  EXPECT_EQ(runs, 1);
}

TEST_P(ResultLimit, AResultAtTheLimitIsStored) {
  ClockedStore s(GetParam(), SmallLimit());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto done, s.store->Execute("k", [](Attempt&) -> Result<std::string> {
    return std::string(100, 'r');
  }));
  EXPECT_EQ(done.result.size(), 100u);
}

// fn's error longer than the limit is recorded cut to it: the claim does not stay pending.
TEST_P(ResultLimit, AnErrorOverTheLimitIsRecordedCutShort) {
  ClockedStore s(GetParam(), SmallLimit());
  ASSERT_NE(s.store, nullptr);
  const std::string error = "card network: " + std::string(200, 'e');
  auto failed = s.store->Execute(
      "k", [&](Attempt&) -> Result<std::string> { return idem::Status::Unavailable(error); });
  EXPECT_CODE(failed.status(), kUnavailable);
  EXPECT_EQ(failed.status().message(), error);
  ASSERT_OK_AND_ASSIGN(auto record, s.store->Get("k"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, State::kFailed);
  EXPECT_TRUE(record->retryable);
  EXPECT_EQ(record->result.size(), 100u);
  EXPECT_EQ(record->result.substr(0, 14), "card network: ");
  EXPECT_EQ(record->result.substr(97), "...");

  const auto started = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Execute("k", [](Attempt&) -> Result<std::string> {
    return std::string("ok");
  }));
  EXPECT_EQ(again.result, "ok");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms);
}

// A write the store refuses (here a bad table name; in PostgreSQL, any staged write) applied
// nothing: the claim is released, and the next caller runs fn at once.
TEST_P(ResultLimit, ARefusedStagedWriteReleasesTheClaim) {
  ClockedStore s(GetParam(), SmallLimit());
  ASSERT_NE(s.store, nullptr);
  auto refused = s.store->Execute("k", [](Attempt& attempt) -> Result<std::string> {
    IDEM_RETURN_IF_ERROR(attempt.Put("no spaces allowed", "a", "1"));
    return std::string("ok");
  });
  EXPECT_CODE(refused.status(), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto record, s.store->Get("k"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, State::kFailed);
  EXPECT_TRUE(record->retryable);

  const auto started = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(auto again, s.store->Execute("k", [](Attempt&) -> Result<std::string> {
    return std::string("ok");
  }));
  EXPECT_EQ(again.result, "ok");
  EXPECT_EQ(again.attempts, 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms);
}

// In a transaction, fn's effects are its SQL, rolled back: the claim is released (retryable), so
// a later run (after the limit is raised, or with a smaller result) completes it.
TEST_P(ResultLimit, AnOversizedResultInATransactionReleasesTheClaim) {
  if (GetParam() == Backend::kRocksDb) GTEST_SKIP() << "ExecuteInTransaction is PostgreSQL's";
  ClockedStore s(GetParam(), SmallLimit());
  ASSERT_NE(s.store, nullptr);
  auto oversized = s.store->ExecuteInTransaction(
      "k", [](Attempt&, idem::SqlTransaction& sql) -> Result<std::string> {
        IDEM_RETURN_IF_ERROR(sql.Exec("SELECT 1").status());
        return std::string(101, 'r');
      });
  EXPECT_CODE(oversized.status(), kInvalidArgument);
  EXPECT_TRUE(Contains(oversized.status(), "result is 101 bytes; the limit is 100"))
      << oversized.status().ToString();
  ASSERT_OK_AND_ASSIGN(auto record, s.store->Get("k"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, State::kFailed);
  EXPECT_TRUE(record->retryable);

  const auto started = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(auto again,
                       s.store->ExecuteInTransaction(
                           "k", [](Attempt&, idem::SqlTransaction&) -> Result<std::string> {
                             return std::string("ok");
                           }));
  EXPECT_EQ(again.result, "ok");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 500ms);
}

IDEM_ON_EACH_BACKEND(ResultLimit);

}  // namespace
