// Tests of one-time tokens (Store::IssueToken, Store::ConsumeToken): the lifecycle, the errors,
// and "exactly one consumer" across threads and across processes. Labelled "concurrency".

#include <gtest/gtest.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::State;
using idem::Status;
using idem_test::ManualClock;
using idem_test::TempDir;
using idem_test::TestOptions;

bool Contains(const Status& status, std::string_view text) {
  return status.message().find(text) != std::string::npos;
}

// Every test runs on each backend (backend.h), on a store of its own, with the system clock
// (store_) or a ManualClock (OpenNew).
class TokensTest : public idem_test::OnEachBackend {
 protected:
  void SetUp() override {
    OnEachBackend::SetUp();
    if (IsSkipped()) return;
    here_ = std::make_unique<idem_test::TestStore>(GetParam());
    store_ = here_->Open();
    ASSERT_NE(store_, nullptr);
  }

  std::string Issue(std::chrono::milliseconds ttl = 1h) {
    auto token = store_->IssueToken(ttl);
    EXPECT_OK(token.status());
    return token.ok() ? *token : std::string();
  }

  // A handle on this test's store with `options`.
  std::unique_ptr<idem::Store> Open(idem::Options options) const { return here_->Open(options); }
  // A handle on a new store with `options` (store_ is closed first: the test uses this one).
  std::unique_ptr<idem::Store> OpenNew(idem::Options options) {
    store_.reset();
    here_ = std::make_unique<idem_test::TestStore>(GetParam());
    return here_->Open(std::move(options));
  }

  std::unique_ptr<idem_test::TestStore> here_;
  std::unique_ptr<idem::Store> store_;
};

TEST_P(TokensTest, IssuedTokenHasTheDocumentedForm) {
  const std::string token = Issue();
  // tok_<32 hex digits>_<1 to 16 hex digits>
  auto lower_hex = [](std::string_view text) {
    return !text.empty() && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  };
  ASSERT_GT(token.size(), 4u + 32u + 1u) << token;
  EXPECT_EQ(token.substr(0, 4), "tok_");
  EXPECT_TRUE(lower_hex(std::string_view(token).substr(4, 32))) << token;
  EXPECT_EQ(token[36], '_') << token;
  EXPECT_TRUE(lower_hex(std::string_view(token).substr(37))) << token;
  EXPECT_LE(token.size() - 37, 16u) << token;
  EXPECT_NE(Issue(), token);
}

TEST_P(TokensTest, ConsumesOnceThenReportsConsumed) {
  const std::string token = Issue();
  EXPECT_OK(store_->ConsumeToken(token));
  Status again = store_->ConsumeToken(token);
  EXPECT_CODE(again, kFailed);
  EXPECT_TRUE(Contains(again, "token already consumed")) << again.ToString();
}

TEST_P(TokensTest, TokenIsARecordOfTypeIdemToken) {
  const std::string token = Issue();
  auto issued = store_->Get(token);
  ASSERT_OK(issued.status());
  ASSERT_TRUE(issued->has_value());
  EXPECT_EQ((*issued)->type, "idem.token");
  EXPECT_EQ((*issued)->state, State::kFailed);
  EXPECT_TRUE((*issued)->retryable);
  EXPECT_EQ((*issued)->attempts, 1u);

  ASSERT_OK(store_->ConsumeToken(token));
  auto consumed = store_->Get(token);
  ASSERT_OK(consumed.status());
  ASSERT_TRUE(consumed->has_value());
  EXPECT_EQ((*consumed)->state, State::kDone);
  EXPECT_EQ((*consumed)->result, "consumed");
}

TEST_P(TokensTest, UnknownTokenIsNotFoundAndLeavesNoRecord) {
  const std::string issued = Issue();
  // Same form and expiry, other random digits.
  std::string forged = issued;
  forged[4] = forged[4] == 'a' ? 'b' : 'a';
  Status status = store_->ConsumeToken(forged);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "unknown token")) << status.ToString();
  auto record = store_->Get(forged);
  ASSERT_OK(record.status());
  EXPECT_FALSE(record->has_value());
  // The real one is untouched.
  EXPECT_OK(store_->ConsumeToken(issued));
}

TEST_P(TokensTest, ForgottenTokenIsUnknown) {
  const std::string token = Issue();
  ASSERT_OK(store_->Forget(token));
  Status status = store_->ConsumeToken(token);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "unknown token")) << status.ToString();
}

TEST_P(TokensTest, ExpiredTokenIsNotFoundWithExpired) {
  const std::string token = Issue(1ms);
  std::this_thread::sleep_for(5ms);
  Status status = store_->ConsumeToken(token);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "token expired")) << status.ToString();
}

TEST_P(TokensTest, TokenShorterThanAWriteIsIssuedAndExpires) {
  for (int i = 0; i < 20; ++i) {
    auto token = store_->IssueToken(1ms);
    ASSERT_OK(token.status());
    std::this_thread::sleep_for(2ms);
    EXPECT_CODE(store_->ConsumeToken(*token), kNotFound);
  }
}

TEST_P(TokensTest, ConsumingATokenAboutToExpireSucceeds) {
  auto clock = std::make_shared<ManualClock>();
  auto store = OpenNew(TestOptions(clock));
  ASSERT_NE(store, nullptr);
  auto token = store->IssueToken(1s);
  ASSERT_OK(token.status());
  clock->Advance(999ms);
  EXPECT_OK(store->ConsumeToken(*token));
}

TEST_P(TokensTest, ExpiredIsToldApartFromUnknownEvenAfterPurge) {
  const std::string token = Issue(1ms);
  std::this_thread::sleep_for(5ms);
  auto purged = store_->Purge();
  ASSERT_OK(purged.status());
  Status status = store_->ConsumeToken(token);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "token expired")) << status.ToString();
}

TEST_P(TokensTest, MalformedTokenIsInvalidArgument) {
  const std::string good = Issue();
  const std::string random = good.substr(4, 32);
  for (const std::string& bad : {
           std::string(), std::string("tok_"), std::string("hello"),
           "tok_" + random,                                  // no expiry
           "tok_" + random + "_",                            // empty expiry
           "tok_" + random.substr(1) + "_ffffffffffff",      // 31 digits
           "tok_" + random + "_" + std::string(17, 'f'),     // expiry too long
           "tok_" + random + "_ffffffffffffffff",            // beyond int64
           "TOK_" + random + "_ffffffff",                    // prefix case
           "tok_" + std::string(32, 'A') + "_ffffffffffff",  // upper-case digits
           "tok_" + random + "_12g4",                        // not hex
           good + " ",                                       // trailing space
       }) {
    SCOPED_TRACE("token " + bad);
    EXPECT_CODE(store_->ConsumeToken(bad), kInvalidArgument);
  }
  EXPECT_OK(store_->ConsumeToken(good));
}

TEST_P(TokensTest, TtlMustBePositive) {
  EXPECT_CODE(store_->IssueToken(0ms).status(), kInvalidArgument);
  EXPECT_CODE(store_->IssueToken(-5ms).status(), kInvalidArgument);
}

TEST_P(TokensTest, EightThreadsConsumeOneTokenExactlyOnce) {
  const int rounds = idem_test::Scaled(20, 5);
  for (int round = 0; round < rounds; ++round) {
    const std::string token = Issue();
    std::atomic<int> ok{0};
    std::atomic<int> failed{0};
    std::atomic<int> other{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        Status status = store_->ConsumeToken(token);
        if (status.ok()) {
          ++ok;
        } else if (status.code() == Status::Code::kFailed) {
          ++failed;
        } else {
          ++other;
          ADD_FAILURE() << status.ToString();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(ok.load(), 1) << "round " << round;
    EXPECT_EQ(failed.load(), 7) << "round " << round;
    EXPECT_EQ(other.load(), 0);
  }
}

TEST_P(TokensTest, ExactlyOneOfFourProcessesConsumesAToken) {
  if (idem_test::UnderTsan()) {
    GTEST_SKIP() << "fork of a multi-threaded process is not supported under TSan";
  }
  std::string token;
  {
    auto store = OpenNew(TestOptions());
    ASSERT_NE(store, nullptr);
    auto issued = store->IssueToken(1h);
    ASSERT_OK(issued.status());
    token = *issued;
  }  // closed before fork: every child opens the store on its own

  constexpr int kChildren = 4;
  std::vector<pid_t> children;
  std::fflush(nullptr);
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = here_->TryOpen();
      if (!store.ok()) {
        std::fprintf(stderr, "child: %s\n", store.status().ToString().c_str());
        _exit(3);
      }
      Status status = (*store)->ConsumeToken(token);
      int code = status.ok() ? 0 : status.code() == Status::Code::kFailed ? 1 : 2;
      if (code == 2) std::fprintf(stderr, "child: %s\n", status.ToString().c_str());
      store->reset();
      _exit(code);
    }
    children.push_back(pid);
  }
  int ok = 0;
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child ended with status " << status;
    const int code = WEXITSTATUS(status);
    if (code == 0) {
      ++ok;
    } else if (code == 1) {
      ++failed;
    } else {
      ADD_FAILURE() << "child exited with " << code;
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(failed, kChildren - 1);

  auto store = Open(TestOptions());
  ASSERT_NE(store, nullptr);
  Status again = store->ConsumeToken(token);
  EXPECT_CODE(again, kFailed);
}

TEST_P(TokensTest, ConsumingDoesNotKeepTheRecordBeyondTheTtl) {
  auto clock = std::make_shared<ManualClock>();
  idem::Options options = TestOptions(clock);
  options.default_lease = 100ms;  // shorter than what is left of the token
  auto store = OpenNew(options);
  ASSERT_NE(store, nullptr);
  auto token = store->IssueToken(2s);
  ASSERT_OK(token.status());
  const auto expiry = clock->Now() + 2s;
  auto issued = store->Get(*token);
  ASSERT_OK(issued.status());
  ASSERT_TRUE(issued->has_value());
  EXPECT_EQ((*issued)->expires, expiry);

  clock->Advance(1500ms);
  ASSERT_OK(store->ConsumeToken(*token));
  auto consumed = store->Get(*token);
  ASSERT_OK(consumed.status());
  ASSERT_TRUE(consumed->has_value());
  EXPECT_EQ((*consumed)->expires, expiry);

  clock->Advance(600ms);
  auto gone = store->Get(*token);
  ASSERT_OK(gone.status());
  EXPECT_FALSE(gone->has_value());
  Status status = store->ConsumeToken(*token);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "token expired")) << status.ToString();
}

TEST_P(TokensTest, ExpiryFollowsTheStoreClock) {
  auto clock = std::make_shared<ManualClock>();
  auto store = OpenNew(TestOptions(clock));
  ASSERT_NE(store, nullptr);
  auto token = store->IssueToken(10s);
  ASSERT_OK(token.status());
  clock->Advance(10s);
  Status status = store->ConsumeToken(*token);
  EXPECT_CODE(status, kNotFound);
  EXPECT_EQ(status.message(), "token expired 0 ms ago");
}

// The store's clock says whether a token lives, not the consumer's: a handle whose clock runs an
// hour ahead (a host with a skewed clock) still consumes a token with ten minutes left, and one
// whose clock runs behind cannot consume a token that has expired by the store's clock.
TEST_P(TokensTest, TheStoresClockDecidesExpiryNotTheConsumers) {
  auto store_clock = std::make_shared<ManualClock>();
  auto store = OpenNew(TestOptions(store_clock));
  ASSERT_NE(store, nullptr);
  auto ahead_clock = std::make_shared<ManualClock>(store_clock->Now() + 1h);
  auto ahead = Open(TestOptions(ahead_clock));
  ASSERT_NE(ahead, nullptr);
  auto behind_clock = std::make_shared<ManualClock>(store_clock->Now() - 1h);
  auto behind = Open(TestOptions(behind_clock));
  ASSERT_NE(behind, nullptr);

  auto live = store->IssueToken(10min);
  ASSERT_OK(live.status());
  EXPECT_OK(ahead->ConsumeToken(*live));
  EXPECT_CODE(ahead->ConsumeToken(*live), kFailed);

  auto expiring = store->IssueToken(10min);
  ASSERT_OK(expiring.status());
  store_clock->Advance(11min);
  behind_clock->Advance(11min);
  Status status = behind->ConsumeToken(*expiring);
  EXPECT_CODE(status, kNotFound);
  EXPECT_TRUE(Contains(status, "unknown token")) << status.ToString();
}

IDEM_ON_EACH_BACKEND(TokensTest);

}  // namespace
