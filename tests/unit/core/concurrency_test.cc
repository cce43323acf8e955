// Concurrency tests through the public API: many threads racing Begin, Execute, Complete with
// stale tokens, Forget and Purge on one store. Labelled "concurrency" in CTest, so that they can
// be run alone under ThreadSanitizer (where the workloads shrink, see idem_test::Scaled).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Outcome;
using idem::Record;
using idem::State;
using idem_test::ManualClock;
using idem_test::Scaled;
using idem_test::TempDir;
using idem_test::TestOptions;

// Durability::kBuffered, for the tests that make many sequential writes to one key and do not
// test durability (each kSync write waits for its own fsync there).
idem::Options BufferedOptions(std::shared_ptr<const idem::Clock> clock = nullptr) {
  idem::Options options = TestOptions(std::move(clock));
  options.durability = idem::Durability::kBuffered;
  return options;
}

std::string Key(const std::string& prefix, int i) { return prefix + std::to_string(i); }

// Runs body(thread_index) on `threads` threads that start together, and joins them.
template <class Body>
void RunThreads(int threads, Body body) {
  std::latch start(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

TEST(Concurrency, EachKeyIsAcquiredExactlyOnce) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions());
  const int kThreads = 8;
  const int kKeys = Scaled(2000, 300);
  std::vector<std::atomic<int>> acquired(kKeys);
  std::atomic<int> errors{0};
  std::atomic<int> unexpected{0};

  RunThreads(kThreads, [&](int t) {
    // Every thread visits every key, starting at a different place.
    for (int n = 0; n < kKeys; ++n) {
      const int i = (n + t * kKeys / kThreads) % kKeys;
      auto claim = store->Begin(Key("key-", i), {.lease = 1h});
      if (!claim.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << claim.status().ToString();
        continue;
      }
      if (claim->outcome == Outcome::kAcquired) {
        acquired[i].fetch_add(1);
      } else if (claim->outcome != Outcome::kInProgress) {
        unexpected.fetch_add(1);
      }
    }
  });

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  int wrong = 0;
  for (int i = 0; i < kKeys; ++i) {
    if (acquired[i].load() != 1 && wrong++ < 10) {
      ADD_FAILURE() << "key-" << i << " acquired " << acquired[i].load() << " times";
    }
  }
  EXPECT_EQ(wrong, 0);
  ASSERT_OK_AND_ASSIGN(const idem::Counters counters, store->GetCounters());
  EXPECT_EQ(counters.claims, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(counters.in_progress, static_cast<uint64_t>(kKeys) * (kThreads - 1));
  for (int i = 0; i < kKeys; i += 97) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key("key-", i)));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->attempts, 1u);
    EXPECT_EQ(got->state, State::kPending);
  }
}

// The counters are kept in shards, a thread adding to its own: with more threads than shards,
// some share one, and every call is still counted once.
TEST(Concurrency, CountersCountEveryCallOfManyThreads) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions());
  ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("done", {}));
  ASSERT_OK(store->Complete("done", claim.token, "result"));
  const int kThreads = 40;
  const int kReplays = Scaled(500, 100);
  std::atomic<int> wrong{0};
  RunThreads(kThreads, [&](int) {
    for (int n = 0; n < kReplays; ++n) {
      auto replay = store->Begin("done", {});
      if (!replay.ok() || replay->outcome != Outcome::kReplay) wrong.fetch_add(1);
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  ASSERT_OK_AND_ASSIGN(const idem::Counters counters, store->GetCounters());
  EXPECT_EQ(counters.claims, 1u);
  EXPECT_EQ(counters.replays, static_cast<uint64_t>(kThreads) * kReplays);
}

TEST(Concurrency, ExecuteRunsEachKeyOnce) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions());
  const int kThreads = 8;
  const int kKeys = Scaled(200, 60);
  std::vector<std::atomic<int>> runs(kKeys);
  std::vector<std::vector<std::string>> results(kThreads, std::vector<std::string>(kKeys));
  std::atomic<int> errors{0};
  std::atomic<int> executed{0};

  RunThreads(kThreads, [&](int t) {
    for (int n = 0; n < kKeys; ++n) {
      // Half the threads go forwards and half backwards, from different places.
      const int offset = (n + t * kKeys / kThreads) % kKeys;
      const int i = t % 2 == 0 ? offset : kKeys - 1 - offset;
      auto execution = store->Execute(
          Key("key-", i), {.type = "job"}, [&](idem::Attempt&) -> idem::Result<std::string> {
            runs[i].fetch_add(1);
            std::this_thread::yield();
            return "result-" + std::to_string(i) + "-by-" + std::to_string(t);
          });
      if (!execution.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << execution.status().ToString();
        continue;
      }
      if (!execution->replayed) executed.fetch_add(1);
      results[t][i] = execution->result;
    }
  });

  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(executed.load(), kKeys);
  int wrong = 0;
  for (int i = 0; i < kKeys; ++i) {
    if (runs[i].load() != 1 && wrong++ < 10) {
      ADD_FAILURE() << "key-" << i << " ran " << runs[i].load() << " times";
    }
    const std::string prefix = "result-" + std::to_string(i) + "-by-";
    EXPECT_EQ(results[0][i].rfind(prefix, 0), 0u) << results[0][i];
    for (int t = 1; t < kThreads; ++t) {
      if (results[t][i] != results[0][i] && wrong++ < 10) {
        ADD_FAILURE() << "key-" << i << ": thread " << t << " got " << results[t][i]
                      << ", thread 0 got " << results[0][i];
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

// Workers race to Begin keys on a short lease while the manual clock keeps jumping past the
// leases, then Complete with their token or a stale one. However the races go, a key is
// completed with at most one result, and that result is what the store keeps.
TEST(Concurrency, StaleTokensNeverOverwriteACompletedResult) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
  const int kThreads = 6;
  const int kKeys = Scaled(300, 60);
  const int kIterations = Scaled(3000, 500);

  struct KeyState {
    std::mutex mu;
    std::optional<std::string> completed;  // the first result a Complete was acknowledged with
    std::set<uint64_t> tokens;             // every token handed out for the key
  };
  std::vector<KeyState> keys(kKeys);
  std::atomic<int> errors{0};
  std::atomic<int> takeovers{0};
  std::atomic<int> successes{0};
  std::atomic<int> lease_lost{0};

  RunThreads(kThreads, [&](int t) {
    std::mt19937 random(1234 + t);
    std::vector<std::pair<int, uint64_t>> held;  // (key, token) claims this thread holds
    for (int n = 0; n < kIterations; ++n) {
      const int i = static_cast<int>(random() % kKeys);
      const std::string key = Key("k", i);
      auto claim = store->Begin(key, {.lease = 1s});
      if (!claim.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << claim.status().ToString();
        continue;
      }
      if (claim->outcome == Outcome::kAcquired) {
        if (claim->took_over) takeovers.fetch_add(1);
        std::lock_guard lock(keys[i].mu);
        if (!keys[i].tokens.insert(claim->token).second) {
          ADD_FAILURE() << key << ": token " << claim->token << " handed out twice";
        }
        held.emplace_back(i, claim->token);
      }
      if (random() % 3 == 0) clock->Advance(700ms);  // let leases run out now and then
      if (held.empty() || random() % 2 == 0) continue;

      // Finish one of the claims this thread holds, most likely a stale one.
      const std::size_t pick = random() % held.size();
      const auto [j, token] = held[pick];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
      const std::string other = Key("k", j);
      const std::string result = "token-" + std::to_string(token);
      const idem::Status status = random() % 8 == 0 ? store->Fail(other, token, "transient")
                                                    : store->Complete(other, token, result);
      if (status.ok()) {
        successes.fetch_add(1);
        // A Fail that succeeded leaves the key retryable; only Completes are tracked.
        auto got = store->Get(other);
        if (got.ok() && got->has_value() && (*got)->state == State::kDone) {
          std::lock_guard lock(keys[j].mu);
          if (!keys[j].completed.has_value()) keys[j].completed = (*got)->result;
          if (*keys[j].completed != (*got)->result) {
            ADD_FAILURE() << other << " completed with " << *keys[j].completed << " and then "
                          << (*got)->result;
          }
        }
      } else if (status.code() == idem::Status::Code::kLeaseLost) {
        lease_lost.fetch_add(1);
      } else if (errors.fetch_add(1) < 5) {
        ADD_FAILURE() << status.ToString();
      }
    }
  });

  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(takeovers.load(), 0);
  EXPECT_GT(lease_lost.load(), 0);
  EXPECT_GT(successes.load(), 0);
  int done = 0;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key("k", i)));
    std::lock_guard lock(keys[i].mu);
    if (!got.has_value()) {
      EXPECT_TRUE(keys[i].tokens.empty()) << "k" << i;
      continue;
    }
    if (got->state == State::kDone) {
      ++done;
      // The stored result names the token that completed it: the record's current token.
      EXPECT_EQ(got->result, "token-" + std::to_string(got->token)) << "k" << i;
      if (keys[i].completed.has_value()) {
        EXPECT_EQ(got->result, *keys[i].completed) << "k" << i;
      }
    } else {
      EXPECT_FALSE(keys[i].completed.has_value()) << "k" << i << " lost its completed result";
    }
    if (!keys[i].tokens.empty()) {
      EXPECT_EQ(got->token, *keys[i].tokens.rbegin()) << "k" << i;
    }
    EXPECT_EQ(got->attempts, keys[i].tokens.size()) << "k" << i;
  }
  EXPECT_GT(done, 0);
}

// Tokens stay unique while threads race Begin and Forget on one key.
TEST(Concurrency, TokensAreNeverReusedWhileForgetRaces) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), BufferedOptions());
  const int kThreads = 4;
  const int kIterations = Scaled(500, 100);
  std::vector<std::vector<uint64_t>> tokens(kThreads);
  std::atomic<int> errors{0};

  RunThreads(kThreads, [&](int t) {
    for (int n = 0; n < kIterations; ++n) {
      auto claim = store->Begin("k", {.lease = 1h});
      if (!claim.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << claim.status().ToString();
        continue;
      }
      if (claim->outcome == Outcome::kAcquired) tokens[t].push_back(claim->token);
      const idem::Status forget = store->Forget("k");
      if (!forget.ok() && forget.code() != idem::Status::Code::kNotFound &&
          errors.fetch_add(1) < 5) {
        ADD_FAILURE() << forget.ToString();
      }
    }
  });

  EXPECT_EQ(errors.load(), 0);
  std::set<uint64_t> all;
  std::size_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (std::size_t n = 1; n < tokens[t].size(); ++n) {
      EXPECT_LT(tokens[t][n - 1], tokens[t][n]) << "thread " << t << " saw a token go back";
    }
    total += tokens[t].size();
    all.insert(tokens[t].begin(), tokens[t].end());
  }
  EXPECT_GT(total, 0u);
  EXPECT_EQ(all.size(), total) << "a token was handed out twice";
}

// Purge runs over and over while other threads create records and re-acquire expired ones: it
// removes only expired records, never a live one.
TEST(Concurrency, PurgeDoesNotLoseLiveRecords) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  IDEM_ASSERT_OPEN(store, dir.StorePath(), BufferedOptions(clock));
  const int kExpired = Scaled(1000, 200);
  const int kWriters = 4;
  const int kNewPerWriter = Scaled(500, 100);
  for (int i = 0; i < kExpired; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(Key("old-", i), {.retention = 1h}));
    ASSERT_OK(store->Complete(Key("old-", i), claim.token, "stale"));
  }
  clock->Advance(2h);

  std::atomic<bool> writers_done{false};
  std::atomic<uint64_t> purged{0};
  std::atomic<int> errors{0};
  std::thread purger([&] {
    while (!writers_done.load()) {
      auto count = store->Purge();
      if (!count.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << count.status().ToString();
        continue;
      }
      purged.fetch_add(*count);
    }
  });
  RunThreads(kWriters, [&](int t) {
    for (int n = 0; n < kNewPerWriter; ++n) {
      const std::string key = Key("new-" + std::to_string(t) + "-", n);
      auto claim = store->Begin(key);
      if (!claim.ok() || claim->outcome != Outcome::kAcquired) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << key << ": " << claim.status().ToString();
        continue;
      }
      if (n % 2 == 0) {
        const idem::Status status = store->Complete(key, claim->token, "fresh");
        if (!status.ok() && errors.fetch_add(1) < 5) ADD_FAILURE() << status.ToString();
      }
      // Writers also re-acquire the even expired keys, racing the purger for them.
      const int old = t + n * kWriters;
      if (old < kExpired && old % 2 == 0) {
        auto again = store->Begin(Key("old-", old));
        if (!again.ok() || again->outcome != Outcome::kAcquired || again->record.attempts != 1) {
          if (errors.fetch_add(1) < 5) ADD_FAILURE() << "old-" << old << " not re-acquired";
          continue;
        }
        const idem::Status status = store->Complete(Key("old-", old), again->token, "renewed");
        if (!status.ok() && errors.fetch_add(1) < 5) ADD_FAILURE() << status.ToString();
      }
    }
  });
  writers_done.store(true);
  purger.join();
  ASSERT_OK_AND_ASSIGN(auto last, store->Purge());
  purged.fetch_add(last);

  EXPECT_EQ(errors.load(), 0);
  for (int t = 0; t < kWriters; ++t) {
    for (int n = 0; n < kNewPerWriter; ++n) {
      const std::string key = Key("new-" + std::to_string(t) + "-", n);
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(key));
      ASSERT_TRUE(got.has_value()) << key << " was lost";
      EXPECT_EQ(got->state, n % 2 == 0 ? State::kDone : State::kPending) << key;
    }
  }
  int renewed = 0;
  for (int i = 0; i < kExpired; ++i) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key("old-", i)));
    const bool reacquired = i % 2 == 0 && i / kWriters < kNewPerWriter;
    if (reacquired) {
      ++renewed;
      ASSERT_TRUE(got.has_value()) << "old-" << i << " was re-acquired and then lost";
      EXPECT_EQ(got->result, "renewed");
    } else {
      EXPECT_FALSE(got.has_value()) << "old-" << i;
    }
  }
  // Every expired key not re-acquired was purged; a re-acquired one may have been purged
  // before it was re-acquired.
  EXPECT_GE(purged.load(), static_cast<uint64_t>(kExpired - renewed));
  EXPECT_LE(purged.load(), static_cast<uint64_t>(kExpired));
  EXPECT_EQ(store->GetCounters()->purged, purged.load());
  ASSERT_OK_AND_ASSIGN(auto left, store->Purge({.dry_run = true}));
  EXPECT_EQ(left, 0u);
}

// Threads open the same directory at the same time (spelled differently), use it, and close it
// again: every handle is on one store, so each key is still acquired exactly once.
TEST(Concurrency, HandlesOpenedConcurrentlyShareOneStore) {
  TempDir dir;
  const int kThreads = 6;
  const int kKeys = Scaled(200, 50);
  const std::vector<std::string> spellings = {dir.StorePath(), dir.StorePath() + "/",
                                              dir.path() + "/./store", dir.StorePath() + "/."};
  for (int round = 0; round < 3; ++round) {
    std::vector<std::atomic<int>> acquired(kKeys);
    std::atomic<int> errors{0};
    RunThreads(kThreads, [&](int t) {
      auto opened = idem::Store::Open(spellings[t % spellings.size()], TestOptions());
      if (!opened.ok()) {
        if (errors.fetch_add(1) < 5) ADD_FAILURE() << opened.status().ToString();
        return;
      }
      std::unique_ptr<idem::Store> store = std::move(opened).value();
      for (int n = 0; n < kKeys; ++n) {
        const int i = (n + t * 13) % kKeys;
        auto claim = store->Begin(Key("r" + std::to_string(round) + "-", i), {.lease = 1h});
        if (!claim.ok()) {
          if (errors.fetch_add(1) < 5) ADD_FAILURE() << claim.status().ToString();
          continue;
        }
        if (claim->outcome == Outcome::kAcquired) acquired[i].fetch_add(1);
      }
    });
    EXPECT_EQ(errors.load(), 0) << "round " << round;
    for (int i = 0; i < kKeys; ++i) {
      EXPECT_EQ(acquired[i].load(), 1) << "round " << round << " key " << i;
    }
  }
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  int records = 0;
  ASSERT_OK(store->Scan({}, [&](const Record&) {
    ++records;
    return true;
  }));
  EXPECT_EQ(records, 3 * kKeys);
}

// Readers scan and get while writers create and complete records: every record read is whole.
TEST(Concurrency, ReadersSeeWholeRecordsWhileWritersWrite) {
  TempDir dir;
  IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions());
  const int kWriters = 3;
  const int kKeys = Scaled(400, 80);
  std::atomic<int> writers_left{kWriters};
  std::atomic<int> errors{0};
  std::atomic<int> scans{0};

  auto check = [&](const Record& record) {
    const bool whole = record.state == State::kDone
                           ? record.result == "result-of-" + record.key
                           : record.state == State::kPending && record.result.empty();
    if (!whole && errors.fetch_add(1) < 5) {
      ADD_FAILURE() << "torn record " << record.key << " state " << idem::StateName(record.state)
                    << " result " << record.result;
    }
  };
  RunThreads(kWriters + 2, [&](int t) {
    if (t < kWriters) {
      for (int n = 0; n < kKeys; ++n) {
        const std::string key = Key("w" + std::to_string(t) + "-", n);
        auto claim = store->Begin(key);
        if (!claim.ok() || claim->outcome != Outcome::kAcquired) {
          if (errors.fetch_add(1) < 5) ADD_FAILURE() << key << " not acquired";
          continue;
        }
        const idem::Status status = store->Complete(key, claim->token, "result-of-" + key);
        if (!status.ok() && errors.fetch_add(1) < 5) ADD_FAILURE() << status.ToString();
      }
      writers_left.fetch_sub(1);
      return;
    }
    while (writers_left.load() > 0) {
      if (t == kWriters) {
        const idem::Status status = store->Scan({}, [&](const Record& record) {
          check(record);
          return true;
        });
        if (!status.ok() && errors.fetch_add(1) < 5) ADD_FAILURE() << status.ToString();
        scans.fetch_add(1);
      } else {
        for (int n = 0; n < kKeys; n += 7) {
          auto got = store->Get(Key("w0-", n));
          if (!got.ok()) {
            if (errors.fetch_add(1) < 5) ADD_FAILURE() << got.status().ToString();
          } else if (got->has_value()) {
            check(**got);
          }
        }
      }
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(scans.load(), 0);
}

}  // namespace
