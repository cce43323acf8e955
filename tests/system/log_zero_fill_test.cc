// Write-ahead logs zero-filled ahead of their records (storage/rocksdb/fs/log_zero_fill.h), and
// what their tails become: cut by a read-write open, read up to the last whole record by a
// read-only one (storage/rocksdb/fs/log_tail.h).

#include "storage/rocksdb/fs/log_zero_fill.h"

#include <gtest/gtest.h>
#include <rocksdb/file_system.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "idem/idem.h"
#include "storage/rocksdb/fs/log_tail.h"
#include "support/test_util.h"

namespace {

using namespace std::chrono_literals;
using idem_test::TempDir;

// The newest write-ahead log of the store at `store_path`, or "".
std::string NewestLog(const std::string& store_path) {
  std::string newest;
  for (const auto& entry : std::filesystem::directory_iterator(store_path + "/db")) {
    if (entry.path().extension() == ".log" && entry.path().string() > newest) {
      newest = entry.path().string();
    }
  }
  return newest;
}

idem::storage::LogScan Scan(const std::string& log) {
  auto scan = idem::storage::ScanLog(*rocksdb::FileSystem::Default(), log, true);
  EXPECT_TRUE(scan.ok()) << scan.status().ToString();
  return scan.ok() ? *scan : idem::storage::LogScan{};
}

// The result stored for key `i`: short for every third key, and otherwise longer than the log's
// 32 KiB blocks, so that its record is split into fragments.
std::string Result(int i) {
  return std::string(i % 3 == 0 ? 500 : 33000 + 997 * (i % 20), static_cast<char>('a' + i % 26));
}
std::string Key(int i) { return "k-" + std::to_string(1000 + i); }

// Every key up to some one is done with its result (that one may be only claimed), and none
// after it is there. Returns how many keys are there.
int ExpectPrefix(idem::Store& store, int keys) {
  int present = 0;
  bool pending_seen = false;
  for (int i = 0; i < keys; ++i) {
    auto record = store.Get(Key(i));
    EXPECT_TRUE(record.ok()) << record.status().ToString();
    if (!record.ok() || !record->has_value()) continue;
    EXPECT_EQ(present, i) << Key(i) << " is there, but an earlier write is not";
    EXPECT_FALSE(pending_seen) << Key(i) << " is there, but an earlier key was not completed";
    if ((*record)->state == idem::State::kDone) {
      EXPECT_EQ((*record)->result, Result(i)) << Key(i);
    } else {
      pending_seen = true;
    }
    ++present;
  }
  return present;
}

// Claims and completes keys [from, to).
void Write(idem::Store& store, int from, int to) {
  for (int i = from; i < to; ++i) {
    auto claim = store.Begin(Key(i), {.lease = 30s});
    ASSERT_TRUE(claim.ok()) << claim.status().ToString();
    ASSERT_TRUE(store.Complete(Key(i), claim->token, Result(i)).ok());
  }
}

TEST(ZeroFilledLogs, ALogIsZeroFilledAheadWhileOpenAndEndsAtItsRecordsOnceClosed) {
  TempDir dir;
  std::string log;
  {
    IDEM_ASSERT_OPEN(store, dir.StorePath(), idem_test::TestOptions());
    Write(*store, 0, 10);
    log = NewestLog(dir.StorePath());
    ASSERT_FALSE(log.empty());
    const auto scan = Scan(log);
    EXPECT_EQ(scan.size % idem::storage::kZeroFillChunk, 0u) << log;
    EXPECT_LT(scan.intact_end, scan.size) << "no zeros after the records of " << log;
    EXPECT_FALSE(scan.damaged);
    EXPECT_GE(scan.records.size(), 20u);
  }
  const auto scan = Scan(log);
  EXPECT_EQ(scan.intact_end, scan.size) << log << " still ends in zeros after a clean close";
  EXPECT_GE(scan.records.size(), 20u);
}

// A file system whose writable files refuse to write a run of zeros as long as a chunk (as a
// quota or a full disk refuses the zero fill while a short record still fits).
class NoRoomForZeros : public rocksdb::FileSystemWrapper {
 public:
  NoRoomForZeros() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "NoRoomForZeros"; }
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    auto opened = target()->NewWritableFile(name, options, file, debug);
    if (opened.ok()) *file = std::make_unique<File>(std::move(*file));
    return opened;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    using FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* debug) override {
      if (data.size() >= idem::storage::kZeroFillChunk / 2) {
        return rocksdb::IOStatus::IOError("disk quota exceeded");
      }
      return target()->PositionedAppend(data, offset, options, debug);
    }
  };
};

// Writes `records` to a new log through `fs` and closes it; the file's size on disk while it was
// open is put in `size_while_open`.
void WriteLog(rocksdb::FileSystem& fs, const std::string& path,
              const std::vector<std::string>& records, uint64_t& size_while_open) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  ASSERT_TRUE(fs.NewWritableFile(path, rocksdb::FileOptions(), &file, nullptr).ok());
  uint64_t written = 0;
  for (const auto& record : records) {
    ASSERT_TRUE(file->Append(record, rocksdb::IOOptions(), nullptr).ok());
    written += record.size();
    EXPECT_EQ(file->GetFileSize(rocksdb::IOOptions(), nullptr), written);
    if (written == records.front().size()) {
      // Not synced yet: appended to.
      EXPECT_EQ(std::filesystem::file_size(path), written);
    }
    ASSERT_TRUE(file->Sync(rocksdb::IOOptions(), nullptr).ok());
  }
  size_while_open = std::filesystem::file_size(path);
  ASSERT_TRUE(file->Close(rocksdb::IOOptions(), nullptr).ok());
}

TEST(ZeroFilledLogs, RecordsGoIntoZerosAheadAndAFailedFillFallsBackToAppending) {
  TempDir dir;
  const std::vector<std::string> records = {"first record", std::string(3000, 'x'), "last"};
  const std::string expected = records[0] + records[1] + records[2];
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  uint64_t size_while_open = 0;
  auto zero_filled = idem::storage::NewZeroFilledLogs(rocksdb::FileSystem::Default());
  WriteLog(*zero_filled, dir.Sub("000007.log"), records, size_while_open);
  EXPECT_EQ(size_while_open, idem::storage::kZeroFillChunk);
  EXPECT_EQ(read(dir.Sub("000007.log")), expected);
  // Other files are written as they are.
  WriteLog(*zero_filled, dir.Sub("MANIFEST-000001"), records, size_while_open);
  EXPECT_EQ(size_while_open, expected.size());
  // No room for zeros: the records are appended all the same.
  auto no_room = idem::storage::NewZeroFilledLogs(std::make_shared<NoRoomForZeros>());
  WriteLog(*no_room, dir.Sub("000008.log"), records, size_while_open);
  EXPECT_EQ(size_while_open, expected.size());
  EXPECT_EQ(read(dir.Sub("000008.log")), expected);
}

// How the writer of the newest log stopped (killed, or a power cut that kept part of a record).
enum class Stopped { kAfterWholeRecords, kInsideARecord, kInsideAFragmentedRecord };

class TornTail : public ::testing::TestWithParam<Stopped> {};

// A process writes kSync records and dies without closing the store: its log ends in zeros, and
// the test leaves its last record half written, as a writer stopped mid-record leaves it.
// RocksDB alone reads a record never completed with zeros after it as damage and refuses the
// store; here a read-only open reads every whole record, and the read-write open cuts the rest
// without calling it a power cut.
TEST_P(TornTail, EveryWholeRecordIsReadAndTheRestIsCut) {
  TempDir dir;
  const int kKeys = GetParam() == Stopped::kInsideARecord ? 40 : 41;  // the last one short, long
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = idem::Store::Open(dir.StorePath(), idem_test::TestOptions());
    if (!store.ok()) _exit(1);
    for (int i = 0; i < kKeys; ++i) {
      auto claim = (*store)->Begin(Key(i), {.lease = 30s});
      if (!claim.ok() || !(*store)->Complete(Key(i), claim->token, Result(i)).ok()) _exit(2);
    }
    _exit(0);  // no close: the log keeps its zeros
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status;

  const std::string log = NewestLog(dir.StorePath());
  ASSERT_FALSE(log.empty());
  auto scan = Scan(log);
  ASSERT_LT(scan.intact_end, scan.size) << log << " does not end in zeros";
  ASSERT_FALSE(scan.damaged);
  ASSERT_GE(scan.records.size(), 2u);
  // The last record (the last Complete) is written only in part.
  const uint64_t last = scan.records.back();
  const uint64_t end = scan.intact_end;
  int expected_done = kKeys;
  if (GetParam() != Stopped::kAfterWholeRecords) {
    ASSERT_EQ(GetParam() == Stopped::kInsideAFragmentedRecord, last / 32768 != (end - 1) / 32768)
        << "the last record of " << log << " (" << last << " to " << end << ") "
        << (GetParam() == Stopped::kInsideAFragmentedRecord ? "is not" : "is") << " fragmented";
    const uint64_t cut = last + (end - last) * 2 / 3;
    std::fstream file(log, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(cut));
    const std::string zeros(end - cut, '\0');
    file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    ASSERT_TRUE(file.good());
    expected_done = kKeys - 1;
  }
  {
    idem::Options read_only = idem_test::TestOptions();
    read_only.read_only = true;
    auto reader = idem::Store::Open(dir.StorePath(), read_only);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ(ExpectPrefix(**reader, kKeys), kKeys);
    auto last_key = (*reader)->Get(Key(kKeys - 1));
    ASSERT_TRUE(last_key.ok() && last_key->has_value());
    EXPECT_EQ((*last_key)->state,
              expected_done == kKeys ? idem::State::kDone : idem::State::kPending);
  }
  std::string said;
  idem::Options options = idem_test::TestOptions();
  options.log = [&said](std::string_view line) { said += std::string(line) + "\n"; };
  {
    auto store = idem::Store::Open(dir.StorePath(), options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(said.find("power cut"), std::string::npos) << said;
    EXPECT_EQ(ExpectPrefix(**store, kKeys), kKeys);
    auto last_key = (*store)->Get(Key(kKeys - 1));
    ASSERT_TRUE(last_key.ok() && last_key->has_value());
    EXPECT_EQ((*last_key)->state,
              expected_done == kKeys ? idem::State::kDone : idem::State::kPending);
    Write(**store, kKeys, kKeys + 2);  // and it takes writes
  }
  std::ifstream info_log(dir.StorePath() + "/db/LOG");
  const std::string info((std::istreambuf_iterator<char>(info_log)), {});
  EXPECT_NE(info.find("cut after its last whole record"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Where, TornTail,
                         ::testing::Values(Stopped::kAfterWholeRecords, Stopped::kInsideARecord,
                                           Stopped::kInsideAFragmentedRecord),
                         [](const auto& info) {
                           switch (info.param) {
                             case Stopped::kAfterWholeRecords:
                               return "AfterWholeRecords";
                             case Stopped::kInsideARecord:
                               return "InsideARecord";
                             default:
                               return "InsideAFragmentedRecord";
                           }
                         });

// A process that owns the store exclusively writes long records (kSync, many split across
// blocks) while this one opens the store read-only again and again, reading the files as they
// are: a read finds the writer in the middle of a record, or finds zeros where a later read of
// the next block finds records. Every open succeeds and reads a prefix of the writes.
TEST(ZeroFilledLogs, AReadOnlyOpenWhileTheOwnerWritesReadsAPrefix) {
  TempDir dir;
  constexpr int kKeys = 600;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // Halfway, the writer waits for the reader's second open: so that opens race the writes
  // however fast either side runs (under emulation, an open costs as much as the whole write).
  int halfway[2];
  ASSERT_EQ(pipe(halfway), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    close(halfway[1]);
    idem::Options options = idem_test::TestOptions();
    options.sharing = idem::Sharing::kExclusive;  // kSync: the log is zero-filled
    options.memory_budget = 256 << 20;            // no flush: the records stay in the log
    auto store = idem::Store::Open(dir.StorePath(), options);
    if (!store.ok()) _exit(1);
    for (int i = 0; i < kKeys; ++i) {
      auto claim = (*store)->Begin(Key(i), {.lease = 30s});
      if (!claim.ok() || !(*store)->Complete(Key(i), claim->token, Result(i)).ok()) _exit(2);
      if (i == 2 && write(ready[1], "r", 1) != 1) _exit(3);
      char go = 0;
      if (i == kKeys / 2 && read(halfway[0], &go, 1) != 1) _exit(4);
      std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 3)));
    }
    _exit(0);
  }
  close(ready[1]);
  close(halfway[0]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  int opens = 0;
  int last_present = 0;
  int wait_status = 0;
  for (;;) {
    const bool writer_done = waitpid(child, &wait_status, WNOHANG) == child;
    idem::Options read_only = idem_test::TestOptions();
    read_only.read_only = true;
    auto reader = idem::Store::Open(dir.StorePath(), read_only);
    ASSERT_TRUE(reader.ok()) << "open " << opens << ": " << reader.status().ToString();
    const int present = ExpectPrefix(**reader, kKeys);
    EXPECT_GE(present, last_present);
    last_present = present;
    ++opens;
    if (opens == 2) {
      EXPECT_EQ(write(halfway[1], "g", 1), 1);
    }
    if (HasFailure() || writer_done) break;
  }
  close(halfway[1]);
  if (!HasFailure()) {
    ASSERT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) << wait_status;
  } else {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  EXPECT_EQ(last_present, kKeys);  // the last open came after the writer's end
  EXPECT_GE(opens, 3);
}

}  // namespace
