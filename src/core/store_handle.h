// The store handle: this caller's options over the process's shared core. A handle validates its
// arguments, applies its defaults and passes each call to its core (DirectoryStoreCore for a store
// directory, directory_store_core.h; PostgresStoreCore for a store in PostgreSQL). Made by
// Store::Open (store.cc), the one file that includes this.

#ifndef IDEM_CORE_STORE_HANDLE_H_
#define IDEM_CORE_STORE_HANDLE_H_

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/reserving_store.h"
#include "core/count_by_scan.h"
#include "core/directory_store_core.h"
#if IDEM_WITH_POSTGRESQL
#include "core/postgres_store_core.h"
#endif
#include "engine/backend.h"
#include "idem/store.h"
#include "util/escape.h"
#include "util/process.h"

namespace idem::core {

// How many records a handle's Scan asks its backend for at a time.
inline constexpr std::size_t kScanPageSize = 1024;

// The entries of a page of a scan, and the key each is listed under (ScanPages).
inline std::span<const Record> Entries(const engine::ScanPage& page) { return page.records; }
inline const std::string& KeyOf(const Record& record) { return record.key; }
inline std::span<const std::pair<std::string, TableValue>> Entries(const engine::TablePage& page) {
  return page.values;
}
inline const std::string& KeyOf(const std::pair<std::string, TableValue>& entry) {
  return entry.first;
}

// Visits the entries of the pages `fetch` returns for `options`, each page asked for after the
// last key of the one before, until `visit` returns false or a page says there is no more.
template <class Fetch, class Visit>
Status ScanPages(const ScanOptions& options, Fetch&& fetch, Visit&& visit) {
  ScanOptions page_options = options;
  std::string cursor(options.start_after);
  for (;;) {
    page_options.start_after = cursor;
    auto page = fetch(page_options);
    if (!page.ok()) return page.status();
    for (const auto& entry : Entries(*page)) {
      if (!visit(entry)) return Status::OK();
    }
    if (!page->more) return Status::OK();
    if (!Entries(*page).empty()) cursor = KeyOf(Entries(*page).back());
  }
}

// Whether a core keeps its store in PostgreSQL, which has its own tools to copy and load it.
template <class Core>
inline constexpr bool kKeptInPostgres = false;
#if IDEM_WITH_POSTGRESQL
template <>
inline constexpr bool kKeptInPostgres<PostgresStoreCore> = true;
#endif

// A handle: this caller's options over the process's shared core (a DirectoryStoreCore for a store
// directory, a PostgresStoreCore for a store in PostgreSQL).
template <class Core>
class StoreHandle final : public Store, public ReservingStore {
 public:
  StoreHandle(std::shared_ptr<Core> core, const Options& options)
      : core_(std::move(core)), options_(options) {}

  Result<Claim> Begin(std::string_view key, const BeginOptions& options) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    IDEM_RETURN_IF_ERROR(CheckDuration("lease", options.lease));
    IDEM_RETURN_IF_ERROR(CheckDuration("retention", options.retention));
    const engine::BeginCall call{
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
    return Run([&](engine::Backend& backend, bool) { return backend.Begin(call, holder); });
  }

  Result<std::unique_ptr<ClaimTransaction>> BeginClaimTransaction(std::string_view key,
                                                                  uint64_t token) override {
    if constexpr (kKeptInPostgres<Core>) {
      IDEM_RETURN_IF_ERROR(CheckWritable());
      return core_->BeginClaimTransaction(key, token, options_.durability);
    } else {
      return Store::BeginClaimTransaction(key, token);
    }
  }

  bool KeptInDatabase() const override { return kKeptInPostgres<Core>; }

  Status Complete(std::string_view key, uint64_t token, std::string_view result) override {
    return Transition(
        key, {.kind = engine::TransitionKind::kComplete, .token = token, .payload = result});
  }

  Status Complete(std::string_view key, uint64_t token, std::string_view result,
                  const WriteSet& writes) override {
    return Transition(
        key, {.kind = engine::TransitionKind::kComplete, .token = token, .payload = result},
        &writes);
  }

  Result<std::vector<std::string>> ListTables() override {
    return Run([&](engine::Backend& backend, bool) { return backend.ListTables(); });
  }

  Result<std::vector<ImportOutcome>> ImportValues(
      std::string_view table, std::span<const std::pair<std::string, TableValue>> values) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    return Run([&](engine::Backend& backend, bool) { return backend.ImportValues(table, values); });
  }

  Result<TableValue> GetValue(std::string_view table, std::string_view key) override {
    return Run([&](engine::Backend& backend, bool) { return backend.GetValue(table, key); });
  }

  Status ScanTable(std::string_view table, const ScanOptions& options,
                   FunctionRef<bool(std::string_view, const TableValue&)> visit) override {
    return ScanPages(
        options,
        [&](const ScanOptions& page_options) {
          return Run([&](engine::Backend& backend, bool) {
            return backend.ScanTable(table, page_options, kScanPageSize);
          });
        },
        [&](const std::pair<std::string, TableValue>& entry) {
          return visit(entry.first, entry.second);
        });
  }

  Status Fail(std::string_view key, uint64_t token, std::string_view error, Failure kind) override {
    return Transition(
        key,
        {.kind = engine::TransitionKind::kFail, .token = token, .payload = error, .failure = kind});
  }

  Status Extend(std::string_view key, uint64_t token, std::chrono::milliseconds lease) override {
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
    return Run([&](engine::Backend& backend, bool) { return backend.Get(key); });
  }

  Result<bool> ReserveKeys(std::string_view claim_key, uint64_t token, std::vector<TableKey> keys,
                           std::chrono::milliseconds hold,
                           std::chrono::milliseconds wait) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const engine::ReserveCall call{.claim_key = claim_key,
                                   .token = token,
                                   .keys = std::move(keys),
                                   .hold = hold,
                                   .wait = wait};
    return Run([&](engine::Backend& backend, bool) { return backend.Reserve(call); });
  }

  Status UnreserveKeys(std::string_view claim_key, uint64_t token) override {
    return Run([&](engine::Backend& backend, bool) { return backend.Unreserve(claim_key, token); });
  }

  Status Forget(std::string_view key) override { return ForgetRecord(key, nullptr); }

  Status ForgetIfUnchanged(const Record& as_read) override {
    const engine::AsRead read{.token = as_read.token, .updated = as_read.updated};
    return ForgetRecord(as_read.key, &read);
  }

  Status Scan(const ScanOptions& options, FunctionRef<bool(const Record&)> visit) override {
    return ScanPages(
        options,
        [&](const ScanOptions& page_options) {
          return Run([&](engine::Backend& backend, bool) {
            return backend.Scan(page_options, kScanPageSize);
          });
        },
        [&](const Record& record) { return visit(record); });
  }

  Status ScanSnapshot(
      FunctionRef<bool(const Record&)> record,
      FunctionRef<bool(std::string_view, std::string_view, const TableValue&)> value) override {
    IDEM_ASSIGN_OR_RETURN(const uint64_t view,
                          Run([](engine::Backend& backend, bool) { return backend.OpenView(); }));
    const Status scanned = ScanView(view, record, value);
    // Released at once, not left to the owner's idle timeout. A view gone already (the owner
    // changed) is no error of its own: the scan said so if it needed it.
    const Status closed =
        Run([view](engine::Backend& backend, bool) { return backend.CloseView(view); });
    return scanned.ok() ? closed : scanned;
  }

  Result<uint64_t> Purge(const PurgeOptions& options) override {
    if (!options.dry_run) IDEM_RETURN_IF_ERROR(CheckWritable());
    return Run([&](engine::Backend& backend, bool) { return backend.Purge(options); });
  }

  Result<Counters> GetCounters() const override {
    return Run([](engine::Backend& backend, bool) { return backend.GetCounters(); });
  }

  Status Backup(std::string_view destination) override {
    if constexpr (kKeptInPostgres<Core>) {
      static_cast<void>(destination);
      return Status::InvalidArgument(fmt::format(
          "store {} is kept in PostgreSQL: back up its tables ({} and the ones named after it) "
          "with PostgreSQL's own tools (pg_dump --table, or the server's base backups); idem "
          "backup copies store directories",
          core_->display_name(), options_.table));
    } else {
      if (destination.empty()) return Status::InvalidArgument("backup destination is empty");
      std::error_code error;
      std::filesystem::path target =
          std::filesystem::absolute(std::filesystem::path(destination), error).lexically_normal();
      if (error) {
        return Status::InvalidArgument(
            fmt::format("bad backup destination {}", EscapeControls(destination)));
      }
      if (!target.has_filename() && target.has_relative_path()) target = target.parent_path();
      // The owner runs in another directory: it gets the path whole. Inside the store, the copy
      // would make the store a directory that is not an idem store.
      const std::filesystem::path relative = target.lexically_relative(core_->directory());
      if (!relative.empty() && *relative.begin() != "..") {
        return Status::InvalidArgument(fmt::format(
            "backup destination {} is inside the store {}; give a path outside it",
            EscapeControls(target.string()), EscapeControls(core_->directory().string())));
      }
      return Run([&](engine::Backend& backend, bool) { return backend.Backup(target.string()); });
    }
  }

  Result<std::vector<ImportOutcome>> Import(std::span<const Record> records) override {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    return Run([&](engine::Backend& backend, bool) { return backend.Import(records); });
  }

  Result<OwnerCounters> GetOwnerCounters() const override {
    IDEM_ASSIGN_OR_RETURN(OwnerCounters answer, Run([](engine::Backend& backend, bool) {
                            return backend.GetOwnerCounters();
                          }));
    if (answer.live) return answer;
    IDEM_RETURN_IF_ERROR(core_->CheckNoOwnerUnasked());
    return answer;
  }

  Result<StoreStats> GetStats() override {
    IDEM_ASSIGN_OR_RETURN(engine::Backend::Stats answer,
                          Run([](engine::Backend& backend, bool) { return backend.GetStats(); }));
    if (answer.counted) return std::move(answer.stats);
    const auto now = options_.clock ? options_.clock->Now() : std::chrono::system_clock::now();
    IDEM_RETURN_IF_ERROR(CountByScan(*this, now, answer.stats));
    return std::move(answer.stats);
  }

  Result<CheckReport> Check() override {
    const auto start = std::chrono::steady_clock::now();
    IDEM_ASSIGN_OR_RETURN(CheckReport report,
                          Run([](engine::Backend& backend, bool) { return backend.Check(); }));
    report.took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    return report;
  }

  StoreHealth Health() override {
    const auto start = std::chrono::steady_clock::now();
    StoreHealth health;
    // The probes go to the core itself: their errors are `problem`, not the calls' last error.
    const Result<std::optional<Record>> read =
        core_->Run([](engine::Backend& backend, bool) { return backend.Get(kHealthProbeKey); });
    health.can_read = read.ok();
    health.problem = read.status();
    if (read.ok()) {
      health.problem = CheckWritable();
      if (health.problem.ok()) {
        health.problem =
            core_->Run([](engine::Backend& backend, bool) { return backend.Writable(); });
      }
      health.can_write = health.problem.ok();
      // A store in PostgreSQL has no owner process; an owner that did not answer the read is
      // not asked again.
      if constexpr (!kKeptInPostgres<Core>) {
        const Result<OwnerCounters> owner =
            core_->Run([](engine::Backend& backend, bool) { return backend.GetOwnerCounters(); });
        if (owner.ok() && owner->live) {
          health.owner_live = true;
          health.owner_pid = owner->pid;
          health.owner_since = owner->since;
        }
        // A damaged table file the owner found: the store answers, but must be restored.
        const Result<engine::Backend::Stats> stats =
            core_->Run([](engine::Backend& backend, bool) { return backend.GetStats(); });
        if (stats.ok() && stats->stats.engine && !stats->stats.engine->damage.empty()) {
          health.problem = Status::Corruption(stats->stats.engine->damage);
        }
      }
    }
    std::tie(health.last_error, health.last_error_at) = core_->errors().Last();
    health.took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    return health;
  }

  const Options& options() const override { return options_; }

 private:
  // The core's Run, keeping a store's failure for Health's last_error.
  template <class Call>
  auto Run(Call&& call) const {
    auto result = core_->Run(std::forward<Call>(call));
    core_->errors().Note(result);
    return result;
  }

  Status CheckWritable() const {
    if (options_.read_only) return Status::InvalidArgument("the store was opened read-only");
    return Status::OK();
  }

  // Forget, of the record `as_read` names only when given.
  Status ForgetRecord(std::string_view key, const engine::AsRead* as_read) {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    return Run([&](engine::Backend& backend, bool resent) {
      Status status = backend.Forget(key, options_.durability, as_read);
      // The first send may have forgotten it before its reply was lost.
      if (resent && status.code() == Status::Code::kNotFound) return Status::OK();
      return status;
    });
  }

  // ScanSnapshot's walk in `view`. The table names are the latest: a table made since the view
  // was taken is empty in it.
  Status ScanView(uint64_t view, FunctionRef<bool(const Record&)> record,
                  FunctionRef<bool(std::string_view, std::string_view, const TableValue&)> value) {
    bool go_on = true;
    IDEM_RETURN_IF_ERROR(ScanPages(
        ScanOptions{},
        [&](const ScanOptions& page_options) {
          return Run([&](engine::Backend& backend, bool) {
            return backend.Scan(page_options, kScanPageSize, view);
          });
        },
        [&](const Record& each) { return go_on = record(each); }));
    if (!go_on) return Status::OK();
    IDEM_ASSIGN_OR_RETURN(const std::vector<std::string> tables,
                          Run([](engine::Backend& backend, bool) { return backend.ListTables(); }));
    for (const std::string& table : tables) {
      IDEM_RETURN_IF_ERROR(ScanPages(
          ScanOptions{},
          [&](const ScanOptions& page_options) {
            return Run([&](engine::Backend& backend, bool) {
              return backend.ScanTable(table, page_options, kScanPageSize, view);
            });
          },
          [&](const std::pair<std::string, TableValue>& entry) {
            return go_on = value(table, entry.first, entry.second);
          }));
      if (!go_on) return Status::OK();
    }
    return Status::OK();
  }

  Status Transition(std::string_view key, const engine::TransitionRequest& request,
                    const WriteSet* writes = nullptr) {
    IDEM_RETURN_IF_ERROR(CheckWritable());
    const engine::TransitionCall call{
        .key = key, .request = request, .durability = options_.durability, .writes = writes};
    return Run([&](engine::Backend& backend, bool) { return backend.Transition(call); });
  }

  // Constant after construction.
  const std::shared_ptr<Core> core_;
  const Options options_;
};

template <class Core>
std::unique_ptr<Store> NewHandle(std::shared_ptr<Core> core, const Options& options) {
  return std::make_unique<StoreHandle<Core>>(std::move(core), options);
}

// A handle on the store `registry` holds under `key`, opened by this process before (and not
// in a parent before a fork), or else on the one `open` makes. Called under RegistryMutex.

}  // namespace idem::core

#endif  // IDEM_CORE_STORE_HANDLE_H_
