// Options::max_disk_bytes: past the quota a Begin that would claim a key is refused with a
// retryable kUnavailable naming the quota, while replays, Complete, Fail, Extend, Forget and
// purge work; crossing the quota and coming back under it are logged once each and counted; the
// owner's quota judges a client process's claims too.

#include "backend/disk_quota.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idem/store.h"
#include "support/file_text.h"
#include "support/test_util.h"

namespace {

using idem::Outcome;
using idem::Status;
using idem_test::CapturedLog;
using idem_test::ManualClock;
using idem_test::TempDir;
using namespace std::chrono_literals;

// A result RocksDB cannot compress, so that it takes its size on disk.
std::string Incompressible(std::size_t bytes, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string text(bytes, '.');
  for (char& c : text) c = static_cast<char>('a' + random() % 26);
  return text;
}

// The database's files and their sizes, for a failure's message.
std::string Listing(const std::string& database) {
  std::string listing;
  for (const auto& entry : std::filesystem::directory_iterator(database)) {
    if (!entry.is_regular_file()) continue;
    listing += " " + entry.path().filename().string() + ":" + std::to_string(entry.file_size());
  }
  return listing;
}

constexpr idem::BeginOptions kShortRetention{.lease = 1s, .retention = 60s};

// Claims and completes keys "fill-N" with 64 KiB results until a Begin is refused (or 10 s
// pass); returns the refusal.
Status FillUntilRefused(idem::Store& store, int& next) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string key = "fill-" + std::to_string(next++);
    auto claim = store.Begin(key, kShortRetention);
    if (!claim.ok()) return claim.status();
    EXPECT_EQ(claim->outcome, Outcome::kAcquired);
    EXPECT_TRUE(store.Complete(key, claim->token, Incompressible(64 << 10, next)).ok());
    std::this_thread::sleep_for(10ms);  // the quota is measured once a second
  }
  return Status::OK();
}

TEST(DiskQuota, PastItNewClaimsAreRefusedAndEverythingElseWorksUntilSpaceIsGivenBack) {
  TempDir dir;
  auto clock = std::make_shared<ManualClock>();
  clock->Set(std::chrono::system_clock::now());
  idem::Options options = idem_test::TestOptions(clock);
  // What an open store takes with nothing in it but a synced write (a log zero-filled a
  // megabyte ahead).
  uint64_t empty_bytes = 0;
  {
    IDEM_ASSERT_OPEN(empty, dir.StorePath(), options);
    ASSERT_OK_AND_ASSIGN(auto claim, empty->Begin("first"));
    ASSERT_OK_AND_ASSIGN(empty_bytes,
                         idem::backend::DiskQuota::MeasureBytes(dir.StorePath() + "/db"));
  }
  CapturedLog log;
  options.log = log.Sink();
  options.max_disk_bytes = empty_bytes + (2 << 20);
  IDEM_ASSERT_OPEN(store, dir.StorePath(), options);

  // Work started before the quota is reached: a claim still pending, and a result.
  ASSERT_OK_AND_ASSIGN(auto held, store->Begin("held", {.lease = 30s}));
  ASSERT_EQ(held.outcome, Outcome::kAcquired);
  ASSERT_OK_AND_ASSIGN(auto done, store->Begin("done"));
  ASSERT_OK(store->Complete("done", done.token, "charged"));
  ASSERT_OK_AND_ASSIGN(auto failing, store->Begin("failing", {.lease = 30s}));

  int next = 0;
  const Status refused = FillUntilRefused(*store, next);
  ASSERT_FALSE(refused.ok()) << "never refused after " << next << " claims of 64 KiB";
  EXPECT_EQ(refused.code(), Status::Code::kUnavailable) << refused.ToString();
  EXPECT_NE(refused.message().find("over its disk quota"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("max_disk_bytes " + std::to_string(options.max_disk_bytes)),
            std::string::npos)
      << refused.ToString();
  EXPECT_FALSE(store->Begin("another").ok()) << "refused until space is given back";

  // Everything that ends pending work or gives space back still works.
  ASSERT_OK_AND_ASSIGN(auto replay, store->Begin("done"));
  EXPECT_EQ(replay.outcome, Outcome::kReplay);
  EXPECT_EQ(replay.record.result, "charged");
  ASSERT_OK(store->Extend("held", held.token, 60s));
  ASSERT_OK(store->SaveCheckpoint("held", held.token, "halfway"));
  ASSERT_OK(store->Complete("held", held.token, "late but done"));
  ASSERT_OK(store->Fail("failing", failing.token, "declined", idem::Failure::kTerminal));
  ASSERT_OK_AND_ASSIGN(auto completed, store->Get("held"));
  ASSERT_TRUE(completed.has_value());
  EXPECT_EQ(completed->state, idem::State::kDone);
  ASSERT_OK(store->Forget("fill-0"));

  ASSERT_OK_AND_ASSIGN(auto counters, store->GetOwnerCounters());
  EXPECT_GE(counters.counters.quota_refusals, 2u);
  EXPECT_EQ(counters.counters.quota_exceeded, 1u);
  EXPECT_EQ(log.Count("reached its disk quota"), 1);
  EXPECT_EQ(log.CountEvent("disk_quota_reached", idem::LogSeverity::kWarning), 1) << log.All();

  // The filling records expire; a purge removes them and compacts their files away (as `idem
  // purge --compact` does), and the next claim is taken.
  clock->Advance(2min);
  idem::PurgeOptions compacting;
  compacting.compact = true;
  ASSERT_OK_AND_ASSIGN(uint64_t purged, store->Purge(compacting));
  EXPECT_GE(purged, static_cast<uint64_t>(next - 2));
  auto after = store->Begin("after the purge");
  ASSERT_TRUE(after.ok()) << after.status().ToString() << " (the database takes "
                          << idem::backend::DiskQuota::MeasureBytes(dir.StorePath() + "/db").value()
                          << " bytes of " << options.max_disk_bytes << ":"
                          << Listing(dir.StorePath() + "/db") << ")";
  EXPECT_EQ(after->outcome, Outcome::kAcquired);
  EXPECT_EQ(log.Count("back under its disk quota"), 1);
  EXPECT_EQ(log.CountEvent("disk_quota_cleared", idem::LogSeverity::kInfo), 1) << log.All();
  EXPECT_EQ(log.Count("reached its disk quota"), 1) << "logged once per crossing";
  ASSERT_OK_AND_ASSIGN(counters, store->GetOwnerCounters());
  EXPECT_EQ(counters.counters.quota_exceeded, 1u);
}

// The log is the application's and may throw: the quota still measures on the next call (its
// measuring lock is not left held), so space given back is seen.
TEST(DiskQuota, ALogThatThrowsLeavesTheQuotaMeasuring) {
  TempDir dir;
  const std::filesystem::path database = dir.path() + "/db";
  std::filesystem::create_directories(database);
  idem_test::WriteFile(database / "000001.sst", std::string(4096, 'x'));
  int logged = 0;
  idem::backend::DiskQuota quota(1024, database, [&](std::string_view) {
    ++logged;
    throw std::runtime_error("the application's log failed");
  });
  EXPECT_THROW(quota.Exceeded(), std::runtime_error);
  EXPECT_EQ(logged, 1);
  EXPECT_TRUE(quota.Exceeded()) << "over it, as measured before the log threw";

  std::filesystem::remove(database / "000001.sst");
  quota.MeasureSoon();
  EXPECT_THROW(quota.Exceeded(), std::runtime_error) << "measured again: back under it";
  EXPECT_EQ(logged, 2);
  EXPECT_FALSE(quota.Exceeded());
}

// A client process's claims are judged by the owner's quota, and its refusal arrives whole.
TEST(DiskQuota, TheOwnersQuotaRefusesAClientProcesssClaims) {
  TempDir dir;
  idem::Options options = idem_test::TestOptions();
  options.max_disk_bytes = 1;  // any store is past it
  options.log = [](std::string_view) {};
  // A client once the owner is open. Its own options set no quota: the owner's judges.
  idem_test::WaitingChild client([&] {
    auto opened = idem::Store::Open(dir.StorePath(), idem_test::TestOptions());
    if (!opened.ok()) return 2;
    auto claim = (*opened)->Begin("from-the-client");
    if (claim.ok()) return 3;
    if (claim.status().code() != Status::Code::kUnavailable) return 4;
    return claim.status().message().find("max_disk_bytes 1") == std::string::npos ? 5 : 0;
  });
  ASSERT_TRUE(client.started());
  auto owner = idem_test::OpenStore(dir.StorePath(), options);
  client.Start();
  const int failed_step = client.Wait();
  EXPECT_EQ(failed_step, 0) << "the client failed at step " << failed_step;
  ASSERT_NE(owner, nullptr);
  ASSERT_OK_AND_ASSIGN(auto counters, owner->GetOwnerCounters());
  EXPECT_EQ(counters.counters.quota_refusals, 1u);
}

}  // namespace
