#include "storage/rocksdb/fs/log_tail.h"

#include <fmt/format.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include "storage/rocksdb/fs/file_names.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "util/coding.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// RocksDB's log format (db/log_format.h): 32 KiB blocks of records, each a 7-byte header
// (masked CRC-32C of the type and payload, little-endian payload length, type) and a payload; a
// record never crosses a block, and a block's last bytes, when fewer than a header, are
// padding. A logical record longer than a block is split into first, middle and last records.
constexpr uint64_t kBlockSize = 32768;
constexpr uint64_t kHeaderSize = 7;
constexpr uint64_t kPageSize = 4096;
// Zeros running from inside a record to a page end count as an unwritten page from this many.
constexpr uint64_t kMinimumZeroRun = 64;

enum RecordType : uint8_t {
  kZeroType = 0,
  kFullType = 1,
  kFirstType = 2,
  kMiddleType = 3,
  kLastType = 4,
  kFirstRecyclableType = 5,
  kLastRecyclableType = 8,
};

// CRC-32C (Castagnoli), as RocksDB's util/crc32c computes it, and its masking.
uint32_t Crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (crc & 1 ? 0x82F63B78u : 0);
      t[i] = crc;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}
uint32_t Masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// memcmp of the bytes with themselves shifted by one: as fast as memcmp (a byte loop took
// seconds per GiB of a log's zeros, and ten times that under emulation).
bool AllZero(std::string_view bytes) {
  return bytes.empty() ||
         (bytes[0] == 0 && std::memcmp(bytes.data(), bytes.data() + 1, bytes.size() - 1) == 0);
}

// Where pages never written end in [begin, end) of `block` (a record that is not whole and
// intact), if they are there: a run of zeros that reaches the end of a page and either covers
// that page from its start (the log's last page may be short), or starts at `begin` (the
// record's header reads as zeros), or is long enough, or goes on through the whole next page.
// The written bytes before an unwritten page may end in zeros of their own (a record's
// fixed-width fields often do), so the run may start before the page. Blocks start at multiples
// of the page size, so a page never crosses one.
std::optional<uint64_t> UnwrittenPagesEnd(std::string_view block, uint64_t begin, uint64_t end) {
  end = std::min<uint64_t>(end, block.size());
  const auto page_end = [&block](uint64_t at) {
    return std::min<uint64_t>((at / kPageSize + 1) * kPageSize, block.size());
  };
  for (uint64_t q = begin; q < end; ++q) {
    if (block[q] != 0 || (q > begin && block[q - 1] == 0)) continue;  // not a run's start
    const uint64_t run_page_end = page_end(q);
    if (!AllZero(block.substr(q, run_page_end - q))) continue;
    if (q == begin || q % kPageSize == 0 || run_page_end - q >= kMinimumZeroRun) {
      return run_page_end;
    }
    const uint64_t next_page_end = page_end(run_page_end);
    if (run_page_end < end && AllZero(block.substr(run_page_end, next_page_end - run_page_end))) {
      return next_page_end;
    }
  }
  return std::nullopt;
}

// Follows a log's records one block at a time (a log may be tens of megabytes; a store's memory
// budget may be a few).
class Scanner {
 public:
  explicit Scanner(bool keep_record_starts) : keep_record_starts_(keep_record_starts) {}

  // The next block, which starts at `offset`; the last one may be short. False once the scan
  // knows all it needs.
  bool Block(std::string_view block, uint64_t offset) {
    if (bad_) {
      NoteDataAfter(block, offset);
      return !Decided();
    }
    uint64_t pos = 0;
    while (pos + kHeaderSize <= kBlockSize) {  // a block's last few bytes are padding
      if (pos >= block.size()) break;
      if (pos + kHeaderSize > block.size()) return Stop(offset + pos);  // a torn header
      const uint32_t stored_crc = util::GetFixed32(block.data() + pos);
      const uint64_t length = static_cast<uint8_t>(block[pos + 4]) |
                              (static_cast<uint64_t>(static_cast<uint8_t>(block[pos + 5])) << 8);
      const uint8_t type = static_cast<uint8_t>(block[pos + 6]);
      if (type >= kFirstRecyclableType && type <= kLastRecyclableType) {
        scan_.unknown_format = true;
        return false;
      }
      const bool zero_header = type == kZeroType && length == 0;
      const bool fits = pos + kHeaderSize + length <= kBlockSize;
      if (!zero_header && fits && pos + kHeaderSize + length > block.size()) {
        return Stop(offset + pos);  // a record cut short by the end: a torn tail
      }
      const bool intact =
          !zero_header && type != kZeroType && fits &&
          Masked(Crc32c(block.substr(pos + kHeaderSize - 1, length + 1))) == stored_crc &&
          (type == kMiddleType || type == kLastType ? in_fragment_ : !in_fragment_);
      if (!intact) {
        // RocksDB drops the rest of the block at such a record and reads on from the next one.
        bad_ = true;
        bad_start_ = offset + pos;
        scan_.intact_end = in_fragment_ ? fragment_start_ : offset + pos;
        const uint64_t end = zero_header || !fits ? block.size() : pos + kHeaderSize + length;
        bad_end_ = offset + (zero_header ? pos + kHeaderSize : end);
        if (auto pages_end = UnwrittenPagesEnd(block, pos, end)) {
          unwritten_pages_end_ = offset + *pages_end;
        }
        NoteDataAfter(block, offset);
        return !Decided();
      }
      if (type == kFirstType) {
        in_fragment_ = true;
        fragment_start_ = offset + pos;
      } else if (type == kLastType) {
        in_fragment_ = false;
        Record(fragment_start_);
      } else if (type != kMiddleType) {
        Record(offset + pos);
      }
      pos += kHeaderSize + length;
    }
    scan_.intact_end =
        in_fragment_ ? fragment_start_ : offset + std::min<uint64_t>(pos, block.size());
    return true;
  }

  LogScan Finish(uint64_t size) {
    scan_.size = size;
    if (scan_.unknown_format) scan_.intact_end = size;
    return std::move(scan_);
  }

 private:
  // Whole records up to `end`, then a torn one: what RocksDB reads as a crash's tail.
  bool Stop(uint64_t end) {
    scan_.intact_end = in_fragment_ ? fragment_start_ : end;
    return false;
  }
  void Record(uint64_t start) {
    if (keep_record_starts_) scan_.records.push_back(start);
  }
  // Notes bytes other than zeros in `block` (at `offset`) in and after the first bad record, and
  // after the pages never written in it.
  void NoteDataAfter(std::string_view block, uint64_t offset) {
    const auto data_from = [&](uint64_t from) {
      const uint64_t start = from > offset ? from - offset : 0;
      return start < block.size() && !AllZero(block.substr(start));
    };
    if (!scan_.damaged && data_from(bad_end_)) scan_.damaged = true;
    if (unwritten_pages_end_.has_value()) {
      if (!scan_.unwritten_pages && data_from(bad_start_)) scan_.unwritten_pages = true;
      if (!scan_.data_after_unwritten_pages && data_from(*unwritten_pages_end_)) {
        scan_.data_after_unwritten_pages = true;
      }
    }
  }
  // Nothing more to learn from the blocks after.
  bool Decided() const {
    return scan_.damaged && (!unwritten_pages_end_.has_value() || scan_.data_after_unwritten_pages);
  }

  const bool keep_record_starts_;
  LogScan scan_;
  bool in_fragment_ = false;
  uint64_t fragment_start_ = 0;
  bool bad_ = false;        // the first record that is not whole and intact was found
  uint64_t bad_start_ = 0;  // where it starts,
  uint64_t bad_end_ = 0;    // where its header says it ends (RocksDB reads on after that),
  std::optional<uint64_t> unwritten_pages_end_;  // and where pages never written in it end
};

// Truncates `path` to `size` bytes and syncs it.
Status CutFile(rocksdb::FileSystem& fs, const std::string& path, uint64_t size) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus cut = fs.ReopenWritableFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (cut.ok()) cut = file->Truncate(size, rocksdb::IOOptions(), nullptr);
  if (cut.ok()) cut = file->Fsync(rocksdb::IOOptions(), nullptr);
  if (cut.ok()) cut = file->Close(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(cut, fmt::format("cutting {} at byte {}", EscapeControls(path), size));
}

// The current MANIFEST, the same way as the logs: its last edit, written but never synced, may
// hold such pages with the rest of the edit after them, which RocksDB refuses as a checksum
// mismatch. Adds the line for the operator to `report` when it is (or would be) cut.
Status CutManifestTail(rocksdb::FileSystem& fs, const std::string& db_path, bool dry_run,
                       std::vector<std::string>& report) {
  std::string current;
  if (!rocksdb::ReadFileToString(&fs, db_path + "/CURRENT", &current).ok()) return Status::OK();
  if (!current.empty() && current.back() == '\n') current.pop_back();
  if (!FileNumber(current, "MANIFEST-", "").has_value()) return Status::OK();
  const std::string path = db_path + "/" + current;
  Result<LogScan> scan = ScanLog(fs, path);
  // A MANIFEST that cannot be read is RocksDB's to report, naming it.
  if (!scan.ok() || !scan->unwritten_pages) return Status::OK();
  if (!dry_run) IDEM_RETURN_IF_ERROR(CutFile(fs, path, scan->intact_end));
  report.push_back(fmt::format(
      "{} {}cut at byte {} of {}: a power cut left pages there that were never written; the edit "
      "they held was never synced",
      EscapeControls(path), dry_run ? "would be " : "", scan->intact_end, scan->size));
  return Status::OK();
}

// Bytes after the log's whole records that are not damage: zeros written ahead of the records
// (log_zero_fill.h), after any record never completed.
bool HasTail(const LogScan& scan) {
  return scan.intact_end < scan.size && !scan.damaged && !scan.unknown_format;
}

// A log read no further than `limit`.
class LimitedLog final : public rocksdb::FSSequentialFileOwnerWrapper {
 public:
  LimitedLog(std::unique_ptr<rocksdb::FSSequentialFile>&& file, uint64_t limit)
      : FSSequentialFileOwnerWrapper(std::move(file)), left_(limit) {}

  rocksdb::IOStatus Read(size_t n, const rocksdb::IOOptions& options, rocksdb::Slice* result,
                         char* scratch, rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus read = target()->Read(static_cast<size_t>(std::min<uint64_t>(n, left_)),
                                            options, result, scratch, debug);
    if (read.ok()) left_ -= result->size();
    return read;
  }
  rocksdb::IOStatus Skip(uint64_t n) override {
    n = std::min(n, left_);
    rocksdb::IOStatus skipped = target()->Skip(n);
    if (skipped.ok()) left_ -= n;
    return skipped;
  }
  // RocksDB reads a log from its start to its end (positioned reads are for direct I/O).
  rocksdb::IOStatus PositionedRead(uint64_t, size_t, const rocksdb::IOOptions&, rocksdb::Slice*,
                                   char*, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("positioned reads of a log read up to a limit");
  }

 private:
  uint64_t left_;
};

class LogPrefixView final : public rocksdb::FileSystemWrapper {
 public:
  explicit LogPrefixView(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}

  static const char* kClassName() { return "idem.LogPrefixView"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewSequentialFile(const std::string& name, const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* file,
                                      rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus opened = target()->NewSequentialFile(name, options, file, debug);
    if (!opened.ok() || !FileNumber(BaseName(name), "", ".log").has_value()) return opened;
    Result<LogScan> scan = ScanLog(*target(), name);
    // Its writer may be writing it: a read may find a record half copied, with zeros after it
    // and records after those that a read of the next block finds written meanwhile. Such a
    // race passes and damage stays: look again before leaving it to RocksDB to refuse.
    for (int again = 0;
         again < kDamageRereads && scan.ok() && scan->damaged && !scan->data_after_unwritten_pages;
         ++again) {
      std::this_thread::sleep_for(kDamageRereadPause);
      scan = ScanLog(*target(), name);
    }
    if (!scan.ok()) return opened;  // RocksDB's own read reports what is wrong
    if (HasTail(*scan) || scan->data_after_unwritten_pages) {
      *file = std::make_unique<LimitedLog>(std::move(*file), scan->intact_end);
    }
    return opened;
  }

 private:
  static constexpr int kDamageRereads = 3;
  static constexpr std::chrono::milliseconds kDamageRereadPause{10};
};

}  // namespace

Result<LogScan> ScanLog(rocksdb::FileSystem& fs, const std::string& path, bool keep_record_starts) {
  const std::string what = fmt::format("reading {}", EscapeControls(path));
  uint64_t size = 0;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(fs.GetFileSize(path, rocksdb::IOOptions(), &size, nullptr), what));
  std::unique_ptr<rocksdb::FSSequentialFile> file;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(fs.NewSequentialFile(path, rocksdb::FileOptions(), &file, nullptr), what));
  Scanner scanner(keep_record_starts);
  std::string scratch(kBlockSize, '\0');
  for (uint64_t offset = 0; offset < size;) {
    rocksdb::Slice block;
    IDEM_RETURN_IF_ERROR(FromRocksDb(
        file->Read(kBlockSize, rocksdb::IOOptions(), &block, scratch.data(), nullptr), what));
    if (block.empty()) break;  // shorter than it was a moment ago
    if (!scanner.Block({block.data(), block.size()}, offset)) break;
    offset += block.size();
  }
  return scanner.Finish(size);
}

Result<LogTailCuts> CutLogTails(rocksdb::FileSystem& fs, const std::string& db_path,
                                bool read_only) {
  LogTailCuts cuts;
  std::vector<std::string> children;
  const rocksdb::IOStatus listed =
      fs.GetChildren(db_path, rocksdb::IOOptions(), &children, nullptr);
  if (listed.IsNotFound() || listed.IsPathNotFound()) return cuts;  // a new store
  IDEM_RETURN_IF_ERROR(FromRocksDb(listed, fmt::format("listing {}", EscapeControls(db_path))));
  std::map<uint64_t, std::string> logs;  // by number: oldest first
  for (const auto& name : children) {
    if (auto number = FileNumber(name, "", ".log")) logs.emplace(*number, name);
  }
  // A read-only open leaves the newest log to LogPrefixView: its writer may be writing it.
  if (read_only && !logs.empty()) logs.erase(std::prev(logs.end()));
  const std::string verb = read_only ? "would be " : "";
  bool cut = false;  // a log was cut: every newer one holds only writes never synced
  for (const auto& [number, name] : logs) {
    const std::string path = db_path + "/" + name;
    IDEM_ASSIGN_OR_RETURN(const LogScan scan, ScanLog(fs, path));
    if (cut) {
      if (scan.size == 0) continue;
      if (!read_only) IDEM_RETURN_IF_ERROR(CutFile(fs, path, 0));
      cuts.power_cut.push_back(fmt::format(
          "the write-ahead log {} {}emptied ({} bytes of writes never synced, after the power cut "
          "found in an older log)",
          EscapeControls(path), verb, scan.size));
      continue;
    }
    if (scan.data_after_unwritten_pages) {
      if (!read_only) IDEM_RETURN_IF_ERROR(CutFile(fs, path, scan.intact_end));
      cuts.power_cut.push_back(fmt::format(
          "the write-ahead log {} {}cut at byte {} of {}: a power cut left pages there that were "
          "never written; what followed was never synced (calls that were not answered, or "
          "kBuffered or kPeriodic writes)",
          EscapeControls(path), verb, scan.intact_end, scan.size));
      cut = true;
      continue;
    }
    if (read_only || !HasTail(scan)) continue;
    IDEM_RETURN_IF_ERROR(CutFile(fs, path, scan.intact_end));
    cuts.tails.push_back(fmt::format(
        "the write-ahead log {} cut after its last whole record, at byte {} of {} (zeros written "
        "ahead of its records, and any record never completed)",
        EscapeControls(path), scan.intact_end, scan.size));
  }
  IDEM_RETURN_IF_ERROR(CutManifestTail(fs, db_path, read_only, cuts.power_cut));
  return cuts;
}

std::shared_ptr<rocksdb::FileSystem> NewLogPrefixView(std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<LogPrefixView>(std::move(base));
}

}  // namespace idem::storage
