// Damaged database files: a write-ahead log damaged in the middle or torn at its end, table
// (SST) files truncated or with a damaged block, a damaged or truncated MANIFEST, a missing
// table file. Each must give kCorruption naming the damaged file (and exit code 3 from the
// `idem` command), or, for the torn log tail a crash leaves, open with everything that was
// acknowledged; never a crash, and never a wrong answer (a damaged record read as absent, or
// acquired and run again).

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/store_directory.h"
#include "idem/idem.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "support/test_util.h"

namespace {

using idem::Status;
using idem_test::TempDir;
using idem_test::TestOptions;
namespace fs = std::filesystem;

constexpr int kRecords = 200;

std::string Key(int i) { return "key-" + std::to_string(i); }
std::string ResultFor(int i) { return "result-" + std::to_string(i) + std::string(100, 'r'); }

// A store with kRecords done records (fsynced: the default durability).
void Fill(const std::string& path) {
  IDEM_ASSERT_OPEN(store, path);
  for (int i = 0; i < kRecords; ++i) {
    ASSERT_OK_AND_ASSIGN(auto claim, store->Begin(Key(i)));
    ASSERT_OK(store->Complete(Key(i), claim.token, ResultFor(i)));
  }
}

// Fill, in a child process that ends without closing the store: what a crash leaves (a store
// that closes writes its counters last, meta owner_counters).
void FillAndCrash(const std::string& path) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = idem::Store::Open(path, idem_test::TestOptions());
    if (!store.ok()) _exit(2);
    for (int i = 0; i < kRecords; ++i) {
      auto claim = (*store)->Begin(Key(i));
      if (!claim.ok() || !(*store)->Complete(Key(i), claim->token, ResultFor(i)).ok()) _exit(3);
    }
    _exit(0);  // no destructor runs: the store is not closed
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed: " << status;
}

// Writes what the logs hold into table files: opens the store's database and flushes it (an open
// alone keeps what it recovers in memory: avoid_flush_during_recovery).
void MoveLogIntoTables(const std::string& path) {
  idem::storage::RocksDbConfig config;
  config.clock = idem::SystemClock();
  auto storage = idem::core::OpenStoreDatabase(path, config);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  ASSERT_OK((*storage)->Flush());
}

// The files of the store's RocksDB whose name contains `part`, largest first.
std::vector<fs::path> FilesLike(const std::string& store_path, const std::string& part) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(store_path + "/db")) {
    if (entry.path().filename().string().find(part) != std::string::npos) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return fs::file_size(a) > fs::file_size(b);
  });
  return files;
}

void Overwrite(const fs::path& file, std::uintmax_t offset, std::size_t length, char byte) {
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(out.good()) << file;
  out.seekp(static_cast<std::streamoff>(offset));
  const std::string garbage(length, byte);
  out.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  ASSERT_TRUE(out.good()) << file;
}

void ExpectRefusedNaming(const std::string& path, const fs::path& file) {
  for (bool read_only : {false, true}) {
    idem::Options options = TestOptions();
    options.read_only = read_only;
    auto opened = idem::Store::Open(path, options);
    ASSERT_FALSE(opened.ok()) << "read_only=" << read_only << ": a damaged store opened";
    EXPECT_EQ(opened.status().code(), Status::Code::kCorruption)
        << "read_only=" << read_only << ": " << opened.status().ToString();
    EXPECT_NE(opened.status().message().find(file.filename().string()), std::string::npos)
        << "read_only=" << read_only << ": " << opened.status().ToString();
  }
}

#ifdef IDEM_TOOL_PATH
// Runs `idem ARGS` (the command built with the tests).
struct CommandResult {
  int code = -1;
  std::string err;
};

CommandResult RunIdem(const std::vector<std::string>& args, const TempDir& dir) {
  std::string command = IDEM_TOOL_PATH;
  for (const auto& arg : args) command += " '" + arg + "'";
  const std::string err_file = dir.Sub("stderr.txt");
  command += " >/dev/null 2>'" + err_file + "'";
  const int status = std::system(command.c_str());
  CommandResult result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  result.err.assign(std::istreambuf_iterator<char>(in), {});
  return result;
}
#endif  // IDEM_TOOL_PATH

// The command reports the damage: exit code 3, the file named on stderr; for a reader (get)
// and a writer (purge).
void ExpectCommandRefusesNaming(const TempDir& dir, const fs::path& file) {
#ifndef IDEM_TOOL_PATH
  (void)dir, (void)file;  // built without the command (IDEM_BUILD_TOOLS=OFF): nothing to run
#else
  for (const auto& args : std::vector<std::vector<std::string> >{{"get", dir.StorePath(), Key(7)},
                                                                 {"purge", dir.StorePath()}}) {
    const CommandResult result = RunIdem(args, dir);
    EXPECT_EQ(result.code, 3) << args[0] << ": " << result.err;
    EXPECT_NE(result.err.find(file.filename().string()), std::string::npos)
        << args[0] << ": " << result.err;
  }
#endif
}

// A log damaged in the middle: RocksDB's default recovery would stop at the damage and open the
// store without every record after it, fsynced ones included, silently. The store refuses to
// open instead and names the log.
TEST(FileCorruption, ALogDamagedInTheMiddleIsRefusedNamingIt) {
  TempDir dir;
  Fill(dir.StorePath());
  const auto logs = FilesLike(dir.StorePath(), ".log");
  ASSERT_FALSE(logs.empty());
  const fs::path log = logs.front();
  ASSERT_GT(fs::file_size(log), 10000u);
  Overwrite(log, fs::file_size(log) / 3, 64, '\x5a');
  ExpectRefusedNaming(dir.StorePath(), log);
  ExpectCommandRefusesNaming(dir, log);
}

// What a crash leaves: the last log record torn. That is no damage: the store opens, with
// every record whose write had completed.
TEST(FileCorruption, ATornLogTailFromACrashIsTolerated) {
  TempDir dir;
  FillAndCrash(dir.StorePath());
  const fs::path log = FilesLike(dir.StorePath(), ".log").front();
  // The log is written into zeros written ahead (storage/rocksdb/fs/log_zero_fill.h): its last
  // record ends at its last byte that is not zero.
  std::ifstream in(log, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::size_t end = bytes.find_last_not_of('\0') + 1;
  ASSERT_GT(end, 20u);
  fs::resize_file(log, end - 20);
  IDEM_ASSERT_OPEN(store, dir.StorePath());
  for (int i = 0; i + 1 < kRecords; ++i) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(Key(i)));
    ASSERT_TRUE(got.has_value()) << Key(i);
    EXPECT_EQ(got->result, ResultFor(i));
  }
  // The last write (the last Complete) was torn: the record is as its Begin left it.
  ASSERT_OK_AND_ASSIGN(auto last, store->Get(Key(kRecords - 1)));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->state, idem::State::kPending);
}

TEST(FileCorruption, ATruncatedTableFileIsRefusedNamingIt) {
  TempDir dir;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  const auto tables = FilesLike(dir.StorePath(), ".sst");
  ASSERT_FALSE(tables.empty());
  fs::resize_file(tables.front(), fs::file_size(tables.front()) / 2);
  ExpectRefusedNaming(dir.StorePath(), tables.front());
  ExpectCommandRefusesNaming(dir, tables.front());
}

TEST(FileCorruption, AMissingTableFileIsRefusedNamingIt) {
  TempDir dir;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  const auto tables = FilesLike(dir.StorePath(), ".sst");
  ASSERT_FALSE(tables.empty());
  fs::remove(tables.front());
  // RocksDB looks for the file under its two names (.sst, then the old .ldb) and names the
  // last it tried: compare by number.
  ExpectRefusedNaming(dir.StorePath(), tables.front().stem());
}

// A damaged data block in a table file: the store may open (RocksDB reads blocks when asked),
// but every record is either read correctly or reported as kCorruption naming the file. Never
// absent, and never acquired again (which would run a done request twice).
TEST(FileCorruption, ADamagedTableBlockIsReportedNamingTheFileNeverMisread) {
  TempDir dir;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  const auto tables = FilesLike(dir.StorePath(), ".sst");
  ASSERT_FALSE(tables.empty());
  const fs::path table = tables.front();
  // Data blocks come first in a table file; the index, filter and footer are at its end.
  Overwrite(table, fs::file_size(table) / 4, 32, '\x5a');

  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  if (!opened.ok()) {
    EXPECT_EQ(opened.status().code(), Status::Code::kCorruption) << opened.status().ToString();
    EXPECT_NE(opened.status().message().find(table.filename().string()), std::string::npos)
        << opened.status().ToString();
    return;
  }
  auto& store = *opened;
  int damaged = 0;
  for (int i = 0; i < kRecords; ++i) {
    auto got = store->Get(Key(i));
    if (got.ok()) {
      ASSERT_TRUE(got->has_value()) << Key(i) << " read as absent";
      EXPECT_EQ((*got)->result, ResultFor(i));
      continue;
    }
    ++damaged;
    EXPECT_EQ(got.status().code(), Status::Code::kCorruption) << got.status().ToString();
    EXPECT_NE(got.status().message().find(table.filename().string()), std::string::npos)
        << got.status().ToString();
    auto claim = store->Begin(Key(i));
    ASSERT_FALSE(claim.ok()) << Key(i) << " acquired again: " << idem::OutcomeName(claim->outcome);
    EXPECT_EQ(claim.status().code(), Status::Code::kCorruption);
  }
  EXPECT_GT(damaged, 0);
  // A scan stops at the damage and says so.
  Status scanned = store->Scan({}, [](const idem::Record&) { return true; });
  EXPECT_EQ(scanned.code(), Status::Code::kCorruption) << scanned.ToString();
}

TEST(FileCorruption, ADamagedManifestIsRefusedNamingIt) {
  TempDir dir;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  const auto manifests = FilesLike(dir.StorePath(), "MANIFEST-");
  ASSERT_EQ(manifests.size(), 1u);
  const fs::path manifest = manifests.front();
  Overwrite(manifest, fs::file_size(manifest) / 2, 16, '\x5a');
  ExpectRefusedNaming(dir.StorePath(), manifest);
  ExpectCommandRefusesNaming(dir, manifest);
}

// A MANIFEST cut short: RocksDB alone would read it like one torn by a crash, open the earlier
// state it describes and delete the table files that state does not name, so every record could
// vanish without an error. The manifest mark (src/storage/rocksdb/fs/manifest_mark.h) makes the
// store refuse it instead, wherever the cut falls.
TEST(FileCorruption, ATruncatedManifestIsRefusedNamingIt) {
  TempDir base;
  Fill(base.StorePath());
  MoveLogIntoTables(base.StorePath());
  const fs::path manifest = FilesLike(base.StorePath(), "MANIFEST-").front();
  const auto size = fs::file_size(manifest);
  int cuts = 0;
  for (std::uintmax_t cut = 0; cut < size; cut += std::max<std::uintmax_t>(1, size / 25)) {
    SCOPED_TRACE("MANIFEST cut to " + std::to_string(cut) + " of " + std::to_string(size));
    TempDir dir;
    fs::create_directories(dir.StorePath());
    fs::copy(base.StorePath() + "/db", dir.StorePath() + "/db", fs::copy_options::recursive);
    fs::resize_file(dir.StorePath() + "/db/" + manifest.filename().string(), cut);
    ExpectRefusedNaming(dir.StorePath(), manifest);
    ++cuts;
  }
  EXPECT_GE(cuts, 20);
  // The command says so too; and deleting the mark is the documented way to open what is left.
  TempDir dir;
  fs::create_directories(dir.StorePath());
  fs::copy(base.StorePath() + "/db", dir.StorePath() + "/db", fs::copy_options::recursive);
  fs::resize_file(dir.StorePath() + "/db/" + manifest.filename().string(), size / 2);
  ExpectCommandRefusesNaming(dir, manifest);
  fs::remove(dir.StorePath() + "/db/IDEM-MARK");
  auto opened = idem::Store::Open(dir.StorePath(), TestOptions());
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
}

// An older copy's MANIFEST and CURRENT put back among newer files: refused, naming the MANIFEST.
TEST(FileCorruption, AnOlderManifestPutBackIsRefusedNamingIt) {
  TempDir dir;
  TempDir older;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  fs::copy(dir.StorePath() + "/db", older.Sub("db"), fs::copy_options::recursive);
  MoveLogIntoTables(dir.StorePath());  // each open writes a new MANIFEST
  const fs::path old_manifest = FilesLike(older.path(), "MANIFEST-").front();
  for (const auto& newer : FilesLike(dir.StorePath(), "MANIFEST-")) fs::remove(newer);
  fs::copy_file(old_manifest, dir.StorePath() + "/db/" + old_manifest.filename().string());
  fs::copy_file(older.Sub("db/CURRENT"), dir.StorePath() + "/db/CURRENT",
                fs::copy_options::overwrite_existing);
  ExpectRefusedNaming(dir.StorePath(), old_manifest);
}

// A damaged mark is refused naming the mark, never ignored.
TEST(FileCorruption, ADamagedManifestMarkIsRefusedNamingIt) {
  TempDir dir;
  Fill(dir.StorePath());
  MoveLogIntoTables(dir.StorePath());
  const fs::path mark = dir.StorePath() + "/db/IDEM-MARK";
  ASSERT_TRUE(fs::exists(mark));
  Overwrite(mark, 3, 4, '\x5a');
  ExpectRefusedNaming(dir.StorePath(), mark);
}

}  // namespace
