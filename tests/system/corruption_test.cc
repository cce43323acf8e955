// Damaged stores: record bytes, an unknown format version, damaged database files, and a store
// held by another process. Each must give a clear status, never a crash or a wrong answer.

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "idem/idem.h"
#include "storage/rocksdb/record_codec.h"
#include "support/raw_db.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem::Status;
using idem_test::OpenStore;
using idem_test::PutRaw;
using idem_test::TempDir;
using idem_test::TestOptions;
namespace fs = std::filesystem;

TEST(Corruption, DamagedRecordBytesAreReportedNamingTheKey) {
  TempDir dir;
  const std::string key("bad\0key", 7);
  auto clock = std::make_shared<idem_test::ManualClock>();
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), idem_test::TestOptions(clock));
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("good"));
    ASSERT_OK(store->Complete("good", claim.token, "fine"));
    ASSERT_OK_AND_ASSIGN(auto bad, store->Begin(key, {.retention = 1h}));
    ASSERT_OK(store->Complete(key, bad.token, "soon damaged"));
  }
  PutRaw(dir.StorePath(), "default", key, std::string("\x01garbage", 8));

  IDEM_ASSERT_OPEN(store, dir.StorePath(), idem_test::TestOptions(clock));
  auto got = store->Get(key);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kCorruption);
  EXPECT_NE(got.status().message().find("bad\\x00key"), std::string::npos)
      << got.status().message();
  // Begin must not overwrite what it cannot read.
  EXPECT_CODE(store->Begin(key).status(), kCorruption);
  EXPECT_CODE(store->Complete(key, 1, "x"), kCorruption);
  // Other records are untouched.
  ASSERT_OK_AND_ASSIGN(auto good, store->Get("good"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->result, "fine");
  // A scan stops at the damaged record and says which one.
  EXPECT_CODE(store->Scan({}, [](const idem::Record&) { return true; }), kCorruption);
  // The operator's way out: forget it, then the key works again.
  ASSERT_OK(store->Forget(key));
  ASSERT_OK_AND_ASSIGN(auto fresh, store->Begin(key, {.retention = 48h}));
  EXPECT_EQ(fresh.outcome, idem::Outcome::kAcquired);
  // Forget removed the damaged record's expiry-index entry too (it could not read the expiry
  // from the damaged bytes): when that old expiry passes, a purge leaves the new record alone.
  clock->Advance(2h);
  ASSERT_OK_AND_ASSIGN(uint64_t purged, store->Purge());
  EXPECT_EQ(purged, 0u);
  ASSERT_OK_AND_ASSIGN(auto kept, store->Get(key));
  EXPECT_TRUE(kept.has_value()) << "a purge deleted a record that expires in two days";
}

// A record of a newer format (a newer release wrote it) is not misread, and not called damage:
// kNewerVersion names the version. Forget still clears it. Version 0 is no version: damage.
TEST(Corruption, AnUnknownRecordVersionIsNotMisread) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
    ASSERT_OK(store->Complete("k", claim.token, "v1 result"));
  }
  std::string future(64, '\0');
  future[0] = 9;
  PutRaw(dir.StorePath(), "default", "k", future);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  auto got = store->Get("k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kNewerVersion);
  EXPECT_NE(got.status().message().find("format version 9, written by a newer release"),
            std::string::npos)
      << got.status().message();
  ASSERT_OK(store->Forget("k"));

  std::string nothing(64, '\0');
  store.reset();
  PutRaw(dir.StorePath(), "default", "k", nothing);
  IDEM_ASSERT_OPEN(reopened, dir.StorePath());
  got = reopened->Get("k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kCorruption) << got.status().ToString();
}

// A record written by an older release (format version 3 or 2, or 1 by idem 0.1) reads back
// whole, its claim completes, and the record it becomes is stored in the current format.
TEST(Corruption, ARecordOfAnOlderFormatIsReadAndRewrittenInTheCurrentOne) {
  for (const uint8_t older :
       {idem::storage::kRecordFormatVersion3, idem::storage::kRecordFormatVersion2,
        idem::storage::kRecordFormatVersion1}) {
    TempDir dir;
    idem::Record claimed;
    {
      IDEM_ASSERT_OPEN(store, dir.StorePath());
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
      claimed = claim.record;
    }
    PutRaw(dir.StorePath(), "default", "k",
           idem::storage::EncodeRecordAtOlderVersion(claimed, older));
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto got, store->Get("k"));
    ASSERT_TRUE(got.has_value());
    idem::Record expected = claimed;
    if (older == idem::storage::kRecordFormatVersion1) expected.holder.pid_scope = 0;
    EXPECT_EQ(*got, expected) << "version " << int{older};
    ASSERT_OK(store->Complete("k", claimed.token, "done after the upgrade"));
    store.reset();
    const std::string stored = idem_test::GetRaw(dir.StorePath(), "default", "k");
    ASSERT_FALSE(stored.empty());
    EXPECT_EQ(static_cast<uint8_t>(stored[0]), idem::storage::kRecordFormatVersion);
    IDEM_ASSERT_OPEN(reopened, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto done, reopened->Get("k"));
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->state, idem::State::kDone);
    EXPECT_EQ(done->result, "done after the upgrade");
    EXPECT_EQ(done->token, claimed.token);
    EXPECT_EQ(done->holder, idem::Holder{});  // a done record keeps no holder
  }
}

TEST(Corruption, AStoreOfANewerFormatIsRefusedAtOpen) {
  TempDir dir;
  { IDEM_ASSERT_OPEN(store, dir.StorePath()); }
  PutRaw(dir.StorePath(), "meta", "format_version", std::string("\x03\0\0\0", 4));
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Status::Code::kNewerVersion);
  EXPECT_NE(opened.status().message().find("format version 3, written by a newer release"),
            std::string::npos)
      << opened.status().message();
  // Read-only too (idem dump, get, stats).
  idem::Options read_only = TestOptions();
  read_only.read_only = true;
  opened = idem::Store::Open(dir.StorePath(), read_only);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Status::Code::kNewerVersion) << opened.status().ToString();
  // A version that no release wrote is damage.
  PutRaw(dir.StorePath(), "meta", "format_version", std::string("\0\0\0\0", 4));
  opened = idem::Store::Open(dir.StorePath(), TestOptions());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Status::Code::kCorruption) << opened.status().ToString();
}

// The format file (db/IDEM-FORMAT) is read before RocksDB opens anything: a store whose file
// names a newer version is refused by every kind of open with every file as it was (contents,
// sizes, time stamps), the owner lock file included.
TEST(Corruption, AStoreOfANewerFormatIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin("k"));
  }
  const std::string format_file = dir.StorePath() + "/db/IDEM-FORMAT";
  {
    std::ifstream in(format_file);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text, "1\n");
  }
  { std::ofstream(format_file, std::ios::trunc) << "3\n"; }
  const auto before = idem_test::TreeSnapshot(dir.StorePath());
  for (const bool read_only : {false, true}) {
    idem::Options options = TestOptions();
    options.read_only = read_only;
    auto opened = idem::Store::Open(dir.StorePath(), options);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), Status::Code::kNewerVersion) << opened.status().ToString();
    EXPECT_NE(opened.status().message().find("format version 3 (" + format_file +
                                             "), written by a newer release"),
              std::string::npos)
        << opened.status().message();
    EXPECT_EQ(idem_test::TreeSnapshot(dir.StorePath()), before) << "read_only " << read_only;
  }
  // A version that no release wrote, or text that is no version, is damage.
  for (const char* text : {"0\n", "one\n", ""}) {
    { std::ofstream(format_file, std::ios::trunc) << text; }
    auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
    ASSERT_FALSE(opened.ok()) << text;
    EXPECT_EQ(opened.status().code(), Status::Code::kCorruption) << opened.status().ToString();
  }
}

// A store made before the format file existed opens as before; a read-write open writes the
// file, a read-only one writes nothing.
TEST(Corruption, AStoreWithoutAFormatFileGetsOneWhenOpenedForWriting) {
  TempDir dir;
  { IDEM_ASSERT_OPEN(store, dir.StorePath()); }
  const std::string format_file = dir.StorePath() + "/db/IDEM-FORMAT";
  ASSERT_TRUE(fs::remove(format_file));
  {
    idem::Options read_only = TestOptions();
    read_only.read_only = true;
    IDEM_ASSERT_OPEN(store, dir.StorePath(), read_only);
  }
  EXPECT_FALSE(fs::exists(format_file));
  { IDEM_ASSERT_OPEN(store, dir.StorePath()); }
  std::ifstream in(format_file);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "1\n");
  EXPECT_EQ(fs::status(format_file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_FALSE(fs::exists(format_file + ".tmp"));
}

TEST(Corruption, DamagedDatabaseFilesGiveAStatusNotACrash) {
  TempDir dir;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath());
    for (int i = 0; i < 100; ++i) {
      const std::string key = "key-" + std::to_string(i);
      ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(key));
      ASSERT_OK(store->Complete(key, claim.token, std::string(200, 'r')));
    }
  }
  // Overwrite the middle of every table and manifest file with garbage.
  int damaged = 0;
  for (const auto& entry : fs::directory_iterator(dir.StorePath() + "/db")) {
    const std::string name = entry.path().filename().string();
    if (name.find(".sst") == std::string::npos && name.find(".log") == std::string::npos &&
        name.rfind("MANIFEST", 0) != 0) {
      continue;
    }
    std::fstream file(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(entry.path());
    file.seekp(static_cast<std::streamoff>(size / 2));
    const std::string garbage(std::min<std::uintmax_t>(size / 4 + 1, 512), '\x5a');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  if (!opened.ok()) {
    EXPECT_TRUE(opened.status().code() == Status::Code::kCorruption ||
                opened.status().code() == Status::Code::kIOError)
        << opened.status().ToString();
    return;
  }
  // Opened: every read either answers correctly or reports the damage.
  for (int i = 0; i < 100; ++i) {
    auto got = (*opened)->Get("key-" + std::to_string(i));
    if (got.ok() && got->has_value()) {
      EXPECT_EQ((*got)->result, std::string(200, 'r'));
    }
  }
}

TEST(Corruption, AStoreHeldByAnotherProcessIsBusy) {
  TempDir dir;
  { IDEM_ASSERT_OPEN(store, dir.StorePath()); }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    idem::Options options = TestOptions();
    options.sharing = idem::Sharing::kExclusive;
    auto store = idem::Store::Open(dir.StorePath(), options);
    const char byte = store.ok() ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  idem::Options options = TestOptions();
  options.sharing = idem::Sharing::kExclusive;
  auto opened = idem::Store::Open(dir.StorePath(), options);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Status::Code::kBusy) << opened.status().ToString();
  // Once the holder is gone, the store opens again with everything in it.
  IDEM_ASSERT_OPEN(store, dir.StorePath());
}

}  // namespace
