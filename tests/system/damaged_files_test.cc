// A store directory whose table file is damaged (docs/design/integrity-plan.md): its owner finds
// the file (every file once at start-up, and again every Options::reverify_interval), names it in
// Health and the stats, and refuses purges, forgets and imports with kCorruption, in the process
// and through `idem`, whether the command owns the store or asks its owner. Claims are not refused
// for it (RocksDB stops every write itself once a compaction reads the damaged file).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "idem/idem.h"
#include "support/cli_run.h"
#include "support/damage.h"
#include "support/owner_process.h"
#include "support/test_util.h"

namespace {

namespace fs = std::filesystem;
using idem_test::DamageLargestTableFile;
using idem_test::RunCliOn;
using idem_test::TempDir;
using idem_test::TestOptions;
using namespace std::chrono_literals;

// Writes `count` done records key-0... with results of 200 bytes, then takes a backup into
// `backup`, which flushes them into table files.
void FillAndFlush(idem::Store& store, int count, const std::string& backup) {
  for (int i = 0; i < count; ++i) {
    const std::string key = "key-" + std::to_string(i);
    ASSERT_OK_AND_ASSIGN(idem::Claim claim, store.Begin(key));
    ASSERT_OK(store.Complete(key, claim.token, std::string(200, 'r')));
  }
  ASSERT_OK(store.Backup(backup));
}

// A store directory of 2000 records whose largest table file is damaged, no process owning it.
struct DamagedStore {
  TempDir dir;
  std::string damaged;  // the file's name; empty when it could not be made
};

void MakeDamaged(DamagedStore& s) {
  {
    IDEM_ASSERT_OPEN(store, s.dir.StorePath());
    FillAndFlush(*store, 2000, s.dir.Sub("backup"));
  }
  s.damaged = DamageLargestTableFile(s.dir.StorePath()).filename().string();
}

// The engine's health as GetStats answers it.
idem::EngineHealth Engine(idem::Store& store) {
  auto stats = store.GetStats();
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  if (!stats.ok() || !stats->engine) return {};
  return *stats->engine;
}

void ExpectRefusedNaming(const idem::Status& status, const std::string& file) {
  EXPECT_EQ(status.code(), idem::Status::Code::kCorruption) << status.ToString();
  EXPECT_NE(status.message().find(file), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("restore the store from a backup"), std::string::npos)
      << status.ToString();
}

TEST(DamagedFiles, TheOwnerRefusesPurgeForgetAndImportAndNamesTheFile) {
  DamagedStore s;
  MakeDamaged(s);
  ASSERT_FALSE(s.damaged.empty());
  IDEM_ASSERT_OPEN(store, s.dir.StorePath());
  // Whether the owner's start-up pass or the call finds it first, each call is refused.
  ExpectRefusedNaming(store->Purge().status(), s.damaged);
  ExpectRefusedNaming(store->Forget("key-1"), s.damaged);
  idem::Record imported;
  imported.key = "imported";
  imported.state = idem::State::kDone;
  imported.created = imported.updated = std::chrono::system_clock::now();
  imported.expires = imported.created + 24h;
  ExpectRefusedNaming(store->Import({&imported, 1}).status(), s.damaged);
  // The record of the imported key was not written.
  ASSERT_OK_AND_ASSIGN(const auto absent, store->Get("imported"));
  EXPECT_FALSE(absent.has_value());

  // The store answers, and says what an operator must do.
  const idem::StoreHealth health = store->Health();
  EXPECT_TRUE(health.can_read);
  ExpectRefusedNaming(health.problem, s.damaged);
  const idem::EngineHealth engine = Engine(*store);
  EXPECT_EQ(engine.damaged_table_files, 1u);
  EXPECT_NE(engine.damage.find(s.damaged), std::string::npos) << engine.damage;

  // Claims are not refused for it, but a compaction that reads the damaged file (the store's
  // open may have started one) makes RocksDB stop every write, naming the file.
  const idem::Result<idem::Claim> fresh = store->Begin("fresh");
  if (!fresh.ok()) {
    EXPECT_EQ(fresh.status().code(), idem::Status::Code::kCorruption) << fresh.status().ToString();
    EXPECT_NE(fresh.status().message().find(s.damaged), std::string::npos)
        << fresh.status().ToString();
  }
}

TEST(DamagedFiles, CommandsThatWriteRefuseAStoreNobodyOwns) {
  DamagedStore s;
  MakeDamaged(s);
  ASSERT_FALSE(s.damaged.empty());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"purge", s.dir.StorePath()},
        std::vector<std::string>{"forget", s.dir.StorePath(), "key-1"}}) {
    const auto refused = RunCliOn(args, nullptr);
    EXPECT_EQ(refused.code, 3) << args[0] << ": " << refused.err << refused.out;
    EXPECT_NE(refused.err.find(s.damaged), std::string::npos) << args[0] << ": " << refused.err;
    EXPECT_EQ(refused.out.find("purged"), std::string::npos) << refused.out;
  }
  // An export of another store, imported.
  TempDir other;
  {
    IDEM_ASSERT_OPEN(store, other.StorePath());
    ASSERT_OK_AND_ASSIGN(const idem::Claim claim, store->Begin("imported"));
    ASSERT_OK(store->Complete("imported", claim.token, "ok"));
  }
  const std::string input = s.dir.Sub("records.jsonl");
  ASSERT_EQ(RunCliOn({"export", other.StorePath(), "--output", input}, nullptr).code, 0);
  const auto import = RunCliOn({"import", s.dir.StorePath(), input}, nullptr);
  EXPECT_EQ(import.code, 3) << import.err << import.out;
  EXPECT_NE(import.err.find(s.damaged), std::string::npos) << import.err;
}

TEST(DamagedFiles, AnOwnerInAnotherProcessRefusesTheCommandsAndPingSaysSo) {
  DamagedStore s;
  MakeDamaged(s);
  ASSERT_FALSE(s.damaged.empty());
  idem_test::OwnerProcess owner(s.dir.StorePath());
  ASSERT_TRUE(owner.ready());
  const auto purge = RunCliOn({"purge", s.dir.StorePath()}, nullptr);
  EXPECT_EQ(purge.code, 3) << purge.err << purge.out;
  EXPECT_NE(purge.err.find(s.damaged), std::string::npos) << purge.err;
  // Once the owner's start-up pass has found it, ping and stats say so too.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  idem_test::CliResult ping;
  do {
    ping = RunCliOn({"ping", s.dir.StorePath()}, nullptr);
    if (ping.code != 0) break;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(ping.code, 3) << ping.err << ping.out;
  EXPECT_NE(ping.err.find(s.damaged), std::string::npos) << ping.err;
  const auto stats = RunCliOn({"stats", s.dir.StorePath(), "--format", "prometheus"}, nullptr);
  EXPECT_EQ(stats.code, 0) << stats.err;
  const std::size_t sample = stats.out.find("\nidem_engine_damaged_table_files{");
  ASSERT_NE(sample, std::string::npos) << stats.out;
  const std::string line = stats.out.substr(sample + 1, stats.out.find('\n', sample + 1) - sample);
  EXPECT_EQ(line.substr(line.rfind(' ')), " 1\n") << line;
}

// A store in `dir` owned by this process, re-verifying every `reverify`, with 2000 records in
// table files that its owner verified good (a purge verifies what is not verified yet first).
std::unique_ptr<idem::Store> OpenVerified(const TempDir& dir, std::chrono::milliseconds reverify) {
  idem::Options options = TestOptions();
  options.reverify_interval = reverify;
  std::unique_ptr<idem::Store> store = idem_test::OpenStore(dir.StorePath(), options);
  if (store == nullptr) return nullptr;
  FillAndFlush(*store, 2000, dir.Sub("backup"));
  EXPECT_OK(store->Purge().status());
  EXPECT_EQ(Engine(*store).damaged_table_files, 0u);
  EXPECT_OK(store->Health().problem);
  return store;
}

TEST(DamagedFiles, ReverificationFindsAFileDamagedBehindTheOwnersBack) {
  TempDir dir;
  const std::unique_ptr<idem::Store> store = OpenVerified(dir, 200ms);
  ASSERT_NE(store, nullptr);

  const std::string damaged = DamageLargestTableFile(dir.StorePath()).filename().string();
  ASSERT_FALSE(damaged.empty());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (Engine(*store).damaged_table_files == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(Engine(*store).damaged_table_files, 1u);
  ExpectRefusedNaming(store->Purge().status(), damaged);
  ExpectRefusedNaming(store->Health().problem, damaged);
}

TEST(DamagedFiles, WithoutReverificationAFileVerifiedOnceIsNotReadAgain) {
  TempDir dir;
  const std::unique_ptr<idem::Store> store = OpenVerified(dir, 0ms);
  ASSERT_NE(store, nullptr);
  ASSERT_FALSE(DamageLargestTableFile(dir.StorePath()).empty());
  std::this_thread::sleep_for(3s);  // longer than a housekeeping round
  EXPECT_EQ(Engine(*store).damaged_table_files, 0u);
  EXPECT_OK(store->Purge().status());
}

TEST(DamagedFiles, ANegativeReverifyIntervalIsRefused) {
  TempDir dir;
  idem::Options options = TestOptions();
  options.reverify_interval = -1ms;
  auto refused = idem::Store::Open(dir.StorePath(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("reverify_interval is -1 ms"), std::string::npos)
      << refused.status().ToString();
}

}  // namespace
