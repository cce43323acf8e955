// The manifest mark: detects a MANIFEST that lost committed edits.
//
// RocksDB reads a MANIFEST cut short (a bad copy, a damaged disk, a careless restore) as if a
// crash had torn its last edit: it opens the earlier state the remaining edits describe and
// deletes the table files that state does not name. Records vanish without an error. A
// sequence-number mark does not catch it (the surviving log holds the newest sequence
// numbers), and neither does RocksDB's track_and_verify_wals_in_manifest (it never tracks the
// log that was live at the last close).
//
// What does catch it: RocksDB deletes a file (table, log, old MANIFEST) only after the edit
// that made it obsolete is synced into the MANIFEST. The marking file system below sits under
// RocksDB, follows which MANIFEST CURRENT names and how many of its bytes are synced, and
// before it lets RocksDB delete any file, durably writes that pair into the mark file
// (db/IDEM-MARK). So every deleted file is vouched for by a mark no larger than the
// committed MANIFEST. At open, CheckManifestMark refuses a MANIFEST older than the mark's or
// shorter than the mark's size: exactly the cases where files the remaining MANIFEST would need
// may already be gone. A crash never trips it (RocksDB never shrinks a synced MANIFEST; a new
// one has a higher number), and it costs one small fsynced write per batch of deletions
// (after flushes and compactions), nothing on the write path.

#ifndef IDEM_STORAGE_ROCKSDB_FS_MANIFEST_MARK_H_
#define IDEM_STORAGE_ROCKSDB_FS_MANIFEST_MARK_H_

#include <memory>
#include <string>

#include "idem/status.h"

namespace rocksdb {
class FileSystem;
}

namespace idem::storage {

// The mark's file name inside the RocksDB directory (RocksDB ignores names it does not know).
inline constexpr char kManifestMarkFile[] = "IDEM-MARK";

// A file system passing everything to `base`, that writes `db_path`'s mark before deleting
// any file in it.
std::shared_ptr<rocksdb::FileSystem> NewManifestMarkingFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base, std::string db_path);

// kCorruption, naming the MANIFEST and the mark, when the MANIFEST that `db_path`'s CURRENT
// names is older or shorter than the mark says was committed, or the mark is unreadable. OK
// when there is no mark (a new store, or one last written by an older idem).
Status CheckManifestMark(rocksdb::FileSystem& fs, const std::string& db_path);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_ROCKSDB_FS_MANIFEST_MARK_H_
