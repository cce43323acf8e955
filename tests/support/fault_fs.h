// FaultFs: a rocksdb::FileSystem that passes every call to the real one, and fails writes,
// syncs, file creations or opens for reading on demand with the errors the POSIX file system would
// give (EIO as a plain IOError, ENOSPC as a retryable NoSpace), counting what it failed. For the
// fault injection tests: faults are injected below RocksDB, never by editing production paths.
//
//   auto fs = std::make_shared<FaultFs>();
//   config.env = fs->env();              // storage::RocksDbConfig's test hook
//   fs->FailSyncs(FaultFs::kEio);        // every fsync/fdatasync fails from now on
//   fs->Clear();                         // the disk is healthy again

#ifndef IDEM_TESTS_FAULT_FS_H_
#define IDEM_TESTS_FAULT_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace idem_test {

class FaultFs : public rocksdb::FileSystemWrapper, public std::enable_shared_from_this<FaultFs> {
 public:
  enum Error { kNone, kEio, kEnospc };

  FaultFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  static const char* kClassName() { return "idem_test.FaultFs"; }
  const char* Name() const override { return kClassName(); }

  // An Env using this file system (RocksDB's default Env for threads and the clock). Keep the
  // FaultFs alive at least as long as the Env.
  std::shared_ptr<rocksdb::Env> env() {
    return std::shared_ptr<rocksdb::Env>(rocksdb::NewCompositeEnv(shared_from_this()));
  }

  // From now on, appends (writes) to files whose name contains `only` (all files when empty)
  // fail with `error`.
  void FailWrites(Error error, std::string only = "") { Set(write_error_, error, only); }
  // From now on, Sync/Fsync/RangeSync of matching files fail with `error`.
  void FailSyncs(Error error, std::string only = "") { Set(sync_error_, error, only); }
  // From now on, creating or renaming files and directories, and creating the LOCK, fail.
  void FailCreates(Error error, std::string only = "") { Set(create_error_, error, only); }
  // From now on, files created whose name contains `only` fail every append with `error`, until
  // Clear(); files that exist already do not. For a fault that only the next log file meets.
  void FailNewFiles(Error error, std::string only) { Set(new_file_error_, error, only); }
  // From now on, opening matching files for reading (NewRandomAccessFile) fails with `error`:
  // what a new read of a file meets. Files RocksDB holds open already (its table cache) still
  // read.
  void FailReads(Error error, std::string only = "") { Set(read_error_, error, only); }
  // After `n` more writes and syncs (of any file: log, table, MANIFEST), every write and sync
  // fails with `error` until Clear(): a disk that dies at an arbitrary moment.
  void FailAfter(int64_t n, Error error) {
    std::lock_guard lock(mu_);
    countdown_error_ = error;
    countdown_.store(n);
  }
  // From now on, every write and sync takes at least `delay` more (zero: none): a slow disk.
  void DelayWritesAndSyncs(std::chrono::microseconds delay) { delay_us_.store(delay.count()); }
  // The disk is healthy again (counters are kept).
  void Clear() {
    countdown_.store(0);
    delay_us_.store(0);
    FailWrites(kNone);
    FailSyncs(kNone);
    FailCreates(kNone);
    FailNewFiles(kNone, "");
    FailReads(kNone);
  }

  // How many operations were failed on purpose, and how many were attempted at all.
  uint64_t failed_writes() const { return failed_writes_.load(); }
  uint64_t failed_syncs() const { return failed_syncs_.load(); }
  uint64_t failed_creates() const { return failed_creates_.load(); }
  uint64_t failed_reads() const { return failed_reads_.load(); }
  uint64_t failures() const {
    return failed_writes() + failed_syncs() + failed_creates() + failed_reads();
  }
  uint64_t writes() const { return writes_.load(); }
  uint64_t syncs() const { return syncs_.load(); }

  // The status the POSIX file system gives for `error` while doing `context` to `file`.
  static rocksdb::IOStatus MakeError(Error error, const std::string& context,
                                     const std::string& file) {
    const std::string what = context + " " + file;
    if (error == kEnospc) {
      rocksdb::IOStatus s = rocksdb::IOStatus::NoSpace(what, std::strerror(ENOSPC));
      s.SetRetryable(true);  // as RocksDB's PosixFileSystem marks it
      return s;
    }
    return rocksdb::IOStatus::IOError(what, std::strerror(EIO));
  }

  // Non-OK when the fault `which` (0 write, 1 sync, 2 create, 3 read) is set and applies to
  // `file`; counted as failed.
  rocksdb::IOStatus Check(int which, const std::string& context, const std::string& file) {
    Fault* const faults[] = {&write_error_, &sync_error_, &create_error_, &read_error_};
    std::atomic<uint64_t>* const failed[] = {&failed_writes_, &failed_syncs_, &failed_creates_,
                                             &failed_reads_};
    Error error;
    {
      std::lock_guard lock(mu_);
      const Fault& fault = *faults[which];
      if (fault.error == kNone) return rocksdb::IOStatus::OK();
      if (!fault.only.empty() && file.find(fault.only) == std::string::npos) {
        return rocksdb::IOStatus::OK();
      }
      error = fault.error;
    }
    failed[which]->fetch_add(1);
    return MakeError(error, context, file);
  }
  void CountDown() {
    if (countdown_.load() > 0 && countdown_.fetch_sub(1) == 1) {
      std::lock_guard lock(mu_);
      write_error_ = {countdown_error_, ""};
      sync_error_ = {countdown_error_, ""};
    }
  }
  void Delay() {
    if (const int64_t us = delay_us_.load(); us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
  }
  rocksdb::IOStatus CheckWrite(const std::string& file, bool created_under_new_file_fault = false) {
    Delay();
    CountDown();
    writes_.fetch_add(1);
    if (created_under_new_file_fault) {
      std::lock_guard lock(mu_);
      if (new_file_error_.error != kNone) {
        failed_writes_.fetch_add(1);
        return MakeError(new_file_error_.error, "While appending to file:", file);
      }
    }
    return Check(0, "While appending to file:", file);
  }
  // Whether a file created now falls under FailNewFiles.
  bool UnderNewFileFault(const std::string& file) {
    std::lock_guard lock(mu_);
    return new_file_error_.error != kNone &&
           (new_file_error_.only.empty() || file.find(new_file_error_.only) != std::string::npos);
  }
  rocksdb::IOStatus CheckSync(const std::string& file) {
    Delay();
    CountDown();
    syncs_.fetch_add(1);
    return Check(1, "While fsync:", file);
  }
  rocksdb::IOStatus CheckCreate(const std::string& file) {
    return Check(2, "While open a file for appending:", file);
  }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& f, const rocksdb::FileOptions& options,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
                                        rocksdb::IODebugContext* dbg) override {
    if (auto s = Check(3, "While open a file for random read:", f); !s.ok()) return s;
    return target()->NewRandomAccessFile(f, options, r, dbg);
  }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(f); !s.ok()) return s;
    auto s = target()->NewWritableFile(f, options, r, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this, f, UnderNewFileFault(f));
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(f); !s.ok()) return s;
    auto s = target()->ReopenWritableFile(f, options, r, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this, f, UnderNewFileFault(f));
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(f); !s.ok()) return s;
    auto s = target()->ReuseWritableFile(f, old, options, r, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this, f, UnderNewFileFault(f));
    return s;
  }
  rocksdb::IOStatus CreateDir(const std::string& d, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(d); !s.ok()) return s;
    return target()->CreateDir(d, options, dbg);
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& d, const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(d); !s.ok()) return s;
    return target()->CreateDirIfMissing(d, options, dbg);
  }
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    if (auto st = CheckCreate(t); !st.ok()) return st;
    return target()->RenameFile(s, t, options, dbg);
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& options,
                             rocksdb::FileLock** l, rocksdb::IODebugContext* dbg) override {
    if (auto s = CheckCreate(f); !s.ok()) return s;
    return target()->LockFile(f, options, l, dbg);
  }

 private:
  struct Fault {
    Error error = kNone;
    std::string only;
  };

  class File final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile>&& target, FaultFs* fs, std::string name,
         bool doomed)
        : FSWritableFileOwnerWrapper(std::move(target)),
          fs_(fs),
          name_(std::move(name)),
          doomed_(doomed) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckWrite(name_, doomed_); !s.ok()) return s;
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckWrite(name_, doomed_); !s.ok()) return s;
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckWrite(name_, doomed_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, options, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckWrite(name_, doomed_); !s.ok()) return s;
      return target()->PositionedAppend(data, offset, options, info, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckSync(name_); !s.ok()) return s;
      return target()->Sync(options, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckSync(name_); !s.ok()) return s;
      return target()->Fsync(options, dbg);
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_->CheckSync(name_); !s.ok()) return s;
      return target()->RangeSync(offset, nbytes, options, dbg);
    }

   private:
    FaultFs* const fs_;
    const std::string name_;
    const bool doomed_;  // created under FailNewFiles
  };

  void Set(Fault& fault, Error error, const std::string& only) {
    std::lock_guard lock(mu_);
    fault.error = error;
    fault.only = only;
  }

  std::mutex mu_;
  Fault write_error_, sync_error_, create_error_, new_file_error_, read_error_;
  std::atomic<uint64_t> failed_writes_{0}, failed_syncs_{0}, failed_creates_{0}, failed_reads_{0};
  std::atomic<uint64_t> writes_{0}, syncs_{0};
  std::atomic<int64_t> countdown_{0};
  std::atomic<int64_t> delay_us_{0};
  Error countdown_error_ = kNone;  // guarded by mu_
};

}  // namespace idem_test

#endif  // IDEM_TESTS_FAULT_FS_H_
