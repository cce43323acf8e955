#include "storage/rocksdb/fs/rocksdb_status.h"

#include <fmt/format.h>

namespace idem::storage {

Status FromRocksDb(const rocksdb::Status& status, const std::string& context) {
  if (status.ok()) return Status::OK();
  std::string message = fmt::format("{}: {}", context, status.ToString());
  if (status.IsNotFound()) return Status::NotFound(std::move(message));
  if (status.IsCorruption()) return Status::Corruption(std::move(message));
  if (status.IsInvalidArgument() || status.IsNotSupported()) {
    return Status::InvalidArgument(std::move(message));
  }
  if (status.IsBusy() || status.IsTryAgain()) return Status::Busy(std::move(message));
  if (status.IsTimedOut()) return Status::TimedOut(std::move(message));
  if (status.IsShutdownInProgress() || status.IsAborted()) {
    return Status::Unavailable(std::move(message));
  }
  return Status::IOError(std::move(message));
}

Status FromRocksDbOpen(const rocksdb::Status& status, const std::string& path) {
  // RocksDB reports a LOCK held by another process as an IOError from fcntl ("lock hold by
  // current process" for this process, "Resource temporarily unavailable" for another).
  const std::string text = status.ToString();
  if (status.IsIOError() && text.find("lock") != std::string::npos) {
    return Status::Busy(fmt::format("store {} is in use by another process: {}", path, text));
  }
  return FromRocksDb(status, fmt::format("opening store {}", path));
}

}  // namespace idem::storage
