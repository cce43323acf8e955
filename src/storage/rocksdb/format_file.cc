#include "storage/rocksdb/format_file.h"

#include <fmt/format.h>
#include <rocksdb/file_system.h>

#include <string_view>

#include "storage/rocksdb/fs/file_names.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// A format file is a few bytes; anything longer is not one.
constexpr std::size_t kLongestFormatFile = 32;

std::string FormatFilePath(const std::string& db_path) { return db_path + "/" + kFormatFile; }

}  // namespace

Result<bool> CheckFormatFile(rocksdb::FileSystem& fs, const std::string& db_path,
                             uint32_t supported) {
  const std::string path = FormatFilePath(db_path);
  uint64_t size = 0;
  const rocksdb::IOStatus sized = fs.GetFileSize(path, rocksdb::IOOptions(), &size, nullptr);
  if (sized.IsNotFound() || sized.IsPathNotFound()) return false;
  if (!sized.ok()) return FromRocksDb(sized, fmt::format("reading {}", EscapeControls(path)));
  std::string text;
  if (size <= kLongestFormatFile) {
    const rocksdb::IOStatus read = rocksdb::ReadFileToString(&fs, path, &text);
    if (!read.ok()) return FromRocksDb(read, fmt::format("reading {}", EscapeControls(path)));
  }
  std::string_view digits = text;
  if (!digits.empty() && digits.back() == '\n') digits.remove_suffix(1);
  const std::optional<uint64_t> version =
      size <= kLongestFormatFile ? ParseNumber(digits) : std::nullopt;
  if (!version) {
    return Status::Corruption(fmt::format(
        "the format file {} is damaged: it should hold the store format version, like \"{}\". "
        "Delete it if the store was written by this release: the next read-write open writes "
        "it again from the version in the store's meta data",
        EscapeControls(path), supported));
  }
  if (*version > supported) {
    return Status::NewerVersion(
        fmt::format("store {} has format version {} ({}), written by a newer release of idem; "
                    "this one reads version {}: upgrade idem to open it (nothing is damaged, and "
                    "nothing was changed; see docs/operations.md, \"Upgrades and downgrades\")",
                    EscapeControls(db_path), *version, EscapeControls(path), supported));
  }
  if (*version < 1) {
    return Status::Corruption(
        fmt::format("store {} has format version {} ({}); this library reads "
                    "versions 1 to {}",
                    EscapeControls(db_path), *version, EscapeControls(path), supported));
  }
  return true;
}

Status WriteFormatFile(rocksdb::FileSystem& fs, const std::string& db_path, uint32_t version) {
  const std::string path = FormatFilePath(db_path);
  const std::string temporary = path + ".tmp";
  const std::string context = fmt::format("writing {}", EscapeControls(path));
  const rocksdb::IOOptions options;
  rocksdb::IOStatus status = rocksdb::WriteStringToFile(&fs, fmt::format("{}\n", version),
                                                        temporary, /*should_sync=*/true);
  if (status.ok()) status = fs.RenameFile(temporary, path, options, nullptr);
  std::unique_ptr<rocksdb::FSDirectory> directory;
  if (status.ok()) status = fs.NewDirectory(db_path, options, &directory, nullptr);
  if (status.ok()) status = directory->Fsync(options, nullptr);
  return FromRocksDb(status, context);
}

}  // namespace idem::storage
