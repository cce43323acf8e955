#include "storage/rocksdb/fs/log_zero_fill.h"

#include <rocksdb/file_system.h>

#include <algorithm>
#include <string>

#include "storage/rocksdb/fs/file_names.h"

namespace idem::storage {
namespace {

// Read-only zeros to write from: a static array in zero-initialized memory, which the kernel
// maps to its one zero page until something writes to it (nothing does), so it costs no memory.
const char kZeros[kZeroFillChunk] = {};

class ZeroFilledLog final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  explicit ZeroFilledLog(std::unique_ptr<rocksdb::FSWritableFile>&& file)
      : FSWritableFileOwnerWrapper(std::move(file)) {}

  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus filled = FillAhead(data.size(), options, debug);
    if (!filled.ok()) return filled;
    return Written(target()->PositionedAppend(data, end_, options, debug), data.size());
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus filled = FillAhead(data.size(), options, debug);
    if (!filled.ok()) return filled;
    return Written(target()->PositionedAppend(data, end_, options, info, debug), data.size());
  }
  // RocksDB writes a log only by appending (positioned writes are for direct I/O).
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice&, uint64_t, const rocksdb::IOOptions&,
                                     rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("positioned writes to a zero-filled log");
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice&, uint64_t, const rocksdb::IOOptions&,
                                     const rocksdb::DataVerificationInfo&,
                                     rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("positioned writes to a zero-filled log");
  }

  rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus truncated = target()->Truncate(size, options, debug);
    if (truncated.ok()) end_ = filled_end_ = size;
    return truncated;
  }

  rocksdb::IOStatus Close(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* debug) override {
    // The zeros past the records go: a log closed cleanly is as RocksDB would have left it.
    // The truncation is not synced: a power cut may bring the zeros back, which read as the end.
    rocksdb::IOStatus trimmed = rocksdb::IOStatus::OK();
    if (filled_end_ > end_ || fill_failed_) trimmed = target()->Truncate(end_, options, debug);
    rocksdb::IOStatus closed = target()->Close(options, debug);
    return trimmed.ok() ? closed : trimmed;
  }

  uint64_t GetFileSize(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return end_;
  }

  // Zeros pay off only for a log that is synced: until its first sync (a log written only with
  // kBuffered never has one) it is appended to, and the zeros would only double its writes.
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                         rocksdb::IODebugContext* debug) override {
    return Synced(target()->Sync(options, debug));
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                          rocksdb::IODebugContext* debug) override {
    return Synced(target()->Fsync(options, debug));
  }

  // RocksDB's preallocation (fallocate, keeping the size) is what the zeros replace.
  void SetPreallocationBlockSize(size_t) override {}
  void PrepareWrite(size_t, size_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {}
  rocksdb::IOStatus Allocate(uint64_t, uint64_t, const rocksdb::IOOptions&,
                             rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }

 private:
  // Makes sure zeros lie under the next `bytes` bytes of records, writing the chunks they reach.
  rocksdb::IOStatus FillAhead(uint64_t bytes, const rocksdb::IOOptions& options,
                              rocksdb::IODebugContext* debug) {
    const uint64_t needed = end_ + bytes;
    if (!synced_ || needed <= filled_end_ || fill_failed_) return rocksdb::IOStatus::OK();
    const uint64_t fill_to = (needed + kZeroFillChunk - 1) / kZeroFillChunk * kZeroFillChunk;
    while (filled_end_ < fill_to) {
      const uint64_t length = std::min<uint64_t>(fill_to - filled_end_, kZeroFillChunk);
      rocksdb::IOStatus written = target()->PositionedAppend(
          rocksdb::Slice(kZeros, static_cast<size_t>(length)), filled_end_, options, debug);
      if (!written.ok()) {
        // No room for the zeros (a full disk, a quota) or another failure: append the records
        // themselves, as RocksDB would, from now on. The zeros only make syncs cheaper; their
        // failure must not fail a write that fits, and a record's own write or sync reports
        // whatever it meets.
        fill_failed_ = true;
        return rocksdb::IOStatus::OK();
      }
      filled_end_ += length;
    }
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus Synced(rocksdb::IOStatus status) {
    if (status.ok()) synced_ = true;
    return status;
  }

  rocksdb::IOStatus Written(rocksdb::IOStatus status, uint64_t bytes) {
    if (status.ok()) {
      end_ += bytes;
      filled_end_ = std::max(filled_end_, end_);
    }
    return status;
  }

  uint64_t end_ = 0;          // where the records end: the next append's offset
  uint64_t filled_end_ = 0;   // where the file's bytes end (zeros from end_ on)
  bool synced_ = false;       // synced once: from then on records go into zeros
  bool fill_failed_ = false;  // zeros could not be written: the file may hold some past filled_end_
};

class ZeroFilledLogs final : public rocksdb::FileSystemWrapper {
 public:
  explicit ZeroFilledLogs(std::shared_ptr<rocksdb::FileSystem> base)
      : FileSystemWrapper(std::move(base)) {}

  static const char* kClassName() { return "idem.ZeroFilledLogs"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* file,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus opened = target()->NewWritableFile(name, options, file, debug);
    if (opened.ok() && FileNumber(BaseName(name), "", ".log").has_value() &&
        !(*file)->use_direct_io()) {
      *file = std::make_unique<ZeroFilledLog>(std::move(*file));
    }
    return opened;
  }
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewZeroFilledLogs(std::shared_ptr<rocksdb::FileSystem> base) {
  return std::make_shared<ZeroFilledLogs>(std::move(base));
}

}  // namespace idem::storage
