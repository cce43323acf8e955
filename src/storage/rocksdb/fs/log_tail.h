// What follows the whole records of RocksDB's logs: zeros written ahead of them, a record never
// completed, pages a power cut never wrote.
//
// Logs are written into zeros written ahead of the records (log_zero_fill.h), so a log that was
// not closed cleanly (a crash, a kill, a power cut, or its writer still writing) ends in zeros,
// perhaps after a record never completed. RocksDB 7.8 reads zeros after whole records as the
// end, but a record never completed with zeros after it as damage ("checksum mismatch", or
// "error in middle of record" for a long record written in pieces), and refuses to open. Such a
// tail was never synced (a record is synced after it is whole): the read-write open cuts every
// log after its last whole record before RocksDB reads it (noted in the info log), and a
// read-only open reads each log only that far (NewLogPrefixView) and changes nothing.
//
// A power cut keeps a file's synced bytes; of the bytes written after its last sync it may keep
// any part, and some file systems (XFS; ext4 with data=writeback) may keep the file's new length
// but not the data: whole pages, or the rest of a page, read as zeros (in a zero-filled log,
// every page not written back reads as the zeros it held). In a log RocksDB then either refuses
// to open (a record's checksum fails over the zeros, with more records after it: "corruption in
// the middle", although nothing synced is damaged), or, worse, skips the rest of the 32 KiB
// block silently when a record header reads as zeros and replays the records after it: writes
// applied with earlier ones missing, not the state after any prefix of the writes.
//
// Neither is damage to synced data. A page that reads as zeros where records were written, with
// data written after it, was never written back; so no sync completed after those records were
// written (a sync writes every dirty page of the file first), and everything from there on, in
// this log and in every newer one (a sync of a newer log syncs the older ones first), is writes
// that were never synced: kSync calls still in flight, or kBuffered writes that may be lost. So
// before RocksDB reads the logs, the read-write open cuts such a log at the start of the record
// the zeros fall in, and empties the newer logs, and says so. A read-only open, which may not
// change the store, refuses it when the cut log is not the newest (it cannot leave the newer
// ones out), and reads the newest one up to the same point. Damage without either signature (a
// flipped bit, garbage, with data after it) is left for RocksDB to refuse, naming the file.
//
// The signature, at the first record that is not whole and intact: its header reads as zeros,
// or zeros run from inside it to the end of a 4 KiB page and cover that page from its start (the
// log's last page may be short), or are at least 64 bytes long (so that a payload ending in a
// few zero bytes is not mistaken for one), or go on through the whole next page (the written
// bytes before an unwritten page may end in zeros of their own); and bytes other than zeros
// follow those pages. Zeros with nothing after them are a tail, as above: a log whose writer
// stopped mid-record ends that way too, and its next log may hold synced writes.
//
// The current MANIFEST (the same format, not zero-filled) is checked the same way: RocksDB syncs
// it after every edit, so only its last edit can hold such pages; when the rest of that edit
// follows them, RocksDB refuses the store (a checksum mismatch); zeros to the end it reads as a
// torn edit. It is cut when its last edit holds such pages and any data at all.

#ifndef IDEM_STORAGE_ROCKSDB_FS_LOG_TAIL_H_
#define IDEM_STORAGE_ROCKSDB_FS_LOG_TAIL_H_

#include <cstdint>
#include <memory>
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
  // A record there is not whole and intact, and the file holds data after the end its header
  // claims: RocksDB would read on past it, not as a torn last record.
  bool damaged = false;
  // That record holds pages never written (see above), and it or what follows holds data.
  bool unwritten_pages = false;
  // ... and data follows those pages: the signature of a power cut in a log.
  bool data_after_unwritten_pages = false;
  // The format is one this scanner does not read (recycled logs): nothing is judged.
  bool unknown_format = false;
};

// Reads the file a block at a time.
Result<LogScan> ScanLog(rocksdb::FileSystem& fs, const std::string& path,
                        bool keep_record_starts = false);

// What CutLogTails did, or would do.
struct LogTailCuts {
  // For the operator: a line per file cut or emptied after a power cut.
  std::vector<std::string> power_cut;
  // For the info log: a line per log cut after its last whole record (a tail, above).
  std::vector<std::string> tails;
};

// Cuts the write-ahead logs and the MANIFEST of the database at `db_path` as described above,
// syncing what it changes. `read_only`: changes nothing, says what a power cut would make the
// read-write open change, and leaves the newest log to NewLogPrefixView.
Result<LogTailCuts> CutLogTails(rocksdb::FileSystem& fs, const std::string& db_path,
                                bool read_only);

// A file system passing everything to `base` that shows a read-only open each log up to its last
// whole record when what follows is a tail or a power cut's pages never written (which the
// read-write open would cut there), and whole when it is damage, which RocksDB then refuses. A
// log that reads as damaged is read again a few times first: its writer may be writing it, and
// a read that races the writer can find a record half copied with records after it.
std::shared_ptr<rocksdb::FileSystem> NewLogPrefixView(std::shared_ptr<rocksdb::FileSystem> base);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_LOG_TAIL_H_
