#include "storage/rocksdb/fs/manifest_mark.h"

#include <fmt/format.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <map>
#include <optional>
#include <string_view>

#include "storage/rocksdb/fs/file_names.h"
#include "storage/rocksdb/fs/rocksdb_status.h"
#include "util/mutex.h"

namespace idem::storage {
namespace {

constexpr std::string_view kManifestPrefix = "MANIFEST-";

// The number of "MANIFEST-000016" (a base name), if it is one.
std::optional<uint64_t> ManifestNumber(std::string_view name) {
  return FileNumber(name, kManifestPrefix, "");
}

std::string ManifestName(uint64_t number) { return fmt::format("MANIFEST-{:06}", number); }

// Files whose deletion can lose data an older MANIFEST would need: tables, logs, blob files,
// MANIFESTs.
bool IsDataFile(std::string_view name) {
  auto ends_with = [name](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  return ends_with(".sst") || ends_with(".log") || ends_with(".blob") ||
         ManifestNumber(name).has_value();
}

// The MANIFEST number that db_path/CURRENT names ("MANIFEST-000016\n").
std::optional<uint64_t> ReadCurrent(rocksdb::FileSystem& fs, const std::string& db_path) {
  std::string current;
  if (!rocksdb::ReadFileToString(&fs, db_path + "/CURRENT", &current).ok()) return std::nullopt;
  if (!current.empty() && current.back() == '\n') current.pop_back();
  return ManifestNumber(current);
}

struct Mark {
  uint64_t manifest = 0;
  uint64_t committed_bytes = 0;
};

std::string FormatMark(const Mark& mark) {
  return fmt::format("{} {}\n", ManifestName(mark.manifest), mark.committed_bytes);
}

std::optional<Mark> ParseMark(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  text.remove_suffix(1);
  const auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto manifest = ManifestNumber(text.substr(0, space));
  const auto bytes = ParseNumber(text.substr(space + 1));
  if (!manifest || !bytes) return std::nullopt;
  return Mark{*manifest, *bytes};
}

class MarkingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  MarkingFileSystem(std::shared_ptr<rocksdb::FileSystem> base, std::string db_path)
      : FileSystemWrapper(std::move(base)), db_path_(std::move(db_path)) {}

  static const char* kClassName() { return "idem.ManifestMarkingFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& file, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->NewWritableFile(file, options, result, debug);
    if (status.ok()) {
      if (auto number = ManifestNumber(BaseName(file))) {
        *result = std::make_unique<ManifestFile>(std::move(*result), this, *number);
      }
    }
    return status;
  }

  // RocksDB installs a MANIFEST by renaming a temporary file onto CURRENT.
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override {
    rocksdb::IOStatus status = target()->RenameFile(from, to, options, debug);
    if (status.ok() && BaseName(to) == "CURRENT") {
      const auto installed = ReadCurrent(*target(), db_path_);
      util::MutexLock lock(mu_);
      installed_ = installed;
    }
    return status;
  }

  rocksdb::IOStatus DeleteFile(const std::string& file, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* debug) override {
    if (IsDataFile(BaseName(file))) {
      // Not deleted unless the mark vouches for the edit that made it obsolete.
      rocksdb::IOStatus marked = WriteMark(options, debug);
      if (!marked.ok()) return marked;
    }
    return target()->DeleteFile(file, options, debug);
  }

 private:
  // A MANIFEST being written: counts the bytes appended, and reports them as committed once
  // synced.
  class ManifestFile final : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    ManifestFile(std::unique_ptr<rocksdb::FSWritableFile>&& file, MarkingFileSystem* fs,
                 uint64_t number)
        : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs), number_(number) {}

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      return Appended(data.size(), target()->Append(data, options, debug));
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      return Appended(data.size(), target()->Append(data, options, info, debug));
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* debug) override {
      return Synced(target()->Sync(options, debug));
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* debug) override {
      return Synced(target()->Fsync(options, debug));
    }

   private:
    rocksdb::IOStatus Appended(std::size_t bytes, rocksdb::IOStatus status) {
      if (status.ok()) appended_ += bytes;
      return status;
    }
    rocksdb::IOStatus Synced(rocksdb::IOStatus status) {
      if (status.ok()) fs_->NoteSynced(number_, appended_);
      return status;
    }

    MarkingFileSystem* const fs_;
    const uint64_t number_;
    uint64_t appended_ = 0;  // RocksDB writes a MANIFEST from one thread at a time
  };

  void NoteSynced(uint64_t manifest, uint64_t bytes) {
    util::MutexLock lock(mu_);
    synced_[manifest] = bytes;
  }

  // Writes (fsynced, atomically by rename) the installed MANIFEST and its synced size, unless
  // the mark already says so.
  rocksdb::IOStatus WriteMark(const rocksdb::IOOptions& options, rocksdb::IODebugContext* debug) {
    util::MutexLock lock(mu_);
    if (!installed_) return rocksdb::IOStatus::OK();
    const auto synced = synced_.find(*installed_);
    // A MANIFEST this file system did not see written: keep the older mark, which stays true.
    if (synced == synced_.end()) return rocksdb::IOStatus::OK();
    const std::string text = FormatMark({*installed_, synced->second});
    if (text == written_) return rocksdb::IOStatus::OK();

    const std::string mark = db_path_ + "/" + kManifestMarkFile;
    const std::string temporary = mark + ".tmp";
    rocksdb::IOStatus status = rocksdb::WriteStringToFile(target(), text, temporary, true);
    if (status.ok()) status = target()->RenameFile(temporary, mark, options, debug);
    std::unique_ptr<rocksdb::FSDirectory> directory;
    if (status.ok()) status = target()->NewDirectory(db_path_, options, &directory, debug);
    if (status.ok()) status = directory->Fsync(options, debug);
    if (status.ok()) written_ = text;
    return status;
  }

  const std::string db_path_;
  util::Mutex mu_;
  std::optional<uint64_t> installed_ IDEM_GUARDED_BY(mu_);    // the MANIFEST number CURRENT names
  std::map<uint64_t, uint64_t> synced_ IDEM_GUARDED_BY(mu_);  // MANIFEST number -> bytes synced
  std::string written_ IDEM_GUARDED_BY(mu_);                  // the mark's text as last written
};

}  // namespace

std::shared_ptr<rocksdb::FileSystem> NewManifestMarkingFileSystem(
    std::shared_ptr<rocksdb::FileSystem> base, std::string db_path) {
  return std::make_shared<MarkingFileSystem>(std::move(base), std::move(db_path));
}

Status CheckManifestMark(rocksdb::FileSystem& fs, const std::string& db_path) {
  const std::string mark_path = db_path + "/" + kManifestMarkFile;
  std::string text;
  rocksdb::IOStatus read = rocksdb::ReadFileToString(&fs, mark_path, &text);
  if (read.IsNotFound() || read.IsPathNotFound()) return Status::OK();
  if (!read.ok()) return FromRocksDb(read, fmt::format("reading {}", mark_path));
  const std::optional<Mark> mark = ParseMark(text);
  if (!mark) {
    return Status::Corruption(
        fmt::format("the manifest mark {} is damaged; it should hold a line like "
                    "\"MANIFEST-000016 522\". Delete it to open the store unchecked",
                    mark_path));
  }
  // RocksDB itself reports a missing or unreadable CURRENT or MANIFEST.
  const std::optional<uint64_t> current = ReadCurrent(fs, db_path);
  if (!current) return Status::OK();
  const std::string manifest_path = db_path + "/" + ManifestName(*current);
  const std::string advice = fmt::format(
      "Opening it would silently drop records. Restore the whole store directory from a copy "
      "taken while it was closed; to open what is left anyway, accepting the loss, delete {}",
      mark_path);
  if (*current < mark->manifest) {
    return Status::Corruption(
        fmt::format("store files rolled back: CURRENT names {}, older than {}, which had been "
                    "committed ({}). {}",
                    manifest_path, ManifestName(mark->manifest), mark_path, advice));
  }
  if (*current > mark->manifest) return Status::OK();
  uint64_t size = 0;
  if (!fs.GetFileSize(manifest_path, rocksdb::IOOptions(), &size, nullptr).ok()) {
    return Status::OK();
  }
  if (size < mark->committed_bytes) {
    return Status::Corruption(
        fmt::format("{} is truncated: {} bytes, but {} bytes of it had been committed ({}). {}",
                    manifest_path, size, mark->committed_bytes, mark_path, advice));
  }
  return Status::OK();
}

}  // namespace idem::storage
