// Store::Open and the local store: validation, the engine's decisions applied through the
// storage layer, counters, the background purge, and the per-process registry that keeps one
// RocksDB instance per store directory.

#include "idem/store.h"

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "engine/state_machine.h"
#include "sharing/process.h"
#include "storage/record_codec.h"
#include "storage/rocksdb_storage.h"

namespace idem {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

class SystemClockImpl final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::system_clock::now(); }
};

// Where a store directory keeps its RocksDB files. Later the lock file and socket of the
// sharing layer sit beside it.
constexpr char kDatabaseDir[] = "db";

struct AtomicCounters {
  std::atomic<uint64_t> claims{0}, replays{0}, in_progress{0}, takeovers{0}, failed{0},
      mismatches{0}, lease_lost{0}, purged{0};

  void Count(const Claim& claim) {
    switch (claim.outcome) {
      case Outcome::kAcquired:
        claims.fetch_add(1, std::memory_order_relaxed);
        if (claim.took_over) takeovers.fetch_add(1, std::memory_order_relaxed);
        break;
      case Outcome::kReplay:
        replays.fetch_add(1, std::memory_order_relaxed);
        break;
      case Outcome::kInProgress:
        in_progress.fetch_add(1, std::memory_order_relaxed);
        break;
      case Outcome::kFailed:
        failed.fetch_add(1, std::memory_order_relaxed);
        break;
      case Outcome::kMismatch:
        mismatches.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }

  Counters Snapshot() const {
    Counters c;
    c.claims = claims.load();
    c.replays = replays.load();
    c.in_progress = in_progress.load();
    c.takeovers = takeovers.load();
    c.failed = failed.load();
    c.mismatches = mismatches.load();
    c.lease_lost = lease_lost.load();
    c.purged = purged.load();
    return c;
  }
};

// Identity of a store directory, whatever the spelling of its path.
struct DirectoryId {
  dev_t device;
  ino_t inode;
  auto operator<=>(const DirectoryId&) const = default;
};

// Process-wide registry of open stores. The mutex is held across a whole open and a whole
// close, so a directory is never opened by RocksDB while the previous instance is still
// closing. Recursive because a failed open may destroy a half-built core under it.
std::recursive_mutex& RegistryMutex() {
  static std::recursive_mutex mu;
  return mu;
}

// One per open store directory in this process, shared by every handle on it.
class StoreCore {
 public:
  StoreCore(std::unique_ptr<storage::Storage> storage, std::shared_ptr<const Clock> clock,
            bool read_only, milliseconds auto_purge_interval)
      : storage_(std::move(storage)), clock_(std::move(clock)), read_only_(read_only) {
    if (!read_only_ && auto_purge_interval > milliseconds(0)) {
      purge_thread_ = std::thread([this, auto_purge_interval] { PurgeLoop(auto_purge_interval); });
    }
  }

  ~StoreCore() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    stop_.notify_all();
    if (purge_thread_.joinable()) purge_thread_.join();
    std::lock_guard registry_lock(RegistryMutex());
    storage_.reset();
  }

  storage::Storage& storage() { return *storage_; }
  bool read_only() const { return read_only_; }
  AtomicCounters& counters() { return counters_; }

  // Now, at the precision records store, so that what a call returns equals what it stored.
  TimePoint Now() const { return storage::TruncateToMicros(clock_->Now()); }

  Result<uint64_t> Purge(const PurgeOptions& options) {
    IDEM_ASSIGN_OR_RETURN(uint64_t count, storage_->Purge(Now(), options));
    if (!options.dry_run) counters_.purged.fetch_add(count, std::memory_order_relaxed);
    return count;
  }

 private:
  void PurgeLoop(milliseconds interval) {
    std::unique_lock lock(mu_);
    while (!stop_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      // A failed background purge is retried at the next interval; a caller's own Purge
      // reports the error.
      static_cast<void>(Purge(PurgeOptions{}));
      lock.lock();
    }
  }

  // Constant after construction.
  std::unique_ptr<storage::Storage> storage_;
  const std::shared_ptr<const Clock> clock_;
  const bool read_only_;
  std::thread purge_thread_;

  AtomicCounters counters_;

  std::mutex mu_;
  std::condition_variable stop_;
  bool stopping_ = false;  // guarded by mu_
};

std::map<DirectoryId, std::weak_ptr<StoreCore>>& Registry() {
  static std::map<DirectoryId, std::weak_ptr<StoreCore>> registry;
  return registry;
}

Status CheckSize(std::string_view what, std::size_t size, std::size_t limit) {
  if (size <= limit) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " is " + std::to_string(size) +
                                 " bytes; the limit is " + std::to_string(limit));
}

Status CheckKey(std::string_view key, const Options& options) {
  if (key.empty()) return Status::InvalidArgument("key is empty");
  return CheckSize("key", key.size(), options.max_key_size);
}

Status CheckDuration(std::string_view what, milliseconds duration) {
  if (duration >= milliseconds(0)) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " is " + std::to_string(duration.count()) +
                                 " ms; it must not be negative");
}

class LocalStore final : public Store {
 public:
  LocalStore(std::shared_ptr<StoreCore> core, const Options& options)
      : core_(std::move(core)), options_(options) {}

  Result<Claim> Begin(std::string_view key, const BeginOptions& options) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckKey(key, options_));
    IDEM_RETURN_IF_ERROR(CheckSize("type", options.type.size(), options_.max_label_size));
    IDEM_RETURN_IF_ERROR(
        CheckSize("fingerprint", options.fingerprint.size(), options_.max_label_size));
    IDEM_RETURN_IF_ERROR(CheckDuration("lease", options.lease));
    IDEM_RETURN_IF_ERROR(CheckDuration("retention", options.retention));
    const engine::BeginRequest request{
        .key = key,
        .type = options.type,
        .fingerprint = options.fingerprint,
        .lease = options.lease.count() > 0 ? options.lease : options_.default_lease,
        .retention = options.retention.count() > 0 ? options.retention : options_.default_retention,
        .holder = sharing::ThisProcessHolder(),
    };
    IDEM_ASSIGN_OR_RETURN(uint64_t fresh_token, core_->storage().NextToken());
    const TimePoint now = core_->Now();
    engine::BeginDecision decision;
    IDEM_RETURN_IF_ERROR(core_->storage().Update(
        key,
        [&](const std::optional<Record>& stored) -> std::optional<Record> {
          const bool holder_is_dead =
              options_.take_over_dead_holders && stored && stored->state == State::kPending &&
              stored->lease_deadline > now && sharing::HolderIsDead(stored->holder);
          decision = engine::DecideBegin(stored, request, now, fresh_token, holder_is_dead);
          if (!decision.write) return std::nullopt;
          return decision.claim.record;
        },
        options_.durability));
    core_->counters().Count(decision.claim);
    return std::move(decision.claim);
  }

  Status Complete(std::string_view key, uint64_t token, std::string_view result) override {
    IDEM_RETURN_IF_ERROR(CheckSize("result", result.size(), options_.max_result_size));
    return Transition(
        key, {.kind = engine::TransitionKind::kComplete, .token = token, .payload = result});
  }

  Status Fail(std::string_view key, uint64_t token, std::string_view error, Failure kind) override {
    IDEM_RETURN_IF_ERROR(CheckSize("error", error.size(), options_.max_result_size));
    return Transition(
        key,
        {.kind = engine::TransitionKind::kFail, .token = token, .payload = error, .failure = kind});
  }

  Status Extend(std::string_view key, uint64_t token, milliseconds lease) override {
    IDEM_RETURN_IF_ERROR(CheckDuration("lease", lease));
    return Transition(key, {.kind = engine::TransitionKind::kExtend,
                            .token = token,
                            .lease = lease.count() > 0 ? lease : options_.default_lease});
  }

  Status SaveCheckpoint(std::string_view key, uint64_t token, std::string_view data) override {
    IDEM_RETURN_IF_ERROR(CheckSize("checkpoint", data.size(), options_.max_result_size));
    return Transition(
        key, {.kind = engine::TransitionKind::kSaveCheckpoint, .token = token, .payload = data});
  }

  Result<std::optional<Record>> Get(std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckKey(key, options_));
    IDEM_ASSIGN_OR_RETURN(std::optional<Record> stored, core_->storage().Read(key));
    return engine::Visible(std::move(stored), core_->Now());
  }

  Status Forget(std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckKey(key, options_));
    // A record that cannot be decoded can still be forgotten: that is how an operator clears it.
    Result<std::optional<Record>> current = Get(key);
    if (current.ok() && !current->has_value()) {
      return Status::NotFound("no record for key " + storage::EscapeKey(key));
    }
    if (!current.ok() && current.status().code() != Status::Code::kCorruption) {
      return current.status();
    }
    IDEM_ASSIGN_OR_RETURN(bool removed, core_->storage().Remove(key, options_.durability));
    if (!removed) return Status::NotFound("no record for key " + storage::EscapeKey(key));
    return Status::OK();
  }

  Status Scan(const ScanOptions& options, FunctionRef<bool(const Record&)> visit) override {
    const TimePoint now = core_->Now();
    return core_->storage().Scan(options, [&](Record&& stored) {
      std::optional<Record> visible = engine::Visible(std::move(stored), now);
      return !visible || visit(*visible);
    });
  }

  Result<uint64_t> Purge(const PurgeOptions& options) override {
    if (!options.dry_run) IDEM_RETURN_IF_ERROR(CheckWritable());
    return core_->Purge(options);
  }

  Counters GetCounters() const override { return core_->counters().Snapshot(); }

  const Options& options() const override { return options_; }

 private:
  Status CheckWritable() const {
    if (options_.read_only || core_->read_only()) {
      return Status::InvalidArgument("the store was opened read-only");
    }
    return Status::OK();
  }

  Status Transition(std::string_view key, const engine::TransitionRequest& request) {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckKey(key, options_));
    const TimePoint now = core_->Now();
    Status outcome;
    IDEM_RETURN_IF_ERROR(core_->storage().Update(
        key,
        [&](const std::optional<Record>& stored) -> std::optional<Record> {
          engine::TransitionDecision decision = engine::DecideTransition(stored, request, now);
          outcome = std::move(decision.status);
          return std::move(decision.write);
        },
        options_.durability));
    if (outcome.code() == Status::Code::kLeaseLost) {
      core_->counters().lease_lost.fetch_add(1, std::memory_order_relaxed);
    }
    return outcome;
  }

  // Constant after construction.
  const std::shared_ptr<StoreCore> core_;
  const Options options_;
};

// Makes sure `path` is a store directory (creating it if allowed) and returns its identity.
Result<DirectoryId> PrepareDirectory(const fs::path& path, const Options& options) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    if (!options.create_if_missing || options.read_only) {
      return Status::NotFound("store " + path.string() + " does not exist");
    }
    fs::create_directories(path, error);
    if (error) {
      return Status::IOError("cannot create store " + path.string() + ": " + error.message());
    }
    // Only the owner may read the records or, later, connect to the store's socket.
    fs::permissions(path, fs::perms::owner_all, error);
  } else if (!fs::is_directory(status)) {
    return Status::InvalidArgument("store " + path.string() + " is not a directory");
  } else if (!options.create_if_missing && !fs::exists(path / kDatabaseDir)) {
    return Status::NotFound("store " + path.string() + " holds no database");
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return Status::IOError("cannot stat store " + path.string());
  }
  return DirectoryId{info.st_dev, info.st_ino};
}

Status CheckOptions(const Options& options) {
  if (options.default_lease <= milliseconds(0)) {
    return Status::InvalidArgument("default_lease must be positive");
  }
  if (options.default_retention <= milliseconds(0)) {
    return Status::InvalidArgument("default_retention must be positive");
  }
  if (options.max_key_size == 0) return Status::InvalidArgument("max_key_size must be positive");
  IDEM_RETURN_IF_ERROR(CheckDuration("execute_wait", options.execute_wait));
  return CheckDuration("auto_purge_interval", options.auto_purge_interval);
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

Result<std::unique_ptr<Store>> Store::Open(std::string_view path, const Options& options) {
  if (path.empty()) return Status::InvalidArgument("store path is empty");
  IDEM_RETURN_IF_ERROR(CheckOptions(options));
  Options effective = options;
  if (!effective.clock) effective.clock = SystemClock();

  std::error_code error;
  const fs::path directory = fs::absolute(fs::path(path), error).lexically_normal();
  if (error) return Status::InvalidArgument("bad store path " + std::string(path));

  std::lock_guard registry_lock(RegistryMutex());
  IDEM_ASSIGN_OR_RETURN(DirectoryId id, PrepareDirectory(directory, effective));
  auto& registry = Registry();
  std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
  if (auto existing = registry[id].lock()) {
    if (existing->read_only() && !effective.read_only) {
      return Status::Busy("store " + directory.string() +
                          " is open read-only in this process; close it before opening it "
                          "for writing");
    }
    return std::unique_ptr<Store>(std::make_unique<LocalStore>(std::move(existing), effective));
  }

  storage::RocksDbConfig config;
  config.path = (directory / kDatabaseDir).string();
  config.create_if_missing = effective.create_if_missing;
  config.read_only = effective.read_only;
  config.memory_budget = effective.memory_budget;
  config.clock = effective.clock;
  IDEM_ASSIGN_OR_RETURN(auto storage, storage::RocksDbStorage::Open(config));
  auto core = std::make_shared<StoreCore>(std::move(storage), effective.clock, effective.read_only,
                                          effective.auto_purge_interval);
  registry[id] = core;
  return std::unique_ptr<Store>(std::make_unique<LocalStore>(std::move(core), effective));
}

}  // namespace idem
