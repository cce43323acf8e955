// Store::Open: a store directory's or PostgreSQL's core, shared by the process's handles
// (store_handle.h) of one store.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "core/directory_store_core.h"
#include "core/open_options.h"
#include "core/store_directory.h"
#include "core/store_handle.h"
#include "util/pg_uri.h"
#if IDEM_WITH_POSTGRESQL
#include "core/postgres_store_core.h"
#endif

namespace idem {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
// Store::Open, in the public namespace, wires the core's internals.
using core::CheckOptions;
using core::DifferencesFromTheFirstOpen;
using core::DirectoryId;
using core::DirectoryStoreCore;
using core::NewHandle;
using core::PrepareStoreDirectory;
using core::RegistryMutex;
using core::StoreDirectory;
#if IDEM_WITH_POSTGRESQL
using core::PostgresStoreCore;
#endif

class SystemClockImpl final : public Clock {
 public:
  std::chrono::system_clock::time_point Now() const override {
    return std::chrono::system_clock::now();
  }
};

std::map<DirectoryId, std::weak_ptr<DirectoryStoreCore>>& Registry() {
  static std::map<DirectoryId, std::weak_ptr<DirectoryStoreCore>> registry;
  return registry;
}

template <class Core, class Key>
Result<std::unique_ptr<Store>> ShareOrOpen(std::map<Key, std::weak_ptr<Core>>& registry,
                                           const Key& key, const Options& options,
                                           const std::string& shown,
                                           FunctionRef<Result<std::shared_ptr<Core>>()> open) {
  std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
  if (auto existing = registry[key].lock(); existing && !existing->forked()) {
    if (existing->read_only() && !options.read_only) {
      return Status::Busy(fmt::format(
          "store {} is open read-only in this process; close it before opening it for writing",
          shown));
    }
    if (auto differences = DifferencesFromTheFirstOpen(existing->options(), options);
        !differences.empty()) {
      const std::string message = fmt::format(
          "store {} is already open in this process: these options are the first "
          "Open's, not this one's: {}",
          shown, fmt::join(differences, "; "));
      DirectoryStoreCore::LogTo(options, {LogSeverity::kWarning, "options_ignored", message});
    }
    return NewHandle(std::move(existing), options);
  }
  IDEM_ASSIGN_OR_RETURN(std::shared_ptr<Core> core, open());
  registry[key] = core;
  return NewHandle(std::move(core), options);
}

// Store::Open of a postgresql:// URI: one PostgresStoreCore per (connection, table) in the process.
Result<std::unique_ptr<Store>> OpenPostgres(std::string_view uri, const Options& options) {
#if IDEM_WITH_POSTGRESQL
  IDEM_ASSIGN_OR_RETURN(const std::string key, PostgresStoreCore::Key(uri, options));
  std::lock_guard registry_lock(RegistryMutex());
  static auto& registry = *new std::map<std::string, std::weak_ptr<PostgresStoreCore>>();
  return ShareOrOpen<PostgresStoreCore>(registry, key, options, DisplayStoreName(uri),
                                        [&] { return PostgresStoreCore::Open(uri, options); });
#else
  static_cast<void>(options);
  return Status::InvalidArgument(
      fmt::format("store {} is kept in PostgreSQL, but this idem was built without PostgreSQL "
                  "(IDEM_WITH_POSTGRESQL=OFF)",
                  DisplayStoreName(uri)));
#endif
}

}  // namespace

std::shared_ptr<const Clock> SystemClock() {
  static const auto clock = std::make_shared<SystemClockImpl>();
  return clock;
}

Store::~Store() = default;

Status Attempt::SaveCheckpoint(std::string_view data) {
  return store->SaveCheckpoint(key, token, data);
}

namespace {

// An import interrupted part way leaves some of its records without the table values that go
// with them (their effects): a retry of such a key would replay an answer whose effects are not
// in the store. So nobody uses the store until the import is finished (Options).
Status RefuseUnfinishedImport(const fs::path& directory) {
  const fs::path mark = directory / kUnfinishedImportFile;
  struct stat info {};
  if (::lstat(mark.c_str(), &info) != 0) {
    if (errno == ENOENT) return Status::OK();
    return Status::IOError(
        fmt::format("cannot stat {}: {}", EscapeControls(mark.string()), std::strerror(errno)));
  }
  return Status::Busy(fmt::format(
      "store {} holds an unfinished import ({} is there): `idem import` is writing into it, or "
      "was stopped part way, and the store may hold some imported records without their table "
      "values. If no import runs, finish it with: idem import {} --finish",
      EscapeControls(directory.string()), EscapeControls(mark.string()),
      EscapeControls(directory.string())));
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(std::string_view path, const Options& options) {
  if (path.empty()) return Status::InvalidArgument("store path is empty");
  IDEM_RETURN_IF_ERROR(CheckOptions(options));
  Options effective = options;
  if (!effective.clock) effective.clock = SystemClock();
  if (util::IsPostgresUri(path)) return OpenPostgres(path, effective);

  std::error_code error;
  fs::path directory = fs::absolute(fs::path(path), error).lexically_normal();
  if (error) return Status::InvalidArgument(fmt::format("bad store path {}", EscapeControls(path)));
  // "/a/store/" names /a/store.
  if (!directory.has_filename() && directory.has_relative_path()) {
    directory = directory.parent_path();
  }

  std::lock_guard registry_lock(RegistryMutex());
  Result<StoreDirectory> prepared =
      PrepareStoreDirectory(directory, effective.create_if_missing && !effective.read_only);
  if (!prepared.ok()) return prepared.status();
  if (prepared->has_database && !effective.open_unfinished_import) {
    IDEM_RETURN_IF_ERROR(RefuseUnfinishedImport(directory));
  }
  const DirectoryId id{prepared->device, prepared->inode};
  return ShareOrOpen<DirectoryStoreCore>(
      Registry(), id, effective, EscapeControls(directory.string()),
      [&]() -> Result<std::shared_ptr<DirectoryStoreCore>> {
        auto core = std::make_shared<DirectoryStoreCore>(directory, id, effective);
        if (Status started = core->Start(); !started.ok()) {
          // Messages from below quote paths (RocksDB's among them) as
          // they are.
          return Status(started.code(), EscapeControls(started.message()));
        }
        return core;
      });
}

}  // namespace idem
