// A store's database directory as files: what one holds (Inspect: nothing, idem's database, or
// something else, named), a staged one put in place (Install), and what a failed open left
// deleted. Opening the database is in rocksdb_storage_open.cc.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>

#include "storage/rocksdb/fs/file_names.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "storage/rocksdb/layout.h"
#include "storage/rocksdb/rocksdb_storage.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

// What a database directory holds, as far as Inspect needs to know.
struct DatabaseListing {
  bool empty = true;
  bool has_current = false;
  std::string newest_options;  // the OPTIONS file RocksDB wrote last; empty: none
};

Result<DatabaseListing> ListDatabase(const std::string& path) {
  DatabaseListing listing;
  uint64_t newest = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it(path, error), end; !error && it != end;
       it.increment(error)) {
    listing.empty = false;
    const std::string name = it->path().filename().string();
    if (name == "CURRENT") listing.has_current = true;
    // RocksDB numbers its OPTIONS files in the order it writes them.
    const std::optional<uint64_t> number = FileNumber(name, "OPTIONS-", "");
    if (number && (listing.newest_options.empty() || *number > newest)) {
      newest = *number;
      listing.newest_options = name;
    }
  }
  if (error) {
    return Status::IOError(
        fmt::format("cannot list {}: {}", EscapeControls(path), error.message()));
  }
  return listing;
}

// The column families an OPTIONS file names: its sections such as `[CFOptions "by_expiry"]`.
std::vector<std::string> ColumnFamiliesIn(std::istream& options) {
  constexpr std::string_view kSection = "[CFOptions \"";
  std::vector<std::string> families;
  for (std::string line; std::getline(options, line);) {
    if (line.size() > kSection.size() + 2 && line.compare(0, kSection.size(), kSection) == 0 &&
        line.compare(line.size() - 2, 2, "\"]") == 0) {
      families.push_back(line.substr(kSection.size(), line.size() - kSection.size() - 2));
    }
  }
  return families;
}

// A database is idem's when it has the column families by_expiry and meta.
RocksDbStorage::Contents ContentsWithFamilies(const std::vector<std::string>& families) {
  using Kind = RocksDbStorage::Contents::Kind;
  const auto has = [&](std::string_view family) {
    return std::find(families.begin(), families.end(), family) != families.end();
  };
  if (has(kByExpiryFamily) && has(kMetaFamily)) return {Kind::kIdem, ""};
  return {Kind::kOther,
          fmt::format("a RocksDB database whose column families ({}) are not idem's ({}, {}, {})",
                      EscapeControls(fmt::to_string(fmt::join(families, ", "))),
                      rocksdb::kDefaultColumnFamilyName, kByExpiryFamily, kMetaFamily)};
}

}  // namespace

void RocksDbStorage::DeleteLeftoversOfAFailedOpen(const std::string& path) {
  std::string current;
  {
    std::ifstream file(path + "/CURRENT");
    std::getline(file, current);
  }
  // Without a CURRENT naming a MANIFEST that is there, no MANIFEST is known to be unused.
  std::error_code error;
  const bool manifest_known =
      current.starts_with("MANIFEST-") && std::filesystem::exists(path + "/" + current, error);
  for (std::filesystem::directory_iterator it(path, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (it->path().extension() == ".dbtmp" ||
        (manifest_known && name.starts_with("MANIFEST-") && name != current)) {
      std::filesystem::remove(it->path(), ignored);
    }
  }
}

Status RocksDbStorage::Install(const RocksDbConfig& config, const std::string& staging,
                               const std::string& destination) {
  const std::shared_ptr<rocksdb::FileSystem> file_system =
      config.env ? config.env->GetFileSystem() : rocksdb::FileSystem::Default();
  const std::string parent = std::filesystem::path(destination).parent_path().string();
  IDEM_RETURN_IF_ERROR(FromRocksDb(
      file_system->RenameFile(staging, destination, rocksdb::IOOptions(), nullptr),
      fmt::format("installing {} as {}", EscapeControls(staging), EscapeControls(destination))));
  std::unique_ptr<rocksdb::FSDirectory> directory;
  rocksdb::IOStatus synced =
      file_system->NewDirectory(parent, rocksdb::IOOptions(), &directory, nullptr);
  if (synced.ok()) synced = directory->Fsync(rocksdb::IOOptions(), nullptr);
  return FromRocksDb(synced, fmt::format("syncing {}", EscapeControls(parent)));
}

Result<RocksDbStorage::Contents> RocksDbStorage::Inspect(const std::string& path) {
  using Kind = Contents::Kind;
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return Contents{Kind::kNothing, ""};
    return Status::IOError(
        fmt::format("cannot read {}: {}", EscapeControls(path), std::strerror(errno)));
  }
  if (S_ISLNK(info.st_mode)) return Contents{Kind::kOther, "a symbolic link"};
  if (!S_ISDIR(info.st_mode)) return Contents{Kind::kOther, "a file, not a directory"};
  // A live owner may write a newer OPTIONS file and delete the one just listed before it is
  // read: then list again.
  for (int attempt = 0; attempt < 8; ++attempt) {
    IDEM_ASSIGN_OR_RETURN(const DatabaseListing listing, ListDatabase(path));
    if (listing.empty) return Contents{Kind::kNothing, ""};
    if (!listing.has_current) {
      return Contents{Kind::kOther, "files, but no RocksDB database (no CURRENT)"};
    }
    if (listing.newest_options.empty()) {
      return Contents{Kind::kOther,
                      "a RocksDB database without an OPTIONS file, which tells whose it is"};
    }
    const std::string options_path = path + "/" + listing.newest_options;
    std::ifstream options(options_path);
    if (!options) {
      if (::access(options_path.c_str(), F_OK) != 0 && errno == ENOENT) continue;
      return Status::IOError(fmt::format("cannot read {}", EscapeControls(options_path)));
    }
    return ContentsWithFamilies(ColumnFamiliesIn(options));
  }
  return Status::IOError(fmt::format("the OPTIONS files of {} kept changing while they were read",
                                     EscapeControls(path)));
}

}  // namespace idem::storage
