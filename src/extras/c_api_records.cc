// The C API's records, counters, Execute and one-time tokens (c_api.cc has the rest; what they
// share is in c_api_internal.h).

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "extras/c_api_internal.h"
#include "idem/c.h"
#include "idem/store.h"
#include "util/time.h"

using idem::Status;
using idem::c_api::Bytes;
using idem::c_api::CopyOut;
using idem::c_api::Guard;
using idem::c_api::GuardStatus;
using idem::c_api::MakeBeginOptions;
using idem::c_api::Out;
using idem::c_api::SaveError;
using idem::c_api::Text;
using std::chrono::milliseconds;

// The IDEM_* values are those of the C++ enums, so that a value converts with a cast.
static_assert(IDEM_STATE_PENDING == static_cast<int>(idem::State::kPending));
static_assert(IDEM_STATE_DONE == static_cast<int>(idem::State::kDone));
static_assert(IDEM_STATE_FAILED == static_cast<int>(idem::State::kFailed));
static_assert(IDEM_IMPORTED == static_cast<int>(idem::ImportOutcome::kImported));
static_assert(IDEM_PRESENT == static_cast<int>(idem::ImportOutcome::kPresent));
static_assert(IDEM_EXPIRED == static_cast<int>(idem::ImportOutcome::kExpired));

extern "C" {

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

size_t idem_latency_count(void) { return idem::kLatencyCount; }
const char* idem_latency_name(size_t which) {
  return which < idem::kLatencyCount ? idem::kLatencies[which].name.data() : nullptr;
}
const char* idem_latency_help(size_t which) {
  return which < idem::kLatencyCount ? idem::kLatencies[which].help.data() : nullptr;
}
size_t idem_latency_bound_count(void) { return std::size(idem::kLatencyBounds); }
uint64_t idem_latency_bound_ns(size_t index) {
  return index < std::size(idem::kLatencyBounds)
             ? static_cast<uint64_t>(idem::kLatencyBounds[index].count())
             : 0;
}

size_t idem_latency(idem_store_t* store, size_t which, uint64_t* buckets, size_t count,
                    uint64_t* sum_ns, char** errptr) {
  return Guard(errptr, size_t{0}, [&]() -> size_t {
    if (which >= idem::kLatencyCount) {
      SaveError(errptr, idem::Status::InvalidArgument(fmt::format(
                            "no latency histogram {}: there are {}", which, idem::kLatencyCount)));
      return 0;
    }
    auto owner = store->store->GetOwnerCounters();
    if (SaveError(errptr, owner.status())) return 0;
    const idem::LatencyHistogram& histogram = owner->latencies.*idem::kLatencies[which].field;
    const size_t written = std::min(count, idem::kLatencyBucketCount);
    std::copy_n(histogram.buckets.begin(), written, buckets);
    if (sum_ns != nullptr) *sum_ns = histogram.sum_nanoseconds;
    return written;
  });
}

// ---- Scan and import ----

int idem_scan(idem_store_t* store, const char* prefix, size_t prefixlen, const char* start_after,
              size_t start_afterlen, idem_scan_fn visit, void* arg, char** errptr) {
  return GuardStatus(errptr, [&] {
    idem::ScanOptions options;
    options.prefix = Bytes(prefix, prefixlen);
    options.start_after = Bytes(start_after, start_afterlen);
    return store->store->Scan(options, [&](const idem::Record& record) {
      const idem_record_t visited{record};
      return visit(arg, &visited) != 0;
    });
  });
}

idem_record_t* idem_record_create(void) { return new (std::nothrow) idem_record_t; }
void idem_record_set_key(idem_record_t* record, const char* key, size_t len) {
  record->record.key.assign(Bytes(key, len));
}
void idem_record_set_type(idem_record_t* record, const char* type, size_t len) {
  record->record.type.assign(Bytes(type, len));
}
void idem_record_set_state(idem_record_t* record, int state) {
  // A value out of a byte's range stays out of State's (idem_import refuses it), not wrapped
  // onto a valid state.
  record->record.state = static_cast<idem::State>(state >= 0 && state <= 255 ? state : 255);
}
void idem_record_set_result(idem_record_t* record, const char* result, size_t len) {
  record->record.result.assign(Bytes(result, len));
}
void idem_record_set_fingerprint(idem_record_t* record, const char* fingerprint, size_t len) {
  record->record.fingerprint.assign(Bytes(fingerprint, len));
}
void idem_record_set_checkpoint(idem_record_t* record, const char* checkpoint, size_t len) {
  record->record.checkpoint.assign(Bytes(checkpoint, len));
}
void idem_record_set_token(idem_record_t* record, uint64_t token) { record->record.token = token; }
void idem_record_set_attempts(idem_record_t* record, uint32_t attempts) {
  record->record.attempts = attempts;
}
void idem_record_set_retryable(idem_record_t* record, unsigned char retryable) {
  record->record.retryable = retryable != 0;
}
void idem_record_set_created_us(idem_record_t* record, int64_t us) {
  record->record.created = idem::util::FromMicros(us);
}
void idem_record_set_updated_us(idem_record_t* record, int64_t us) {
  record->record.updated = idem::util::FromMicros(us);
}
void idem_record_set_lease_deadline_us(idem_record_t* record, int64_t us) {
  record->record.lease_deadline = idem::util::FromMicros(us);
}
void idem_record_set_expires_us(idem_record_t* record, int64_t us) {
  record->record.expires = idem::util::FromMicros(us);
}

int idem_import(idem_store_t* store, const idem_record_t* const* records, size_t count,
                int* outcomes, char** errptr) {
  return GuardStatus(errptr, [&]() -> Status {
    std::vector<idem::Record> given;
    given.reserve(count);
    for (size_t i = 0; i < count; ++i) given.push_back(records[i]->record);
    auto done = store->store->Import(given);
    if (!done.ok()) return done.status();
    if (outcomes != nullptr) {
      for (size_t i = 0; i < done->size(); ++i) outcomes[i] = static_cast<int>((*done)[i]);
    }
    return Status::OK();
  });
}

// ---- Health ----

idem_health_t* idem_health(idem_store_t* store, char** errptr) {
  return Guard(errptr, static_cast<idem_health_t*>(nullptr),
               [&]() -> idem_health_t* { return new idem_health_t{store->store->Health()}; });
}

void idem_health_destroy(idem_health_t* health) { delete health; }
unsigned char idem_health_can_read(const idem_health_t* health) {
  return health->health.can_read ? 1 : 0;
}
unsigned char idem_health_can_write(const idem_health_t* health) {
  return health->health.can_write ? 1 : 0;
}
int idem_health_problem_code(const idem_health_t* health) {
  return static_cast<int>(health->health.problem.code());
}
const char* idem_health_problem(const idem_health_t* health) {
  return health->health.problem.message().c_str();
}
unsigned char idem_health_owner_live(const idem_health_t* health) {
  return health->health.owner_live ? 1 : 0;
}
int64_t idem_health_owner_pid(const idem_health_t* health) { return health->health.owner_pid; }
int64_t idem_health_owner_since_us(const idem_health_t* health) {
  return health->health.owner_live ? idem::util::ToMicros(health->health.owner_since) : 0;
}
int idem_health_last_error_code(const idem_health_t* health) {
  return static_cast<int>(health->health.last_error.code());
}
const char* idem_health_last_error(const idem_health_t* health) {
  return health->health.last_error.message().c_str();
}
int64_t idem_health_last_error_at_us(const idem_health_t* health) {
  return health->health.last_error.ok() ? 0 : idem::util::ToMicros(health->health.last_error_at);
}
int64_t idem_health_took_ms(const idem_health_t* health) { return health->health.took.count(); }

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
