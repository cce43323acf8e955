// Store::Open and the store handle. A handle validates its arguments, applies its defaults and
// passes each call to its StoreCore (store_core.h), which holds the process's role for the store
// directory and fails over when the owner dies.

#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "core/store_core.h"
#include "core/store_directory.h"
#include "engine/backend.h"
#include "util/escape.h"
#include "util/process.h"

namespace idem {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

class SystemClockImpl final : public Clock {
 public:
  std::chrono::system_clock::time_point Now() const override {
    return std::chrono::system_clock::now();
  }
};

// How many records a handle's Scan asks its backend for at a time.
constexpr std::size_t kScanPageSize = 1024;

std::map<DirectoryId, std::weak_ptr<StoreCore>>& Registry() {
  static std::map<DirectoryId, std::weak_ptr<StoreCore>> registry;
  return registry;
}

Status CheckDuration(std::string_view what, milliseconds duration) {
  if (duration >= milliseconds(0)) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " is " + std::to_string(duration.count()) +
                                 " ms; it must not be negative");
}

// A handle: this caller's options over the process's shared core.
class StoreHandle final : public Store {
 public:
  StoreHandle(std::shared_ptr<StoreCore> core, const Options& options)
      : core_(std::move(core)), options_(options) {}

  Result<Claim> Begin(std::string_view key, const BeginOptions& options) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckDuration("lease", options.lease));
    IDEM_RETURN_IF_ERROR(CheckDuration("retention", options.retention));
    const BeginCall call{
        .key = key,
        .type = options.type,
        .fingerprint = options.fingerprint,
        .lease = options_.LeaseOrDefault(options.lease),
        .retention = options_.RetentionOrDefault(options.retention),
        // One id for this call, resends included: a resent Begin gets its own claim back.
        .request_id = util::RandomRequestId(),
        .durability = options_.durability,
    };
    const Holder holder = util::ThisProcessHolder();
    return core_->Run([&](Backend& backend, bool) { return backend.Begin(call, holder); });
  }

  Status Complete(std::string_view key, uint64_t token, std::string_view result) override {
    return Transition(
        key, {.kind = engine::TransitionKind::kComplete, .token = token, .payload = result});
  }

  Status Fail(std::string_view key, uint64_t token, std::string_view error, Failure kind) override {
    return Transition(
        key,
        {.kind = engine::TransitionKind::kFail, .token = token, .payload = error, .failure = kind});
  }

  Status Extend(std::string_view key, uint64_t token, milliseconds lease) override {
    IDEM_RETURN_IF_ERROR(CheckDuration("lease", lease));
    return Transition(key, {.kind = engine::TransitionKind::kExtend,
                            .token = token,
                            .payload = {},
                            .failure = Failure::kRetryable,
                            .lease = options_.LeaseOrDefault(lease)});
  }

  Status SaveCheckpoint(std::string_view key, uint64_t token, std::string_view data) override {
    return Transition(
        key, {.kind = engine::TransitionKind::kSaveCheckpoint, .token = token, .payload = data});
  }

  Result<std::optional<Record>> Get(std::string_view key) override {
    return core_->Run([&](Backend& backend, bool) { return backend.Get(key); });
  }

  Status Forget(std::string_view key) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    return core_->Run([&](Backend& backend, bool resent) {
      Status status = backend.Forget(key, options_.durability);
      // The first send may have forgotten it before its reply was lost.
      if (resent && status.code() == Status::Code::kNotFound) return Status::OK();
      return status;
    });
  }

  Status Scan(const ScanOptions& options, FunctionRef<bool(const Record&)> visit) override {
    ScanOptions page_options = options;
    std::string cursor(options.start_after);
    for (;;) {
      page_options.start_after = cursor;
      IDEM_ASSIGN_OR_RETURN(ScanPage page, core_->Run([&](Backend& backend, bool) {
        return backend.Scan(page_options, kScanPageSize);
      }));
      for (const Record& record : page.records) {
        if (!visit(record)) return Status::OK();
      }
      if (!page.more) return Status::OK();
      if (!page.records.empty()) cursor = page.records.back().key;
    }
  }

  Result<uint64_t> Purge(const PurgeOptions& options) override {
    if (!options.dry_run) IDEM_RETURN_IF_ERROR(CheckWritable());
    return core_->Run([&](Backend& backend, bool) { return backend.Purge(options); });
  }

  Result<Counters> GetCounters() const override {
    return core_->Run([](Backend& backend, bool) { return backend.GetCounters(); });
  }

  const Options& options() const override { return options_; }

 private:
  Status CheckWritable() const {
    if (options_.read_only) return Status::InvalidArgument("the store was opened read-only");
    return Status::OK();
  }

  Status Transition(std::string_view key, const engine::TransitionRequest& request) {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const TransitionCall call{.key = key, .request = request, .durability = options_.durability};
    return core_->Run([&](Backend& backend, bool) { return backend.Transition(call); });
  }

  // Constant after construction.
  const std::shared_ptr<StoreCore> core_;
  const Options options_;
};

Status CheckOptions(const Options& options) {
  if (options.default_lease <= milliseconds(0)) {
    return Status::InvalidArgument("default_lease must be positive");
  }
  if (options.default_retention <= milliseconds(0)) {
    return Status::InvalidArgument("default_retention must be positive");
  }
  if (options.max_key_size == 0) return Status::InvalidArgument("max_key_size must be positive");
  IDEM_RETURN_IF_ERROR(CheckDuration("execute_wait", options.execute_wait));
  IDEM_RETURN_IF_ERROR(CheckDuration("failover_timeout", options.failover_timeout));
  IDEM_RETURN_IF_ERROR(CheckDuration("renewal_grace", options.renewal_grace));
  if (options.request_timeout <= milliseconds(0)) {
    return Status::InvalidArgument("request_timeout must be positive");
  }
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
  fs::path directory = fs::absolute(fs::path(path), error).lexically_normal();
  if (error) return Status::InvalidArgument("bad store path " + EscapeControls(path));
  // "/a/store/" names /a/store.
  if (!directory.has_filename() && directory.has_relative_path()) {
    directory = directory.parent_path();
  }

  std::lock_guard registry_lock(RegistryMutex());
  Result<StoreDirectory> prepared =
      PrepareStoreDirectory(directory, effective.create_if_missing && !effective.read_only);
  if (!prepared.ok()) return prepared.status();
  const DirectoryId id{prepared->device, prepared->inode};
  auto& registry = Registry();
  std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
  if (auto existing = registry[id].lock(); existing && !existing->forked()) {
    if (existing->read_only() && !effective.read_only) {
      return Status::Busy("store " + EscapeControls(directory.string()) +
                          " is open read-only in this process; close it before opening it "
                          "for writing");
    }
    return std::unique_ptr<Store>(std::make_unique<StoreHandle>(std::move(existing), effective));
  }
  auto core = std::make_shared<StoreCore>(directory, id, effective);
  if (Status started = core->Start(); !started.ok()) {
    // Messages from below quote paths (RocksDB's among them) as they are.
    return Status(started.code(), EscapeControls(started.message()));
  }
  registry[id] = core;
  return std::unique_ptr<Store>(std::make_unique<StoreHandle>(std::move(core), effective));
}

}  // namespace idem
