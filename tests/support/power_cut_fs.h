// PowerCutFs: a rocksdb::FileSystem that simulates losing power, as RocksDB's own crash tests
// do with their FaultInjectionTestFS. It passes every call to the real file system and tracks
// what a power cut could take away:
//   - per file, how many of its bytes were written and how many were synced (Sync or Fsync;
//     RangeSync is sync_file_range, which promises nothing);
//   - per directory, the entries created, renamed and deleted since its last fsync.
// At the chosen moment (after a given number of changes, or at once) the power goes off. The
// process runs on, as it would for the instant before a real cut reached it, and sees no error,
// but nothing it does from then on reaches the disk for good: no sync counts, and Reboot()
// takes every later change away. A test treats a call that returns after the cut as one whose
// answer never arrived. Once the store is closed, Reboot() makes the disk into one that a power
// cut at that moment could have left:
//   - each file keeps its synced bytes plus, at random, none, some or all of the bytes written
//     after its last sync and before the cut, some of whose whole pages may read as zeros (a
//     file system may persist a file's length before its data);
//   - each page of synced bytes overwritten since the file's last sync (PositionedAppend, as
//     zero-filled logs write) keeps, at random, its new contents or the synced ones (always the
//     synced ones if it was overwritten after the cut);
//   - each directory keeps, at random, none, some or all of the entry changes made after its
//     last fsync and before the cut, in the order they were made (a journaling file system
//     commits them in order); the rest are undone: files created are removed, files deleted
//     come back, renames go back, and a file a rename replaced comes back with its old contents
//     (kept meanwhile as a hard link under the stash directory, on the same file system).
// Files that existed before the file system saw them count as synced. After Reboot() the power
// is on again and the disk as it is now is the new synced state.
//
// Syncs are recorded, not made: only what they would have made durable matters, and the tests
// run without the disk's fsync latency. A truncation counts as durable at once. Deleting
// directories, random-access files and reusing files (WAL recycling) are not modelled: they
// fail, so a test that needs them notices.

#ifndef IDEM_TESTS_POWER_CUT_FS_H_
#define IDEM_TESTS_POWER_CUT_FS_H_

#include <fcntl.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace idem_test {

class PowerCutFs : public rocksdb::FileSystemWrapper,
                   public std::enable_shared_from_this<PowerCutFs> {
 public:
  // `stash` is created if missing; it must be on the same file system as the files written.
  explicit PowerCutFs(std::string stash)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), stash_(std::move(stash)) {
    std::filesystem::create_directories(stash_);
  }

  static const char* kClassName() { return "idem_test.PowerCutFs"; }
  const char* Name() const override { return kClassName(); }

  // An Env using this file system. Keep the PowerCutFs alive at least as long as the Env.
  std::shared_ptr<rocksdb::Env> env() {
    return std::shared_ptr<rocksdb::Env>(rocksdb::NewCompositeEnv(shared_from_this()));
  }

  // The power goes off once `n` more changes (appends, syncs, creations, renames, deletions,
  // directory syncs) have been made. 0: only by CutNow().
  void CutAfter(uint64_t n) {
    std::lock_guard lock(mu_);
    cut_at_ = n == 0 ? 0 : changes_ + n;
  }
  void CutNow() {
    std::lock_guard lock(mu_);
    off_ = true;
  }
  bool off() const {
    std::lock_guard lock(mu_);
    return off_;
  }
  // Changes made since this file system was created.
  uint64_t changes() const {
    std::lock_guard lock(mu_);
    return changes_;
  }

  // What Reboot() did, for a failure message.
  struct Outcome {
    int truncated_files = 0;          // files that lost unsynced bytes
    uint64_t lost_bytes = 0;          // unsynced bytes dropped
    int undone_entry_changes = 0;     // directory changes undone
    int kept_entry_changes = 0;       // unsynced directory changes kept
    int zeroed_pages = 0;             // unsynced pages kept as zeros
    int restored_pages = 0;           // overwritten pages given back their synced contents
    std::vector<std::string> undone;  // what was undone, for messages
    std::string error;                // non-empty: the disk could not be made so
  };

  // With every file this file system handed out closed: cuts the power if it is on, applies
  // the cut to the disk, chosen with `random`, and turns the power on again.
  Outcome Reboot(std::mt19937_64& random) { return Reboot(&random); }
  // The same, keeping nothing that was not synced: the harshest cut.
  Outcome RebootKeepingNothing() { return Reboot(nullptr); }

 private:
  Outcome Reboot(std::mt19937_64* random) {
    std::lock_guard lock(mu_);
    off_ = true;
    Outcome outcome;
    // File data first, through any name each file still has (its own or a stash link).
    std::map<Inode*, std::string> paths;
    for (const auto& [path, inode] : names_) paths.emplace(inode.get(), path);
    for (const auto& [directory, changes] : pending_) {
      for (const auto& change : changes) {
        if (change.inode && !change.inode_stash.empty()) {
          paths.emplace(change.inode.get(), change.inode_stash);
        }
        if (change.displaced) paths.emplace(change.displaced.get(), change.displaced_stash);
      }
    }
    for (const auto& [inode, path] : paths) {
      // Bytes written after the cut are always lost; those written before it, since the last
      // sync, at random.
      const uint64_t unsynced =
          inode->written_on > inode->synced ? inode->written_on - inode->synced : 0;
      const uint64_t kept = Survivors(random, unsynced);
      struct stat info {};
      if (::stat(path.c_str(), &info) != 0) continue;  // never written to disk
      const uint64_t length =
          std::min<uint64_t>(inode->synced + kept, static_cast<uint64_t>(info.st_size));
      if (length < static_cast<uint64_t>(info.st_size)) {
        if (::truncate(path.c_str(), static_cast<off_t>(length)) != 0) {
          outcome.error = "truncate " + path + ": " + std::strerror(errno);
          return outcome;
        }
        ++outcome.truncated_files;
        outcome.lost_bytes += static_cast<uint64_t>(info.st_size) - length;
      }
      // Synced pages overwritten since: new or synced contents, at random.
      for (const auto& [page, old] : inode->overwritten) {
        if (random != nullptr && !old.after_cut && (*random)() % 2 == 0) continue;
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        const bool written =
            fd >= 0 && ::pwrite(fd, old.bytes.data(), old.bytes.size(), static_cast<off_t>(page)) ==
                           static_cast<ssize_t>(old.bytes.size());
        if (fd >= 0) ::close(fd);
        if (!written) {
          outcome.error = "restoring a page of " + path + ": " + std::strerror(errno);
          return outcome;
        }
        ++outcome.restored_pages;
      }
      // Some file systems (XFS; ext4 with data=writeback) may persist a file's new length
      // before its data: the unsynced part kept may read as zeros, in whole pages.
      if (random != nullptr && length > inode->synced && (*random)() % 2 == 0) {
        const uint64_t first = (inode->synced + kPage - 1) / kPage * kPage;
        for (uint64_t page = first; page < length; page += kPage) {
          if ((*random)() % 2 != 0) continue;
          const std::string zeros(std::min(kPage, length - page), '\0');
          const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
          const bool written =
              fd >= 0 && ::pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(page)) ==
                             static_cast<ssize_t>(zeros.size());
          if (fd >= 0) ::close(fd);
          if (!written) {
            outcome.error = "zeroing a page of " + path + ": " + std::strerror(errno);
            return outcome;
          }
          ++outcome.zeroed_pages;
        }
      }
    }
    // Then, per directory, the entry changes after a random prefix are undone, newest first.
    // Inner directories first (in reverse order a directory comes after everything under it),
    // while the names their changes were made under are still there.
    for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
      auto& changes = it->second;
      std::size_t before_cut = 0;
      while (before_cut < changes.size() && !changes[before_cut].after_cut) ++before_cut;
      const std::size_t keep = Survivors(random, before_cut);
      outcome.kept_entry_changes += static_cast<int>(keep);
      for (std::size_t i = changes.size(); i-- > keep;) {
        std::string error = Undo(changes[i]);
        if (!error.empty()) {
          outcome.error = error;
          return outcome;
        }
        ++outcome.undone_entry_changes;
        outcome.undone.push_back(Describe(changes[i]) +
                                 (changes[i].after_cut ? " (after the cut)" : ""));
      }
    }
    // What is on disk now is the synced state.
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(stash_, ignored)) {
      std::filesystem::remove_all(entry.path(), ignored);
    }
    names_.clear();
    pending_.clear();
    off_ = false;
    cut_at_ = 0;
    return outcome;
  }

 public:
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    std::lock_guard lock(mu_);
    const std::string path = Normal(f);
    CountLocked();
    // Opening an existing file truncates it: modelled as deleting it and creating a new one,
    // so that the old contents can come back if the deletion is undone.
    if (Exists(path)) {
      if (auto s = UnlinkLocked(path); !s.ok()) return s;
    }
    auto s = target()->NewWritableFile(path, options, r, dbg);
    if (!s.ok()) return s;
    auto inode = std::make_shared<Inode>();
    names_[path] = inode;
    pending_[Parent(path)].push_back({Change::kCreate, path, "", inode, "", nullptr, "", off_});
    *r = std::make_unique<File>(std::move(*r), this, inode, path);
    return s;
  }

  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    std::lock_guard lock(mu_);
    const std::string path = Normal(f);
    CountLocked();
    const bool existed = Exists(path);
    auto s = target()->ReopenWritableFile(path, options, r, dbg);
    if (!s.ok()) return s;
    std::shared_ptr<Inode> inode = InodeLocked(path);
    if (!existed) {
      pending_[Parent(path)].push_back({Change::kCreate, path, "", inode, "", nullptr, "", off_});
    }
    *r = std::make_unique<File>(std::move(*r), this, inode, path);
    return s;
  }

  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string&,
                                      const rocksdb::FileOptions&,
                                      std::unique_ptr<rocksdb::FSWritableFile>*,
                                      rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("PowerCutFs does not model reusing a file", f);
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions&,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>*,
                                    rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("PowerCutFs does not model random writes", f);
  }
  rocksdb::IOStatus DeleteDir(const std::string& d, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("PowerCutFs does not model deleting a directory", d);
  }

  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions&,
                               rocksdb::IODebugContext*) override {
    std::lock_guard lock(mu_);
    const std::string path = Normal(f);
    CountLocked();
    return UnlinkLocked(path);
  }

  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    std::lock_guard lock(mu_);
    const std::string source = Normal(from);
    const std::string destination = Normal(to);
    CountLocked();
    if (Parent(source) != Parent(destination)) {
      return rocksdb::IOStatus::NotSupported("PowerCutFs models renames within one directory",
                                             source + " -> " + destination);
    }
    std::shared_ptr<Inode> displaced;
    std::string displaced_stash;
    struct stat target_info {};
    if (::lstat(destination.c_str(), &target_info) == 0 && S_ISDIR(target_info.st_mode)) {
      return rocksdb::IOStatus::NotSupported("PowerCutFs does not model replacing a directory",
                                             destination);
    }
    if (Exists(destination)) {
      displaced = InodeLocked(destination);
      displaced_stash = NewStash();
      if (::link(destination.c_str(), displaced_stash.c_str()) != 0) {
        return rocksdb::IOStatus::IOError("PowerCutFs: link " + destination, std::strerror(errno));
      }
    }
    const bool directory =
        ::lstat(source.c_str(), &target_info) == 0 && S_ISDIR(target_info.st_mode);
    std::shared_ptr<Inode> inode = directory ? nullptr : InodeLocked(source);
    auto s = target()->RenameFile(source, destination, options, dbg);
    if (!s.ok()) return s;
    if (directory) {
      MovedLocked(source, destination);
    } else {
      names_.erase(source);
      names_[destination] = inode;
    }
    pending_[Parent(destination)].push_back(
        {Change::kRename, destination, source, inode, "", displaced, displaced_stash, off_});
    return s;
  }

  rocksdb::IOStatus LinkFile(const std::string& from, const std::string& to,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
    std::lock_guard lock(mu_);
    const std::string source = Normal(from);
    const std::string destination = Normal(to);
    CountLocked();
    std::shared_ptr<Inode> inode = InodeLocked(source);
    auto s = target()->LinkFile(source, destination, options, dbg);
    if (!s.ok()) return s;
    names_[destination] = inode;
    pending_[Parent(destination)].push_back(
        {Change::kCreate, destination, "", inode, "", nullptr, "", off_});
    return s;
  }

  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    return MakeDirectory(d, options, dbg, false);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
    return MakeDirectory(d, options, dbg, true);
  }

  rocksdb::IOStatus NewDirectory(const std::string& d, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* dbg) override {
    auto s = target()->NewDirectory(d, options, r, dbg);
    if (s.ok()) *r = std::make_unique<Directory>(std::move(*r), this, Normal(d));
    return s;
  }

  rocksdb::IOStatus Truncate(const std::string& f, size_t size, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
    std::lock_guard lock(mu_);
    const std::string path = Normal(f);
    CountLocked();
    auto s = target()->Truncate(path, size, options, dbg);
    if (s.ok()) InodeLocked(path)->Truncated(size);
    return s;
  }

 private:
  static constexpr uint64_t kPage = 4096;

  // A file's contents as a power cut treats them.
  struct Inode {
    uint64_t written = 0;     // its length as the writer sees it
    uint64_t written_on = 0;  // of which written before the power went off
    uint64_t synced = 0;      // bytes a power cut keeps
    // The synced contents of each page (by offset) overwritten since the last sync.
    struct SyncedPage {
      std::string bytes;
      bool after_cut = false;  // overwritten with the power off: never kept
    };
    std::map<uint64_t, SyncedPage> overwritten;
    void Wrote(bool power_on) {
      if (power_on) written_on = written;
    }
    void Truncated(uint64_t size) {
      written = size;
      written_on = std::min(written_on, size);
      synced = std::min(synced, size);
      for (auto it = overwritten.lower_bound(size / kPage * kPage); it != overwritten.end();) {
        if (it->first >= size) {
          it = overwritten.erase(it);
        } else {
          it->second.bytes.resize(std::min<uint64_t>(it->second.bytes.size(), size - it->first));
          ++it;
        }
      }
    }
  };

  // A directory entry change not yet synced.
  struct Change {
    enum Kind { kCreate, kUnlink, kRename, kCreateDir } kind;
    std::string name;  // the entry created, deleted, or renamed to
    std::string from;  // kRename: the old name
    std::shared_ptr<Inode> inode;
    std::string inode_stash;           // kUnlink: a hard link keeping the deleted file
    std::shared_ptr<Inode> displaced;  // kRename: the file it replaced
    std::string displaced_stash;       // and a hard link keeping it
    bool after_cut = false;            // made with the power off: never kept
  };

  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile>&& target, PowerCutFs* fs,
         std::shared_ptr<Inode> inode, std::string path)
        : FSWritableFileOwnerWrapper(std::move(target)),
          fs_(fs),
          inode_(std::move(inode)),
          path_(std::move(path)) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      auto s = target()->Append(data, options, dbg);
      if (s.ok()) inode_->written += data.size(), inode_->Wrote(!fs_->off_);
      return s;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      auto s = target()->Append(data, options, info, dbg);
      if (s.ok()) inode_->written += data.size(), inode_->Wrote(!fs_->off_);
      return s;
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      if (auto saved = SaveSyncedPages(offset, data.size()); !saved.ok()) return saved;
      auto s = target()->PositionedAppend(data, offset, options, dbg);
      if (s.ok()) Overwritten(offset, data.size());
      return s;
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      if (auto saved = SaveSyncedPages(offset, data.size()); !saved.ok()) return saved;
      auto s = target()->PositionedAppend(data, offset, options, info, dbg);
      if (s.ok()) Overwritten(offset, data.size());
      return s;
    }
    rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      auto s = target()->Truncate(size, options, dbg);
      if (s.ok()) inode_->Truncated(size);
      return s;
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
      return Synced();
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
      return Synced();
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* dbg) override {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      return target()->RangeSync(offset, nbytes, options, dbg);  // makes nothing durable
    }
    // Closing writes nothing the power cut could keep; PosixWritableFile::Close truncates the
    // preallocated space past the written length, which changes no byte this file tracks.

   private:
    rocksdb::IOStatus Synced() {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      if (!fs_->off_) {
        inode_->synced = inode_->written;
        inode_->overwritten.clear();
      }
      return rocksdb::IOStatus::OK();
    }
    // Keeps the synced contents of each page a write at `offset` is about to change.
    rocksdb::IOStatus SaveSyncedPages(uint64_t offset, std::size_t bytes) {
      const uint64_t end = std::min<uint64_t>(offset + bytes, inode_->synced);
      if (offset >= end) return rocksdb::IOStatus::OK();
      const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return rocksdb::IOStatus::IOError("PowerCutFs: open " + path_, std::strerror(errno));
      rocksdb::IOStatus status = rocksdb::IOStatus::OK();
      for (uint64_t page = offset / kPage * kPage; page < end && status.ok(); page += kPage) {
        auto [it, added] = inode_->overwritten.try_emplace(page);
        it->second.after_cut = it->second.after_cut || fs_->off_;
        if (!added) continue;
        it->second.bytes.assign(std::min(kPage, inode_->synced - page), '\0');
        if (::pread(fd, it->second.bytes.data(), it->second.bytes.size(),
                    static_cast<off_t>(page)) != static_cast<ssize_t>(it->second.bytes.size())) {
          status = rocksdb::IOStatus::IOError("PowerCutFs: read " + path_, std::strerror(errno));
        }
      }
      ::close(fd);
      return status;
    }
    void Overwritten(uint64_t offset, std::size_t bytes) {
      inode_->written = std::max<uint64_t>(inode_->written, offset + bytes);
      inode_->Wrote(!fs_->off_);
    }

    PowerCutFs* const fs_;
    const std::shared_ptr<Inode> inode_;
    const std::string path_;  // its name when opened (RocksDB renames no file it writes)
  };

  class Directory final : public rocksdb::FSDirectoryWrapper {
   public:
    Directory(std::unique_ptr<rocksdb::FSDirectory>&& target, PowerCutFs* fs, std::string path)
        : FSDirectoryWrapper(std::move(target)), fs_(fs), path_(std::move(path)) {}
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
      return Synced();
    }
    rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions&, rocksdb::IODebugContext*,
                                          const rocksdb::DirFsyncOptions&) override {
      return Synced();
    }

   private:
    rocksdb::IOStatus Synced() {
      std::lock_guard lock(fs_->mu_);
      fs_->CountLocked();
      if (!fs_->off_) fs_->DirectorySyncedLocked(path_);
      return rocksdb::IOStatus::OK();
    }
    PowerCutFs* const fs_;
    const std::string path_;
  };

  // How many of `count` unsynced things (bytes, directory changes) a cut keeps: none, all, or
  // some, a third of the time each; none without `random`.
  static uint64_t Survivors(std::mt19937_64* random, uint64_t count) {
    if (random == nullptr) return 0;
    switch ((*random)() % 3) {
      case 0:
        return 0;
      case 1:
        return count;
      default:
        return (*random)() % (count + 1);
    }
  }

  // Counts a change, and turns the power off when the count set by CutAfter is reached.
  void CountLocked() {
    if (!off_ && cut_at_ != 0 && changes_ >= cut_at_) off_ = true;
    ++changes_;
  }

  rocksdb::IOStatus MakeDirectory(const std::string& d, const rocksdb::IOOptions& options,
                                  rocksdb::IODebugContext* dbg, bool if_missing) {
    std::lock_guard lock(mu_);
    const std::string path = Normal(d);
    if (if_missing && Exists(path)) return rocksdb::IOStatus::OK();
    CountLocked();
    auto s = if_missing ? target()->CreateDirIfMissing(path, options, dbg)
                        : target()->CreateDir(path, options, dbg);
    if (s.ok())
      pending_[Parent(path)].push_back(
          {Change::kCreateDir, path, "", nullptr, "", nullptr, "", off_});
    return s;
  }

  rocksdb::IOStatus UnlinkLocked(const std::string& path) {
    std::shared_ptr<Inode> inode = InodeLocked(path);
    const std::string stash = NewStash();
    if (::link(path.c_str(), stash.c_str()) != 0) {
      return rocksdb::IOStatus::IOError("PowerCutFs: link " + path, std::strerror(errno));
    }
    auto s = target()->DeleteFile(path, rocksdb::IOOptions(), nullptr);
    if (!s.ok()) {
      ::unlink(stash.c_str());
      return s;
    }
    names_.erase(path);
    pending_[Parent(path)].push_back({Change::kUnlink, path, "", inode, stash, nullptr, "", off_});
    return s;
  }

  // A directory moved from `from` to `to`: what is tracked under it is now under `to`.
  void MovedLocked(const std::string& from, const std::string& to) {
    auto moved = [&](std::string& path) {
      if (path == from || path.compare(0, from.size() + 1, from + "/") == 0) {
        path = to + path.substr(from.size());
      }
    };
    std::map<std::string, std::shared_ptr<Inode>> names;
    for (auto& [path, inode] : names_) {
      std::string name = path;
      moved(name);
      names[name] = inode;
    }
    names_ = std::move(names);
    std::map<std::string, std::vector<Change>> pending;
    for (auto& [path, changes] : pending_) {
      std::string directory = path;
      moved(directory);
      if (directory != path) {
        for (auto& change : changes) moved(change.name), moved(change.from);
      }
      auto& list = pending[directory];
      list.insert(list.end(), changes.begin(), changes.end());
    }
    pending_ = std::move(pending);
  }

  void DirectorySyncedLocked(const std::string& directory) {
    auto it = pending_.find(directory);
    if (it == pending_.end()) return;
    // Deleted and replaced files are gone for good.
    for (const auto& change : it->second) {
      if (!change.inode_stash.empty()) ::unlink(change.inode_stash.c_str());
      if (!change.displaced_stash.empty()) ::unlink(change.displaced_stash.c_str());
    }
    pending_.erase(it);
  }

  // The file at `path`, tracked from now on. A file first seen now is synced as it is.
  std::shared_ptr<Inode> InodeLocked(const std::string& path) {
    auto& inode = names_[path];
    if (!inode) {
      inode = std::make_shared<Inode>();
      struct stat info {};
      if (::stat(path.c_str(), &info) == 0) {
        inode->written = inode->written_on = inode->synced = static_cast<uint64_t>(info.st_size);
      }
    }
    return inode;
  }

  std::string Undo(const Change& change) {
    auto fail = [&](const std::string& what) {
      return "undoing " + Describe(change) + ": " + what + ": " + std::strerror(errno);
    };
    switch (change.kind) {
      case Change::kCreate:
        if (::unlink(change.name.c_str()) != 0 && errno != ENOENT) return fail("unlink");
        break;
      case Change::kCreateDir: {
        std::error_code error;
        std::filesystem::remove_all(change.name, error);
        if (error) return "undoing " + Describe(change) + ": " + error.message();
        break;
      }
      case Change::kUnlink:
        if (::link(change.inode_stash.c_str(), change.name.c_str()) != 0) return fail("link");
        break;
      case Change::kRename:
        if (::rename(change.name.c_str(), change.from.c_str()) != 0) return fail("rename");
        if (change.displaced && ::link(change.displaced_stash.c_str(), change.name.c_str()) != 0) {
          return fail("link");
        }
        break;
    }
    return "";
  }

  static std::string Describe(const Change& change) {
    switch (change.kind) {
      case Change::kCreate:
        return "create " + change.name;
      case Change::kCreateDir:
        return "mkdir " + change.name;
      case Change::kUnlink:
        return "delete " + change.name;
      case Change::kRename:
        return "rename " + change.from + " -> " + change.name;
    }
    return "?";
  }

  std::string NewStash() { return stash_ + "/" + std::to_string(++stashes_); }

  static bool Exists(const std::string& path) {
    struct stat info {};
    return ::lstat(path.c_str(), &info) == 0;
  }
  // Without repeated or trailing slashes, so that one directory has one name.
  static std::string Normal(const std::string& path) {
    std::string normal;
    for (char c : path) {
      if (c == '/' && !normal.empty() && normal.back() == '/') continue;
      normal += c;
    }
    while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    return normal;
  }
  static std::string Parent(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  }

  const std::string stash_;
  mutable std::mutex mu_;
  bool off_ = false;
  uint64_t cut_at_ = 0;
  uint64_t changes_ = 0;
  uint64_t stashes_ = 0;
  std::map<std::string, std::shared_ptr<Inode>> names_;  // files seen, by current name
  std::map<std::string, std::vector<Change>> pending_;   // directory -> unsynced changes
};

}  // namespace idem_test

#endif  // IDEM_TESTS_POWER_CUT_FS_H_
