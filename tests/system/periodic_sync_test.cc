// PeriodicSync (Durability::kPeriodic): a write is synced an interval after it is noted at the
// latest, an idle store is never synced, a failed sync stays due and is retried, and stopping
// syncs what is due. Then kPeriodic through the Store API, in this process and from a client
// process. The loss at a power cut, in time, is measured in tests/system/power_cut_test.cc
// (PowerCutPeriodic).

#include "storage/rocksdb/periodic_sync.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "idem/store.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem::storage::PeriodicSync;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Waits up to 10 s for `done`.
template <class Done>
bool Eventually(Done done) {
  const auto deadline = Clock::now() + 10s;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The syncs a PeriodicSync made, when, and the log lines it wrote.
struct Recorder {
  std::mutex mu;
  std::vector<Clock::time_point> syncs;
  std::vector<std::string> lines;
  std::vector<std::pair<idem::LogSeverity, std::string>> events;
  int failures_left = 0;  // the next syncs that fail

  std::function<Status()> Sync() {
    return [this] {
      std::lock_guard lock(mu);
      syncs.push_back(Clock::now());
      if (failures_left > 0) {
        --failures_left;
        return Status::IOError("the disk said no");
      }
      return Status::OK();
    };
  }
  idem::LogSink Log() {
    return [this](const idem::LogLine& line) {
      std::lock_guard lock(mu);
      lines.emplace_back(line.message);
      events.emplace_back(line.severity, line.event);
    };
  }
  std::size_t SyncCount() {
    std::lock_guard lock(mu);
    return syncs.size();
  }
};

TEST(PeriodicSync, AWriteIsSyncedAnIntervalAfterItAndAnIdleStoreNever) {
  Recorder recorder;
  PeriodicSync periodic(100ms, recorder.Sync(), recorder.Log());
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(recorder.SyncCount(), 0u) << "nothing was written: nothing to sync";

  const auto first = Clock::now();
  periodic.Note();
  periodic.Note();  // the second write is due with the first
  ASSERT_TRUE(Eventually([&] { return recorder.SyncCount() == 1; }));
  // Never before the interval (it may be later on a busy machine: the bound in time is measured
  // by the power-cut test, not here).
  EXPECT_GE(recorder.syncs[0] - first, 100ms);

  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(recorder.SyncCount(), 1u) << "no write since the sync: no other sync";
  periodic.Note();
  ASSERT_TRUE(Eventually([&] { return recorder.SyncCount() == 2; }));
  EXPECT_EQ(periodic.counts().syncs, 2u);
  EXPECT_EQ(periodic.counts().failures, 0u);
  EXPECT_TRUE(recorder.lines.empty());
}

TEST(PeriodicSync, AFailedSyncStaysDueIsReportedOnceAndItsRecoveryOnce) {
  Recorder recorder;
  recorder.failures_left = 3;
  PeriodicSync periodic(20ms, recorder.Sync(), recorder.Log());
  periodic.Note();
  // Retried without another write: the write is still due.
  ASSERT_TRUE(Eventually([&] { return recorder.SyncCount() == 4; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(recorder.SyncCount(), 4u) << "synced once it worked, then idle";
  EXPECT_EQ(periodic.counts().failures, 3u);
  std::lock_guard lock(recorder.mu);
  ASSERT_EQ(recorder.lines.size(), 2u);
  EXPECT_NE(recorder.lines[0].find("a periodic sync of its log failed"), std::string::npos)
      << recorder.lines[0];
  EXPECT_NE(recorder.lines[0].find("the disk said no"), std::string::npos) << recorder.lines[0];
  EXPECT_NE(recorder.lines[0].find("retrying every 20 ms"), std::string::npos) << recorder.lines[0];
  EXPECT_EQ(recorder.lines[1], "the periodic sync of its log works again");
  using Event = std::pair<idem::LogSeverity, std::string>;
  EXPECT_EQ(recorder.events[0], Event(idem::LogSeverity::kError, "periodic_sync_failed"));
  EXPECT_EQ(recorder.events[1], Event(idem::LogSeverity::kInfo, "periodic_sync_recovered"));
  // Each retry came an interval after the failure before it.
  for (std::size_t i = 1; i < recorder.syncs.size(); ++i) {
    EXPECT_GE(recorder.syncs[i] - recorder.syncs[i - 1], 20ms) << "sync " << i;
  }
}

TEST(PeriodicSync, StoppingSyncsWhatIsDueAtOnce) {
  Recorder recorder;
  PeriodicSync periodic(1h, recorder.Sync(), recorder.Log());
  periodic.Stop();
  EXPECT_EQ(recorder.SyncCount(), 0u) << "nothing due, nothing synced";

  Recorder second;
  const auto start = Clock::now();
  {
    PeriodicSync due(1h, second.Sync(), second.Log());
    due.Note();
  }  // the destructor stops
  EXPECT_EQ(second.SyncCount(), 1u);
  EXPECT_LT(Clock::now() - start, 10s) << "stopping does not wait for the interval";
}

// Writers note their writes while the thread syncs: every write is followed by a sync that began
// after it, whatever the interleaving (the exchange of the due flag on both sides).
TEST(PeriodicSync, WritersAndTheSyncRaceWithoutLosingANote) {
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> synced_up_to{0};
  std::atomic<uint64_t> syncs{0};
  PeriodicSync periodic(
      1ms,
      [&] {
        // Everything written before this sync began is durable once it ends.
        synced_up_to.store(written.load());
        syncs.fetch_add(1);
        return Status::OK();
      },
      nullptr);
  std::vector<std::thread> writers;
  // Long enough for many syncs of 1 ms to run among the writes.
  const auto until = Clock::now() + 200ms;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&] {
      while (Clock::now() < until) {
        written.fetch_add(1);
        periodic.Note();
      }
    });
  }
  for (auto& writer : writers) writer.join();
  const uint64_t total = written.load();
  // Every write was noted, so a sync must come that saw them all, without a later write.
  ASSERT_TRUE(Eventually([&] { return synced_up_to.load() == total; }))
      << synced_up_to.load() << " of " << total << " writes synced, after " << syncs.load()
      << " syncs";
  EXPECT_GT(syncs.load(), 1u);
}

// kPeriodic through the Store API: calls answer as with the other modes, from this process and
// from a client process whose requests the owner writes, and a bad interval is refused.
TEST(PeriodicDurability, CallsWorkAndABadIntervalIsRefused) {
  idem_test::TempDir dir;
  idem::Options options = idem_test::TestOptions();
  options.durability = idem::Durability::kPeriodic;
  options.sync_interval = 0ms;
  auto refused = idem::Store::Open(dir.StorePath(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("sync_interval is 0 ms; it must be positive"),
            std::string::npos)
      << refused.status().ToString();

  options.sync_interval = 10ms;
  // A child process is a client of this process's store: its kPeriodic calls travel over the
  // socket.
  idem_test::WaitingChild client([&] {
    auto opened = idem::Store::Open(dir.StorePath(), options);
    if (!opened.ok()) return 2;
    auto replay = (*opened)->Begin("pay-1", {});
    if (!replay.ok() || replay->outcome != idem::Outcome::kReplay ||
        replay->record.result != "charged") {
      return 3;
    }
    auto fresh = (*opened)->Begin("pay-2", {});
    if (!fresh.ok() || fresh->outcome != idem::Outcome::kAcquired) return 4;
    return (*opened)->Complete("pay-2", fresh->token, "charged too").ok() ? 0 : 5;
  });
  ASSERT_TRUE(client.started());
  auto store = idem_test::OpenStore(dir.StorePath(), options);
  if (store != nullptr) {
    auto claim = store->Begin("pay-1", {});
    EXPECT_TRUE(claim.ok() && claim->outcome == idem::Outcome::kAcquired);
    if (claim.ok()) {
      EXPECT_TRUE(store->Complete("pay-1", claim->token, "charged").ok());
    }
  }
  client.Start();
  const int failed_step = client.Wait();
  EXPECT_EQ(failed_step, 0) << "the client process failed at step " << failed_step;
  ASSERT_NE(store, nullptr);
  auto record = store->Get("pay-2");
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_TRUE(record->has_value());
  EXPECT_EQ((*record)->result, "charged too");
}

}  // namespace
