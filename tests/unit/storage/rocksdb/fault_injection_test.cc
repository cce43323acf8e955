// Disk faults injected below RocksDB (tests/support/fault_fs.h): a write or an fsync failing with
// EIO or ENOSPC, a full or unwritable disk at open, a table file that cannot be written. Each test
// checks the promises of docs/reliability.md: the call reports kIOError with the reason, no
// acknowledged record is lost, no record is half-written (a record and its expiry-index entry
// are one batch), and the store works again once the fault clears, or says that it must be
// reopened, and then reopens with everything acknowledged.

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <map>
#include <random>
#include <thread>

#include "backend/engine_backend.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "support/damage.h"
#include "support/fault_fs.h"
#include "support/index_check.h"
#include "support/owner_backend.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem_test::CheckIndexMatchesRecords;
using idem_test::FaultFs;
using idem_test::TempDir;
using namespace std::chrono_literals;

// A EngineBackend on a RocksDbStorage whose file system is a FaultFs: what Store::Open builds for
// the owner of a store, with the fault hook added.
class FaultyStore {
 public:
  explicit FaultyStore(std::string db_path) : db_path_(std::move(db_path)) {}

  Status Open(idem::Durability durability = idem::Durability::kSync) {
    backend_.reset();
    storage_ = nullptr;
    durability_ = durability;
    idem::storage::RocksDbConfig config;
    config.path = db_path_;
    config.clock = clock_;
    config.memory_budget = 4 << 20;
    config.env = fs_->env();
    config.log = [this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_ += std::string(line) + "\n";
    };
    auto storage = idem::storage::RocksDbStorage::Open(config);
    if (!storage.ok()) return storage.status();
    storage_ = storage->get();
    backend_ = idem_test::OwnerBackend(std::move(storage).value(), idem_test::TestOptions(clock_));
    return Status::OK();
  }
  void Close() {
    backend_.reset();
    storage_ = nullptr;
  }

  idem::Result<idem::Claim> Begin(std::string_view key) {
    const idem::engine::BeginCall call{.key = key,
                                       .lease = 30s,
                                       .retention = 24h,
                                       .request_id = ++request_id_,
                                       .durability = durability_};
    return backend_->Begin(call, idem::Holder{});
  }
  Status Complete(std::string_view key, uint64_t token, std::string_view result) {
    return backend_->Transition({.key = key,
                                 .request = {.kind = idem::engine::TransitionKind::kComplete,
                                             .token = token,
                                             .payload = result},
                                 .durability = durability_});
  }
  // Begin + Complete; the result is the key's "result:" + key.
  Status Run(const std::string& key, std::size_t padding = 0) {
    auto claim = Begin(key);
    if (!claim.ok()) return claim.status();
    if (claim->outcome != idem::Outcome::kAcquired) {
      return Status::InvalidArgument("unexpected outcome for " + key);
    }
    return Complete(key, claim->token, "result:" + key + std::string(padding, '.'));
  }
  idem::Result<std::optional<idem::Record>> Get(std::string_view key) { return backend_->Get(key); }

  FaultFs& fs() { return *fs_; }
  idem::storage::RocksDbStorage& storage() { return *storage_; }
  idem_test::ManualClock& clock() { return *clock_; }
  const std::string& db_path() const { return db_path_; }
  // What the storage told the operator (RocksDbConfig::log), a line each.
  std::string log() const {
    std::lock_guard lock(log_mu_);
    return log_;
  }

 private:
  mutable std::mutex log_mu_;
  std::string log_;
  const std::string db_path_;
  std::shared_ptr<FaultFs> fs_ = std::make_shared<FaultFs>();
  std::shared_ptr<idem_test::ManualClock> clock_ = std::make_shared<idem_test::ManualClock>();
  idem::Durability durability_ = idem::Durability::kSync;
  uint64_t request_id_ = 0;
  idem::storage::RocksDbStorage* storage_ = nullptr;
  std::unique_ptr<idem::backend::EngineBackend> backend_;
};

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every key in `keys` is stored as done with its result.
void ExpectDone(FaultyStore& store, const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    auto got = store.Get(key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(got->has_value()) << "acknowledged record " << key << " is lost";
    EXPECT_EQ((*got)->state, idem::State::kDone) << key;
    EXPECT_EQ((*got)->result.substr(0, (*got)->result.find('.')), "result:" + key);
  }
}

struct FaultCase {
  const char* name;
  bool sync;             // fail syncs (else appends)
  FaultFs::Error error;  // EIO or ENOSPC
  const char* reason;    // what the status must say
  idem::Durability durability;
};

void PrintTo(const FaultCase& fault, std::ostream* os) { *os << fault.name; }

class WriteFaults : public ::testing::TestWithParam<FaultCase> {};

// The core promise, for each kind of fault: the failing call says kIOError and why; nothing of
// it is visible (neither the record nor its index entry); every record acknowledged before is
// kept; once the disk is healthy the store resumes in place, or says it must be reopened; after
// a reopen everything acknowledged is there and the index matches the records exactly.
TEST_P(WriteFaults, FailedWriteIsReportedNotHalfAppliedAndNothingAcknowledgedIsLost) {
  const FaultCase& fault = GetParam();
  if (fault.sync && fault.durability == idem::Durability::kBuffered) GTEST_SKIP();
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open(fault.durability));
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "before-" + std::to_string(i);
    ASSERT_OK(store.Run(key));
    acknowledged.push_back(key);
  }
  ASSERT_OK_AND_ASSIGN(auto pending, store.Begin("pending-before"));

  // The WAL write or sync fails: the claim is refused with the reason.
  if (fault.sync) {
    store.fs().FailSyncs(fault.error, ".log");
  } else {
    store.fs().FailWrites(fault.error, ".log");
  }
  auto failed = store.Begin("during-fault");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Status::Code::kIOError) << failed.status().ToString();
  EXPECT_TRUE(Contains(failed.status().message(), fault.reason)) << failed.status().ToString();
  EXPECT_TRUE(Contains(failed.status().message(), ".log")) << failed.status().ToString();
  EXPECT_GT(store.fs().failures(), 0u);
  // Not visible, not even in part.
  ASSERT_OK_AND_ASSIGN(auto absent, store.Get("during-fault"));
  EXPECT_FALSE(absent.has_value());
  // Completing the pending claim fails too, and leaves the claim as it was.
  EXPECT_CODE(store.Complete("pending-before", pending.token, "result:pending-before"), kIOError);
  ASSERT_OK_AND_ASSIGN(auto still, store.Get("pending-before"));
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->state, idem::State::kPending);
  // Reads keep working, and show everything acknowledged.
  ExpectDone(store, acknowledged);

  // The disk heals. A full disk (ENOSPC) heals in place: RocksDB polls the free space and
  // resumes within seconds, meanwhile calls say the store is recovering. After EIO, RocksDB
  // cannot know what reached the disk and stops writing for good: the store says it must be
  // reopened, naming it.
  store.fs().Clear();
  Status after;
  if (fault.error == FaultFs::kEnospc) {
    EXPECT_TRUE(idem_test::WaitFor([&] { return (after = store.Run("after-fault")).ok(); }, 20s))
        << after.ToString();
    acknowledged.push_back("after-fault");
    ASSERT_OK(store.Complete("pending-before", pending.token, "result:pending-before"));
    acknowledged.push_back("pending-before");
  } else {
    after = store.Run("after-fault");
    EXPECT_EQ(after.code(), Status::Code::kIOError) << after.ToString();
    EXPECT_TRUE(Contains(after.message(), "reopen")) << after.ToString();
    EXPECT_TRUE(Contains(after.message(), store.db_path())) << after.ToString();
  }
  ExpectDone(store, acknowledged);

  // Reopened: everything acknowledged is there, and no record is half-written.
  store.Close();
  const std::vector<std::string> keys = CheckIndexMatchesRecords(store.db_path());
  for (const auto& key : acknowledged) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  ASSERT_OK(store.Open(fault.durability));
  ExpectDone(store, acknowledged);
  // The failed claim may have reached the log before its sync failed ("a call that returned an
  // error may or may not have been applied"), but only whole: a pending claim or nothing.
  ASSERT_OK_AND_ASSIGN(auto maybe, store.Get("during-fault"));
  if (maybe.has_value()) {
    EXPECT_EQ(maybe->state, idem::State::kPending);
  }
  // And the store takes new work.
  ASSERT_OK(store.Run("after-reopen"));
  ExpectDone(store, {"after-reopen"});
}

INSTANTIATE_TEST_SUITE_P(
    Faults, WriteFaults,
    ::testing::Values(
        FaultCase{"SyncEio", true, FaultFs::kEio, "Input/output error", idem::Durability::kSync},
        FaultCase{"SyncEnospc", true, FaultFs::kEnospc, "No space left on device",
                  idem::Durability::kSync},
        FaultCase{"WriteEio", false, FaultFs::kEio, "Input/output error", idem::Durability::kSync},
        FaultCase{"WriteEnospc", false, FaultFs::kEnospc, "No space left on device",
                  idem::Durability::kSync},
        FaultCase{"BufferedWriteEio", false, FaultFs::kEio, "Input/output error",
                  idem::Durability::kBuffered},
        FaultCase{"BufferedWriteEnospc", false, FaultFs::kEnospc, "No space left on device",
                  idem::Durability::kBuffered}),
    [](const auto& info) { return std::string(info.param.name); });

// A full disk (ENOSPC) is the fault that heals on its own: the store must take writes again in
// the same process once space is freed, without a reopen. Without the resume on the next write,
// RocksDB would refuse every write until the process restarts.
TEST(FaultInjection, AFullDiskHealsInPlace) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("a"));
  store.fs().FailWrites(FaultFs::kEnospc);
  EXPECT_CODE(store.Run("b"), kIOError);
  EXPECT_CODE(store.Run("c"), kIOError);  // still full: still refused, never half-done
  store.fs().Clear();
  // RocksDB polls the free space and resumes by itself (within about 5 seconds); meanwhile a
  // call says that the store is recovering.
  Status last;
  EXPECT_TRUE(idem_test::WaitFor([&] { return (last = store.Run("d")).ok(); }, 20s))
      << last.ToString();
  ASSERT_OK(store.Run("b"));
  ExpectDone(store, {"a", "b", "d"});
  store.Close();
  CheckIndexMatchesRecords(store.db_path());
  ASSERT_OK(store.Open());
  ExpectDone(store, {"a", "b", "d"});
}

// An EIO from fsync is not retryable: the kernel may have dropped the dirty pages, so RocksDB
// stops writing for good. The store must say so plainly (kIOError, "reopen") rather than keep
// failing with a bare I/O error, and a reopen must bring back everything acknowledged.
TEST(FaultInjection, AnFsyncEioSaysTheStoreMustBeReopened) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("a"));
  store.fs().FailSyncs(FaultFs::kEio);
  Status first = store.Run("b");
  EXPECT_EQ(first.code(), Status::Code::kIOError) << first.ToString();
  store.fs().Clear();
  Status next = store.Run("c");
  if (!next.ok()) {
    EXPECT_EQ(next.code(), Status::Code::kIOError);
    EXPECT_TRUE(Contains(next.message(), "reopen")) << next.ToString();
    EXPECT_TRUE(Contains(next.message(), store.db_path())) << next.ToString();
  }
  store.Close();
  ASSERT_OK(store.Open());
  ExpectDone(store, {"a"});
  ASSERT_OK(store.Run("c2"));
}

// The disk dies at an arbitrary moment (after a random number of writes and syncs, of the log,
// a table file or the MANIFEST) while several threads write: every call that returned OK is
// there after a reopen, and the index matches the records (no half-applied batch). Repeated
// over rounds, so that later rounds reopen stores that earlier faults interrupted.
TEST(FaultInjection, NoAcknowledgedRecordIsLostWhenTheDiskDiesAtAnyMoment) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  constexpr int kThreads = 4;
  const int rounds = idem_test::Scaled(12, 4);
  std::vector<std::string> acknowledged;
  std::mt19937 random(20260301);
  uint64_t refused = 0;
  for (int round = 0; round < rounds; ++round) {
    ASSERT_OK(store.Open());
    ExpectDone(store, acknowledged);
    const auto error = round % 2 ? FaultFs::kEio : FaultFs::kEnospc;
    store.fs().FailAfter(std::uniform_int_distribution<int64_t>(1, 300)(random), error);
    std::mutex mu;
    std::vector<std::thread> workers;
    for (int t = 0; t < kThreads; ++t) {
      workers.emplace_back([&, t] {
        // Large results, so that memtables fill and flushes (table files) are hit too.
        for (int i = 0; i < 200; ++i) {
          const std::string key =
              "r" + std::to_string(round) + "-t" + std::to_string(t) + "-" + std::to_string(i);
          Status status = store.Run(key, 4096);
          if (!status.ok()) {
            EXPECT_EQ(status.code(), Status::Code::kIOError) << status.ToString();
            std::lock_guard lock(mu);
            ++refused;
            return;
          }
          std::lock_guard lock(mu);
          acknowledged.push_back(key);
        }
      });
    }
    for (auto& worker : workers) worker.join();
    store.Close();
    store.fs().Clear();
    CheckIndexMatchesRecords(store.db_path());
  }
  ASSERT_OK(store.Open());
  ExpectDone(store, acknowledged);
  ASSERT_OK(store.Run("afterwards"));
  EXPECT_GT(refused, 0u);
  std::cout << acknowledged.size() << " acknowledged records all kept; " << refused
            << " calls refused; " << store.fs().failures() << " faults injected\n";
}

// A table file that cannot be written (the memtable flush hits the fault): the flush reports
// it, the records stay readable from memory and the log, and after the fault clears the store
// writes again (in place, or after a reopen) with everything acknowledged.
TEST(FaultInjection, AFailedFlushLosesNothing) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  std::vector<std::string> acknowledged;
  for (int i = 0; i < 50; ++i) {
    acknowledged.push_back("k" + std::to_string(i));
    ASSERT_OK(store.Run(acknowledged.back()));
  }
  store.fs().FailWrites(FaultFs::kEnospc, ".sst");
  Status flushed = store.storage().Flush();
  EXPECT_EQ(flushed.code(), Status::Code::kIOError) << flushed.ToString();
  EXPECT_TRUE(Contains(flushed.message(), ".sst")) << flushed.ToString();
  ExpectDone(store, acknowledged);
  store.fs().Clear();
  // The failed flush stopped writes; the next writes resume (at once, or within seconds when
  // RocksDB is recovering by itself from ENOSPC).
  Status last;
  EXPECT_TRUE(idem_test::WaitFor([&] { return (last = store.Run("after")).ok(); }, 20s))
      << last.ToString();
  acknowledged.push_back("after");
  ASSERT_OK(store.storage().Flush());
  store.Close();
  CheckIndexMatchesRecords(store.db_path());
  ASSERT_OK(store.Open());
  ExpectDone(store, acknowledged);
}

// Open on a disk that refuses to create files (read-only, or full): a clear kIOError naming the
// path and the reason. Running as root, chmod cannot make a directory unwritable, so the fault
// file system refuses instead.
TEST(FaultInjection, OpenOnAnUnwritableDiskNamesThePath) {
  for (auto error : {FaultFs::kEio, FaultFs::kEnospc}) {
    TempDir dir;
    FaultyStore store(dir.Sub("db"));
    store.fs().FailCreates(error);
    Status opened = store.Open();
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.code(), Status::Code::kIOError) << opened.ToString();
    EXPECT_TRUE(Contains(opened.message(), store.db_path())) << opened.ToString();
    EXPECT_TRUE(Contains(opened.message(),
                         error == FaultFs::kEio ? "Input/output error" : "No space left on device"))
        << opened.ToString();
    store.fs().Clear();
    ASSERT_OK(store.Open());
    ASSERT_OK(store.Run("works"));
  }
}

// An existing store reopened on a full disk: Open must fail cleanly (it writes the token
// ceiling), and the records stay intact for the next open.
TEST(FaultInjection, ReopenOnAFullDiskFailsCleanlyAndLosesNothing) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("kept"));
  store.Close();
  for (auto error : {FaultFs::kEnospc, FaultFs::kEio}) {
    store.fs().FailWrites(error);
    Status opened = store.Open();
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.code(), Status::Code::kIOError) << opened.ToString();
    EXPECT_TRUE(Contains(opened.message(), store.db_path())) << opened.ToString();
    store.fs().Clear();
  }
  ASSERT_OK(store.Open());
  ExpectDone(store, {"kept"});
  // Tokens stay unique across the failed opens.
  ASSERT_OK_AND_ASSIGN(auto claim, store.Begin("next"));
  EXPECT_EQ(claim.outcome, idem::Outcome::kAcquired);
}

// A log write fails right after every memtable was flushed. RocksDB 7.8 then resumes without
// replacing the log file (it replaces it only when flushing a memtable that holds data), and
// its writer of that file asserts on the next append: the process aborted. Now every write
// says the store must be reopened (kIOError), flushes and compactions do not abort either, and
// a reopen brings back everything acknowledged.
TEST(FaultInjection, ALogWriteFailingWhenEveryMemtableIsEmptyNeverAborts) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("a"));
  ASSERT_OK(store.storage().Flush());  // every memtable empty
  store.fs().FailWrites(FaultFs::kEnospc, ".log");
  EXPECT_CODE(store.Run("b"), kIOError);
  store.fs().Clear();
  // RocksDB resumes by itself (on the failed file): the store refuses to write to it.
  Status refused;
  EXPECT_TRUE(idem_test::WaitFor(
      [&] {
        refused = store.Run("c");
        EXPECT_EQ(refused.code(), Status::Code::kIOError) << refused.ToString();
        return Contains(refused.message(), "reopen");
      },
      20s))
      << refused.ToString();
  EXPECT_TRUE(Contains(refused.message(), store.db_path())) << refused.ToString();
  for (int i = 0; i < 5; ++i) EXPECT_CODE(store.Run("d" + std::to_string(i)), kIOError);
  (void)store.storage().Flush();
  (void)store.storage().CompactRecords();
  ExpectDone(store, {"a"});
  EXPECT_TRUE(Contains(store.log(), "stopped writing")) << store.log();
  store.Close();
  CheckIndexMatchesRecords(store.db_path());
  ASSERT_OK(store.Open());
  ExpectDone(store, {"a"});
  ASSERT_OK(store.Run("after-reopen"));
}

// The disk is still full for the first write after a resume (which flushed every memtable):
// the store resumes again in place. Without the unlogged guard that the store writes after a
// resume, RocksDB 7.8 would resume the second time on the failed log file (see above): before,
// the process aborted; without the guard, the store would have to be reopened.
TEST(FaultInjection, AFullDiskRightAfterAResumeResumesAgain) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("a"));
  store.fs().FailWrites(FaultFs::kEnospc, ".log");
  // The next log file RocksDB starts is full too: set before the failure, since the resume that
  // starts it runs in the background from then on (under emulation it could finish before the
  // next line of this test, on a log that the fault had not reached).
  store.fs().FailNewFiles(FaultFs::kEnospc, ".log");
  const Status failed = store.Run("b");
  ASSERT_EQ(failed.code(), Status::Code::kIOError) << failed.ToString();
  // ".../000012.log: No space left on device"
  const std::size_t log_end = failed.message().rfind(".log");
  ASSERT_NE(log_end, std::string::npos) << failed.ToString();
  const std::string failed_log = failed.message().substr(
      failed.message().rfind('/', log_end), log_end + 4 - failed.message().rfind('/', log_end));
  // The disk heals for the log file that failed, but not for the next one (above).
  store.fs().FailWrites(FaultFs::kNone);
  Status failed_again;
  EXPECT_TRUE(idem_test::WaitFor(
      [&] {
        failed_again = store.Run("c");
        EXPECT_EQ(failed_again.code(), Status::Code::kIOError) << failed_again.ToString();
        // The first write after the resume fails, on the new log file.
        return Contains(failed_again.message(), "writing record") &&
               !Contains(failed_again.message(), failed_log);
      },
      20s))
      << failed_again.ToString();
  store.fs().Clear();
  Status after;
  EXPECT_TRUE(idem_test::WaitFor([&] { return (after = store.Run("d")).ok(); }, 20s))
      << after.ToString();
  ExpectDone(store, {"a", "d"});
  EXPECT_TRUE(Contains(store.log(), "writes again")) << store.log();
  store.Close();
  CheckIndexMatchesRecords(store.db_path());
  ASSERT_OK(store.Open());
  ExpectDone(store, {"a", "d"});
}

// The owner's verification of its table files (table_file_verifier.h): a file that cannot be
// read (EIO at its open) is not damage, and is not taken as verified either: the next pass reads
// it again, and so finds damage made meanwhile.
TEST(TableFileVerification, AFileThatCannotBeReadIsNotDamageAndIsReadAgain) {
  TempDir dir;
  FaultyStore store(dir.Sub("db"));
  ASSERT_OK(store.Open());
  ASSERT_OK(store.Run("a", 4096));
  ASSERT_OK(store.storage().Flush());
  const auto go_on = [] { return true; };
  store.fs().FailReads(FaultFs::kEio, ".sst");
  EXPECT_OK(store.storage().VerifyNewFiles(go_on));
  EXPECT_GT(store.fs().failed_reads(), 0u);
  // Damaged before the disk heals, so that no pass can read the file whole in between.
  ASSERT_FALSE(idem_test::DamageLargestTableFile(dir.path()).empty());
  store.fs().Clear();
  const Status found = store.storage().VerifyNewFiles(go_on);
  EXPECT_EQ(found.code(), Status::Code::kCorruption) << found.ToString();
  EXPECT_TRUE(Contains(found.message(), "is damaged")) << found.ToString();
}

}  // namespace
