// Tests of idem::Store through its public API: scan, forget, counters, reopening, one directory
// opened by several handles, and the helpers (fingerprints, request ids, names).

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
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
using idem_test::ClockedStore;
using idem_test::ManualClock;
using idem_test::ScanKeys;
using idem_test::TempDir;
using idem_test::TestOptions;

// ---- Scan, Forget, counters ------------------------------------------------------------------

// Scan, Forget and the counters run on each backend (backend.h); reopening and sharing a
// directory are RocksDB's (StoreDirectory); the free functions: StoreHelpers.
class Store : public idem_test::OnEachBackend {};

TEST_P(Store, ScanVisitsLiveRecordsInKeyOrder) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  for (const char* key : {"b/2", "a/1", "b/1", "c", "b/3", "a/2"}) {
    ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin(key, {.type = "t"}));
    ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  }
  EXPECT_EQ(ScanKeys(*s.store), (std::vector<std::string>{"a/1", "a/2", "b/1", "b/2", "b/3", "c"}));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/"}), (std::vector<std::string>{"b/1", "b/2", "b/3"}));
  EXPECT_EQ(ScanKeys(*s.store, {.start_after = "b/1"}),
            (std::vector<std::string>{"b/2", "b/3", "c"}));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/", .start_after = "b/2"}),
            (std::vector<std::string>{"b/3"}));
  EXPECT_TRUE(ScanKeys(*s.store, {.prefix = "zz"}).empty());

  // Stops when visit returns false.
  std::vector<std::string> first_two;
  ASSERT_OK(s.store->Scan({}, [&](const Record& record) {
    first_two.push_back(record.key);
    return first_two.size() < 2;
  }));
  EXPECT_EQ(first_two, (std::vector<std::string>{"a/1", "a/2"}));

  // Records are complete.
  ASSERT_OK(s.store->Scan({.prefix = "c"}, [&](const Record& record) {
    EXPECT_EQ(record.type, "t");
    EXPECT_EQ(record.state, State::kPending);
    EXPECT_EQ(record.attempts, 1u);
    EXPECT_GT(record.token, 0u);
    return true;
  }));

  ASSERT_OK(s.store->Forget("b/2"));
  EXPECT_EQ(ScanKeys(*s.store, {.prefix = "b/"}), (std::vector<std::string>{"b/1", "b/3"}));
}

TEST_P(Store, ScanReportsTimedOutRecords) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("k", {.lease = 1s}));
  s.clock->Advance(2s);
  int seen = 0;
  ASSERT_OK(s.store->Scan({}, [&](const Record& record) {
    ++seen;
    EXPECT_TRUE(record.timed_out);
    return true;
  }));
  EXPECT_EQ(seen, 1);
}

TEST_P(Store, ForgetRemovesARecordInAnyState) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto pending, s.store->Begin("pending"));
  ASSERT_OK_AND_ASSIGN(auto done, s.store->Begin("done"));
  ASSERT_OK(s.store->Complete("done", done.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto failed, s.store->Begin("failed"));
  ASSERT_OK(s.store->Fail("failed", failed.token, "e", idem::Failure::kTerminal));
  for (const char* key : {"pending", "done", "failed"}) {
    ASSERT_OK(s.store->Forget(key));
    ASSERT_OK_AND_ASSIGN(auto got, s.store->Get(key));
    EXPECT_FALSE(got.has_value()) << key;
    EXPECT_CODE(s.store->Forget(key), kNotFound);
    ASSERT_OK_AND_ASSIGN(auto again, s.store->Begin(key));
    EXPECT_EQ(again.outcome, Outcome::kAcquired) << key;
  }
}

// A record that moved on since it was read (completed, claimed again with a new token, extended)
// is kept; the one as read is forgotten.
TEST_P(Store, ForgetIfUnchangedRemovesOnlyTheRecordAsRead) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(auto claim, s.store->Begin("order-1"));
  ASSERT_OK_AND_ASSIGN(const std::optional<Record> pending, s.store->Get("order-1"));
  ASSERT_TRUE(pending.has_value());
  s.clock->Advance(1ms);
  ASSERT_OK(s.store->Complete("order-1", claim.token, "charged"));
  EXPECT_CODE(s.store->ForgetIfUnchanged(*pending), kConflict);  // same token, later write
  ASSERT_OK_AND_ASSIGN(auto kept, s.store->Get("order-1"));
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->result, "charged");

  ASSERT_OK_AND_ASSIGN(auto first, s.store->Begin("order-2"));
  s.clock->Advance(1ms);
  ASSERT_OK(s.store->Fail("order-2", first.token, "busy", idem::Failure::kRetryable));
  ASSERT_OK_AND_ASSIGN(const std::optional<Record> failed, s.store->Get("order-2"));
  s.clock->Advance(1ms);
  ASSERT_OK_AND_ASSIGN(auto second, s.store->Begin("order-2"));
  ASSERT_EQ(second.outcome, Outcome::kAcquired);
  EXPECT_CODE(s.store->ForgetIfUnchanged(*failed), kConflict);  // another token
  ASSERT_OK_AND_ASSIGN(const std::optional<Record> claimed, s.store->Get("order-2"));
  s.clock->Advance(1ms);
  ASSERT_OK(s.store->Extend("order-2", second.token, 30s));
  EXPECT_CODE(s.store->ForgetIfUnchanged(*claimed), kConflict);  // extended since
  ASSERT_OK_AND_ASSIGN(auto live, s.store->Get("order-2"));
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->token, second.token);

  ASSERT_OK(s.store->ForgetIfUnchanged(*live));
  ASSERT_OK_AND_ASSIGN(auto gone, s.store->Get("order-2"));
  EXPECT_FALSE(gone.has_value());
  EXPECT_CODE(s.store->ForgetIfUnchanged(*live), kNotFound);
}

TEST_P(Store, CountsOutcomes) {
  ClockedStore s(GetParam());
  ASSERT_NE(s.store, nullptr);
  ASSERT_OK_AND_ASSIGN(const idem::Counters zero, s.store->GetCounters());
  EXPECT_EQ(zero.claims, 0u);
  EXPECT_EQ(zero.replays, 0u);

  ASSERT_OK_AND_ASSIGN(auto a, s.store->Begin("a", {.fingerprint = "f1", .lease = 1s}));
  ASSERT_OK_AND_ASSIGN(auto a2, s.store->Begin("a"));                         // in progress
  ASSERT_OK_AND_ASSIGN(auto a3, s.store->Begin("a", {.fingerprint = "f2"}));  // mismatch
  EXPECT_EQ(a3.outcome, Outcome::kMismatch);
  s.clock->Advance(2s);
  ASSERT_OK_AND_ASSIGN(auto a4, s.store->Begin("a"));  // takeover
  ASSERT_TRUE(a4.took_over);
  EXPECT_CODE(s.store->Complete("a", a.token, "stale"), kLeaseLost);
  ASSERT_OK(s.store->Complete("a", a4.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto a5, s.store->Begin("a"));  // replay
  ASSERT_OK_AND_ASSIGN(auto b, s.store->Begin("b"));
  ASSERT_OK(s.store->Fail("b", b.token, "e", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(auto b2, s.store->Begin("b"));  // failed
  EXPECT_EQ(b2.outcome, Outcome::kFailed);

  ASSERT_OK_AND_ASSIGN(const idem::Counters c, s.store->GetCounters());
  EXPECT_EQ(c.claims, 3u);
  EXPECT_EQ(c.takeovers, 1u);
  EXPECT_EQ(c.in_progress, 1u);
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.replays, 1u);
  EXPECT_EQ(c.failed, 1u);
  EXPECT_EQ(c.lease_lost, 1u);
  EXPECT_EQ(c.purged, 0u);
}

// ---- Reopen and sharing ----------------------------------------------------------------------

TEST(StoreDirectory, ReopenKeepsEverything) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  const std::string binary_key("bin\0\xff\x01", 6);
  std::vector<Record> before;
  uint64_t pending_token = 0;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto done, store->Begin("done", {.type = "pay", .fingerprint = "fp"}));
    ASSERT_OK(store->Complete("done", done.token, std::string("result\0with nul", 15)));
    ASSERT_OK_AND_ASSIGN(auto failed, store->Begin("failed", {.type = "refund"}));
    ASSERT_OK(store->Fail("failed", failed.token, "declined", idem::Failure::kTerminal));
    ASSERT_OK_AND_ASSIGN(auto retry, store->Begin("retry"));
    ASSERT_OK(store->Fail("retry", retry.token, "transient"));
    ASSERT_OK_AND_ASSIGN(auto pending, store->Begin("pending", {.lease = 1h}));
    ASSERT_OK(store->SaveCheckpoint("pending", pending.token, "cp"));
    pending_token = pending.token;
    ASSERT_OK_AND_ASSIGN(auto bin, store->Begin(binary_key));
    ASSERT_OK(store->Complete(binary_key, bin.token, "binary"));
    clock->Advance(1s);
    ASSERT_OK(store->Scan({}, [&](const Record& record) {
      before.push_back(record);
      return true;
    }));
    ASSERT_EQ(before.size(), 5u);
  }
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    std::vector<Record> after;
    ASSERT_OK(store->Scan({}, [&](const Record& record) {
      after.push_back(record);
      return true;
    }));
    EXPECT_EQ(after, before);
    for (const Record& record : before) {
      ASSERT_OK_AND_ASSIGN(auto got, store->Get(record.key));
      ASSERT_TRUE(got.has_value());
      EXPECT_EQ(*got, record);
    }
    ASSERT_OK_AND_ASSIGN(auto bin, store->Get(binary_key));
    ASSERT_TRUE(bin.has_value());
    EXPECT_EQ(bin->key, binary_key);
    EXPECT_EQ(bin->result, "binary");

    // The pending owner can still finish after the reopen; the states behave as before.
    ASSERT_OK_AND_ASSIGN(auto in_progress, store->Begin("pending"));
    EXPECT_EQ(in_progress.outcome, Outcome::kInProgress);
    ASSERT_OK(store->Complete("pending", pending_token, "finished"));
    ASSERT_OK_AND_ASSIGN(auto replay, store->Begin("done", {.fingerprint = "fp"}));
    EXPECT_EQ(replay.outcome, Outcome::kReplay);
    EXPECT_EQ(replay.record.result, std::string("result\0with nul", 15));
    ASSERT_OK_AND_ASSIGN(auto failed, store->Begin("failed"));
    EXPECT_EQ(failed.outcome, Outcome::kFailed);
    ASSERT_OK_AND_ASSIGN(auto retry, store->Begin("retry"));
    EXPECT_EQ(retry.outcome, Outcome::kAcquired);
    EXPECT_EQ(retry.record.attempts, 2u);
  }
  {
    // Tokens keep increasing after a reopen.
    IDEM_ASSERT_OPEN(store, dir.StorePath(), TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto fresh, store->Begin("fresh"));
    for (const Record& record : before) EXPECT_GT(fresh.token, record.token);
  }
}

TEST(StoreDirectory, OpensTheSameDirectoryTwiceAsOneStore) {
  TempDir dir;
  const std::string path = dir.StorePath();
  IDEM_ASSERT_OPEN(a, path);
  IDEM_ASSERT_OPEN(b, path);
  IDEM_ASSERT_OPEN(c, path + "/");
  IDEM_ASSERT_OPEN(
      d, dir.path() + "/../" + std::filesystem::path(dir.path()).filename().string() + "/./store");

  ASSERT_OK_AND_ASSIGN(auto claim, a->Begin("k"));
  ASSERT_EQ(claim.outcome, Outcome::kAcquired);
  for (idem::Store* other : {b.get(), c.get(), d.get()}) {
    ASSERT_OK_AND_ASSIGN(auto seen, other->Begin("k"));
    EXPECT_EQ(seen.outcome, Outcome::kInProgress);
    EXPECT_EQ(seen.record.token, claim.token);
  }
  ASSERT_OK(d->Complete("k", claim.token, "via d"));
  ASSERT_OK_AND_ASSIGN(auto via_a, a->Get("k"));
  ASSERT_TRUE(via_a.has_value());
  EXPECT_EQ(via_a->result, "via d");

  // Closing one handle leaves the others working.
  a.reset();
  ASSERT_OK_AND_ASSIGN(auto via_b, b->Begin("k"));
  EXPECT_EQ(via_b.outcome, Outcome::kReplay);
  ASSERT_OK_AND_ASSIGN(auto other, c->Begin("other"));
  ASSERT_OK(b->Complete("other", other.token, "x"));

  // When every handle is closed, the directory can be opened again.
  b.reset();
  c.reset();
  d.reset();
  IDEM_ASSERT_OPEN(e, path);
  ASSERT_OK_AND_ASSIGN(auto got, e->Get("other"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "x");
}

// A second Open of a store in one process gets a handle with its own lease, retention,
// durability, read_only and execute_wait; the options that are the store's in this process
// stay the first Open's, and the second opener is told which of its own were not applied.
TEST(StoreDirectory, ASecondOpenIsToldWhichOfItsOptionsAreTheFirstOpens) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  idem::Options first = TestOptions(clock);
  first.max_key_size = 64;
  IDEM_ASSERT_OPEN(a, dir.StorePath(), first);

  std::vector<std::string> told;
  idem::Options same = first;
  same.default_lease = 2s;  // a handle's own: nothing to say
  same.durability = idem::Durability::kBuffered;
  same.log = [&told](std::string_view line) { told.emplace_back(line); };
  IDEM_ASSERT_OPEN(b, dir.StorePath(), same);
  EXPECT_TRUE(told.empty()) << told.front();
  ASSERT_OK_AND_ASSIGN(auto claim, b->Begin("k"));
  EXPECT_EQ(claim.record.lease_deadline, claim.record.created + 2s);

  idem::Options other = same;
  other.max_key_size = 4096;
  other.memory_budget = 32 << 20;
  other.renewal_grace = 0ms;
  other.clock = std::make_shared<ManualClock>();
  IDEM_ASSERT_OPEN(c, dir.StorePath(), other);
  ASSERT_EQ(told.size(), 1u);
  for (const char* expected :
       {"already open in this process", "max_key_size 64 (this Open asked 4096)", "memory_budget",
        "renewal_grace", "clock"}) {
    EXPECT_NE(told[0].find(expected), std::string::npos) << expected << " not in: " << told[0];
  }
  EXPECT_EQ(told[0].find("default_lease"), std::string::npos) << told[0];
  // And it is so: the first Open's key limit applies to the second handle.
  auto too_long = c->Begin(std::string(100, 'k'));
  EXPECT_EQ(too_long.status().code(), idem::Status::Code::kInvalidArgument);
}

// The log is the application's and may throw: the call that had something to say still does
// what it was asked, and the line reaches stderr with what the log threw.
TEST(StoreDirectory, ALogThatThrowsFailsNothingAndTheLineGoesToStderr) {
  TempDir dir;
  idem::Options first = TestOptions();
  first.max_key_size = 64;
  IDEM_ASSERT_OPEN(a, dir.StorePath(), first);

  idem::Options other = first;
  other.max_key_size = 4096;  // a difference the second Open tells the log of
  other.log = [](std::string_view) { throw std::runtime_error("the log's disk is full"); };
  testing::internal::CaptureStderr();
  auto b = idem::Store::Open(dir.StorePath(), other);
  const std::string said = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(said.find("already open in this process"), std::string::npos) << said;
  EXPECT_NE(said.find("the application's log threw: the log's disk is full"), std::string::npos)
      << said;
  ASSERT_OK_AND_ASSIGN(auto claim, (*b)->Begin("k"));
  EXPECT_EQ(claim.outcome, Outcome::kAcquired);
}

// Options::log takes the whole line (severity, event, message) or, as before events, only the
// message; a null sink of either form stays null, and the line then reaches stderr with its
// severity and event.
TEST(StoreDirectory, ALogTakesTheWholeLineOrItsMessageAndNullMeansStderr) {
  EXPECT_FALSE(idem::LogSink(std::function<void(std::string_view)>()));
  EXPECT_FALSE(idem::LogSink(std::function<void(const idem::LogLine&)>()));
  EXPECT_FALSE(idem::LogSink(static_cast<void (*)(std::string_view)>(nullptr)));
  EXPECT_FALSE(idem::LogSink(nullptr));

  TempDir dir;
  idem::Options first = TestOptions();
  first.max_key_size = 64;
  IDEM_ASSERT_OPEN(a, dir.StorePath(), first);
  idem::Options other = first;
  other.max_key_size = 4096;  // a difference the second Open tells the log of

  std::vector<idem::LogLine> lines;
  std::vector<std::string> messages;
  other.log = [&](const idem::LogLine& line) {
    lines.push_back(line);
    messages.emplace_back(line.message);  // the line's views last the call only
  };
  IDEM_ASSERT_OPEN(b, dir.StorePath(), other);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].severity, idem::LogSeverity::kWarning);
  EXPECT_EQ(std::string(lines[0].event), "options_ignored");  // a literal: it outlives the call
  EXPECT_NE(messages[0].find("max_key_size 64 (this Open asked 4096)"), std::string::npos);

  other.log = nullptr;
  testing::internal::CaptureStderr();
  IDEM_ASSERT_OPEN(c, dir.StorePath(), other);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.rfind("idem: warning: store ", 0), 0u) << said;
  EXPECT_NE(said.find("max_key_size 64 (this Open asked 4096) [options_ignored]\n"),
            std::string::npos)
      << said;
}

TEST(StoreDirectory, OpensASymlinkedDirectoryAsTheSameStore) {
  TempDir dir;
  IDEM_ASSERT_OPEN(a, dir.StorePath());
  std::error_code ec;
  std::filesystem::create_directory_symlink(dir.StorePath(), dir.Sub("link"), ec);
  ASSERT_FALSE(ec) << ec.message();
  IDEM_ASSERT_OPEN(b, dir.Sub("link"));
  ASSERT_OK_AND_ASSIGN(auto claim, b->Begin("k"));
  ASSERT_OK(a->Complete("k", claim.token, "r"));
  ASSERT_OK_AND_ASSIGN(auto got, b->Get("k"));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->result, "r");
}

TEST(StoreDirectory, OpensManyStoresSideBySide) {
  TempDir dir;
  std::vector<std::unique_ptr<idem::Store>> stores;
  for (int i = 0; i < 4; ++i) {
    stores.push_back(idem_test::OpenStore(dir.Sub("s" + std::to_string(i))));
    ASSERT_NE(stores.back(), nullptr);
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, stores[i]->Begin("k"));
    EXPECT_EQ(claim.outcome, Outcome::kAcquired) << i;  // separate stores: no sharing
  }
}

// ---- Helpers ---------------------------------------------------------------------------------

TEST(StoreHelpers, FingerprintIsTheHexSha256) {
  EXPECT_EQ(idem::Fingerprint(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(idem::Fingerprint("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(idem::Fingerprint(std::string("a\0b", 3)).size(), 64u);
  EXPECT_NE(idem::Fingerprint(std::string("a\0b", 3)), idem::Fingerprint("a"));
}

TEST(StoreHelpers, NewRequestIdIsAUuidV7) {
  std::set<std::string> ids;
  std::string previous_ms_id;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = idem::NewRequestId();
    ASSERT_EQ(id.size(), 36u) << id;
    for (int dash : {8, 13, 18, 23}) EXPECT_EQ(id[dash], '-') << id;
    EXPECT_EQ(id[14], '7') << id;
    EXPECT_NE(std::string("89ab").find(id[19]), std::string::npos) << id;
    for (char ch : id) {
      const bool lower_hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
      EXPECT_TRUE(ch == '-' || lower_hex) << id;
    }
    EXPECT_TRUE(ids.insert(id).second) << "duplicate " << id;
  }
  // Time-ordered: ids made milliseconds apart sort in order.
  const std::string first = idem::NewRequestId();
  std::this_thread::sleep_for(3ms);
  const std::string second = idem::NewRequestId();
  EXPECT_LT(first, second);
}

TEST(StoreHelpers, NamesItsEnums) {
  EXPECT_EQ(idem::OutcomeName(Outcome::kAcquired), "acquired");
  EXPECT_EQ(idem::OutcomeName(Outcome::kReplay), "replay");
  EXPECT_EQ(idem::OutcomeName(Outcome::kInProgress), "in_progress");
  EXPECT_EQ(idem::OutcomeName(Outcome::kFailed), "failed");
  EXPECT_EQ(idem::OutcomeName(Outcome::kMismatch), "mismatch");
  EXPECT_EQ(idem::StateName(State::kPending), "pending");
  EXPECT_EQ(idem::StateName(State::kDone), "done");
  EXPECT_EQ(idem::StateName(State::kFailed), "failed");
  EXPECT_EQ(idem::Status::OK().ToString(), "OK");
  EXPECT_EQ(idem::Status::InvalidArgument("key is empty").ToString(),
            "InvalidArgument: key is empty");
  EXPECT_EQ(idem::CodeName(idem::Status::Code::kLeaseLost), "LeaseLost");
}

IDEM_ON_EACH_BACKEND(Store);

}  // namespace
