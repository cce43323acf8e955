/* The idem C API: an embedded idempotency store for C programs (C89 or later with <stdint.h>).
 *
 * It mirrors the C++ API of idem/store.h; see there and docs/semantics.md for what each call
 * means. Conventions, as in leveldb's c.h:
 *
 *  - Handles are opaque pointers made by a *_create or an idem_* call and released by the
 *    matching *_destroy (or idem_close). Passing NULL to a *_destroy is allowed.
 *  - A call that can fail takes `char** errptr` last. On error it stores a malloc'd,
 *    NUL-terminated "Code: message" string in *errptr (for example
 *    "InvalidArgument: key is empty"), freeing the string *errptr held before, if any; on
 *    success it leaves *errptr unchanged. So set `char* err = NULL;` before a call, test it
 *    after, and release it with idem_free. errptr may be NULL when the message is not wanted.
 *  - The error's code is an integer beside the message, never parsed from it: a call that
 *    returns nothing else returns it (IDEM_OK on success), and idem_last_error_code() gives the
 *    code of the last call on this thread that takes errptr, whatever it returns.
 *  - Keys and payloads are byte strings given as pointer + length (keys may hold NUL bytes).
 *    type, fingerprint and token are NUL-terminated strings; NULL means "".
 *  - Strings returned by an accessor belong to the object they came from and stay valid until
 *    it is destroyed; they are also NUL-terminated. A `size_t* len` out-parameter may be NULL.
 *  - Durations are int64_t milliseconds; times are int64_t microseconds since the Unix epoch.
 *  - An idem_store_t is safe for concurrent use by several threads. Other objects are not
 *    synchronized.
 *
 * Link with `pkg-config --libs idem` (add --static for the static library), or find_package(idem)
 * and idem::idem in CMake. See docs/c_api.md.
 */

#ifndef IDEM_C_H_
#define IDEM_C_H_

#include <stddef.h>
#include <stdint.h>

#include "idem/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Codes -------------------------------------------------------------------------------- */

/* Error codes: the values of idem::Status::Code. */
#define IDEM_OK 0
#define IDEM_INVALID_ARGUMENT 1
#define IDEM_NOT_FOUND 2
#define IDEM_IN_PROGRESS 3
#define IDEM_MISMATCH 4
#define IDEM_FAILED 5
#define IDEM_LEASE_LOST 6
#define IDEM_BUSY 7
#define IDEM_TIMED_OUT 8
#define IDEM_IO_ERROR 9
#define IDEM_CORRUPTION 10
#define IDEM_UNAVAILABLE 11
#define IDEM_NEWER_VERSION 12
#define IDEM_CONFLICT 13
/* Not a code of idem::Status: idem_error_code's answer for text that is not an idem error. */
#define IDEM_UNKNOWN_ERROR (-1)

/* What idem_begin found: the values of idem::Outcome. */
#define IDEM_ACQUIRED 0
#define IDEM_REPLAY 1
#define IDEM_OUTCOME_IN_PROGRESS 2
#define IDEM_OUTCOME_FAILED 3
#define IDEM_OUTCOME_MISMATCH 4

/* Stored states: the values of idem::State. */
#define IDEM_STATE_PENDING 0
#define IDEM_STATE_DONE 1
#define IDEM_STATE_FAILED 2

/* Kinds of failure for idem_fail: the values of idem::Failure. */
#define IDEM_RETRYABLE 0
#define IDEM_TERMINAL 1

/* idem::Durability */
#define IDEM_SYNC 0
#define IDEM_BUFFERED 1
#define IDEM_PERIODIC 2

/* idem::Sharing */
#define IDEM_SHARING_AUTO 0
#define IDEM_SHARING_EXCLUSIVE 1

/* ---- Types -------------------------------------------------------------------------------- */

typedef struct idem_store_t idem_store_t;
typedef struct idem_options_t idem_options_t;
typedef struct idem_claim_t idem_claim_t;
typedef struct idem_record_t idem_record_t;
typedef struct idem_attempt_t idem_attempt_t;
typedef struct idem_writeset_t idem_writeset_t;
typedef struct idem_value_t idem_value_t;
typedef struct idem_health_t idem_health_t;
typedef struct idem_stats_t idem_stats_t;
typedef struct idem_check_t idem_check_t;
typedef struct idem_log_line_t idem_log_line_t;

/* ---- Version, errors and memory ------------------------------------------------------------ */

/* The library's version, "MAJOR.MINOR.PATCH" (static storage), and the same as the number
 * MAJOR * 1000000 + MINOR * 1000 + PATCH (0.1.0 is 1000), to compare. */
IDEM_EXPORT const char* idem_version(void);
IDEM_EXPORT int idem_version_number(void);

/* Frees a string or buffer returned by idem (an error, a result, a token). NULL is allowed. */
IDEM_EXPORT void idem_free(void* ptr);

/* The IDEM_* code of the last call made on this thread that takes errptr: IDEM_OK when it
 * succeeded (idem_get finding no record succeeds), else the code of the error it stored in
 * *errptr (also when errptr was NULL). Other calls leave it unchanged, and so do the calls an
 * idem_execute callback makes: after idem_execute returns, the code is idem_execute's. */
IDEM_EXPORT int idem_last_error_code(void);

/* Deprecated: use the code a call returns, or idem_last_error_code(). The IDEM_* code read back
 * from the text of an error set through errptr ("NotFound: ..." is IDEM_NOT_FOUND); IDEM_OK
 * for NULL; IDEM_UNKNOWN_ERROR for text that does not start with an idem code name and ": ". */
IDEM_EXPORT int idem_error_code(const char* err);

/* "OK", "InvalidArgument", ...: the name of an IDEM_* error code, "Unknown" for any other
 * value (static storage). */
IDEM_EXPORT const char* idem_code_name(int code);

/* ---- Options ------------------------------------------------------------------------------ */

/* Options for idem_open with the defaults of idem::Options. */
IDEM_EXPORT idem_options_t* idem_options_create(void);
IDEM_EXPORT void idem_options_destroy(idem_options_t* options);
/* IDEM_SYNC (default: fsync before acknowledging), IDEM_BUFFERED or IDEM_PERIODIC (fsynced by
 * a background thread within the sync interval). */
IDEM_EXPORT void idem_options_set_durability(idem_options_t* options, int durability);
/* IDEM_SHARING_AUTO (default) or IDEM_SHARING_EXCLUSIVE. */
IDEM_EXPORT void idem_options_set_sharing(idem_options_t* options, int sharing);
/* Lease of a claim when idem_begin's lease_ms is 0. Default: 10000. */
IDEM_EXPORT void idem_options_set_default_lease_ms(idem_options_t* options, int64_t ms);
/* Retention of a record when idem_begin's retention_ms is 0. Default: 30 days. */
IDEM_EXPORT void idem_options_set_default_retention_ms(idem_options_t* options, int64_t ms);
/* How long idem_execute waits for another owner. Default: 30000. */
IDEM_EXPORT void idem_options_set_execute_wait_ms(idem_options_t* options, int64_t ms);
/* IDEM_PERIODIC: how long after a call its write is fsynced at the latest; positive.
 * Default: 1000. */
IDEM_EXPORT void idem_options_set_sync_interval_ms(idem_options_t* options, int64_t ms);
/* The resident memory the process holding the store should stay under, in bytes (see
 * idem::Options::memory_budget; 8 MiB works for a small device). Default: 96 MiB. */
IDEM_EXPORT void idem_options_set_memory_budget(idem_options_t* options, size_t bytes);
/* The disk space the store's database may take, in bytes: past it new claims fail with
 * IDEM_UNAVAILABLE. 0 (default): no limit. */
IDEM_EXPORT void idem_options_set_max_disk_bytes(idem_options_t* options, uint64_t bytes);
/* Interval of the background purge; 0 disables it. Default: 10 minutes. */
IDEM_EXPORT void idem_options_set_auto_purge_interval_ms(idem_options_t* options, int64_t ms);
/* How often the owner reads each table file again to verify its checksums (see
 * idem::Options::reverify_interval); 0 disables it. Default: 7 days. */
IDEM_EXPORT void idem_options_set_reverify_interval_ms(idem_options_t* options, int64_t ms);
/* Create the store directory when missing (default 1). */
IDEM_EXPORT void idem_options_set_create_if_missing(idem_options_t* options, unsigned char value);
/* Open for reading only (default 0): writing calls fail with IDEM_INVALID_ARGUMENT. */
IDEM_EXPORT void idem_options_set_read_only(idem_options_t* options, unsigned char value);
/* Longest key, in bytes. Default: 512. */
IDEM_EXPORT void idem_options_set_max_key_size(idem_options_t* options, size_t bytes);
/* Longest result, error text or checkpoint, in bytes. Default: 1 MiB. */
IDEM_EXPORT void idem_options_set_max_result_size(idem_options_t* options, size_t bytes);
/* A store in PostgreSQL: the table, in the connection's current schema, or "schema.table"
 * (docs/postgresql.md, "Naming a schema"; copied; NULL restores the default "idem_records").
 * Ignored for a store directory. */
IDEM_EXPORT void idem_options_set_table(idem_options_t* options, const char* table);
/* A store in PostgreSQL: how many connections this process keeps at most. Default: 8. */
IDEM_EXPORT void idem_options_set_pool_size(idem_options_t* options, int size);
/* Open a store that an import left unfinished (idem::Options::open_unfinished_import; default 0:
 * such a store is refused with IDEM_BUSY). */
IDEM_EXPORT void idem_options_set_open_unfinished_import(idem_options_t* options,
                                                         unsigned char value);
/* Longest type label or fingerprint, in bytes. Default: 256. */
IDEM_EXPORT void idem_options_set_max_label_size(idem_options_t* options, size_t bytes);
/* How many times idem_execute runs fn again after a conflict of its table writes. Default: 8. */
IDEM_EXPORT void idem_options_set_conflict_retries(idem_options_t* options, int retries);
/* Take over at once a claim whose holder process is known dead (default 1). */
IDEM_EXPORT void idem_options_set_take_over_dead_holders(idem_options_t* options,
                                                         unsigned char value);
/* How long claims whose lease ran out during the owner's stall or a failover stay held for
 * their holder (idem::Options::renewal_grace). Default: 5000. */
IDEM_EXPORT void idem_options_set_renewal_grace_ms(idem_options_t* options, int64_t ms);
/* How long a call keeps failing over to a new owner or server. Default: 10000. */
IDEM_EXPORT void idem_options_set_failover_timeout_ms(idem_options_t* options, int64_t ms);
/* How long a call waits for the store's owner or server to answer. Default: 10000. */
IDEM_EXPORT void idem_options_set_request_timeout_ms(idem_options_t* options, int64_t ms);
/* Receives what no call returns (idem::Options::log): log(arg, line) with a line valid during
 * the call only, read with idem_log_line_severity, idem_log_line_event and
 * idem_log_line_message. Called from background threads: it must be thread-safe. NULL
 * (default): written to stderr as "idem: <severity>: <message> [<event>]". */
typedef void (*idem_log_fn)(void* arg, const idem_log_line_t* line);
IDEM_EXPORT void idem_options_set_log(idem_options_t* options, idem_log_fn log, void* arg);
/* A log line's severity (idem::LogSeverity). */
#define IDEM_LOG_INFO 0
#define IDEM_LOG_WARNING 1
#define IDEM_LOG_ERROR 2
IDEM_EXPORT int idem_log_line_severity(const idem_log_line_t* line);
/* A log line's event: a stable snake_case name ("foreign_uid"; docs/operations.md, "Log
 * events"), to match on instead of the message. */
IDEM_EXPORT const char* idem_log_line_event(const idem_log_line_t* line, size_t* len);
/* The text of a log line: one line, control characters escaped. */
IDEM_EXPORT const char* idem_log_line_message(const idem_log_line_t* line, size_t* len);
/* The wall clock that judges leases and retention (idem::Options::clock), for tests:
 * now_us(arg) returns microseconds since the Unix epoch; called from any thread. NULL
 * (default): the system clock. A store in PostgreSQL ignores it (the server's clock judges). */
typedef int64_t (*idem_clock_fn)(void* arg);
IDEM_EXPORT void idem_options_set_clock(idem_options_t* options, idem_clock_fn now_us, void* arg);

/* ---- Store -------------------------------------------------------------------------------- */

/* Opens the store in directory `path`, or the store in PostgreSQL that `path` names when it is
 * a libpq connection URI (postgresql://... or postgres://...); `options` may be NULL for the
 * defaults and may be destroyed after the call. Returns NULL and sets *errptr on error (which
 * never shows a password of the URI). */
IDEM_EXPORT idem_store_t* idem_open(const char* path, const idem_options_t* options, char** errptr);

/* Closes the handle. NULL is allowed. */
IDEM_EXPORT void idem_close(idem_store_t* store);

/* Claims `key` or reports what an earlier attempt left (idem::Store::Begin). lease_ms and
 * retention_ms: 0 for the store's defaults. Returns a claim to release with
 * idem_claim_destroy, or NULL and sets *errptr on error. */
IDEM_EXPORT idem_claim_t* idem_begin(idem_store_t* store, const char* key, size_t keylen,
                                     const char* type, const char* fingerprint, int64_t lease_ms,
                                     int64_t retention_ms, char** errptr);

IDEM_EXPORT void idem_claim_destroy(idem_claim_t* claim);
/* IDEM_ACQUIRED, IDEM_REPLAY, IDEM_OUTCOME_IN_PROGRESS, IDEM_OUTCOME_FAILED or
 * IDEM_OUTCOME_MISMATCH. */
IDEM_EXPORT int idem_claim_outcome(const idem_claim_t* claim);
/* IDEM_ACQUIRED: the fencing token to pass to idem_complete, idem_fail, ... */
IDEM_EXPORT uint64_t idem_claim_token(const idem_claim_t* claim);
/* IDEM_ACQUIRED after an expired or abandoned attempt. */
IDEM_EXPORT unsigned char idem_claim_took_over(const idem_claim_t* claim);
/* IDEM_OUTCOME_IN_PROGRESS: milliseconds left on the other owner's lease. */
IDEM_EXPORT int64_t idem_claim_retry_after_ms(const idem_claim_t* claim);
/* The record's result: IDEM_REPLAY the stored result, IDEM_OUTCOME_FAILED the error text. */
IDEM_EXPORT const char* idem_claim_result(const idem_claim_t* claim, size_t* len);
/* How many times the key was acquired (1 on the first attempt). */
IDEM_EXPORT uint32_t idem_claim_attempts(const idem_claim_t* claim);
/* The record as stored after the call; owned by the claim. */
IDEM_EXPORT const idem_record_t* idem_claim_record(const idem_claim_t* claim);

/* The four calls below succeed only with the record's current token while it is pending;
 * otherwise IDEM_LEASE_LOST (IDEM_NOT_FOUND without a record). Like every call below that
 * returns int and takes errptr, they return IDEM_OK or the code of the error they stored. */

/* Stores the result and marks the record done. */
IDEM_EXPORT int idem_complete(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                              const char* result, size_t resultlen, char** errptr);
/* Records a failure; kind is IDEM_RETRYABLE or IDEM_TERMINAL. */
IDEM_EXPORT int idem_fail(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                          const char* error, size_t errorlen, int kind, char** errptr);
/* Sets the lease deadline to now + lease_ms (0: the default lease). */
IDEM_EXPORT int idem_extend(idem_store_t* store, const char* key, size_t keylen, uint64_t token,
                            int64_t lease_ms, char** errptr);
/* Stores a recovery point that survives a takeover. */
IDEM_EXPORT int idem_save_checkpoint(idem_store_t* store, const char* key, size_t keylen,
                                     uint64_t token, const char* data, size_t datalen,
                                     char** errptr);

/* Removes a record whatever its state (IDEM_NOT_FOUND if there is none). */
IDEM_EXPORT int idem_forget(idem_store_t* store, const char* key, size_t keylen, char** errptr);
/* idem_forget, only if the record is still the one `record` shows (from idem_get or idem_scan):
 * the same token and updated time. IDEM_CONFLICT when it changed since (nothing is forgotten),
 * IDEM_NOT_FOUND when it is gone (idem::Store::ForgetIfUnchanged). */
IDEM_EXPORT int idem_forget_if_unchanged(idem_store_t* store, const idem_record_t* record,
                                         char** errptr);

/* Removes the records whose retention has expired; returns how many (or, with dry_run, how
 * many it would remove). Returns 0 and sets *errptr on error (idem_last_error_code() tells it
 * from nothing to purge). */
IDEM_EXPORT uint64_t idem_purge(idem_store_t* store, unsigned char dry_run, char** errptr);

/* ---- Counters (idem/counters.h) -------------------------------------------------------------- */

/* How many counters there are, and the name and help text of counter `index` (NULL past the
 * last): the rows of idem::kCounters, in their order, e.g. for a Prometheus /metrics endpoint
 * ("idem_<name>_total"). The strings are static. */
IDEM_EXPORT size_t idem_counter_count(void);
IDEM_EXPORT const char* idem_counter_name(size_t index);
IDEM_EXPORT const char* idem_counter_help(size_t index);
/* The store's counters, kept by the process that owns the store (this one, or the owner asked
 * over its socket): writes min(count, idem_counter_count()) values to values[0..], in the order
 * above, and returns how many it wrote. Returns 0 and sets *errptr when the owner cannot be
 * asked (never zeros in place of its counts). */
IDEM_EXPORT size_t idem_counters(idem_store_t* store, uint64_t* values, size_t count,
                                 char** errptr);

/* The latency histograms (idem::Latencies): how many there are, and the name and help text of
 * histogram `which` (NULL past the last), the rows of idem::kLatencies ("begin", "complete").
 * Their buckets' upper bounds in nanoseconds, the same for every histogram and every release:
 * idem_latency_bound_count() of them, bound `index` (0 past the last); one more bucket counts
 * the calls over the last bound. */
IDEM_EXPORT size_t idem_latency_count(void);
IDEM_EXPORT const char* idem_latency_name(size_t which);
IDEM_EXPORT const char* idem_latency_help(size_t which);
IDEM_EXPORT size_t idem_latency_bound_count(void);
IDEM_EXPORT uint64_t idem_latency_bound_ns(size_t index);
/* Histogram `which` of the process that owns the store (as idem_counters): writes
 * min(count, idem_latency_bound_count() + 1) bucket counts (not cumulative) to buckets[0..],
 * sets *sum_ns to the calls' total time in nanoseconds, and returns how many it wrote. Returns 0
 * and sets *errptr when the owner cannot be asked or `which` is not a histogram. */
IDEM_EXPORT size_t idem_latency(idem_store_t* store, size_t which, uint64_t* buckets, size_t count,
                                uint64_t* sum_ns, char** errptr);

/* Writes a copy of the store, consistent as of one moment, into the new directory
 * `destination` (idem::Store::Backup: it must not exist, its parent must). IDEM_OK, or the
 * error (*errptr set). */
IDEM_EXPORT int idem_backup(idem_store_t* store, const char* destination, char** errptr);

/* ---- Stats (idem::Store::GetStats) ------------------------------------------------------------
 */

/* The live records counted by state and type, the oldest pending one and the engine's health:
 * without reading the records where the owner of a store directory keeps their counts,
 * otherwise by reading every one. To release with idem_stats_destroy; NULL and *errptr set on
 * error. */
IDEM_EXPORT idem_stats_t* idem_stats(idem_store_t* store, char** errptr);
IDEM_EXPORT void idem_stats_destroy(idem_stats_t* stats);
/* Live records in all, and in `state`: "pending", "timeout", "done" or "failed" (0 for another
 * name). */
IDEM_EXPORT uint64_t idem_stats_records(const idem_stats_t* stats);
IDEM_EXPORT uint64_t idem_stats_records_in_state(const idem_stats_t* stats, const char* state);
/* The type labels with a live record, in byte order: how many, the name of the one at `index`
 * (owned by stats; NULL past the last) and its count. */
IDEM_EXPORT size_t idem_stats_type_count(const idem_stats_t* stats);
IDEM_EXPORT const char* idem_stats_type_name(const idem_stats_t* stats, size_t index, size_t* len);
IDEM_EXPORT uint64_t idem_stats_type_records(const idem_stats_t* stats, size_t index);
/* The pending record created first: its key (owned by stats; NULL when nothing is pending) and
 * its creation time. */
IDEM_EXPORT const char* idem_stats_oldest_pending_key(const idem_stats_t* stats, size_t* len);
IDEM_EXPORT int64_t idem_stats_oldest_pending_created_us(const idem_stats_t* stats);
/* When the records were counted, and how exactly: 0 when each was read; otherwise the owner's
 * kept counts, a done or failed record counted up to this long after its retention passed. */
IDEM_EXPORT int64_t idem_stats_at_us(const idem_stats_t* stats);
IDEM_EXPORT int64_t idem_stats_precision_ms(const idem_stats_t* stats);
/* 1 when the store has an engine of its own (a store directory: RocksDB), whose health the
 * next five give; 0 for PostgreSQL (they are then 0). The damaged table files are those the
 * owner found (idem::EngineHealth::damage; idem_health_problem names the first). */
IDEM_EXPORT unsigned char idem_stats_engine_known(const idem_stats_t* stats);
IDEM_EXPORT unsigned char idem_stats_writes_stopped(const idem_stats_t* stats);
IDEM_EXPORT uint64_t idem_stats_pending_compaction_bytes(const idem_stats_t* stats);
IDEM_EXPORT uint64_t idem_stats_live_table_bytes(const idem_stats_t* stats);
IDEM_EXPORT uint64_t idem_stats_total_table_bytes(const idem_stats_t* stats);
IDEM_EXPORT uint64_t idem_stats_damaged_table_files(const idem_stats_t* stats);

/* ---- Check (idem::Store::Check) ------------------------------------------------------------ */

/* Reads the whole store and says what is wrong with it: table files whose checksums do not match,
 * records and table values that do not decode, the expiry index against the records, tokens
 * against the token ceiling. What is wrong with the store is in the answer (findings), not in
 * *errptr: to release with idem_check_destroy; NULL and *errptr set only when the check could not
 * run (IDEM_BUSY: another process owns the store directory; check a backup of it instead). */
IDEM_EXPORT idem_check_t* idem_check(idem_store_t* store, char** errptr);
IDEM_EXPORT void idem_check_destroy(idem_check_t* check);
/* 1 when nothing was found. What was read: table files, records, index entries, table values;
 * and how long the check took. */
IDEM_EXPORT unsigned char idem_check_clean(const idem_check_t* check);
IDEM_EXPORT uint64_t idem_check_files(const idem_check_t* check);
IDEM_EXPORT uint64_t idem_check_records(const idem_check_t* check);
IDEM_EXPORT uint64_t idem_check_index_entries(const idem_check_t* check);
IDEM_EXPORT uint64_t idem_check_table_values(const idem_check_t* check);
IDEM_EXPORT int64_t idem_check_took_ms(const idem_check_t* check);
/* The findings listed (up to 1,000), and how many more were found beyond them. Each: its part
 * ("file", "record", "index", "table", "tokens", "meta" or "read"), what it is about (a file's
 * name or a key, raw bytes; length 0 when about the part as a whole) and what is wrong; each
 * string owned by check, NULL for an index past the last. */
IDEM_EXPORT size_t idem_check_finding_count(const idem_check_t* check);
IDEM_EXPORT uint64_t idem_check_findings_left_out(const idem_check_t* check);
IDEM_EXPORT const char* idem_check_finding_part(const idem_check_t* check, size_t index);
IDEM_EXPORT const char* idem_check_finding_subject(const idem_check_t* check, size_t index,
                                                   size_t* len);
IDEM_EXPORT const char* idem_check_finding_problem(const idem_check_t* check, size_t index);

/* ---- Health (idem::Store::Health) --------------------------------------------------------- */

/* Probes the store: a read, then, when it is answered and the store was not opened read-only,
 * whether a claim would be taken now (nothing is written); each within the request timeout.
 * What went wrong with the store is in the answer, not in *errptr: to release with
 * idem_health_destroy; NULL (and *errptr set) only when no answer could be made. */
IDEM_EXPORT idem_health_t* idem_health(idem_store_t* store, char** errptr);
IDEM_EXPORT void idem_health_destroy(idem_health_t* health);
/* 1 when the read was answered (by this process, the store's owner, its files or the server). */
IDEM_EXPORT unsigned char idem_health_can_read(const idem_health_t* health);
/* 1 when a claim would be taken: not read-only, not over max_disk_bytes, writes not stopped by
 * a full disk, not a read-only PostgreSQL. */
IDEM_EXPORT unsigned char idem_health_can_write(const idem_health_t* health);
/* Why can_read or can_write is 0: the IDEM_* code a read or a claim would get and its message
 * (owned by health); IDEM_OK and "" when both are 1. */
IDEM_EXPORT int idem_health_problem_code(const idem_health_t* health);
IDEM_EXPORT const char* idem_health_problem(const idem_health_t* health);
/* The process that owns the store directory: 1 when one answered, its pid (0 when not visible
 * from this PID namespace) and since when it has owned the store (0 when none answered; always
 * none for a store in PostgreSQL). */
IDEM_EXPORT unsigned char idem_health_owner_live(const idem_health_t* health);
IDEM_EXPORT int64_t idem_health_owner_pid(const idem_health_t* health);
IDEM_EXPORT int64_t idem_health_owner_since_us(const idem_health_t* health);
/* The last failure of the store (IDEM_IO_ERROR, IDEM_CORRUPTION, IDEM_UNAVAILABLE,
 * IDEM_TIMED_OUT, IDEM_BUSY, IDEM_NEWER_VERSION) that a call on it met in this process, its
 * message (owned by health) and when (IDEM_OK, "" and 0 when there was none). */
IDEM_EXPORT int idem_health_last_error_code(const idem_health_t* health);
IDEM_EXPORT const char* idem_health_last_error(const idem_health_t* health);
IDEM_EXPORT int64_t idem_health_last_error_at_us(const idem_health_t* health);
/* How long the probes took, in milliseconds. */
IDEM_EXPORT int64_t idem_health_took_ms(const idem_health_t* health);

/* ---- Records ------------------------------------------------------------------------------ */

/* The record of `key`, to release with idem_record_destroy; NULL when there is none (errptr
 * untouched) or on error (*errptr set). */
IDEM_EXPORT idem_record_t* idem_get(idem_store_t* store, const char* key, size_t keylen,
                                    char** errptr);

IDEM_EXPORT void idem_record_destroy(idem_record_t* record);
IDEM_EXPORT const char* idem_record_key(const idem_record_t* record, size_t* len);
IDEM_EXPORT const char* idem_record_type(const idem_record_t* record, size_t* len);
/* IDEM_STATE_PENDING, IDEM_STATE_DONE or IDEM_STATE_FAILED. */
IDEM_EXPORT int idem_record_state(const idem_record_t* record);
/* Pending and its lease has passed ("timeout"). */
IDEM_EXPORT unsigned char idem_record_timed_out(const idem_record_t* record);
/* Done: the result; failed: the error text; pending: empty. */
IDEM_EXPORT const char* idem_record_result(const idem_record_t* record, size_t* len);
IDEM_EXPORT const char* idem_record_fingerprint(const idem_record_t* record, size_t* len);
IDEM_EXPORT const char* idem_record_checkpoint(const idem_record_t* record, size_t* len);
IDEM_EXPORT uint64_t idem_record_token(const idem_record_t* record);
IDEM_EXPORT uint32_t idem_record_attempts(const idem_record_t* record);
/* A failed record that the next idem_begin acquires again. */
IDEM_EXPORT unsigned char idem_record_retryable(const idem_record_t* record);
IDEM_EXPORT int64_t idem_record_created_us(const idem_record_t* record);
IDEM_EXPORT int64_t idem_record_updated_us(const idem_record_t* record);
IDEM_EXPORT int64_t idem_record_lease_deadline_us(const idem_record_t* record);
IDEM_EXPORT int64_t idem_record_expires_us(const idem_record_t* record);

/* Calls visit(arg, record) with each live record whose key starts with `prefix` (prefixlen 0:
 * every one), in key order, after the key `start_after` (start_afterlen 0: from the first),
 * until visit returns 0 (idem::Store::Scan: read in pages, not one snapshot). The record is
 * valid during the call only. IDEM_OK, or the error (*errptr set). */
typedef int (*idem_scan_fn)(void* arg, const idem_record_t* record);
IDEM_EXPORT int idem_scan(idem_store_t* store, const char* prefix, size_t prefixlen,
                          const char* start_after, size_t start_afterlen, idem_scan_fn visit,
                          void* arg, char** errptr);

/* A record to fill in and import (idem_import), to release with idem_record_destroy: every
 * field empty or 0, state IDEM_STATE_PENDING. The setters copy what they are given. */
IDEM_EXPORT idem_record_t* idem_record_create(void);
IDEM_EXPORT void idem_record_set_key(idem_record_t* record, const char* key, size_t len);
IDEM_EXPORT void idem_record_set_type(idem_record_t* record, const char* type, size_t len);
IDEM_EXPORT void idem_record_set_state(idem_record_t* record, int state);
IDEM_EXPORT void idem_record_set_result(idem_record_t* record, const char* result, size_t len);
IDEM_EXPORT void idem_record_set_fingerprint(idem_record_t* record, const char* fingerprint,
                                             size_t len);
IDEM_EXPORT void idem_record_set_checkpoint(idem_record_t* record, const char* checkpoint,
                                            size_t len);
IDEM_EXPORT void idem_record_set_token(idem_record_t* record, uint64_t token);
IDEM_EXPORT void idem_record_set_attempts(idem_record_t* record, uint32_t attempts);
IDEM_EXPORT void idem_record_set_retryable(idem_record_t* record, unsigned char retryable);
IDEM_EXPORT void idem_record_set_created_us(idem_record_t* record, int64_t us);
IDEM_EXPORT void idem_record_set_updated_us(idem_record_t* record, int64_t us);
IDEM_EXPORT void idem_record_set_lease_deadline_us(idem_record_t* record, int64_t us);
IDEM_EXPORT void idem_record_set_expires_us(idem_record_t* record, int64_t us);

/* What idem_import did with one record: the values of idem::ImportOutcome. */
#define IDEM_IMPORTED 0
#define IDEM_PRESENT 1
#define IDEM_EXPIRED 2
/* Writes `count` records as they are given (idem::Store::Import, what `idem import` does): a key
 * that holds a live record is left as it is (IDEM_PRESENT), a record whose retention has passed
 * is not written (IDEM_EXPIRED); outcomes[i] (when outcomes is not NULL) gets what was done with
 * records[i]. Every record is checked before any is written. IDEM_OK, or the error (*errptr
 * set; IDEM_INVALID_ARGUMENT naming the first bad record writes nothing). */
IDEM_EXPORT int idem_import(idem_store_t* store, const idem_record_t* const* records, size_t count,
                            int* outcomes, char** errptr);

/* ---- Application tables (idem/tables.h, docs/semantics.md "Exactly-once effects") --------- */

/* Writes to stage for idem_complete_with_writes; release with idem_writeset_destroy. */
IDEM_EXPORT idem_writeset_t* idem_writeset_create(void);
IDEM_EXPORT void idem_writeset_destroy(idem_writeset_t* writes);
/* Stages key := value in `table` (a NUL-terminated name: 1 to 64 letters, digits, '_', '-',
 * '.'); when has_version is 1, only if the key is still at if_version (0: never written) when
 * the Complete applies; 0: unconditional. */
IDEM_EXPORT void idem_writeset_put(idem_writeset_t* writes, const char* table, const char* key,
                                   size_t keylen, const char* value, size_t valuelen,
                                   unsigned char has_version, uint64_t if_version);
/* Stages the deletion of key in `table` (its version still rises), under the same condition. */
IDEM_EXPORT void idem_writeset_delete(idem_writeset_t* writes, const char* table, const char* key,
                                      size_t keylen, unsigned char has_version,
                                      uint64_t if_version);
/* Writes nothing to key in `table`, but applies the Complete only if the key is still at
 * `version` (0: never written) (idem::WriteSet::Require): for a key read and not written, so
 * that the Complete commits only if nothing it decided on has changed. */
IDEM_EXPORT void idem_writeset_require(idem_writeset_t* writes, const char* table, const char* key,
                                       size_t keylen, uint64_t version);
/* idem_complete, and the staged writes in the same atomic write, applied only if the Complete
 * applies. IDEM_CONFLICT: a conditional write's or a required key changed since it was read;
 * nothing was written and the claim is still the caller's: read again and complete again. */
IDEM_EXPORT int idem_complete_with_writes(idem_store_t* store, const char* key, size_t keylen,
                                          uint64_t token, const char* result, size_t resultlen,
                                          const idem_writeset_t* writes, char** errptr);
/* The value of key in `table` and its version, to release with idem_value_destroy; NULL on
 * error (*errptr set). A key never written (or deleted) is a value that is not present. */
IDEM_EXPORT idem_value_t* idem_get_value(idem_store_t* store, const char* table, const char* key,
                                         size_t keylen, char** errptr);
IDEM_EXPORT void idem_value_destroy(idem_value_t* value);
IDEM_EXPORT unsigned char idem_value_present(const idem_value_t* value);
/* The value's bytes (empty when not present); owned by the value. */
IDEM_EXPORT const char* idem_value_bytes(const idem_value_t* value, size_t* len);
/* 0 while never written; one more at every write of the key, a deletion included. */
IDEM_EXPORT uint64_t idem_value_version(const idem_value_t* value);

/* ---- Execute ------------------------------------------------------------------------------ */

/* The request function that idem_execute runs, at most once per key across threads and
 * processes.
 *
 * On success it returns the result: a buffer of *resultlen bytes allocated with malloc, whose
 * ownership passes to idem (NULL with *resultlen 0 is an empty result). On failure it stores a
 * malloc'd NUL-terminated error text in *errmsg (ownership passes to idem) and returns NULL;
 * the failure is recorded as retryable, or as terminal when it also sets *terminal to 1 (a
 * declined card: later calls return IDEM_FAILED without running it again).
 *
 * `ctx` is idem_execute's ctx. `attempt` is valid during the call only. It runs on the thread
 * that called idem_execute and must not longjmp out. While it runs, its lease is renewed in the
 * background. */
typedef char* (*idem_execute_fn)(void* ctx, idem_attempt_t* attempt, size_t* resultlen,
                                 char** errmsg, unsigned char* terminal);

/* The fencing token of this attempt. */
IDEM_EXPORT uint64_t idem_attempt_token(const idem_attempt_t* attempt);
/* This attempt took over an expired or abandoned one. */
IDEM_EXPORT unsigned char idem_attempt_took_over(const idem_attempt_t* attempt);
/* 1 on the first attempt. */
IDEM_EXPORT uint32_t idem_attempt_attempts(const idem_attempt_t* attempt);
/* 1 while this attempt surely holds its lease (idem::Attempt::LeaseHeld): check it right before
 * a side effect that must not run twice. */
IDEM_EXPORT unsigned char idem_attempt_lease_held(const idem_attempt_t* attempt);
/* The checkpoint saved by an earlier attempt (empty if none). */
IDEM_EXPORT const char* idem_attempt_checkpoint(const idem_attempt_t* attempt, size_t* len);
/* Saves a recovery point for the next owner should this attempt die. Returns IDEM_OK or the
 * error's code. */
IDEM_EXPORT int idem_attempt_save_checkpoint(idem_attempt_t* attempt, const char* data,
                                             size_t datalen, char** errptr);

/* Application-table reads and writes staged inside idem_execute's fn (idem::Attempt::Read, Put,
 * Delete): they apply with the record's Complete, or not at all. A key read first is written
 * only if still at the version read, and a key read and not written must still be at it too
 * (serializable); if another commit changed one meanwhile, idem_execute runs fn again on fresh
 * reads (Options::conflict_retries times, then IDEM_CONFLICT). A re-read in one
 * run of fn returns the first read, or what this run put there. idem_attempt_read returns a
 * value to release with idem_value_destroy (NULL and *errptr set on error); put and delete
 * return IDEM_OK or the error's code. */
IDEM_EXPORT idem_value_t* idem_attempt_read(idem_attempt_t* attempt, const char* table,
                                            const char* key, size_t keylen, char** errptr);
IDEM_EXPORT int idem_attempt_put(idem_attempt_t* attempt, const char* table, const char* key,
                                 size_t keylen, const char* value, size_t valuelen, char** errptr);
IDEM_EXPORT int idem_attempt_delete(idem_attempt_t* attempt, const char* table, const char* key,
                                    size_t keylen, char** errptr);

/* Runs the whole lifecycle of one request (idem::Store::Execute): Begin; when acquired, calls
 * fn and records its result or failure; on a replay returns the stored result without calling
 * fn; while another owner holds the key, waits for its outcome.
 *
 * Returns the result as a malloc'd buffer of *resultlen bytes, NUL-terminated (release with
 * idem_free); *replayed (may be NULL) tells whether it is a stored result; *attempts (may be
 * NULL) is the record's attempt count. On error returns NULL and sets *errptr: the failure text
 * of fn (with the code IDEM_FAILED when terminal, IDEM_UNAVAILABLE otherwise), or
 * IDEM_FAILED for a key that failed terminally before, IDEM_MISMATCH, IDEM_IN_PROGRESS when
 * the wait ran out, and the store's errors. */
IDEM_EXPORT char* idem_execute(idem_store_t* store, const char* key, size_t keylen,
                               const char* type, const char* fingerprint, int64_t lease_ms,
                               int64_t retention_ms, idem_execute_fn fn, void* ctx,
                               size_t* resultlen, unsigned char* replayed, uint32_t* attempts,
                               char** errptr);

/* ---- One-time tokens ---------------------------------------------------------------------- */

/* A fresh token that idem_consume_token accepts once within ttl_ms: a malloc'd NUL-terminated
 * string to release with idem_free. NULL and *errptr set on error. */
IDEM_EXPORT char* idem_issue_token(idem_store_t* store, int64_t ttl_ms, char** errptr);

/* Consumes `token` (NUL-terminated): succeeds for exactly one caller. Errors:
 * IDEM_INVALID_ARGUMENT (malformed), IDEM_NOT_FOUND ("token expired ..." or "unknown token"),
 * IDEM_FAILED ("token already consumed", or being consumed by another caller). Returns IDEM_OK or
 * the error's code. */
IDEM_EXPORT int idem_consume_token(idem_store_t* store, const char* token, char** errptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* IDEM_C_H_ */
