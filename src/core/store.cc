// Store::Open and the store handle. A handle validates its arguments, applies its defaults and
// passes each call to its StoreCore, which holds the process's role for the store directory:
// owner (a LocalBackend on RocksDB, serving the other processes over the store's socket),
// client (a RemoteBackend talking to the owner), or reader (the owner's socket, or a RocksDB
// read-only instance of the files).
// When the owner dies, a client's call fails over: it takes the owner lock and becomes the
// owner, or reconnects to whoever did, and resends the call.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/local_backend.h"
#include "core/store_directory.h"
#include "engine/backend.h"
#include "sharing/log_limiter.h"
#include "sharing/owner_lock.h"
#include "sharing/remote_backend.h"
#include "sharing/server.h"
#include "storage/rocksdb_storage.h"
#include "util/backoff.h"
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

// How long the owner lock must stay refused before an exclusive open reports kBusy.
constexpr milliseconds kBusyAfter{50};
// Waiting for an owner that is starting (or has just died) polls fast at first: most owners
// answer within milliseconds.
constexpr milliseconds kFirstPause{1};
constexpr milliseconds kLongestPause{50};
// How many records a handle's Scan asks its backend for at a time.
constexpr std::size_t kScanPageSize = 1024;

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

// Being the owner: the lock, the storage, and (when sharing) the server. Members are destroyed
// in reverse order: the server stops calling the backend before it closes, and the lock is
// released only after RocksDB has closed.
struct Ownership {
  std::unique_ptr<sharing::OwnerLock> lock;
  std::shared_ptr<LocalBackend> backend;
  std::unique_ptr<sharing::Server> server;
};

// One per open store directory in this process, shared by every handle on it.
class StoreCore {
 public:
  StoreCore(fs::path directory, DirectoryId id, const Options& options)
      : directory_(std::move(directory)),
        address_(sharing::SocketAddressFor(directory_.string(), id.device, id.inode)),
        options_(options) {}

  ~StoreCore() {
    if (forked()) {
      // A child of fork() holds copies of objects whose threads stayed in the parent: joining
      // or closing them here would hang or corrupt. Leave them (the fork handler of OwnerLock
      // already let go of the owner lock).
      new std::shared_ptr<Backend>(std::move(backend_));
      static_cast<void>(ownership_.release());
      return;
    }
    std::lock_guard registry_lock(RegistryMutex());
    std::lock_guard lock(mu_);
    backend_.reset();
    ownership_.reset();
  }

  // Takes up the process's role for the store.
  Status Start() {
    std::lock_guard lock(mu_);
    IDEM_ASSIGN_OR_RETURN(
        backend_, AcquireBackend(std::chrono::steady_clock::now() + options_.failover_timeout));
    return Status::OK();
  }

  bool read_only() const { return options_.read_only; }
  // True in a child of fork(): this core belongs to the parent.
  bool forked() const { return util::ForkGeneration() != creator_generation_; }

  // Runs `call(backend, resent)` on the current backend; when that backend lost the owner, fails
  // over and runs it again with resent = true. The failovers of one call together take at most
  // options.failover_timeout: an owner that keeps dropping connections (one of another
  // version, say) ends the call with kUnavailable, not a loop.
  template <class Call>
  auto Run(Call&& call) -> std::invoke_result_t<Call&, Backend&, bool> {
    if (forked()) {
      return Status::Unavailable("the store was opened before fork(); open it again in the child");
    }
    std::shared_ptr<Backend> backend = Current();
    std::optional<std::chrono::steady_clock::time_point> give_up_at;
    for (bool resent = false;; resent = true) {
      auto result = call(*backend, resent);
      if (!backend->lost()) return result;
      const auto now = std::chrono::steady_clock::now();
      if (!give_up_at) {
        give_up_at = now + options_.failover_timeout;
      } else if (now >= *give_up_at) {
        return Status::Unavailable("lost the owner of store " + directory_.string() +
                                   " again and again for " +
                                   std::to_string(options_.failover_timeout.count()) + " ms");
      }
      Result<std::shared_ptr<Backend>> next = Failover(backend, *give_up_at);
      if (!next.ok()) return next.status();
      backend = std::move(next).value();
    }
  }

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;

  std::shared_ptr<Backend> Current() {
    std::lock_guard lock(mu_);
    return backend_;
  }

  Result<std::shared_ptr<Backend>> Failover(const std::shared_ptr<Backend>& lost,
                                            SteadyTime give_up_at) {
    std::lock_guard lock(mu_);
    if (backend_ == lost) {
      log_.Log("failover", "lost the owner of store " + directory_.string() + "; failing over");
      IDEM_ASSIGN_OR_RETURN(backend_, AcquireBackend(give_up_at));
    }
    return backend_;
  }

  // mu_ held. Gives up at `give_up_at`.
  Result<std::shared_ptr<Backend>> AcquireBackend(SteadyTime give_up_at) {
    return options_.read_only ? AcquireReader(give_up_at) : AcquireWriter(give_up_at);
  }

  // kUnavailable (nobody listens) and kTimedOut (the owner accepts nothing) may pass; any other
  // error from ConnectToOwner is a refusal (this process's own checks of the owner, or a
  // failure here) and is final.
  static bool Unreachable(const Status& status) {
    return status.code() == Status::Code::kUnavailable || status.code() == Status::Code::kTimedOut;
  }

  // A client of the owner listening at address_; waits at most until `give_up_at` for the
  // owner to accept.
  Result<std::shared_ptr<Backend>> ConnectToOwner(SteadyTime give_up_at) {
    const auto left =
        std::max(milliseconds(1),
                 std::chrono::ceil<milliseconds>(give_up_at - std::chrono::steady_clock::now()));
    IDEM_ASSIGN_OR_RETURN(
        auto remote, sharing::RemoteBackend::Connect(address_, options_.request_timeout,
                                                     std::min(left, options_.request_timeout)));
    return std::shared_ptr<Backend>(std::move(remote));
  }

  // A reader never takes the owner lock: it asks the running owner (live records, the owner's
  // counters) or, when none serves the store, reads the files as a RocksDB read-only instance.
  // It reads the files only when nobody holds the lock (or an exclusive owner does, which
  // serves nobody): a new owner holds the lock while it replays the log and starts serving,
  // and files read in that window may be rewritten or deleted under the reader (the soak
  // caught readers missing acknowledged results then). So it waits for that owner, up to
  // `give_up_at`. A refusal is returned at once.
  Result<std::shared_ptr<Backend>> AcquireReader(SteadyTime give_up_at) {
    util::Backoff backoff(kFirstPause, kLongestPause);
    for (;;) {
      Result<std::shared_ptr<Backend>> remote = ConnectToOwner(give_up_at);
      if (remote.ok() || !Unreachable(remote.status())) return remote;

      const std::optional<sharing::OwnerInfo> owner =
          sharing::OwnerLock::ReadOwner(directory_.string());
      const bool exclusive_owner = owner && owner->exclusive;
      if (exclusive_owner || !sharing::OwnerLock::IsHeld(directory_.string())) {
        Result<std::unique_ptr<storage::Storage>> storage = OpenStorage();
        // An owner that appeared while the files were opened may have changed them meanwhile:
        // ask it instead.
        if (exclusive_owner || !sharing::OwnerLock::IsHeld(directory_.string())) {
          if (!storage.ok()) return storage.status();
          return std::shared_ptr<Backend>(
              std::make_shared<LocalBackend>(std::move(storage).value(), options_));
        }
      }
      if (std::chrono::steady_clock::now() >= give_up_at) {
        return Status::Unavailable("the owner of store " + directory_.string() +
                                   (owner ? " (pid " + std::to_string(owner->pid) + ")" : "") +
                                   " holds it but did not answer within " +
                                   std::to_string(options_.failover_timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(backoff.Next());
    }
  }

  // Becomes the owner, or a client of the owner; retries while the owner is starting or has
  // just died, up to `give_up_at`. A refusal is returned at once.
  Result<std::shared_ptr<Backend>> AcquireWriter(SteadyTime give_up_at) {
    const auto start = std::chrono::steady_clock::now();
    util::Backoff backoff(kFirstPause, kLongestPause);
    Status last_error;
    for (;;) {
      IDEM_ASSIGN_OR_RETURN(auto owner_lock,
                            sharing::OwnerLock::TryAcquire(directory_.string(), options_.sharing));
      if (owner_lock) return BecomeOwner(std::move(owner_lock));

      const std::optional<sharing::OwnerInfo> owner =
          sharing::OwnerLock::ReadOwner(directory_.string());
      const std::string holder = owner ? " by pid " + std::to_string(owner->pid) : "";
      // A reader checking the lock holds it for an instant (OwnerLock::IsHeld), and the lock
      // file may still name an exclusive owner that died: only a refusal that lasts is Busy.
      const bool lasting = std::chrono::steady_clock::now() - start >= kBusyAfter;
      if (options_.sharing == Sharing::kExclusive || (owner && owner->exclusive)) {
        if (lasting) {
          return Status::Busy("store " + directory_.string() +
                              (options_.sharing == Sharing::kExclusive
                                   ? " is held" + holder + "; Sharing::kExclusive needs it alone"
                                   : " is held exclusively" + holder));
        }
      } else {
        Result<std::shared_ptr<Backend>> remote = ConnectToOwner(give_up_at);
        if (remote.ok() || !Unreachable(remote.status())) return remote;
        last_error = remote.status();
      }

      if (std::chrono::steady_clock::now() >= give_up_at) {
        return Status::Unavailable(
            "could not reach the owner of store " + directory_.string() + holder + " within " +
            std::to_string(options_.failover_timeout.count()) + " ms: " + last_error.message());
      }
      // The owner holds the lock but is still opening RocksDB, or has just died.
      std::this_thread::sleep_for(backoff.Next());
    }
  }

  // mu_ held, `owner_lock` taken.
  Result<std::shared_ptr<Backend>> BecomeOwner(std::unique_ptr<sharing::OwnerLock> owner_lock) {
    auto ownership = std::make_unique<Ownership>();
    ownership->lock = std::move(owner_lock);
    IDEM_ASSIGN_OR_RETURN(auto storage, OpenStorage());
    ownership->backend = std::make_shared<LocalBackend>(std::move(storage), options_);
    if (options_.sharing == Sharing::kAuto) {
      sharing::ServerOptions server_options;
      // A request carries at most a key, a label or two and one payload.
      server_options.max_frame =
          options_.max_key_size + 2 * options_.max_label_size + options_.max_result_size + 4096;
      server_options.log = [this](std::string_view message) { Log(message); };
      IDEM_ASSIGN_OR_RETURN(ownership->server,
                            sharing::Server::Start(address_, *ownership->backend, server_options));
    }
    std::shared_ptr<Backend> backend = ownership->backend;
    ownership_ = std::move(ownership);
    return backend;
  }

  Result<std::unique_ptr<storage::Storage>> OpenStorage() {
    storage::RocksDbConfig config;
    config.create_if_missing = options_.create_if_missing;
    config.read_only = options_.read_only;
    config.memory_budget = options_.memory_budget;
    config.clock = options_.clock;
    config.log = [this](std::string_view message) { Log(message); };
    IDEM_ASSIGN_OR_RETURN(auto storage, OpenStoreDatabase(directory_, std::move(config)));
    return std::unique_ptr<storage::Storage>(std::move(storage));
  }

  // One line each: control characters in the message (from a path, or from RocksDB quoting
  // one) are escaped, so a message can neither forge a line nor send a terminal escape.
  void Log(std::string_view message) const {
    const std::string line = EscapeControls(message);
    if (options_.log) {
      options_.log(line);
    } else {
      std::cerr << "idem: " << line << '\n';
    }
  }

  // Constant after construction.
  const uint64_t creator_generation_ = util::ForkGeneration();
  const fs::path directory_;
  const sharing::SocketAddress address_;
  const Options options_;  // the first opener's
  sharing::LogLimiter log_{[this](std::string_view message) { Log(message); }};

  std::mutex mu_;
  // Guarded by mu_.
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<Ownership> ownership_;
};

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
