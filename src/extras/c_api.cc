// The C API of include/idem/c.h over idem::Store. No exception leaves these functions: each
// body runs under Guard, which turns one into an error. An error is a string in *errptr and, as
// an integer, this thread's last error code (and the return value of the calls that have no
// other).

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "idem/c.h"
#include "idem/store.h"
#include "util/time.h"

using idem::Status;
using std::chrono::milliseconds;

struct idem_options_t {
  idem::Options options;
};

struct idem_store_t {
  std::unique_ptr<idem::Store> store;
};

struct idem_record_t {
  idem::Record record;
};

struct idem_writeset_t {
  idem::WriteSet writes;
};

struct idem_value_t {
  idem::TableValue value;
};

struct idem_claim_t {
  idem::Claim claim;
  idem_record_t record;  // claim.record, as idem_claim_record hands it out
};

struct idem_attempt_t {
  idem::Attempt* attempt;
};

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

// The code of the last call on this thread that takes errptr (idem_last_error_code): per
// thread, like errno, because a store handle is shared by threads.
thread_local int last_error_code = IDEM_OK;

// The code of one call that takes errptr, published as this thread's last when the call returns.
// Calls nest (idem_execute runs a callback that may call idem), so each keeps its own and the
// outer one publishes last: after idem_execute, the code is idem_execute's.
class CallCode {
 public:
  CallCode() : outer_(innermost_) { innermost_ = this; }
  ~CallCode() {
    innermost_ = outer_;
    last_error_code = code_;
  }
  CallCode(const CallCode&) = delete;
  CallCode& operator=(const CallCode&) = delete;

  // Records the code of the call running on this thread.
  static void Set(int code) {
    if (innermost_ != nullptr) innermost_->code_ = code;
  }

 private:
  static thread_local CallCode* innermost_;
  CallCode* const outer_;
  int code_ = IDEM_OK;
};
thread_local CallCode* CallCode::innermost_ = nullptr;

// A malloc'd copy of `bytes` with a NUL after them (so text results print directly).
char* CopyOut(std::string_view bytes) {
  char* out = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (out == nullptr) return nullptr;
  if (!bytes.empty()) std::memcpy(out, bytes.data(), bytes.size());
  out[bytes.size()] = '\0';
  return out;
}

// Stores "Code: message" in *errptr, freeing what it held, and the code as the running call's.
// Returns whether `status` is an error.
bool SaveError(char** errptr, const Status& status) {
  if (status.ok()) return false;
  CallCode::Set(static_cast<int>(status.code()));
  if (errptr != nullptr) {
    std::free(*errptr);
    *errptr = CopyOut(status.ToString());
  }
  return true;
}

// Runs `body`, turning an escaping exception into an error (kUnavailable) and `fallback`. Every
// call that takes errptr runs under it: its code starts as IDEM_OK and becomes this thread's
// last when it returns.
template <class Body, class T>
T Guard(char** errptr, T fallback, Body&& body) {
  CallCode call;  // not const: SaveError writes its code through innermost_
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SaveError(errptr, Status::Unavailable("out of memory"));
  } catch (const std::exception& e) {
    SaveError(errptr, Status::Unavailable(fmt::format("unexpected exception: {}", e.what())));
  } catch (...) {
    SaveError(errptr, Status::Unavailable("unexpected exception"));
  }
  return fallback;
}

// Runs `body`, which returns a Status, under Guard; returns the call's code (IDEM_OK or the
// error's), published by Guard on its return.
template <class Body>
int GuardStatus(char** errptr, Body&& body) {
  Guard(errptr, 0, [&] {
    SaveError(errptr, body());
    return 0;
  });
  return last_error_code;
}

std::string_view Bytes(const char* data, size_t size) {
  return data == nullptr ? std::string_view() : std::string_view(data, size);
}

std::string_view Text(const char* text) {
  return text == nullptr ? std::string_view() : std::string_view(text);
}

const char* Out(const std::string& value, size_t* len) {
  if (len != nullptr) *len = value.size();
  return value.c_str();
}

idem::BeginOptions MakeBeginOptions(const char* type, const char* fingerprint, int64_t lease_ms,
                                    int64_t retention_ms) {
  return idem::BeginOptions{.type = Text(type),
                            .fingerprint = Text(fingerprint),
                            .lease = milliseconds(lease_ms),
                            .retention = milliseconds(retention_ms)};
}

constexpr Status::Code kLastCode = Status::Code::kConflict;

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

uint64_t idem_purge(idem_store_t* store, unsigned char dry_run, char** errptr) {
  return Guard(errptr, uint64_t{0}, [&]() -> uint64_t {
    idem::PurgeOptions options;
    options.dry_run = dry_run != 0;
    auto purged = store->store->Purge(options);
    if (SaveError(errptr, purged.status())) return 0;
    return *purged;
  });
}

// ---- Counters ----

size_t idem_counter_count(void) { return idem::kCounterCount; }

// The table's names and help texts are string_views into string literals: NUL-terminated.
const char* idem_counter_name(size_t index) {
  return index < idem::kCounterCount ? idem::kCounters[index].name.data() : nullptr;
}
const char* idem_counter_help(size_t index) {
  return index < idem::kCounterCount ? idem::kCounters[index].help.data() : nullptr;
}

size_t idem_counters(idem_store_t* store, uint64_t* values, size_t count, char** errptr) {
  return Guard(errptr, size_t{0}, [&]() -> size_t {
    auto counters = store->store->GetCounters();
    if (SaveError(errptr, counters.status())) return 0;
    const size_t written = std::min(count, idem::kCounterCount);
    for (size_t i = 0; i < written; ++i) values[i] = (*counters).*idem::kCounters[i].field;
    return written;
  });
}

// ---- Records ----

idem_record_t* idem_get(idem_store_t* store, const char* key, size_t keylen, char** errptr) {
  return Guard(errptr, static_cast<idem_record_t*>(nullptr), [&]() -> idem_record_t* {
    auto record = store->store->Get(Bytes(key, keylen));
    if (SaveError(errptr, record.status())) return nullptr;
    if (!record->has_value()) return nullptr;
    return new idem_record_t{std::move(**record)};
  });
}

void idem_record_destroy(idem_record_t* record) { delete record; }
const char* idem_record_key(const idem_record_t* record, size_t* len) {
  return Out(record->record.key, len);
}
const char* idem_record_type(const idem_record_t* record, size_t* len) {
  return Out(record->record.type, len);
}
int idem_record_state(const idem_record_t* record) {
  return static_cast<int>(record->record.state);
}
unsigned char idem_record_timed_out(const idem_record_t* record) {
  return record->record.timed_out;
}
const char* idem_record_result(const idem_record_t* record, size_t* len) {
  return Out(record->record.result, len);
}
const char* idem_record_fingerprint(const idem_record_t* record, size_t* len) {
  return Out(record->record.fingerprint, len);
}
const char* idem_record_checkpoint(const idem_record_t* record, size_t* len) {
  return Out(record->record.checkpoint, len);
}
uint64_t idem_record_token(const idem_record_t* record) { return record->record.token; }
uint32_t idem_record_attempts(const idem_record_t* record) { return record->record.attempts; }
unsigned char idem_record_retryable(const idem_record_t* record) {
  return record->record.retryable;
}
int64_t idem_record_created_us(const idem_record_t* record) {
  return idem::util::ToMicros(record->record.created);
}
int64_t idem_record_updated_us(const idem_record_t* record) {
  return idem::util::ToMicros(record->record.updated);
}
int64_t idem_record_lease_deadline_us(const idem_record_t* record) {
  return idem::util::ToMicros(record->record.lease_deadline);
}
int64_t idem_record_expires_us(const idem_record_t* record) {
  return idem::util::ToMicros(record->record.expires);
}

// ---- Execute ----

uint64_t idem_attempt_token(const idem_attempt_t* attempt) { return attempt->attempt->token; }
unsigned char idem_attempt_took_over(const idem_attempt_t* attempt) {
  return attempt->attempt->took_over;
}
uint32_t idem_attempt_attempts(const idem_attempt_t* attempt) { return attempt->attempt->attempts; }
unsigned char idem_attempt_lease_held(const idem_attempt_t* attempt) {
  return attempt->attempt->LeaseHeld() ? 1 : 0;
}
const char* idem_attempt_checkpoint(const idem_attempt_t* attempt, size_t* len) {
  // The view points into the claim's record, a std::string: NUL-terminated.
  const std::string_view checkpoint = attempt->attempt->checkpoint;
  if (len != nullptr) *len = checkpoint.size();
  return checkpoint.empty() ? "" : checkpoint.data();
}
int idem_attempt_save_checkpoint(idem_attempt_t* attempt, const char* data, size_t datalen,
                                 char** errptr) {
  return GuardStatus(errptr,
                     [&] { return attempt->attempt->SaveCheckpoint(Bytes(data, datalen)); });
}

idem_value_t* idem_attempt_read(idem_attempt_t* attempt, const char* table, const char* key,
                                size_t keylen, char** errptr) {
  return Guard(errptr, static_cast<idem_value_t*>(nullptr), [&]() -> idem_value_t* {
    auto value = attempt->attempt->Read(Text(table), Bytes(key, keylen));
    if (SaveError(errptr, value.status())) return nullptr;
    return new idem_value_t{std::move(*value)};
  });
}

int idem_attempt_put(idem_attempt_t* attempt, const char* table, const char* key, size_t keylen,
                     const char* value, size_t valuelen, char** errptr) {
  return GuardStatus(errptr, [&] {
    return attempt->attempt->Put(Text(table), Bytes(key, keylen), Bytes(value, valuelen));
  });
}

int idem_attempt_delete(idem_attempt_t* attempt, const char* table, const char* key, size_t keylen,
                        char** errptr) {
  return GuardStatus(errptr,
                     [&] { return attempt->attempt->Delete(Text(table), Bytes(key, keylen)); });
}

char* idem_execute(idem_store_t* store, const char* key, size_t keylen, const char* type,
                   const char* fingerprint, int64_t lease_ms, int64_t retention_ms,
                   idem_execute_fn fn, void* ctx, size_t* resultlen, unsigned char* replayed,
                   uint32_t* attempts, char** errptr) {
  return Guard(errptr, static_cast<char*>(nullptr), [&]() -> char* {
    if (fn == nullptr) {
      SaveError(errptr, Status::InvalidArgument("idem_execute: fn is NULL"));
      return nullptr;
    }
    auto execution = store->store->Execute(
        Bytes(key, keylen), MakeBeginOptions(type, fingerprint, lease_ms, retention_ms),
        [&](idem::Attempt& attempt) -> idem::Result<std::string> {
          idem_attempt_t handle{&attempt};
          size_t size = 0;
          char* errmsg = nullptr;
          unsigned char terminal = 0;
          char* result = fn(ctx, &handle, &size, &errmsg, &terminal);
          // Take ownership of both before anything can throw.
          std::unique_ptr<char, decltype(&std::free)> owned_result(result, &std::free);
          std::unique_ptr<char, decltype(&std::free)> owned_error(errmsg, &std::free);
          if (errmsg != nullptr) {
            std::string text(errmsg);
            if (terminal != 0) return idem::Terminal(std::move(text));
            return Status::Unavailable(std::move(text));
          }
          return std::string(Bytes(result, size));
        });
    if (SaveError(errptr, execution.status())) return nullptr;
    char* out = CopyOut(execution->result);
    if (out == nullptr) throw std::bad_alloc();
    if (resultlen != nullptr) *resultlen = execution->result.size();
    if (replayed != nullptr) *replayed = execution->replayed;
    if (attempts != nullptr) *attempts = execution->attempts;
    return out;
  });
}

// ---- One-time tokens ----

char* idem_issue_token(idem_store_t* store, int64_t ttl_ms, char** errptr) {
  return Guard(errptr, static_cast<char*>(nullptr), [&]() -> char* {
    auto token = store->store->IssueToken(milliseconds(ttl_ms));
    if (SaveError(errptr, token.status())) return nullptr;
    char* out = CopyOut(*token);
    if (out == nullptr) throw std::bad_alloc();
    return out;
  });
}

int idem_consume_token(idem_store_t* store, const char* token, char** errptr) {
  return GuardStatus(errptr, [&] { return store->store->ConsumeToken(Text(token)); });
}

}  // extern "C"
