// The C API of include/idem/c.h over idem::Store. No exception leaves these functions: each
// body runs under Guard, which turns one into an error. An error is a string in *errptr and, as
// an integer, this thread's last error code (and the return value of the calls that have no
// other). Records, counters, Execute and one-time tokens are in c_api_records.cc.

#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include "extras/c_api_internal.h"
#include "idem/c.h"
#include "idem/store.h"
#include "util/time.h"

using idem::Status;
using idem::c_api::Bytes;
using idem::c_api::CopyOut;
using idem::c_api::Guard;
using idem::c_api::GuardStatus;
using idem::c_api::last_error_code;
using idem::c_api::MakeBeginOptions;
using idem::c_api::Out;
using idem::c_api::SaveError;
using idem::c_api::Text;
using std::chrono::milliseconds;

// The IDEM_* codes are the values of Status::Code, so that a code converts with a cast.
static_assert(IDEM_OK == static_cast<int>(Status::Code::kOk));
static_assert(IDEM_INVALID_ARGUMENT == static_cast<int>(Status::Code::kInvalidArgument));
static_assert(IDEM_NOT_FOUND == static_cast<int>(Status::Code::kNotFound));
static_assert(IDEM_IN_PROGRESS == static_cast<int>(Status::Code::kInProgress));
static_assert(IDEM_MISMATCH == static_cast<int>(Status::Code::kMismatch));
static_assert(IDEM_FAILED == static_cast<int>(Status::Code::kFailed));
static_assert(IDEM_LEASE_LOST == static_cast<int>(Status::Code::kLeaseLost));
static_assert(IDEM_BUSY == static_cast<int>(Status::Code::kBusy));
static_assert(IDEM_TIMED_OUT == static_cast<int>(Status::Code::kTimedOut));
static_assert(IDEM_IO_ERROR == static_cast<int>(Status::Code::kIOError));
static_assert(IDEM_CORRUPTION == static_cast<int>(Status::Code::kCorruption));
static_assert(IDEM_UNAVAILABLE == static_cast<int>(Status::Code::kUnavailable));
static_assert(IDEM_NEWER_VERSION == static_cast<int>(Status::Code::kNewerVersion));
static_assert(IDEM_CONFLICT == static_cast<int>(Status::Code::kConflict));

namespace {

constexpr Status::Code kLastCode = Status::Code::kConflict;

// idem_options_set_clock's function as an idem::Clock.
class CallbackClock final : public idem::Clock {
 public:
  CallbackClock(idem_clock_fn now_us, void* arg) : now_us_(now_us), arg_(arg) {}
  std::chrono::system_clock::time_point Now() const override {
    return idem::util::FromMicros(now_us_(arg_));
  }

 private:
  idem_clock_fn const now_us_;
  void* const arg_;
};

}  // namespace

extern "C" {

const char* idem_version(void) { return IDEM_VERSION_TEXT; }
int idem_version_number(void) { return IDEM_VERSION_NUMBER; }

void idem_free(void* ptr) { std::free(ptr); }

int idem_last_error_code(void) { return last_error_code; }

int idem_error_code(const char* err) {
  if (err == nullptr) return IDEM_OK;
  const std::string_view text(err);
  for (int code = 0; code <= static_cast<int>(kLastCode); ++code) {
    const std::string_view name = idem::CodeName(static_cast<Status::Code>(code));
    if (text.size() > name.size() && text.substr(0, name.size()) == name &&
        text[name.size()] == ':') {
      return code;
    }
  }
  return IDEM_UNKNOWN_ERROR;  // not an idem error string
}

const char* idem_code_name(int code) {
  if (code < 0 || code > static_cast<int>(kLastCode)) return "Unknown";
  // CodeName views static string literals.
  return idem::CodeName(static_cast<Status::Code>(code)).data();
}

// ---- Options ----

idem_options_t* idem_options_create(void) { return new (std::nothrow) idem_options_t; }
void idem_options_destroy(idem_options_t* options) { delete options; }
void idem_options_set_durability(idem_options_t* options, int durability) {
  options->options.durability = durability == IDEM_BUFFERED   ? idem::Durability::kBuffered
                                : durability == IDEM_PERIODIC ? idem::Durability::kPeriodic
                                                              : idem::Durability::kSync;
}
void idem_options_set_memory_budget(idem_options_t* options, size_t bytes) {
  options->options.memory_budget = bytes;
}
void idem_options_set_max_disk_bytes(idem_options_t* options, uint64_t bytes) {
  options->options.max_disk_bytes = bytes;
}
void idem_options_set_sync_interval_ms(idem_options_t* options, int64_t ms) {
  options->options.sync_interval = milliseconds(ms);
}
void idem_options_set_sharing(idem_options_t* options, int sharing) {
  options->options.sharing =
      sharing == IDEM_SHARING_EXCLUSIVE ? idem::Sharing::kExclusive : idem::Sharing::kAuto;
}
void idem_options_set_default_lease_ms(idem_options_t* options, int64_t ms) {
  options->options.default_lease = milliseconds(ms);
}
void idem_options_set_default_retention_ms(idem_options_t* options, int64_t ms) {
  options->options.default_retention = milliseconds(ms);
}
void idem_options_set_execute_wait_ms(idem_options_t* options, int64_t ms) {
  options->options.execute_wait = milliseconds(ms);
}
void idem_options_set_auto_purge_interval_ms(idem_options_t* options, int64_t ms) {
  options->options.auto_purge_interval = milliseconds(ms);
}
void idem_options_set_reverify_interval_ms(idem_options_t* options, int64_t ms) {
  options->options.reverify_interval = milliseconds(ms);
}
void idem_options_set_create_if_missing(idem_options_t* options, unsigned char value) {
  options->options.create_if_missing = value != 0;
}
void idem_options_set_read_only(idem_options_t* options, unsigned char value) {
  options->options.read_only = value != 0;
}
void idem_options_set_max_key_size(idem_options_t* options, size_t bytes) {
  options->options.max_key_size = bytes;
}
void idem_options_set_max_result_size(idem_options_t* options, size_t bytes) {
  options->options.max_result_size = bytes;
}
void idem_options_set_table(idem_options_t* options, const char* table) {
  options->options.table = table != nullptr ? table : idem::Options{}.table;
}
void idem_options_set_pool_size(idem_options_t* options, int size) {
  options->options.pool_size = size;
}
void idem_options_set_open_unfinished_import(idem_options_t* options, unsigned char value) {
  options->options.open_unfinished_import = value != 0;
}
void idem_options_set_max_label_size(idem_options_t* options, size_t bytes) {
  options->options.max_label_size = bytes;
}
void idem_options_set_conflict_retries(idem_options_t* options, int retries) {
  options->options.conflict_retries = retries;
}
void idem_options_set_take_over_dead_holders(idem_options_t* options, unsigned char value) {
  options->options.take_over_dead_holders = value != 0;
}
void idem_options_set_renewal_grace_ms(idem_options_t* options, int64_t ms) {
  options->options.renewal_grace = milliseconds(ms);
}
void idem_options_set_failover_timeout_ms(idem_options_t* options, int64_t ms) {
  options->options.failover_timeout = milliseconds(ms);
}
void idem_options_set_request_timeout_ms(idem_options_t* options, int64_t ms) {
  options->options.request_timeout = milliseconds(ms);
}
void idem_options_set_log(idem_options_t* options, idem_log_fn log, void* arg) {
  if (log == nullptr) {
    options->options.log = nullptr;
    return;
  }
  // The event and message arrive as views: the line hands them out NUL-terminated.
  options->options.log = [log, arg](const idem::LogLine& given) {
    const idem_log_line_t line{given.severity, std::string(given.event),
                               std::string(given.message)};
    log(arg, &line);
  };
}
int idem_log_line_severity(const idem_log_line_t* line) {
  switch (line->severity) {
    case idem::LogSeverity::kInfo:
      return IDEM_LOG_INFO;
    case idem::LogSeverity::kWarning:
      return IDEM_LOG_WARNING;
    case idem::LogSeverity::kError:
      return IDEM_LOG_ERROR;
  }
  return IDEM_LOG_ERROR;
}
const char* idem_log_line_event(const idem_log_line_t* line, size_t* len) {
  return Out(line->event, len);
}
const char* idem_log_line_message(const idem_log_line_t* line, size_t* len) {
  return Out(line->message, len);
}
void idem_options_set_clock(idem_options_t* options, idem_clock_fn now_us, void* arg) {
  options->options.clock =
      now_us == nullptr ? nullptr : std::make_shared<const CallbackClock>(now_us, arg);
}

// ---- Store ----

idem_store_t* idem_open(const char* path, const idem_options_t* options, char** errptr) {
  return Guard(errptr, static_cast<idem_store_t*>(nullptr), [&]() -> idem_store_t* {
    const idem::Options defaults;
    auto store = idem::Store::Open(Text(path), options != nullptr ? options->options : defaults);
    if (SaveError(errptr, store.status())) return nullptr;
    return new idem_store_t{std::move(store).value()};
  });
}

void idem_close(idem_store_t* store) {
  try {
    delete store;
  } catch (...) {
    // A destructor that throws would terminate anyway; nothing else can be done in C.
  }
}

idem_claim_t* idem_begin(idem_store_t* store, const char* key, size_t keylen, const char* type,
                         const char* fingerprint, int64_t lease_ms, int64_t retention_ms,
                         char** errptr) {
  return Guard(errptr, static_cast<idem_claim_t*>(nullptr), [&]() -> idem_claim_t* {
    auto claim = store->store->Begin(Bytes(key, keylen),
                                     MakeBeginOptions(type, fingerprint, lease_ms, retention_ms));
    if (SaveError(errptr, claim.status())) return nullptr;
    auto* out = new idem_claim_t{std::move(claim).value(), {}};
    out->record.record = out->claim.record;
    return out;
  });
}

void idem_claim_destroy(idem_claim_t* claim) { delete claim; }
int idem_claim_outcome(const idem_claim_t* claim) { return static_cast<int>(claim->claim.outcome); }
uint64_t idem_claim_token(const idem_claim_t* claim) { return claim->claim.token; }
unsigned char idem_claim_took_over(const idem_claim_t* claim) { return claim->claim.took_over; }
int64_t idem_claim_retry_after_ms(const idem_claim_t* claim) {
  return claim->claim.retry_after.count();
}
const char* idem_claim_result(const idem_claim_t* claim, size_t* len) {
  return Out(claim->claim.record.result, len);
}
uint32_t idem_claim_attempts(const idem_claim_t* claim) { return claim->claim.record.attempts; }
const idem_record_t* idem_claim_record(const idem_claim_t* claim) { return &claim->record; }

int idem_complete(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                  const char* result, size_t resultlen, char** errptr) {
  return GuardStatus(errptr, [&] {
    return store->store->Complete(Bytes(key, keylen), token, Bytes(result, resultlen));
  });
}

idem_writeset_t* idem_writeset_create(void) { return new idem_writeset_t; }
void idem_writeset_destroy(idem_writeset_t* writes) { delete writes; }

void idem_writeset_put(idem_writeset_t* writes, const char* table, const char* key, size_t keylen,
                       const char* value, size_t valuelen, unsigned char has_version,
                       uint64_t if_version) {
  writes->writes.Put(Text(table), Bytes(key, keylen), Bytes(value, valuelen),
                     has_version ? std::optional(if_version) : std::nullopt);
}

void idem_writeset_delete(idem_writeset_t* writes, const char* table, const char* key,
                          size_t keylen, unsigned char has_version, uint64_t if_version) {
  writes->writes.Delete(Text(table), Bytes(key, keylen),
                        has_version ? std::optional(if_version) : std::nullopt);
}

void idem_writeset_require(idem_writeset_t* writes, const char* table, const char* key,
                           size_t keylen, uint64_t version) {
  writes->writes.Require(Text(table), Bytes(key, keylen), version);
}

int idem_complete_with_writes(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                              const char* result, size_t resultlen, const idem_writeset_t* writes,
                              char** errptr) {
  return GuardStatus(errptr, [&] {
    return store->store->Complete(Bytes(key, keylen), token, Bytes(result, resultlen),
                                  writes != nullptr ? writes->writes : idem::WriteSet());
  });
}

idem_value_t* idem_get_value(idem_store_t* store, const char* table, const char* key, size_t keylen,
                             char** errptr) {
  return Guard(errptr, static_cast<idem_value_t*>(nullptr), [&]() -> idem_value_t* {
    auto value = store->store->GetValue(Text(table), Bytes(key, keylen));
    if (SaveError(errptr, value.status())) return nullptr;
    return new idem_value_t{std::move(*value)};
  });
}

void idem_value_destroy(idem_value_t* value) { delete value; }
unsigned char idem_value_present(const idem_value_t* value) {
  return value->value.value.has_value() ? 1 : 0;
}
const char* idem_value_bytes(const idem_value_t* value, size_t* len) {
  static const std::string kEmpty;
  return Out(value->value.value ? *value->value.value : kEmpty, len);
}
uint64_t idem_value_version(const idem_value_t* value) { return value->value.version; }

int idem_fail(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
              const char* error, size_t errorlen, int kind, char** errptr) {
  return GuardStatus(errptr, [&] {
    const idem::Failure failure =
        kind == IDEM_TERMINAL ? idem::Failure::kTerminal : idem::Failure::kRetryable;
    return store->store->Fail(Bytes(key, keylen), token, Bytes(error, errorlen), failure);
  });
}

int idem_extend(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                int64_t lease_ms, char** errptr) {
  return GuardStatus(errptr, [&] {
    return store->store->Extend(Bytes(key, keylen), token, milliseconds(lease_ms));
  });
}

int idem_save_checkpoint(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                         const char* data, size_t datalen, char** errptr) {
  return GuardStatus(errptr, [&] {
    return store->store->SaveCheckpoint(Bytes(key, keylen), token, Bytes(data, datalen));
  });
}

int idem_forget(idem_store_t* store, const char* key, size_t keylen, char** errptr) {
  return GuardStatus(errptr, [&] { return store->store->Forget(Bytes(key, keylen)); });
}

int idem_forget_if_unchanged(idem_store_t* store, const idem_record_t* record, char** errptr) {
  return GuardStatus(errptr, [&] { return store->store->ForgetIfUnchanged(record->record); });
}

int idem_backup(idem_store_t* store, const char* destination, char** errptr) {
  return GuardStatus(errptr, [&] { return store->store->Backup(Text(destination)); });
}

uint64_t idem_purge(idem_store_t* store, unsigned char dry_run, char** errptr) {
  return Guard(errptr, uint64_t{0}, [&]() -> uint64_t {
    idem::PurgeOptions options;
    options.dry_run = dry_run != 0;
    auto purged = store->store->Purge(options);
    if (SaveError(errptr, purged.status())) return 0;
    return *purged;
  });
}

}  // extern "C"
