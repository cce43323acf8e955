#include "storage/log_tail.h"

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

// Whether [begin, end) of `data` (a record that is not whole and intact) shows pages never
// written: its header reads as zeros, or zeros run from inside it to the end of a page.
bool UnwrittenPages(std::string_view data, uint64_t begin, uint64_t end) {
  end = std::min<uint64_t>(end, data.size());
  for (uint64_t q = begin; q < end; ++q) {
    if (data[q] != 0 || (q > begin && data[q - 1] == 0)) continue;  // not a run's start
    const uint64_t page_end = std::min<uint64_t>((q / kPageSize + 1) * kPageSize, data.size());
    if (!AllZero(data.substr(q, page_end - q))) continue;
    if (q == begin || page_end - q >= kMinimumZeroRun) return true;
  }
  return false;
}

LogScan Scan(std::string_view data) {
  LogScan scan;
  scan.size = data.size();
  uint64_t pos = 0;
  uint64_t fragment_start = 0;
  bool in_fragment = false;
  // The first record that is not whole and intact: where it starts, and how far it reaches.
  uint64_t bad = data.size();
  uint64_t bad_end = data.size();
  while (pos < data.size()) {
    const uint64_t block_left = kBlockSize - pos % kBlockSize;
    if (block_left < kHeaderSize) {
      pos += block_left;  // padding
      continue;
    }
    if (pos + kHeaderSize > data.size()) break;  // a header cut short by the end: a torn tail
    const uint32_t stored_crc = util::GetFixed32(data.data() + pos);
    const uint64_t length = static_cast<uint8_t>(data[pos + 4]) |
                            (static_cast<uint64_t>(static_cast<uint8_t>(data[pos + 5])) << 8);
    const uint8_t type = static_cast<uint8_t>(data[pos + 6]);
    if (type >= kFirstRecyclableType && type <= kLastRecyclableType) {
      scan.unknown_format = true;
      scan.intact_end = data.size();
      return scan;
    }
    const bool zero_header = type == kZeroType && length == 0;
    if (!zero_header && kHeaderSize + length <= block_left &&
        pos + kHeaderSize + length > data.size()) {
      break;  // a record cut short by the end: a torn tail
    }
    const bool intact =
        !zero_header && type != kZeroType && kHeaderSize + length <= block_left &&
        Masked(Crc32c(data.substr(pos + kHeaderSize - 1, length + 1))) == stored_crc &&
        ((type == kFullType || type > kLastType) ? !in_fragment
         : type == kFirstType                    ? !in_fragment
                                                 : in_fragment);
    if (!intact) {
      bad = pos;
      bad_end = zero_header || kHeaderSize + length > block_left ? pos + block_left
                                                                 : pos + kHeaderSize + length;
      break;
    }
    if (type == kFirstType) {
      in_fragment = true;
      fragment_start = pos;
    } else if (type == kLastType) {
      in_fragment = false;
      scan.records.push_back(fragment_start);
    } else if (type != kMiddleType) {
      scan.records.push_back(pos);
    }
    pos += kHeaderSize + length;
  }
  if (bad == data.size()) {
    // Whole records, then at most a torn one: what RocksDB reads as a crash's tail.
    scan.intact_end = in_fragment ? fragment_start : std::min<uint64_t>(pos, data.size());
    return scan;
  }
  scan.intact_end = in_fragment ? fragment_start : bad;
  // Zeros to the end are what RocksDB skips as preallocated space: nothing to read after them.
  scan.damaged = !AllZero(data.substr(bad));
  scan.unwritten_pages = scan.damaged && UnwrittenPages(data, bad, bad_end);
  return scan;
}

// Truncates `path` to `size` bytes and syncs it.
Status CutFile(rocksdb::FileSystem& fs, const std::string& path, uint64_t size) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  rocksdb::IOStatus cut = fs.ReopenWritableFile(path, rocksdb::FileOptions(), &file, nullptr);
  if (cut.ok()) cut = file->Truncate(size, rocksdb::IOOptions(), nullptr);
  if (cut.ok()) cut = file->Fsync(rocksdb::IOOptions(), nullptr);
  if (cut.ok()) cut = file->Close(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(cut, "cutting " + EscapeControls(path) + " at byte " + std::to_string(size));
}

}  // namespace

Result<LogScan> ScanLog(rocksdb::FileSystem& fs, const std::string& path) {
  std::string data;
  IDEM_RETURN_IF_ERROR(
      FromRocksDb(rocksdb::ReadFileToString(&fs, path, &data), "reading " + EscapeControls(path)));
  return Scan(data);
}

Result<std::vector<std::string>> CutUnwrittenLogTails(rocksdb::FileSystem& fs,
                                                      const std::string& db_path, bool dry_run) {
  std::vector<std::string> children;
  const rocksdb::IOStatus listed =
      fs.GetChildren(db_path, rocksdb::IOOptions(), &children, nullptr);
  if (listed.IsNotFound() || listed.IsPathNotFound()) return std::vector<std::string>();  // new
  IDEM_RETURN_IF_ERROR(FromRocksDb(listed, "listing " + EscapeControls(db_path)));
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
      report.push_back("the write-ahead log " + EscapeControls(path) + " " + verb + "emptied (" +
                       std::to_string(scan.size) +
                       " bytes of writes never synced, after the power cut found in an older "
                       "log)");
      continue;
    }
    if (!scan.unwritten_pages) continue;
    if (!dry_run) IDEM_RETURN_IF_ERROR(CutFile(fs, path, scan.intact_end));
    report.push_back("the write-ahead log " + EscapeControls(path) + " " + verb + "cut at byte " +
                     std::to_string(scan.intact_end) + " of " + std::to_string(scan.size) +
                     ": a power cut left pages there that were never written; what followed "
                     "was never synced (calls that were not answered, or kBuffered writes)");
    cut = true;
  }
  return report;
}

}  // namespace idem::storage
