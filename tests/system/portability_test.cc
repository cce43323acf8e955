// What differs between the architectures idem runs on (x86-64, arm64, and armhf, whose size_t
// and long are 32 bits, and whose time_t is too unless built with _TIME_BITS=64) must change
// nothing that idem stores, sends or reads (docs/cross.md): times past 2038 and 2106, lengths
// past 2 GiB and 4 GiB, file offsets past them, tokens past 2^32, and the exact bytes of the
// record, wire and export encodings. A store written on each architecture, tests/data/
// portable_stores/<architecture>, opens and reads the same on every other.
//
// `portability_test --write-portable-store DIR` writes such a store (see PortableRecords).

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "idem/idem.h"
#include "sharing/owner_server.h"
#include "sharing/protocol.h"
#include "sharing/socket.h"
#include "sharing/wire_codec.h"
#include "storage/rocksdb/fs/log_tail.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/record_codec.h"
#include "support/test_util.h"
#include "text.h"
#include "util/hex.h"

namespace {

using namespace std::chrono_literals;
using idem::Record;
using idem::State;
using idem_test::ManualClock;
using idem_test::TempDir;
using TimePoint = std::chrono::system_clock::time_point;
using std::chrono::year_month_day;

static_assert(sizeof(off_t) == 8, "build with -D_FILE_OFFSET_BITS=64 (cmake/toolchains/)");
static_assert(sizeof(std::time_t) == 8, "build with -D_TIME_BITS=64 (cmake/toolchains/)");

constexpr uint64_t kGiB = uint64_t{1} << 30;

TimePoint At(year_month_day date, std::chrono::seconds time_of_day = 0s,
             std::chrono::microseconds micros = 0us) {
  return TimePoint(std::chrono::sys_days(date)) + time_of_day + micros;
}
using std::chrono::February;
using std::chrono::January;
using std::chrono::year;

// 2^31 s after the epoch: a 32-bit signed time_t ends the second before. 2^32 s: an unsigned
// 32-bit count of seconds ends the second before.
const TimePoint k2038 = TimePoint(std::chrono::seconds(int64_t{1} << 31));
const TimePoint k2106 = TimePoint(std::chrono::seconds(int64_t{1} << 32));

std::string Hex(std::string_view bytes) { return idem::util::ToHex(bytes); }

// ---- Times past 2038 and 2106 ------------------------------------------------------------------

// A time to set the clock to, named for the test's name.
struct FarTime {
  const char* name;
  TimePoint time;
};
void PrintTo(const FarTime& far, std::ostream* out) { *out << far.name; }

class FarTimes : public ::testing::TestWithParam<FarTime> {};

// A claim, its lease running out, a takeover, a result, the retention running out and a purge,
// on a clock set near or past the ends of 32-bit times.
TEST_P(FarTimes, LeasesRetentionAndPurgeKeepEveryTime) {
  idem_test::ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  const TimePoint start = GetParam().time;
  s.clock->Set(start);
  const idem::BeginOptions options{.type = "t", .lease = 10s, .retention = 1h};
  auto first = s.store->Begin("k", options);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->outcome, idem::Outcome::kAcquired);
  EXPECT_EQ(first->record.created, start);
  EXPECT_EQ(first->record.lease_deadline, start + 10s);
  EXPECT_EQ(first->record.expires, start + 1h);

  s.clock->Advance(9s);
  auto busy = s.store->Begin("k", options);
  ASSERT_TRUE(busy.ok());
  EXPECT_EQ(busy->outcome, idem::Outcome::kInProgress);
  EXPECT_EQ(busy->retry_after, 1s);

  s.clock->Advance(2s);
  auto again = s.store->Begin("k", options);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->outcome, idem::Outcome::kAcquired);
  EXPECT_TRUE(again->took_over);
  EXPECT_EQ(again->record.lease_deadline, start + 21s);
  EXPECT_EQ(again->record.expires, start + 11s + 1h);
  ASSERT_TRUE(s.store->Complete("k", again->token, "done").ok());

  auto got = s.store->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->state, State::kDone);
  EXPECT_EQ((*got)->created, start);
  EXPECT_EQ((*got)->updated, start + 11s);
  EXPECT_EQ((*got)->expires, start + 11s + 1h);

  s.clock->Advance(1h - 1s);
  EXPECT_EQ(*s.store->Purge(), 0u);  // due a second from now
  EXPECT_TRUE(s.store->Get("k")->has_value());
  s.clock->Advance(1s);
  EXPECT_FALSE(s.store->Get("k")->has_value());
  EXPECT_EQ(*s.store->Purge(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Portability, FarTimes,
    ::testing::Values(FarTime{"LeaseEndsPast2To31Seconds", k2038 - 5s},
                      FarTime{"In2040", At(year(2040) / January / 1, 0s, 500000us)},
                      FarTime{"LeaseEndsPast2To32Seconds", k2106 - 5s},
                      FarTime{"In2107", At(year(2107) / February / 3, 4s, 5us)},
                      FarTime{"In2250", At(year(2250) / January / 1)}),
    [](const ::testing::TestParamInfo<FarTime>& info) { return std::string(info.param.name); });

// The expiry index orders by time, past 2038 and 2106 too, and its keys are the same bytes on
// every architecture.
TEST(Portability, ExpiryIndexKeysPast2038And2106) {
  const std::vector<TimePoint> times = {
      At(year(1969) / January / 1), k2038 - 1us, k2038, k2106 - 1us, k2106,
      At(year(2250) / January / 1)};
  std::string previous;
  for (const TimePoint t : times) {
    const int64_t micros = idem::util::ToMicros(t);
    const std::string key = idem::storage::ExpiryIndexKey(micros, "k");
    EXPECT_LT(previous, key);
    EXPECT_EQ(idem::storage::ExpiryOfIndexKey(key), micros);
    previous = key;
  }
  EXPECT_EQ(Hex(idem::storage::ExpiryIndexKey(idem::util::ToMicros(k2038), "k")),
            "8007a120000000006b");
  EXPECT_EQ(Hex(idem::storage::ExpiryIndexKey(idem::util::ToMicros(k2106), "k")),
            "800f424000000000"
            "6b");
}

TEST(Portability, DatesPast2038And2106FormatAndParse) {
  const std::vector<std::pair<TimePoint, std::string>> dates = {
      {k2038 - 1s, "2038-01-19T03:14:07.000000Z"},
      {k2038, "2038-01-19T03:14:08.000000Z"},
      {k2106, "2106-02-07T06:28:16.000000Z"},
      {At(year(2107) / February / 3, 4s, 5us), "2107-02-03T00:00:04.000005Z"},
      {At(year(1901) / January / 1, 0s, 1us), "1901-01-01T00:00:00.000001Z"}};
  for (const auto& [time, text] : dates) {
    EXPECT_EQ(idem::cli::FormatRfc3339(time), text);
    EXPECT_EQ(idem::cli::ParseRfc3339(text), time) << text;
  }
  // Past what a time_point holds (2262): refused, not wrapped.
  EXPECT_FALSE(idem::cli::ParseRfc3339("2263-01-01T00:00:00Z").has_value());
  EXPECT_FALSE(idem::cli::ParseRfc3339("9999-12-31T23:59:59Z").has_value());
}

// ---- Lengths past 2 GiB and 4 GiB --------------------------------------------------------------

std::string Varint(uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out += static_cast<char>(value | 0x80);
  out += static_cast<char>(value);
  return out;
}

// `encoded` with the first `length` then `bytes` replaced by `new_length` then `bytes`.
std::string WithLength(std::string encoded, std::string_view length, std::string_view bytes,
                       std::string_view new_length) {
  const std::size_t at = encoded.find(std::string(length) + std::string(bytes));
  EXPECT_NE(at, std::string::npos);
  if (at == std::string::npos) return encoded;
  encoded.replace(at, length.size(), new_length);
  return encoded;
}

TEST(Portability, LengthsPast2And4GiBInARecordAreCorruption) {
  Record record;
  record.key = "k";
  record.state = State::kDone;
  record.result = "RRRRR";
  record.token = 7;
  record.attempts = 1;
  const std::string encoded = idem::storage::EncodeRecord(record);
  ASSERT_TRUE(idem::storage::DecodeRecord("k", encoded).ok());
  for (const uint64_t length : {3 * kGiB, 2 * kGiB, 4 * kGiB - 1, 4 * kGiB + 5, 5 * kGiB}) {
    const std::string damaged = WithLength(encoded, Varint(5), "RRRRR", Varint(length));
    auto decoded = idem::storage::DecodeRecord("k", damaged);
    ASSERT_FALSE(decoded.ok()) << length;
    EXPECT_EQ(decoded.status().code(), idem::Status::Code::kCorruption) << length;
  }
}

std::string Fixed32(uint32_t value) {
  std::string out;
  idem::util::PutFixed32(out, value);
  return out;
}

TEST(Portability, LengthsPast2And4GiBOnTheWireAreRefused) {
  Record record;
  record.key = "k";
  record.state = State::kDone;
  record.result = "RRRRR";
  const std::string body = idem::sharing::EncodeOptionalRecord(record);
  ASSERT_TRUE(idem::sharing::DecodeOptionalRecord(body).ok());
  for (const uint32_t length : {uint32_t{3} << 30, uint32_t{1} << 31, ~uint32_t{0}}) {
    const std::string damaged = WithLength(body, Fixed32(5), "RRRRR", Fixed32(length));
    EXPECT_FALSE(idem::sharing::DecodeOptionalRecord(damaged).ok()) << length;
    // A frame announcing that many bytes is never whole with what arrived, nor by wrapping.
    EXPECT_FALSE(idem::sharing::FrameIsWhole(64, length));
  }
  // 4 + length wraps a 32-bit size_t to a few bytes: such a frame must not pass for whole.
  EXPECT_FALSE(idem::sharing::FrameIsWhole(8, 0xfffffffdu));
  if constexpr (sizeof(std::size_t) == 4) {
    EXPECT_FALSE(idem::sharing::FrameIsWhole(std::numeric_limits<std::size_t>::max(), ~0u));
  }
  EXPECT_TRUE(idem::sharing::FrameIsWhole(4 + 5, 5));
  EXPECT_FALSE(idem::sharing::FrameIsWhole(4 + 4, 5));
  EXPECT_FALSE(idem::sharing::FrameIsWhole(3, 0));

  // A client reading an answer whose header announces 3 GiB refuses it at the header.
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  const std::string header = Fixed32(uint32_t{3} << 30) + "abc";
  ASSERT_EQ(::write(fds[1], header.data(), header.size()), static_cast<ssize_t>(header.size()));
  auto frame = idem::sharing::ReadFrame(fds[0], idem::sharing::kMaxResponseFrame,
                                        std::chrono::steady_clock::now() + 10s);
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().code(), idem::Status::Code::kInvalidArgument);
  EXPECT_NE(frame.status().message().find("3221225472 bytes"), std::string::npos)
      << frame.status().ToString();
  ::close(fds[0]);
  ::close(fds[1]);
}

// The owner's frame limit, the sum of the store's size limits, saturates instead of wrapping
// (a 32-bit size_t ends at 4 GiB).
TEST(Portability, TheFrameLimitSaturates) {
  constexpr std::size_t kMost = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(idem::sharing::MaxRequestFrame(512, 1024, 1 << 20), 512 + 2 * 1024 + (1 << 20) + 4096);
  EXPECT_EQ(idem::sharing::MaxRequestFrame(512, 1024, kMost), kMost);
  EXPECT_EQ(idem::sharing::MaxRequestFrame(kMost / 2, kMost / 2, 1), kMost);
  EXPECT_EQ(idem::sharing::MaxRequestFrame(kMost / 4, kMost / 4, kMost / 4), kMost);
}

// ---- File offsets past 2 GiB and 4 GiB ---------------------------------------------------------

// A write-ahead log of a few records, as RocksDB writes it.
std::string SmallLog(const TempDir& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  const std::string path = dir.Sub("db");
  EXPECT_TRUE(rocksdb::DB::Open(options, path, &db).ok());
  if (db == nullptr) return {};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), "key" + std::to_string(i), "value").ok());
  }
  delete db;  // the records stay in the log: nothing flushed
  std::string log;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.path().extension() == ".log" && entry.file_size() > 0) log = entry.path();
  }
  EXPECT_FALSE(log.empty());
  std::ifstream in(log, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file system whose file sizes and sequential reads are this program's own, with the 64-bit
// off_t it is built with (cmake/toolchains/): so that the log scan's own arithmetic past 2 and
// 4 GiB is tested on every architecture, whatever RocksDB was built with (below).
class LargeFileFs : public rocksdb::FileSystemWrapper {
 public:
  LargeFileFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  static const char* kClassName() { return "idem_test.LargeFileFs"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus GetFileSize(const std::string& path, const rocksdb::IOOptions& /*options*/,
                                uint64_t* size, rocksdb::IODebugContext* /*debug*/) override {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return rocksdb::IOStatus::IOError(path, Error());
    *size = static_cast<uint64_t>(info.st_size);
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus NewSequentialFile(const std::string& path,
                                      const rocksdb::FileOptions& /*options*/,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* file,
                                      rocksdb::IODebugContext* /*debug*/) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rocksdb::IOStatus::IOError(path, Error());
    *file = std::make_unique<File>(fd);
    return rocksdb::IOStatus::OK();
  }

 private:
  static std::string Error() { return std::strerror(errno); }

  class File final : public rocksdb::FSSequentialFile {
   public:
    explicit File(int fd) : fd_(fd) {}
    ~File() override { ::close(fd_); }
    rocksdb::IOStatus Read(std::size_t n, const rocksdb::IOOptions& /*options*/,
                           rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* /*debug*/) override {
      std::size_t got = 0;
      while (got < n) {
        const ssize_t read = ::read(fd_, scratch + got, n - got);
        if (read < 0 && errno == EINTR) continue;
        if (read < 0) return rocksdb::IOStatus::IOError("read", Error());
        if (read == 0) break;
        got += static_cast<std::size_t>(read);
      }
      *result = rocksdb::Slice(scratch, got);
      return rocksdb::IOStatus::OK();
    }
    rocksdb::IOStatus Skip(uint64_t n) override {
      if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) {
        return rocksdb::IOStatus::IOError("lseek", Error());
      }
      return rocksdb::IOStatus::OK();
    }

   private:
    const int fd_;
  };
};

// Where to make a sparse file of 4 GiB: on /dev/shm when it is there, else in `dir`.
std::string SparseFilePath(const TempDir& dir) {
  std::string pattern = "/dev/shm/idem_sparse_XXXXXX";
  const int fd = std::filesystem::is_directory("/dev/shm") ? ::mkstemp(pattern.data()) : -1;
  if (fd < 0) return dir.Sub("sparse.log");
  ::close(fd);
  return pattern;
}
struct SparseFileRemover {
  std::string path;
  ~SparseFileRemover() { ::unlink(path.c_str()); }
};

// A sparse log: records, a hole of zeros (pages a power cut never wrote), then data past 4 GiB.
// The scan reads through the hole, past 2 GiB and 4 GiB, and finds the data at its offset: a
// 32-bit off_t or size_t on the way would fail or wrap. One file, on a tmpfs where there is one
// (/dev/shm): a tmpfs reads a hole at memory speed, ext4 here at about 1 GiB/s.
TEST(Portability, ALogScanReadsPast2And4GiB) {
  const TempDir dir;
  const std::string prefix = SmallLog(dir);
  ASSERT_FALSE(prefix.empty());
  const std::string path = SparseFilePath(dir);
  const SparseFileRemover remove_it{path};
  const uint64_t data_at = 4 * kGiB + 8192;
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, prefix.data(), prefix.size(), 0), static_cast<ssize_t>(prefix.size()));
  const std::string data(4096, 'd');
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(data_at)),
            static_cast<ssize_t>(data.size()));
  ::close(fd);
  ASSERT_EQ(std::filesystem::file_size(path), data_at + data.size());

  const auto expect_whole_scan = [&](const idem::Result<idem::storage::LogScan>& scan) {
    ASSERT_TRUE(scan.ok()) << scan.status().ToString();
    EXPECT_EQ(scan->size, data_at + data.size());
    EXPECT_EQ(scan->records.size(), 5u);
    EXPECT_EQ(scan->intact_end, prefix.size());
    EXPECT_TRUE(scan->damaged);
    EXPECT_TRUE(scan->unwritten_pages);
    EXPECT_TRUE(scan->data_after_unwritten_pages);
  };
  LargeFileFs large_files;
  expect_whole_scan(idem::storage::ScanLog(large_files, path, true));

  // Through RocksDB's own file system, as the store reads its logs. Debian 12's armhf RocksDB
  // is built with a 32-bit off_t (it calls stat, open and pread, not stat64, open64 and
  // pread64), so a file past 2 GiB must be refused there with an I/O error naming it, never
  // misread. A store's own files stay far below 2 GiB (docs/cross.md).
  auto through_rocksdb = idem::storage::ScanLog(*rocksdb::FileSystem::Default(), path, true);
  if constexpr (sizeof(void*) == 8) {
    expect_whole_scan(through_rocksdb);
  } else {
    ASSERT_FALSE(through_rocksdb.ok());
    EXPECT_EQ(through_rocksdb.status().code(), idem::Status::Code::kIOError);
    EXPECT_NE(through_rocksdb.status().message().find(path), std::string::npos)
        << through_rocksdb.status().ToString();
  }
}

// ---- Tokens past 2^32 --------------------------------------------------------------------------

TEST(Portability, TokensPast2To32) {
  idem_test::ClockedStore s;
  ASSERT_NE(s.store, nullptr);
  const TimePoint now = s.clock->Now();
  Record failed;
  failed.key = "k";
  failed.state = State::kFailed;
  failed.retryable = true;
  failed.result = "try again";
  failed.token = (uint64_t{1} << 32) + 5;
  failed.attempts = 1;
  failed.created = failed.updated = failed.lease_deadline = now;
  failed.expires = now + 1h;
  ASSERT_TRUE(s.store->Import(std::vector<Record>{failed}).ok());

  auto claim = s.store->Begin("k");
  ASSERT_TRUE(claim.ok());
  ASSERT_EQ(claim->outcome, idem::Outcome::kAcquired);
  EXPECT_GT(claim->token, failed.token);
  EXPECT_EQ(s.store->Complete("k", failed.token, "x").code(), idem::Status::Code::kLeaseLost);
  // The same low 32 bits, another token.
  EXPECT_EQ(s.store->Complete("k", claim->token & 0xffffffffu, "x").code(),
            idem::Status::Code::kLeaseLost);
  ASSERT_TRUE(s.store->Complete("k", claim->token, "x").ok());
  EXPECT_EQ((*s.store->Get("k"))->token, claim->token);
  // Later keys get later tokens still.
  auto other = s.store->Begin("other");
  ASSERT_TRUE(other.ok());
  EXPECT_GT(other->token, claim->token);

  idem::Claim wide;
  wide.outcome = idem::Outcome::kAcquired;
  wide.token = (uint64_t{1} << 62) + 3;
  wide.record.token = wide.token;
  auto decoded = idem::sharing::DecodeClaim(idem::sharing::EncodeClaim(wide));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->token, wide.token);
  EXPECT_EQ(decoded->record.token, wide.token);
}

// ---- The same bytes on every architecture ------------------------------------------------------

// The records of tests/data/portable_stores/*: every state, times past 2038 and 2106, tokens past
// 2^32, binary and UTF-8 bytes, a result of several blocks. Read on the default clock of
// ManualClock (2026-03-01): every retention still runs; "timeout" reads as timed out.
std::vector<Record> PortableRecords() {
  const TimePoint t2026 = ManualClock::DefaultStart() - 24h;
  const TimePoint t2040 = At(year(2040) / January / 1, 3723s, 4us);
  const TimePoint t2107 = At(year(2107) / February / 3, 4s, 5us);
  std::vector<Record> records;
  const auto add = [&](std::string key, State state, uint64_t token, TimePoint created) {
    Record& r = records.emplace_back();
    r.key = std::move(key);
    r.state = state;
    r.token = token;
    r.attempts = 1;
    r.created = created;
    r.updated = created + 1s;
    r.lease_deadline = created + 10s;
    r.expires = created + 24h * 400;
    return &r;
  };
  Record* r = add("done-2026", State::kDone, 1, t2026);
  r->type = "pay";
  r->result = "charged 12.30 EUR";
  r->fingerprint = idem::Fingerprint("amount=12.30");
  r = add("pending-2040", State::kPending, (uint64_t{1} << 32) + 1, t2040);
  r->attempts = 2;
  r->checkpoint = "step 2 of 3";
  r->holder = {.pid = 4242,
               .process_start = 987654321,
               .pid_scope = 0xfedcba9876543210ULL,
               .request_id = 0x0123456789abcdefULL,
               .took_over = true};
  r = add("failed-2107", State::kFailed, uint64_t{1} << 40, t2107);
  r->retryable = true;
  r->result = "upstream timed out";
  r = add(std::string("bin\0\xff\x80key", 9), State::kFailed, (uint64_t{1} << 62) + 7, k2038);
  r->result = std::string("card\0declined", 13);
  r->type = "refund";
  r = add("big", State::kDone, 3, t2026 + 1h);
  r->result.resize(3 * 32768 / 4 + 17);  // longer than a log block once compressed or not
  for (std::size_t i = 0; i < r->result.size(); ++i) {
    r->result[i] = static_cast<char>((i * 7 + i / 251) % 256);
  }
  r = add("utf8-\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", State::kDone, 4, t2026 + 2h);
  r->result = "\xe2\x9c\x93";
  r = add("timeout", State::kPending, 5, t2026 - 1h);
  r->holder = {.pid = 7, .process_start = 1, .pid_scope = 2, .request_id = 3};
  return records;
}

// The records as a store reads them back on ManualClock's default clock.
std::vector<Record> PortableRecordsAsRead() {
  std::vector<Record> records = PortableRecords();
  for (Record& r : records) {
    r.timed_out = r.state == State::kPending && r.lease_deadline <= ManualClock::DefaultStart();
  }
  std::sort(records.begin(), records.end(),
            [](const Record& a, const Record& b) { return a.key < b.key; });
  return records;
}

// Every key and value of every column family of the closed store at `store`, read through
// RocksDB alone (read-only), "family/key" -> value.
std::map<std::string, std::string> RawContents(const std::string& store) {
  std::map<std::string, std::string> contents;
  const std::string path = store + "/db";
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& name : names) families.emplace_back(name, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status opened =
      rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), path, families, &handles, &db);
  EXPECT_TRUE(opened.ok()) << opened.ToString();
  if (!opened.ok()) return contents;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[i]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      contents[names[i] + "/" + it->key().ToString()] = it->value().ToString();
    }
    EXPECT_TRUE(it->status().ok());
  }
  for (auto* handle : handles) EXPECT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
  delete db;
  return contents;
}

idem::Options PortableStoreOptions() {
  idem::Options options = idem_test::TestOptions(std::make_shared<ManualClock>());
  options.sharing = idem::Sharing::kExclusive;
  return options;
}

// Writes the portable store at `path` (a new directory).
idem::Status WritePortableStore(const std::string& path) {
  auto store = idem::Store::Open(path, PortableStoreOptions());
  if (!store.ok()) return store.status();
  auto imported = (*store)->Import(PortableRecords());
  if (!imported.ok()) return imported.status();
  return idem::Status::OK();
}

// The architectures whose committed store (tests/data/portable_stores/<architecture>, written
// there by `portability_test --write-portable-store`) every architecture reads. x86-64's is the
// reference the others' bytes are compared with.
constexpr const char* kReferenceArchitecture = "x86_64";
const std::vector<std::string> kStoreArchitectures = {"x86_64", "arm64", "armhf"};

// The store committed from `architecture` as a store of its own, in `dir`.
std::string CopyOfPortableStore(const TempDir& dir, const std::string& architecture) {
  const std::string copy = dir.Sub("from-" + architecture);
  std::filesystem::copy(std::string(IDEM_PORTABLE_STORES) + "/" + architecture, copy,
                        std::filesystem::copy_options::recursive);
  return copy;
}

class CommittedStore : public ::testing::TestWithParam<std::string> {};

// Each committed store opens here and reads the same: every record through the API, and every
// key and value of its column families as this architecture encodes them. With one store
// written on each architecture, a store written on any of them reads the same on every other.
TEST_P(CommittedStore, ReadsTheSame) {
  const TempDir dir;
  const std::string path = CopyOfPortableStore(dir, GetParam());
  {
    auto store = idem::Store::Open(path, PortableStoreOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<Record> read;
    ASSERT_TRUE((*store)
                    ->Scan({},
                           [&](const Record& r) {
                             read.push_back(r);
                             return true;
                           })
                    .ok());
    EXPECT_EQ(read, PortableRecordsAsRead());
    for (const Record& expected : PortableRecordsAsRead()) {
      auto got = (*store)->Get(expected.key);
      ASSERT_TRUE(got.ok() && got->has_value()) << expected.key;
      EXPECT_EQ(**got, expected);
    }
  }
  // Byte for byte: each record as this architecture encodes it, and the expiry index's keys.
  std::map<std::string, std::string> expected;
  for (const Record& r : PortableRecords()) {
    expected["default/" + r.key] = idem::storage::EncodeRecord(r);
    expected["by_expiry/" + idem::storage::ExpiryIndexKey(idem::util::ToMicros(r.expires), r.key)] =
        "";
  }
  std::map<std::string, std::string> raw = RawContents(path);
  std::erase_if(raw, [](const auto& entry) { return entry.first.starts_with("meta/"); });
  EXPECT_EQ(raw, expected);
}

INSTANTIATE_TEST_SUITE_P(WrittenOn, CommittedStore, ::testing::ValuesIn(kStoreArchitectures),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// A store written here holds the same bytes as the one committed from x86-64, so it reads the
// same there.
TEST(Portability, AStoreWrittenHereHoldsTheCommittedBytes) {
  const TempDir dir;
  ASSERT_TRUE(WritePortableStore(dir.Sub("here")).ok());
  const std::string committed = CopyOfPortableStore(dir, kReferenceArchitecture);
  // Left out: the directory the files were last opened in (where they live, not what they
  // hold), and the token lead and the record counts kept at close (which hold the moment of the
  // close), which x86-64's committed store (written before them) has none of.
  std::map<std::string, std::string> here = RawContents(dir.Sub("here"));
  std::erase_if(here, [](const auto& entry) {
    return entry.first.starts_with("meta/home_") || entry.first == "meta/token_lead" ||
           entry.first == "meta/record_counts";
  });
  EXPECT_EQ(here, RawContents(committed));
}

Record KnownRecord() {
  Record r = PortableRecords()[1];  // pending, past 2038, token past 2^32, a holder
  r.type = "t";
  r.fingerprint = "f";
  return r;
}

TEST(Portability, TheRecordEncodingIsTheSameBytes) {
  EXPECT_EQ(Hex(idem::storage::EncodeRecord(KnownRecord())),
            "04c4182bc77ff80700005e010000000100000002ffffaf88d4db0f80897a80d1ca08efcdab896745230110"
            "32547698badcfe9221b1d1f9d603017401660b737465702032206f662033");
  EXPECT_EQ(Hex(idem::storage::EncodeRecord(PortableRecords()[2])),
            "0405a9ec48077e0f000221000000000001000001ffffaf88d4db0f80897a80d1ca0812757073747265616d"
            "2074696d6564206f7574");
}

TEST(Portability, TheWireEncodingIsTheSameBytes) {
  EXPECT_EQ(Hex(idem::sharing::EncodeOptionalRecord(KnownRecord())),
            "010c00000070656e64696e672d32303430000001000000740100000066000000000b000000737465702032"
            "206f66203301000000010000000200000000c418a52611d90700045bb42611d9070044af3d2711d90700c4"
            "182bc77ff8070092100000b168de3a000000001032547698badcfeefcdab896745230101");
  idem::Claim claim;
  claim.outcome = idem::Outcome::kInProgress;
  claim.token = (uint64_t{1} << 32) + 1;
  claim.retry_after = 1500ms;
  claim.record = KnownRecord();
  EXPECT_EQ(Hex(idem::sharing::EncodeClaim(claim)),
            "02010000000100000000dc050000000000000c00000070656e64696e672d32303430000001000000740100"
            "000066000000000b000000737465702032206f66203301000000010000000200000000c418a52611d90700"
            "045bb42611d9070044af3d2711d90700c4182bc77ff8070092100000b168de3a000000001032547698badc"
            "feefcdab896745230101");
}

TEST(Portability, TheExportEncodingIsTheSameText) {
  EXPECT_EQ(
      idem::cli::RecordToExportJson(KnownRecord()),
      R"({"key":"pending-2040","type":"t","state":"pending","result":"","fingerprint":"f","checkpoint":"step 2 of 3","token":4294967297,"attempts":2,"retryable":false,"created":"2040-01-01T01:02:03.000004Z","updated":"2040-01-01T01:02:04.000004Z","lease_deadline":"2040-01-01T01:02:13.000004Z","expires":"2041-02-04T01:02:03.000004Z","holder":{"pid":4242,"process_start":987654321,"pid_scope":18364758544493064720,"request_id":81985529216486895,"took_over":true}})");
  EXPECT_EQ(
      idem::cli::RecordToExportJson(PortableRecords()[3]),
      R"({"key":{"hex":"62696e00ff806b6579"},"type":"refund","state":"failed","result":"card\u0000declined","fingerprint":"","checkpoint":"","token":4611686018427387911,"attempts":1,"retryable":false,"created":"2038-01-19T03:14:08.000000Z","updated":"2038-01-19T03:14:09.000000Z","lease_deadline":"2038-01-19T03:14:18.000000Z","expires":"2039-02-23T03:14:08.000000Z","holder":{"pid":0,"process_start":0,"pid_scope":0,"request_id":0,"took_over":false}})");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--write-portable-store") {
    const idem::Status written = WritePortableStore(argv[2]);
    if (!written.ok()) {
      std::fprintf(stderr, "portability_test: %s\n", written.ToString().c_str());
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
