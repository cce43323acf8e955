#include "import_store.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"
#include "util/sync_directory.h"

namespace idem::cli {
namespace {

namespace fs = std::filesystem;

// Records (or table values) copied per Import call, one sync each, and the bytes that end a
// batch sooner.
constexpr std::size_t kBatchRecords = 1000;
constexpr std::size_t kBatchBytes = 16 << 20;

Status SyncDirectory(const fs::path& directory) {
  const int error = util::SyncDirectory(directory);
  if (error == 0) return Status::OK();
  return Status::IOError(
      fmt::format("cannot sync {}: {}", DisplayEscape(directory.string()), std::strerror(error)));
}

Result<std::unique_ptr<Store>> OpenStaging(const std::string& staging, Options options) {
  options.create_if_missing = true;
  options.read_only = false;
  options.sharing = Sharing::kExclusive;
  options.open_unfinished_import = false;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Store>> opened = Store::Open(staging, options);
  if (!opened.ok() && opened.status().code() == Status::Code::kBusy) {
    return Status::Busy(fmt::format("{} is held by another import ({})", DisplayEscape(staging),
                                    opened.status().message()));
  }
  return opened;
}

// Where RemoveStaging moves a staging store before removing it, so that a kill part way through
// the removal never leaves a half-removed store under the staging name (which the next import
// could not open, and so would not remove).
std::string TrashOf(const std::string& staging) { return staging + ".removing"; }

Status RemoveTree(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);  // never follows a symbolic link
  if (error) {
    return Status::IOError(
        fmt::format("cannot remove {}: {}", DisplayEscape(path), error.message()));
  }
  return Status::OK();
}

}  // namespace

std::string StoreDirectoryPath(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return trimmed;
}

bool IsNewStoreDirectory(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return errno == ENOENT;
  if (!S_ISDIR(info.st_mode)) return false;
  // An empty mount point cannot be renamed over: the import goes into it as into a store.
  struct stat parent {};
  const fs::path above = fs::absolute(fs::path(path)).parent_path();
  if (::stat(above.c_str(), &parent) != 0 || parent.st_dev != info.st_dev) return false;
  std::error_code error;
  return fs::is_empty(path, error) && !error;
}

Result<std::unique_ptr<Store>> OpenEmptyStaging(const std::string& staging, Options options) {
  // What a kill left of a removal: only RemoveStaging makes this name.
  IDEM_RETURN_IF_ERROR(RemoveTree(TrashOf(staging)));
  struct stat info {};
  if (::lstat(staging.c_str(), &info) == 0) {
    // Left by a killed import: opened first, so that what is removed is an idem store no other
    // import holds (a directory of someone else's files is refused, and left as it is).
    IDEM_RETURN_IF_ERROR(OpenStaging(staging, options).status());
    IDEM_RETURN_IF_ERROR(RemoveStaging(staging));
  }
  return OpenStaging(staging, options);
}

Status RemoveStaging(const std::string& staging) {
  const std::string trash = TrashOf(staging);
  IDEM_RETURN_IF_ERROR(RemoveTree(trash));
  if (::rename(staging.c_str(), trash.c_str()) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::IOError(
        fmt::format("cannot remove {}: {}", DisplayEscape(staging), std::strerror(errno)));
  }
  return RemoveTree(trash);
}

Status InstallNewStore(const std::string& aside, const std::string& path) {
  struct stat info {};
  const bool missing = ::lstat(path.c_str(), &info) != 0 && errno == ENOENT;
  // Into a missing PATH: never over anything made meanwhile. Over the empty directory PATH was:
  // rename replaces only an empty directory, so a store made there meanwhile stays.
  int renamed = missing
                    ? ::renameat2(AT_FDCWD, aside.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE)
                    : ::rename(aside.c_str(), path.c_str());
  if (renamed != 0 && missing && errno == EINVAL) {
    // A file system without RENAME_NOREPLACE: a plain rename still never replaces a store.
    renamed = ::rename(aside.c_str(), path.c_str());
  }
  if (renamed != 0) {
    const int error = errno;
    return Status::IOError(fmt::format("cannot rename {} to {}: {}{}", DisplayEscape(aside),
                                       DisplayEscape(path), std::strerror(error),
                                       error == EEXIST || error == ENOTEMPTY
                                           ? " (something was made there during the import)"
                                           : ""));
  }
  const fs::path parent = fs::absolute(fs::path(path)).parent_path();
  return SyncDirectory(parent);
}

Status RemoveUnfinishedMark(const std::string& directory) {
  const fs::path mark = fs::path(directory) / kUnfinishedImportFile;
  if (::unlink(mark.c_str()) != 0 && errno != ENOENT) {
    return Status::IOError(
        fmt::format("cannot remove {}: {}", DisplayEscape(mark.string()), std::strerror(errno)));
  }
  return SyncDirectory(directory);
}

Result<std::string> StagingPath(const std::string& path) {
  if (!util::IsPostgresUri(path)) return (fs::path(path) / kStagingDirectory).string();
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/idem-import-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::IOError(fmt::format("cannot make a temporary directory {}: {}",
                                       DisplayEscape(pattern), std::strerror(errno)));
  }
  return pattern + "/" + kStagingDirectory;
}

void RemoveStagingAndTemporary(const std::string& path, const std::string& staging) {
  static_cast<void>(RemoveStaging(staging));
  if (util::IsPostgresUri(path)) ::rmdir(fs::path(staging).parent_path().c_str());
}

namespace {

// CopyStaged's copy, calling `copied` with the counts after each batch.
Status CopyInBatches(Store& staging, Store& target, CopyCounts& counts,
                     const std::function<void(const CopyCounts&)>& copied) {
  std::vector<Record> records;
  std::size_t bytes = 0;
  const auto write_records = [&]() -> Status {
    IDEM_ASSIGN_OR_RETURN(std::vector<ImportOutcome> outcomes, target.Import(records));
    for (const ImportOutcome outcome : outcomes) {
      counts.imported += outcome == ImportOutcome::kImported ? 1 : 0;
      counts.present += outcome == ImportOutcome::kPresent ? 1 : 0;
      counts.expired += outcome == ImportOutcome::kExpired ? 1 : 0;
    }
    records.clear();
    bytes = 0;
    copied(counts);
    return Status::OK();
  };
  Status written;
  IDEM_RETURN_IF_ERROR(staging.Scan({}, [&](const Record& record) {
    bytes += record.key.size() + record.result.size() + record.checkpoint.size();
    records.push_back(record);
    if (records.size() >= kBatchRecords || bytes >= kBatchBytes) written = write_records();
    return written.ok();
  }));
  IDEM_RETURN_IF_ERROR(written);
  if (!records.empty()) IDEM_RETURN_IF_ERROR(write_records());

  IDEM_ASSIGN_OR_RETURN(const std::vector<std::string> tables, staging.ListTables());
  for (const std::string& table : tables) {
    std::vector<std::pair<std::string, TableValue>> values;
    const auto write_values = [&]() -> Status {
      IDEM_ASSIGN_OR_RETURN(std::vector<ImportOutcome> outcomes,
                            target.ImportValues(table, values));
      for (const ImportOutcome outcome : outcomes) {
        counts.values_imported += outcome == ImportOutcome::kImported ? 1 : 0;
        counts.values_present += outcome == ImportOutcome::kPresent ? 1 : 0;
      }
      values.clear();
      bytes = 0;
      copied(counts);
      return Status::OK();
    };
    IDEM_RETURN_IF_ERROR(
        staging.ScanTable(table, {}, [&](std::string_view key, const TableValue& value) {
          bytes += key.size() + value.value->size();
          values.emplace_back(std::string(key), value);
          if (values.size() >= kBatchRecords || bytes >= kBatchBytes) written = write_values();
          return written.ok();
        }));
    IDEM_RETURN_IF_ERROR(written);
    if (!values.empty()) IDEM_RETURN_IF_ERROR(write_values());
  }
  return Status::OK();
}

}  // namespace

Status CopyStaged(Store& staging, Store& target, CopyCounts& counts, ProgressLine& progress,
                  uint64_t staged) {
  progress.Erase();  // the copy's first line comes at once
  const auto copied = [&](const CopyCounts& so_far) {
    if (!progress.Due()) return;
    const uint64_t done = so_far.imported + so_far.present + so_far.expired +
                          so_far.values_imported + so_far.values_present;
    progress.Show(staged == 0 ? fmt::format("idem import: copied {} records and values into the "
                                            "store ...",
                                            done)
                              : fmt::format("idem import: copied {} of {} records and values "
                                            "into the store ({}%) ...",
                                            done, staged, std::min(done, staged) * 100 / staged));
  };
  const Status status = CopyInBatches(staging, target, counts, copied);
  progress.Erase();
  return status;
}

}  // namespace idem::cli
