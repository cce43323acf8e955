// Pages a power cut never wrote, at the end of RocksDB's logs.
//
// A power cut keeps a file's synced bytes; of the bytes written after its last sync it may keep
// any part, and some file systems (XFS; ext4 with data=writeback) may keep the file's new length
// but not the data: whole pages, or the rest of a page, read as zeros. In a write-ahead log
// RocksDB 7.8 then either refuses to open (a record's checksum fails over the zeros, with more
// records after it: "corruption in the middle", although nothing synced is damaged), or,
// worse, skips the rest of the 32 KiB block silently when a record header reads as zeros and
// replays the records after it: writes applied with earlier ones missing, not the state after
// any prefix of the writes.
//
// Neither is damage to synced data. A page that reads as zeros where records were written was
// never written back; so no sync completed after those records were written (a sync writes
// every dirty page of the file first), and everything from there on, in this log and in every
// newer one (a sync of a newer log syncs the older ones first), is writes that were never
// synced: kSync calls still in flight, or kBuffered writes that may be lost. So before RocksDB
// reads the logs, the read-write open cuts such a log at the start of the record the zeros
// fall in, and empties the newer logs, and says so. Damage without that signature (a flipped
// bit, garbage) is left for RocksDB to refuse, naming the file, as before.
//
// The signature, at the first record that is not whole and intact: its header reads as zeros,
// or zeros run from inside it to the end of a 4 KiB page and cover that page from its start (the
// log's last page may be short), or are at least 64 bytes long (so that a payload ending in a
// few zero bytes is not mistaken for one), or go on through the whole next page (the written
// bytes before an unwritten page may end in zeros of their own).
//
// The current MANIFEST (the same format) is checked the same way: RocksDB syncs it after every
// edit, so only its last edit can hold such pages; when the rest of that edit follows them,
// RocksDB refuses the store (a checksum mismatch); zeros to the end it reads as a torn edit.

#ifndef IDEM_STORAGE_LOG_TAIL_H_
#define IDEM_STORAGE_LOG_TAIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "idem/status.h"

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

// What a file in RocksDB's log format holds.
struct LogScan {
  uint64_t size = 0;
  // The start of each whole, intact logical record, in order (when asked for).
  std::vector<uint64_t> records;
  // Where the whole, intact records end: the start of the first record that is not (or of the
  // fragmented record it belongs to), or `size`.
  uint64_t intact_end = 0;
  // A record there is not whole and intact, and the file holds data after it: RocksDB would not
  // read it as a crash's torn last record.
  bool damaged = false;
  // ... and what is wrong with it is pages never written (see above).
  bool unwritten_pages = false;
  // The format is one this scanner does not read (recycled logs): nothing is judged.
  bool unknown_format = false;
};

// Reads the file a block at a time.
Result<LogScan> ScanLog(rocksdb::FileSystem& fs, const std::string& path,
                        bool keep_record_starts = false);

// Cuts the write-ahead logs and the MANIFEST of the database at `db_path` after a power cut as
// described above, syncing what it changes. Returns a line for the operator per file changed (none
// when nothing was). `dry_run`: changes nothing, and says what would be changed.
Result<std::vector<std::string>> CutUnwrittenLogTails(rocksdb::FileSystem& fs,
                                                      const std::string& db_path,
                                                      bool dry_run = false);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_LOG_TAIL_H_
