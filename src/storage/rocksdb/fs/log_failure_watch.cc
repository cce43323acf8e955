#include "storage/rocksdb/fs/log_failure_watch.h"

#include <rocksdb/file_system.h>

#include <string>

#include "storage/rocksdb/fs/file_names.h"

namespace idem::storage {
namespace {

class LogFailureWatch final : public rocksdb::FileSystemWrapper {
 public:
  LogFailureWatch(std::shared_ptr<rocksdb::FileSystem> base, std::shared_ptr<DiskErrorFlags> flags)
      : FileSystemWrapper(std::move(base)), flags_(std::move(flags)) {}

  static const char* kClassName() { return "idem.LogFailureWatch"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->NewWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* file,
                                       rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->ReopenWritableFile(name, options, file, debug), file);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* file,
                                      rocksdb::IODebugContext* debug) override {
    return Watch(name, target()->ReuseWritableFile(name, old_name, options, file, debug), file);
  }

 private:
  // A log file: every call that makes RocksDB's writer remember an error is checked.
  class LogFile final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    LogFile(std::unique_ptr<rocksdb::FSWritableFile>&& file, DiskErrorFlags* flags, uint64_t number)
        : FSWritableFileOwnerWrapper(std::move(file)), flags_(flags), number_(number) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      return Checked(target()->Append(data, options, debug));
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      return Checked(target()->Append(data, options, info, debug));
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* debug) override {
      return Checked(target()->PositionedAppend(data, offset, options, debug));
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* debug) override {
      return Checked(target()->PositionedAppend(data, offset, options, info, debug));
    }
    rocksdb::IOStatus Flush(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Checked(target()->Flush(options, debug));
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      return Checked(target()->Sync(options, debug));
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Checked(target()->Fsync(options, debug));
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& options,
                                rocksdb::IODebugContext* debug) override {
      return Checked(target()->RangeSync(offset, nbytes, options, debug));
    }

   private:
    rocksdb::IOStatus Checked(rocksdb::IOStatus status) {
      if (!status.ok()) flags_->failed_log.store(number_, std::memory_order_release);
      return status;
    }

    DiskErrorFlags* const flags_;  // outlives the file: the file system holds it
    const uint64_t number_;
  };

  rocksdb::IOStatus Watch(const std::string& name, rocksdb::IOStatus status,
                          std::unique_ptr<rocksdb::FSWritableFile>* file) {
    if (status.ok()) {
      if (const auto number = FileNumber(BaseName(name), "", ".log")) {
        *file = std::make_unique<LogFile>(std::move(*file), flags_.get(), *number);
      }
    }
    return status;
  }

  const std::shared_ptr<DiskErrorFlags> flags_;
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewLogFailureWatch(std::shared_ptr<rocksdb::FileSystem> base,
                                                        std::shared_ptr<DiskErrorFlags> flags) {
  return std::make_shared<LogFailureWatch>(std::move(base), std::move(flags));
}

}  // namespace idem::storage
