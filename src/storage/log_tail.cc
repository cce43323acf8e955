#include "storage/log_tail.h"

#include <fmt/format.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

#include "storage/file_names.h"
#include "storage/rocksdb_status.h"
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

bool AllZero(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

// Whether [begin, end) of `block` (a record that is not whole and intact) shows pages never
// written: its header reads as zeros, or a run of zeros reaches the end of a page and either
// covers that page from its start (the log's last page may be short), or is long enough, or goes
// on through the whole next page. The written bytes before an unwritten page may end in zeros
// of their own (a record's fixed-width fields often do), so the run may start before the page.
// Blocks start at multiples of the page size, so a page never crosses one.
bool UnwrittenPages(std::string_view block, uint64_t begin, uint64_t end) {
  end = std::min<uint64_t>(end, block.size());
  const auto page_end = [&block](uint64_t at) {
    return std::min<uint64_t>((at / kPageSize + 1) * kPageSize, block.size());
  };
  for (uint64_t q = begin; q < end; ++q) {
    if (block[q] != 0 || (q > begin && block[q - 1] == 0)) continue;  // not a run's start
    const uint64_t run_page_end = page_end(q);
    if (!AllZero(block.substr(q, run_page_end - q))) continue;
    if (q == begin || q % kPageSize == 0 || run_page_end - q >= kMinimumZeroRun) return true;
    if (run_page_end < end &&
        AllZero(block.substr(run_page_end, page_end(run_page_end) - run_page_end))) {
      return true;
    }
  }
  return false;
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
      scan_.damaged = !AllZero(block);  // data after the bad record: RocksDB reads past it
      return !scan_.damaged;
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
        bad_ = true;
        scan_.intact_end = in_fragment_ ? fragment_start_ : offset + pos;
        scan_.damaged = !AllZero(block.substr(pos));
        const uint64_t end = zero_header || !fits ? block.size() : pos + kHeaderSize + length;
        scan_.unwritten_pages = UnwrittenPages(block, pos, end);
        return !scan_.damaged;
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
    // Pages never written matter only with data after them (RocksDB skips zeros to the end).
    scan_.unwritten_pages = scan_.unwritten_pages && scan_.damaged;
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

  const bool keep_record_starts_;
  LogScan scan_;
  bool in_fragment_ = false;
  uint64_t fragment_start_ = 0;
  bool bad_ = false;  // the first record that is not whole and intact was found
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

Result<std::vector<std::string>> CutUnwrittenLogTails(rocksdb::FileSystem& fs,
                                                      const std::string& db_path, bool dry_run) {
  std::vector<std::string> children;
  const rocksdb::IOStatus listed =
      fs.GetChildren(db_path, rocksdb::IOOptions(), &children, nullptr);
  if (listed.IsNotFound() || listed.IsPathNotFound()) return std::vector<std::string>();  // new
  IDEM_RETURN_IF_ERROR(FromRocksDb(listed, fmt::format("listing {}", EscapeControls(db_path))));
  std::map<uint64_t, std::string> logs;  // by number: oldest first
  for (const auto& name : children) {
    if (auto number = FileNumber(name, "", ".log")) logs.emplace(*number, name);
  }
  const std::string verb = dry_run ? "would be " : "";
  std::vector<std::string> report;
  bool cut = false;  // a log was cut: every newer one holds only writes never synced
  for (const auto& [number, name] : logs) {
    const std::string path = db_path + "/" + name;
    IDEM_ASSIGN_OR_RETURN(const LogScan scan, ScanLog(fs, path));
    if (cut) {
      if (scan.size == 0) continue;
      if (!dry_run) IDEM_RETURN_IF_ERROR(CutFile(fs, path, 0));
      report.push_back(fmt::format(
          "the write-ahead log {} {}emptied ({} bytes of writes never synced, after the power cut "
          "found in an older log)",
          EscapeControls(path), verb, scan.size));
      continue;
    }
    if (!scan.unwritten_pages) continue;
    if (!dry_run) IDEM_RETURN_IF_ERROR(CutFile(fs, path, scan.intact_end));
    report.push_back(fmt::format(
        "the write-ahead log {} {}cut at byte {} of {}: a power cut left pages there that were "
        "never written; what followed was never synced (calls that were not answered, or "
        "kBuffered writes)",
        EscapeControls(path), verb, scan.intact_end, scan.size));
    cut = true;
  }
  IDEM_RETURN_IF_ERROR(CutManifestTail(fs, db_path, dry_run, report));
  return report;
}

}  // namespace idem::storage
