/* Tests of the C API (include/idem/c.h), compiled as C99. Exits non-zero on the first failure,
 * naming it. Uses a fresh temporary store, removed at the end. */

#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "idem/c.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Asserts that err is NULL, printing it otherwise, and frees it. */
#define CHECK_NO_ERROR(err)                                                        \
  do {                                                                             \
    if ((err) != NULL) {                                                           \
      fprintf(stderr, "%s:%d: unexpected error: %s\n", __FILE__, __LINE__, (err)); \
      ++failures;                                                                  \
      idem_free(err);                                                              \
      (err) = NULL;                                                                \
    }                                                                              \
  } while (0)

/* Asserts that the last call failed with `code` (as an integer, idem_last_error_code) and
 * stored an error whose text starts with `prefix` in err, and frees it. */
static void check_error(char** err, int code, const char* prefix, int line) {
  const int last = idem_last_error_code();
  if (*err == NULL) {
    fprintf(stderr, "c_api_test.c:%d: expected error %s, got none\n", line, idem_code_name(code));
    ++failures;
    return;
  }
  if (last != code || strncmp(*err, prefix, strlen(prefix)) != 0) {
    fprintf(stderr, "c_api_test.c:%d: expected \"%s...\" (%s), got \"%s\" (%s)\n", line, prefix,
            idem_code_name(code), *err, idem_code_name(last));
    ++failures;
  }
  /* The deprecated reading of the text agrees. */
  if (idem_error_code(*err) != code) {
    fprintf(stderr, "c_api_test.c:%d: idem_error_code(\"%s\") is %d\n", line, *err,
            idem_error_code(*err));
    ++failures;
  }
  idem_free(*err);
  *err = NULL;
}
#define CHECK_ERROR(err, code, prefix) check_error(&(err), (code), (prefix), __LINE__)

static int remove_entry(const char* path, const struct stat* info, int flag, struct FTW* ftw) {
  (void)info;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* ---- Execute callbacks ---- */

struct counter {
  int runs;
};

/* Adds 5 to the balance "carol" through the attempt's staged writes, and deletes "dave". */
static char* credit_carol(void* ctx, idem_attempt_t* attempt, size_t* resultlen, char** errmsg,
                          unsigned char* terminal) {
  struct counter* counter = (struct counter*)ctx;
  char* err = NULL;
  char text[32];
  size_t len = 0;
  long balance = 0;
  const char* bytes;
  idem_value_t* value = idem_attempt_read(attempt, "balances", "carol", 5, &err);
  (void)terminal;
  counter->runs++;
  if (value == NULL) {
    *errmsg = err;
    return NULL;
  }
  bytes = idem_value_bytes(value, &len);
  if (idem_value_present(value)) balance = strtol(bytes, NULL, 10);
  idem_value_destroy(value);
  snprintf(text, sizeof text, "%ld", balance + 5);
  if (idem_attempt_put(attempt, "balances", "carol", 5, text, strlen(text), &err) != IDEM_OK ||
      idem_attempt_delete(attempt, "balances", "dave", 4, &err) != IDEM_OK) {
    *errmsg = err;
    return NULL;
  }
  *resultlen = strlen(text);
  return strdup(text);
}

static char* make_receipt(void* ctx, idem_attempt_t* attempt, size_t* resultlen, char** errmsg,
                          unsigned char* terminal) {
  struct counter* counter = (struct counter*)ctx;
  char* result = (char*)malloc(8);
  (void)errmsg;
  (void)terminal;
  counter->runs++;
  if (idem_attempt_attempts(attempt) < 1 || idem_attempt_token(attempt) == 0) return NULL;
  if (!idem_attempt_lease_held(attempt)) return NULL;
  memcpy(result, "receipt", 7);
  *resultlen = 7;
  return result;
}

static char* fail_retryable_once(void* ctx, idem_attempt_t* attempt, size_t* resultlen,
                                 char** errmsg, unsigned char* terminal) {
  struct counter* counter = (struct counter*)ctx;
  char* err = NULL;
  (void)terminal;
  counter->runs++;
  if (counter->runs == 1) {
    idem_attempt_save_checkpoint(attempt, "step-1", 6, &err);
    if (err != NULL) idem_free(err);
    *errmsg = (char*)malloc(16);
    strcpy(*errmsg, "bank timeout");
    return NULL;
  }
  {
    size_t len = 0;
    const char* checkpoint = idem_attempt_checkpoint(attempt, &len);
    char* result = (char*)malloc(len + 1);
    memcpy(result, checkpoint, len + 1);
    *resultlen = len;
    return result;
  }
}

static char* decline(void* ctx, idem_attempt_t* attempt, size_t* resultlen, char** errmsg,
                     unsigned char* terminal) {
  struct counter* counter = (struct counter*)ctx;
  (void)attempt;
  (void)resultlen;
  counter->runs++;
  *errmsg = (char*)malloc(16);
  strcpy(*errmsg, "card declined");
  *terminal = 1;
  return NULL;
}

/* Succeeds after a call of its own that fails (ctx is the store): idem_execute's code must be
 * its own, not that of a call made inside it. */
static char* fail_inside(void* ctx, idem_attempt_t* attempt, size_t* resultlen, char** errmsg,
                         unsigned char* terminal) {
  char* result = (char*)malloc(3);
  (void)attempt;
  (void)errmsg;
  (void)terminal;
  if (idem_forget((idem_store_t*)ctx, "", 0, NULL) != IDEM_INVALID_ARGUMENT) return NULL;
  memcpy(result, "ok", 3);
  *resultlen = 2;
  return result;
}

/* A thread whose failing call must not change another thread's last error code. */
static void* fail_on_another_thread(void* store) {
  char* err = NULL;
  int code = idem_forget((idem_store_t*)store, "", 0, &err);
  idem_free(err);
  return code == IDEM_INVALID_ARGUMENT && idem_last_error_code() == IDEM_INVALID_ARGUMENT ? store
                                                                                          : NULL;
}

/* The clock of test_clock_log_and_setters, in microseconds since the epoch. */
static int64_t now_us(void* arg) { return *(const int64_t*)arg; }

/* Counts the log lines that mention the disk quota (arg: an int), checking each is one line
 * and that the quota's crossing is a warning of its event. */
static void count_quota_lines(void* arg, const idem_log_line_t* line) {
  size_t len = 0;
  size_t event_len = 0;
  const char* message = idem_log_line_message(line, &len);
  const char* event = idem_log_line_event(line, &event_len);
  CHECK(strlen(message) == len && strchr(message, '\n') == NULL);
  CHECK(strlen(event) == event_len);
  if (strstr(message, "reached its disk quota") != NULL) {
    CHECK(strcmp(event, "disk_quota_reached") == 0);
    CHECK(idem_log_line_severity(line) == IDEM_LOG_WARNING);
  }
  if (strstr(message, "disk quota") != NULL) ++*(int*)arg;
}

/* Every Options setter is taken; an injected clock judges retention; the log callback hears
 * the quota crossed. */
static void test_clock_log_and_setters(const char* dir) {
  char path[256];
  char* err = NULL;
  int64_t clock = (int64_t)1800000000 * 1000000; /* 2027-01-15 */
  int quota_lines = 0;
  idem_options_t* options = idem_options_create();
  idem_store_t* store;
  idem_claim_t* claim;
  idem_record_t* record;
  snprintf(path, sizeof(path), "%s/clocked", dir);
  idem_options_set_clock(options, now_us, &clock);
  idem_options_set_open_unfinished_import(options, 0);
  idem_options_set_max_label_size(options, 64);
  idem_options_set_conflict_retries(options, 3);
  idem_options_set_take_over_dead_holders(options, 1);
  idem_options_set_renewal_grace_ms(options, 1000);
  idem_options_set_failover_timeout_ms(options, 2000);
  idem_options_set_request_timeout_ms(options, 2000);
  idem_options_set_auto_purge_interval_ms(options, 0);
  idem_options_set_reverify_interval_ms(options, 3600000);
  store = idem_open(path, options, &err);
  CHECK_NO_ERROR(err);
  if (store != NULL) {
    claim = idem_begin(store, "k", 1, NULL, NULL, 0, 60000, &err);
    CHECK_NO_ERROR(err);
    CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_ACQUIRED);
    if (claim != NULL) {
      const idem_record_t* claimed = idem_claim_record(claim);
      CHECK(idem_record_created_us(claimed) == clock);
      CHECK(idem_record_expires_us(claimed) == clock + 60000000);
    }
    idem_claim_destroy(claim);
    /* A label over max_label_size is refused. */
    claim = idem_begin(store, "k2", 2,
                       "a-type-label-longer-than-sixty-four-bytes-a-type-label-longer-than-64",
                       NULL, 0, 0, &err);
    CHECK(claim == NULL);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
    clock += 120000000; /* past the retention, by the store's clock only */
    record = idem_get(store, "k", 1, &err);
    CHECK_NO_ERROR(err);
    CHECK(record == NULL);
    idem_record_destroy(record);
    idem_close(store);
  }
  /* The log callback, and NULL restoring stderr. */
  idem_options_set_clock(options, NULL, NULL);
  idem_options_set_log(options, NULL, NULL);
  idem_options_set_log(options, count_quota_lines, &quota_lines);
  idem_options_set_max_disk_bytes(options, 1);
  store = idem_open(path, options, &err);
  idem_options_destroy(options);
  CHECK_NO_ERROR(err);
  if (store != NULL) {
    claim = idem_begin(store, "over", 4, NULL, NULL, 0, 0, &err);
    CHECK(claim == NULL);
    CHECK_ERROR(err, IDEM_UNAVAILABLE, "Unavailable: ");
    CHECK(quota_lines == 1);
    idem_close(store);
  }
}

/* Sums the keys' lengths of the records visited (arg: a size_t) and stops after two. */
static int visit_two(void* arg, const idem_record_t* record) {
  size_t len = 0;
  idem_record_key(record, &len);
  *(size_t*)arg += len;
  return *(size_t*)arg < 2 * 5 ? 1 : 0;
}

/* Scan with a prefix and an early stop, a backup that opens, and an import with each outcome. */
static void test_scan_backup_import(const char* dir) {
  char path[256];
  char backup[256];
  char* err = NULL;
  idem_store_t* store;
  idem_store_t* copy;
  idem_claim_t* claim;
  idem_record_t* record;
  idem_record_t* records[3];
  int outcomes[3] = {-1, -1, -1};
  size_t visited = 0;
  size_t len = 0;
  const int64_t now = (int64_t)time(NULL) * 1000000;
  int i;
  snprintf(path, sizeof(path), "%s/scanned", dir);
  snprintf(backup, sizeof(backup), "%s/scanned-backup", dir);
  store = idem_open(path, NULL, &err);
  CHECK_NO_ERROR(err);
  if (store == NULL) return;
  for (i = 0; i < 3; ++i) {
    char key[16];
    snprintf(key, sizeof(key), "pay-%d", i);
    claim = idem_begin(store, key, 5, NULL, NULL, 0, 0, &err);
    CHECK_NO_ERROR(err);
    if (claim != NULL) {
      CHECK(idem_complete(store, key, 5, idem_claim_token(claim), "ok", 2, &err) == IDEM_OK);
      CHECK_NO_ERROR(err);
    }
    idem_claim_destroy(claim);
  }
  claim = idem_begin(store, "other", 5, NULL, NULL, 0, 0, &err);
  CHECK_NO_ERROR(err);
  idem_claim_destroy(claim);
  CHECK(idem_scan(store, "pay-", 4, NULL, 0, visit_two, &visited, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  CHECK(visited == 10); /* two keys of 5 bytes, then it stopped */
  visited = 0;
  CHECK(idem_scan(store, "pay-", 4, "pay-1", 5, visit_two, &visited, &err) == IDEM_OK);
  CHECK(visited == 5); /* pay-2 only */

  CHECK(idem_backup(store, backup, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  CHECK(idem_backup(store, backup, &err) == IDEM_INVALID_ARGUMENT); /* never overwrites */
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");

  /* Import: a new record, one whose key is live, one whose retention has passed. */
  for (i = 0; i < 3; ++i) {
    records[i] = idem_record_create();
    idem_record_set_state(records[i], IDEM_STATE_DONE);
    idem_record_set_result(records[i], "imported", 8);
    idem_record_set_type(records[i], "pay", 3);
    idem_record_set_fingerprint(records[i], "fp", 2);
    idem_record_set_checkpoint(records[i], "", 0);
    idem_record_set_token(records[i], 1000 + (uint64_t)i);
    idem_record_set_attempts(records[i], 1);
    idem_record_set_retryable(records[i], 0);
    idem_record_set_created_us(records[i], now - 1000000);
    idem_record_set_updated_us(records[i], now - 1000000);
    idem_record_set_lease_deadline_us(records[i], now);
    idem_record_set_expires_us(records[i], now + (int64_t)3600 * 1000000);
  }
  idem_record_set_key(records[0], "moved-1", 7);
  idem_record_set_key(records[1], "pay-0", 5);
  idem_record_set_key(records[2], "moved-2", 7);
  idem_record_set_expires_us(records[2], now - 1000000);
  CHECK(idem_import(store, (const idem_record_t* const*)records, 3, outcomes, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  CHECK(outcomes[0] == IDEM_IMPORTED && outcomes[1] == IDEM_PRESENT && outcomes[2] == IDEM_EXPIRED);
  record = idem_get(store, "moved-1", 7, &err);
  CHECK_NO_ERROR(err);
  CHECK(record != NULL && idem_record_token(record) == 1000);
  CHECK(record != NULL && strcmp(idem_record_result(record, &len), "imported") == 0);
  idem_record_destroy(record);
  /* A bad record (attempts 0, a state that is none) writes nothing. */
  idem_record_set_key(records[0], "moved-3", 7);
  idem_record_set_attempts(records[0], 0);
  CHECK(idem_import(store, (const idem_record_t* const*)records, 1, NULL, &err) ==
        IDEM_INVALID_ARGUMENT);
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
  idem_record_set_attempts(records[0], 1);
  idem_record_set_state(records[0], 258);
  CHECK(idem_import(store, (const idem_record_t* const*)records, 1, NULL, &err) ==
        IDEM_INVALID_ARGUMENT);
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
  record = idem_get(store, "moved-3", 7, &err);
  CHECK_NO_ERROR(err);
  CHECK(record == NULL);
  for (i = 0; i < 3; ++i) idem_record_destroy(records[i]);
  idem_close(store);

  /* The backup opens as a store, with what was there when it was taken. */
  copy = idem_open(backup, NULL, &err);
  CHECK_NO_ERROR(err);
  if (copy != NULL) {
    record = idem_get(copy, "pay-2", 5, &err);
    CHECK_NO_ERROR(err);
    CHECK(record != NULL && idem_record_state(record) == IDEM_STATE_DONE);
    idem_record_destroy(record);
    record = idem_get(copy, "moved-1", 7, &err);
    CHECK(record == NULL);
    idem_record_destroy(record);
    idem_close(copy);
  }
}

int main(void) {
  char dir_template[200];
  const char* tmpdir = getenv("TMPDIR");
  char path[256];
  char* err = NULL;
  idem_options_t* options;
  idem_store_t* store;
  idem_claim_t* claim;
  idem_record_t* record;
  size_t len = 0;
  const char* text;
  uint64_t token;

  /* $TMPDIR, as the other tests (scripts/cross.sh points it at a tmpfs), or /tmp. */
  snprintf(dir_template, sizeof(dir_template), "%s/idem_c_api_test_XXXXXX",
           tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
  if (mkdtemp(dir_template) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(path, sizeof(path), "%s/store", dir_template);

  /* The version: the project's (compiled in by tests/CMakeLists.txt). */
  CHECK(strcmp(idem_version(), IDEM_EXPECTED_VERSION) == 0);
  {
    int major = -1, minor = -1, patch = -1;
    CHECK(sscanf(idem_version(), "%d.%d.%d", &major, &minor, &patch) == 3);
    CHECK(idem_version_number() == major * 1000000 + minor * 1000 + patch);
  }

  /* Codes and names. */
  CHECK(idem_last_error_code() == IDEM_OK);
  CHECK(idem_error_code(NULL) == IDEM_OK);
  CHECK(strcmp(idem_code_name(IDEM_INVALID_ARGUMENT), "InvalidArgument") == 0);
  CHECK(strcmp(idem_code_name(IDEM_UNAVAILABLE), "Unavailable") == 0);
  CHECK(strcmp(idem_code_name(99), "Unknown") == 0);
  CHECK(strcmp(idem_code_name(IDEM_UNKNOWN_ERROR), "Unknown") == 0);
  /* The deprecated parser knows idem's texts and nothing else: "oops" is not Unavailable. */
  CHECK(idem_error_code("NotFound: no such key") == IDEM_NOT_FOUND);
  CHECK(idem_error_code("Unavailable: try later") == IDEM_UNAVAILABLE);
  CHECK(idem_error_code("oops") == IDEM_UNKNOWN_ERROR);
  CHECK(idem_error_code("") == IDEM_UNKNOWN_ERROR);
  CHECK(idem_error_code("NotFound") == IDEM_UNKNOWN_ERROR);
  CHECK(idem_error_code("Unknown: x") == IDEM_UNKNOWN_ERROR);

  /* Opening: a missing store without create_if_missing is NotFound. */
  options = idem_options_create();
  idem_options_set_create_if_missing(options, 0);
  store = idem_open(path, options, &err);
  CHECK(store == NULL);
  CHECK_ERROR(err, IDEM_NOT_FOUND, "NotFound: ");

  idem_options_set_create_if_missing(options, 1);
  /* A sync interval that cannot be is refused, naming it. */
  idem_options_set_durability(options, IDEM_PERIODIC);
  idem_options_set_sync_interval_ms(options, -5);
  store = idem_open(path, options, &err);
  CHECK(store == NULL);
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: sync_interval is -5 ms");
  idem_options_set_sync_interval_ms(options, 50);
  idem_options_set_durability(options, IDEM_BUFFERED);
  idem_options_set_default_lease_ms(options, 5000);
  idem_options_set_default_retention_ms(options, 3600 * 1000);
  idem_options_set_auto_purge_interval_ms(options, 0);
  idem_options_set_execute_wait_ms(options, 2000);
  store = idem_open(path, options, &err);
  idem_options_destroy(options);
  CHECK_NO_ERROR(err);
  if (store == NULL) return 1;

  /* An empty key is an error whose string the caller frees. */
  claim = idem_begin(store, "", 0, NULL, NULL, 0, 0, &err);
  CHECK(claim == NULL);
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: key is empty");
  /* Without errptr the code is still there; the next call that succeeds resets it. */
  claim = idem_begin(store, "", 0, NULL, NULL, 0, 0, NULL);
  CHECK(claim == NULL && idem_last_error_code() == IDEM_INVALID_ARGUMENT);
  CHECK(idem_forget(store, "", 0, NULL) == IDEM_INVALID_ARGUMENT);
  record = idem_get(store, "absent", 6, NULL);
  CHECK(record == NULL && idem_last_error_code() == IDEM_OK);
  /* The code is per thread. */
  CHECK(idem_forget(store, "absent", 6, NULL) == IDEM_NOT_FOUND);
  {
    pthread_t thread;
    void* thread_ok = NULL;
    CHECK(pthread_create(&thread, NULL, fail_on_another_thread, store) == 0);
    CHECK(pthread_join(thread, &thread_ok) == 0);
    CHECK(thread_ok == store);
    CHECK(idem_last_error_code() == IDEM_NOT_FOUND);
  }
  /* An error replaces (and frees) an earlier one left in *errptr. */
  err = (char*)malloc(4);
  strcpy(err, "old");
  claim = idem_begin(store, "", 0, NULL, NULL, 0, 0, &err);
  CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");

  /* Begin -> acquired, Complete, then Begin -> replay. */
  claim = idem_begin(store, "order-1", 7, "pay", "fp-1", 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL);
  if (claim == NULL) return 1;
  CHECK(idem_claim_outcome(claim) == IDEM_ACQUIRED);
  CHECK(idem_claim_attempts(claim) == 1);
  CHECK(!idem_claim_took_over(claim));
  token = idem_claim_token(claim);
  CHECK(token != 0);
  text = idem_record_type(idem_claim_record(claim), &len);
  CHECK(len == 3 && strcmp(text, "pay") == 0);
  idem_claim_destroy(claim);

  CHECK(idem_save_checkpoint(store, "order-1", 7, token, "half", 4, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  CHECK(idem_extend(store, "order-1", 7, token, 10000, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  /* A second caller sees the live lease. */
  claim = idem_begin(store, "order-1", 7, "pay", "fp-1", 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_OUTCOME_IN_PROGRESS);
  CHECK(claim != NULL && idem_claim_retry_after_ms(claim) > 0);
  idem_claim_destroy(claim);
  /* A stale token is LeaseLost. */
  CHECK(idem_complete(store, "order-1", 7, token + 1000, "x", 1, &err) == IDEM_LEASE_LOST);
  CHECK_ERROR(err, IDEM_LEASE_LOST, "LeaseLost: ");
  CHECK(idem_extend(store, "order-1", 7, token + 1000, 0, &err) == IDEM_LEASE_LOST);
  CHECK_ERROR(err, IDEM_LEASE_LOST, "LeaseLost: ");

  CHECK(idem_complete(store, "order-1", 7, token, "receipt\0binary", 14, &err) == IDEM_OK);
  CHECK(idem_last_error_code() == IDEM_OK);
  CHECK_NO_ERROR(err);
  claim = idem_begin(store, "order-1", 7, "pay", "fp-1", 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_REPLAY);
  if (claim != NULL) {
    text = idem_claim_result(claim, &len);
    CHECK(len == 14 && memcmp(text, "receipt\0binary", 14) == 0);
  }
  idem_claim_destroy(claim);

  /* A different fingerprint is a mismatch. */
  claim = idem_begin(store, "order-1", 7, "pay", "fp-2", 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_OUTCOME_MISMATCH);
  idem_claim_destroy(claim);

  /* Get. */
  record = idem_get(store, "order-1", 7, &err);
  CHECK_NO_ERROR(err);
  CHECK(record != NULL);
  if (record != NULL) {
    CHECK(idem_record_state(record) == IDEM_STATE_DONE);
    CHECK(idem_record_token(record) == token);
    CHECK(idem_record_attempts(record) == 1);
    CHECK(!idem_record_timed_out(record));
    text = idem_record_key(record, &len);
    CHECK(len == 7 && strcmp(text, "order-1") == 0);
    text = idem_record_checkpoint(record, NULL);
    CHECK(strcmp(text, "half") == 0);
    text = idem_record_fingerprint(record, NULL);
    CHECK(strcmp(text, "fp-1") == 0);
    CHECK(idem_record_created_us(record) > 0);
    CHECK(idem_record_updated_us(record) >= idem_record_created_us(record));
    CHECK(idem_record_expires_us(record) > idem_record_lease_deadline_us(record));
  }
  idem_record_destroy(record);
  record = idem_get(store, "absent", 6, &err);
  CHECK(record == NULL);
  CHECK_NO_ERROR(err);

  /* Keys are bytes: a NUL inside is part of the key. */
  claim = idem_begin(store, "a\0b", 3, NULL, NULL, 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_ACQUIRED);
  idem_claim_destroy(claim);
  record = idem_get(store, "a", 1, &err);
  CHECK(record == NULL);
  CHECK_NO_ERROR(err);

  /* Fail retryable -> acquired again; fail terminal -> failed for good. */
  claim = idem_begin(store, "order-2", 7, NULL, NULL, 0, 0, &err);
  CHECK_NO_ERROR(err);
  if (claim == NULL) return 1;
  CHECK(idem_fail(store, "order-2", 7, idem_claim_token(claim), "timeout", 7, IDEM_RETRYABLE,
                  &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  idem_claim_destroy(claim);
  claim = idem_begin(store, "order-2", 7, NULL, NULL, 0, 0, &err);
  CHECK_NO_ERROR(err);
  if (claim == NULL) return 1;
  CHECK(idem_claim_outcome(claim) == IDEM_ACQUIRED);
  CHECK(idem_claim_attempts(claim) == 2);
  idem_fail(store, "order-2", 7, idem_claim_token(claim), "declined", 8, IDEM_TERMINAL, &err);
  CHECK_NO_ERROR(err);
  idem_claim_destroy(claim);
  claim = idem_begin(store, "order-2", 7, NULL, NULL, 0, 0, &err);
  CHECK_NO_ERROR(err);
  CHECK(claim != NULL && idem_claim_outcome(claim) == IDEM_OUTCOME_FAILED);
  if (claim != NULL) CHECK(strcmp(idem_claim_result(claim, NULL), "declined") == 0);
  idem_claim_destroy(claim);

  /* Forget. */
  CHECK(idem_forget(store, "order-2", 7, &err) == IDEM_OK);
  CHECK_NO_ERROR(err);
  CHECK(idem_forget(store, "order-2", 7, &err) == IDEM_NOT_FOUND);
  CHECK_ERROR(err, IDEM_NOT_FOUND, "NotFound: ");

  /* Execute: runs once, then replays. */
  {
    struct counter counter = {0};
    size_t resultlen = 0;
    unsigned char replayed = 9;
    uint32_t attempts = 0;
    char* result = idem_execute(store, "exec-1", 6, "pay", NULL, 0, 0, make_receipt, &counter,
                                &resultlen, &replayed, &attempts, &err);
    CHECK_NO_ERROR(err);
    CHECK(result != NULL && resultlen == 7 && strcmp(result, "receipt") == 0);
    CHECK(replayed == 0 && attempts == 1);
    idem_free(result);
    result = idem_execute(store, "exec-1", 6, "pay", NULL, 0, 0, make_receipt, &counter, &resultlen,
                          &replayed, &attempts, &err);
    CHECK_NO_ERROR(err);
    CHECK(result != NULL && strcmp(result, "receipt") == 0);
    CHECK(replayed == 1);
    CHECK(counter.runs == 1);
    idem_free(result);
  }
  /* Execute: a retryable failure is recorded and reported; the next call runs again and sees
   * the checkpoint. */
  {
    struct counter counter = {0};
    size_t resultlen = 0;
    uint32_t attempts = 0;
    char* result = idem_execute(store, "exec-2", 6, NULL, NULL, 0, 0, fail_retryable_once, &counter,
                                &resultlen, NULL, &attempts, &err);
    CHECK(result == NULL);
    CHECK_ERROR(err, IDEM_UNAVAILABLE, "Unavailable: bank timeout");
    result = idem_execute(store, "exec-2", 6, NULL, NULL, 0, 0, fail_retryable_once, &counter,
                          &resultlen, NULL, &attempts, &err);
    CHECK_NO_ERROR(err);
    CHECK(result != NULL && strcmp(result, "step-1") == 0 && resultlen == 6);
    CHECK(attempts == 2 && counter.runs == 2);
    idem_free(result);
  }
  /* Execute: its code is its own, whatever the calls made inside its callback returned. */
  {
    char* result = idem_execute(store, "exec-nested", 11, NULL, NULL, 0, 0, fail_inside, store,
                                NULL, NULL, NULL, &err);
    CHECK_NO_ERROR(err);
    CHECK(result != NULL && strcmp(result, "ok") == 0);
    CHECK(idem_last_error_code() == IDEM_OK);
    idem_free(result);
  }
  /* Execute: a terminal failure is final and does not run again. */
  {
    struct counter counter = {0};
    char* result = idem_execute(store, "exec-3", 6, NULL, NULL, 0, 0, decline, &counter, NULL, NULL,
                                NULL, &err);
    CHECK(result == NULL);
    CHECK_ERROR(err, IDEM_FAILED, "Failed: card declined");
    result = idem_execute(store, "exec-3", 6, NULL, NULL, 0, 0, decline, &counter, NULL, NULL, NULL,
                          &err);
    CHECK(result == NULL);
    CHECK_ERROR(err, IDEM_FAILED, "Failed: card declined");
    CHECK(counter.runs == 1);
    result = idem_execute(store, "exec-4", 6, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, &err);
    CHECK(result == NULL);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
  }

  /* One-time tokens. */
  {
    char* tok = idem_issue_token(store, 60000, &err);
    CHECK_NO_ERROR(err);
    CHECK(tok != NULL && strncmp(tok, "tok_", 4) == 0);
    if (tok != NULL) {
      CHECK(idem_consume_token(store, tok, &err) == IDEM_OK);
      CHECK_NO_ERROR(err);
      CHECK(idem_consume_token(store, tok, &err) == IDEM_FAILED);
      CHECK_ERROR(err, IDEM_FAILED, "Failed: token already consumed");
      tok[4] = tok[4] == 'a' ? 'b' : 'a';
      idem_consume_token(store, tok, &err);
      CHECK_ERROR(err, IDEM_NOT_FOUND, "NotFound: unknown token");
    }
    idem_free(tok);
    idem_consume_token(store, "not-a-token", &err);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: malformed token");
    tok = idem_issue_token(store, 0, &err);
    CHECK(tok == NULL);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
    tok = idem_issue_token(store, 1, &err);
    CHECK_NO_ERROR(err);
    {
      struct timespec pause = {0, 5000000L};
      nanosleep(&pause, NULL);
    }
    idem_consume_token(store, tok, &err);
    CHECK_ERROR(err, IDEM_NOT_FOUND, "NotFound: token expired");
    idem_free(tok);
  }

  /* Purge (nothing has expired except the 1 ms token's record). */
  {
    uint64_t purged = idem_purge(store, 1, &err);
    CHECK_NO_ERROR(err);
    CHECK(purged <= 1);
  }

  /* Counters: the table's names in order, and this store's counts (its owner is this process). */
  {
    uint64_t values[32];
    size_t i;
    size_t written;
    size_t claims_row = 99;
    CHECK(idem_counter_count() >= 8 && idem_counter_count() <= 32);
    CHECK(strcmp(idem_counter_name(0), "claims") == 0);
    CHECK(strstr(idem_counter_help(0), "acquired") != NULL);
    CHECK(idem_counter_name(idem_counter_count()) == NULL);
    CHECK(idem_counter_help(idem_counter_count()) == NULL);
    for (i = 0; i < 32; ++i) values[i] = 12345;
    written = idem_counters(store, values, 32, &err);
    CHECK_NO_ERROR(err);
    CHECK(written == idem_counter_count());
    CHECK(values[written] == 12345);
    for (i = 0; i < written; ++i) {
      if (strcmp(idem_counter_name(i), "claims") == 0) claims_row = i;
    }
    CHECK(claims_row == 0);
    CHECK(values[claims_row] >= 1);
    /* A shorter array gets only what fits. */
    values[1] = 12345;
    CHECK(idem_counters(store, values, 1, &err) == 1);
    CHECK_NO_ERROR(err);
    CHECK(values[1] == 12345);
  }

  /* Latency histograms: their names and bounds, and this store's Begin times, one bucket per
   * call (every Begin above was answered with an outcome). */
  {
    uint64_t buckets[20];
    uint64_t sum_ns = 0;
    uint64_t calls = 0;
    size_t i;
    size_t written;
    CHECK(idem_latency_count() == 2);
    CHECK(strcmp(idem_latency_name(0), "begin") == 0);
    CHECK(strcmp(idem_latency_name(1), "complete") == 0);
    CHECK(idem_latency_name(2) == NULL);
    CHECK(strstr(idem_latency_help(0), "Begin") != NULL);
    CHECK(idem_latency_bound_count() == 13);
    CHECK(idem_latency_bound_ns(0) == 50000);
    CHECK(idem_latency_bound_ns(12) == 1000000000);
    CHECK(idem_latency_bound_ns(13) == 0);
    for (i = 0; i < 20; ++i) buckets[i] = 12345;
    written = idem_latency(store, 0, buckets, 20, &sum_ns, &err);
    CHECK_NO_ERROR(err);
    CHECK(written == idem_latency_bound_count() + 1);
    CHECK(buckets[written] == 12345);
    for (i = 0; i < written; ++i) calls += buckets[i];
    CHECK(calls >= 1);
    CHECK(sum_ns > 0);
    /* No such histogram: an error that says so. */
    CHECK(idem_latency(store, 2, buckets, 20, &sum_ns, &err) == 0);
    CHECK(err != NULL && strstr(err, "no latency histogram 2") != NULL);
    idem_free(err);
    err = NULL;
  }

  /* Health: this process owns the store, which reads and writes; no call has failed. */
  {
    idem_health_t* health = idem_health(store, &err);
    CHECK_NO_ERROR(err);
    CHECK(health != NULL);
    if (health != NULL) {
      CHECK(idem_health_can_read(health) == 1);
      CHECK(idem_health_can_write(health) == 1);
      CHECK(idem_health_problem_code(health) == IDEM_OK);
      CHECK(strcmp(idem_health_problem(health), "") == 0);
      CHECK(idem_health_owner_live(health) == 1);
      CHECK(idem_health_owner_pid(health) == (int64_t)getpid());
      CHECK(idem_health_owner_since_us(health) > 0);
      CHECK(idem_health_owner_since_us(health) <= (int64_t)time(NULL) * 1000000 + 1000000);
      CHECK(idem_health_last_error_code(health) == IDEM_OK);
      CHECK(strcmp(idem_health_last_error(health), "") == 0);
      CHECK(idem_health_last_error_at_us(health) == 0);
      CHECK(idem_health_took_ms(health) >= 0);
    }
    idem_health_destroy(health);
    idem_health_destroy(NULL);
  }

  /* Application tables: writes committed with a Complete, versions, a conflict. */
  {
    idem_writeset_t* writes = idem_writeset_create();
    idem_value_t* value;
    claim = idem_begin(store, "table-1", 7, NULL, NULL, 0, 0, &err);
    CHECK_NO_ERROR(err);
    token = claim != NULL ? idem_claim_token(claim) : 0;
    idem_claim_destroy(claim);
    idem_writeset_put(writes, "balances", "alice", 5, "10", 2, 1, 0);
    idem_writeset_put(writes, "balances", "bob", 3, "5", 1, 0, 0);
    CHECK(idem_complete_with_writes(store, "table-1", 7, token, "ok", 2, writes, &err) == IDEM_OK);
    CHECK_NO_ERROR(err);
    idem_writeset_destroy(writes);
    value = idem_get_value(store, "balances", "alice", 5, &err);
    CHECK_NO_ERROR(err);
    CHECK(value != NULL && idem_value_present(value) && idem_value_version(value) == 1);
    text = value != NULL ? idem_value_bytes(value, &len) : NULL;
    CHECK(text != NULL && len == 2 && memcmp(text, "10", 2) == 0);
    idem_value_destroy(value);
    value = idem_get_value(store, "balances", "nobody", 6, &err);
    CHECK_NO_ERROR(err);
    CHECK(value != NULL && !idem_value_present(value) && idem_value_version(value) == 0);
    idem_value_destroy(value);
    /* A write on a version that moved on: IDEM_CONFLICT, nothing written; then a deletion. */
    claim = idem_begin(store, "table-2", 7, NULL, NULL, 0, 0, &err);
    CHECK_NO_ERROR(err);
    token = claim != NULL ? idem_claim_token(claim) : 0;
    idem_claim_destroy(claim);
    writes = idem_writeset_create();
    idem_writeset_put(writes, "balances", "alice", 5, "99", 2, 1, 0);
    CHECK(idem_complete_with_writes(store, "table-2", 7, token, "ok", 2, writes, &err) ==
          IDEM_CONFLICT);
    CHECK_ERROR(err, IDEM_CONFLICT, "Conflict: ");
    idem_writeset_destroy(writes);
    /* A key read and not written, required at a version it moved on from (bob, written once,
     * required never written): IDEM_CONFLICT too, and nothing written. */
    writes = idem_writeset_create();
    idem_writeset_require(writes, "balances", "bob", 3, 0);
    idem_writeset_put(writes, "log", "table-2", 7, "x", 1, 0, 0);
    CHECK(idem_complete_with_writes(store, "table-2", 7, token, "ok", 2, writes, &err) ==
          IDEM_CONFLICT);
    CHECK_ERROR(err, IDEM_CONFLICT, "Conflict: key ");
    idem_writeset_destroy(writes);
    value = idem_get_value(store, "log", "table-2", 7, &err);
    CHECK_NO_ERROR(err);
    CHECK(value != NULL && !idem_value_present(value) && idem_value_version(value) == 0);
    idem_value_destroy(value);
    writes = idem_writeset_create();
    idem_writeset_delete(writes, "balances", "alice", 5, 1, 1);
    idem_writeset_require(writes, "balances", "bob", 3, 1);
    CHECK(idem_complete_with_writes(store, "table-2", 7, token, "ok", 2, writes, &err) == IDEM_OK);
    CHECK_NO_ERROR(err);
    idem_writeset_destroy(writes);
    value = idem_get_value(store, "balances", "alice", 5, &err);
    CHECK_NO_ERROR(err);
    CHECK(value != NULL && !idem_value_present(value) && idem_value_version(value) == 2);
    idem_value_destroy(value);
    CHECK(idem_get_value(store, "bad name", "k", 1, &err) == NULL);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: table name");
    CHECK(strcmp(idem_code_name(IDEM_CONFLICT), "Conflict") == 0);
  }
  /* Writes staged inside idem_execute: applied with its Complete, once. */
  {
    struct counter counter = {0};
    idem_value_t* value;
    char* result;
    int round;
    for (round = 0; round < 2; ++round) {
      result = idem_execute(store, "credit-carol", 12, NULL, NULL, 0, 0, credit_carol, &counter,
                            NULL, NULL, NULL, &err);
      CHECK_NO_ERROR(err);
      CHECK(result != NULL && strcmp(result, "5") == 0);
      idem_free(result);
    }
    CHECK(counter.runs == 1);
    value = idem_get_value(store, "balances", "carol", 5, &err);
    CHECK_NO_ERROR(err);
    text = value != NULL ? idem_value_bytes(value, &len) : NULL;
    CHECK(text != NULL && len == 1 && text[0] == '5' && idem_value_version(value) == 1);
    idem_value_destroy(value);
    value = idem_get_value(store, "balances", "dave", 4, &err);
    CHECK(value != NULL && !idem_value_present(value) && idem_value_version(value) == 1);
    idem_value_destroy(value);
    /* Outside idem_execute's fn there is no attempt to stage in. */
  }

  idem_close(store);
  idem_close(NULL);
  idem_options_destroy(NULL);

  /* Read-only: writes are refused. */
  options = idem_options_create();
  idem_options_set_read_only(options, 1);
  store = idem_open(path, options, &err);
  idem_options_destroy(options);
  CHECK_NO_ERROR(err);
  if (store != NULL) {
    idem_health_t* health;
    idem_forget(store, "exec-1", 6, &err);
    CHECK_ERROR(err, IDEM_INVALID_ARGUMENT, "InvalidArgument: ");
    /* It reads (the files: nobody owns the store) and says why it does not write. */
    health = idem_health(store, &err);
    CHECK_NO_ERROR(err);
    CHECK(health != NULL);
    if (health != NULL) {
      CHECK(idem_health_can_read(health) == 1);
      CHECK(idem_health_can_write(health) == 0);
      CHECK(idem_health_problem_code(health) == IDEM_INVALID_ARGUMENT);
      CHECK(strstr(idem_health_problem(health), "read-only") != NULL);
      CHECK(idem_health_owner_live(health) == 0);
      CHECK(idem_health_owner_since_us(health) == 0);
    }
    idem_health_destroy(health);
    /* Stats: counted by reading the files (nobody keeps counts), with the engine's health. */
    {
      idem_stats_t* stats = idem_stats(store, &err);
      CHECK_NO_ERROR(err);
      CHECK(stats != NULL);
      if (stats != NULL) {
        uint64_t by_type = 0;
        size_t i, len = 0;
        CHECK(idem_stats_records(stats) >= 1);
        CHECK(idem_stats_records_in_state(stats, "done") >= 1);
        CHECK(idem_stats_records_in_state(stats, "no such state") == 0);
        CHECK(idem_stats_records_in_state(stats, "pending") +
                  idem_stats_records_in_state(stats, "timeout") +
                  idem_stats_records_in_state(stats, "done") +
                  idem_stats_records_in_state(stats, "failed") ==
              idem_stats_records(stats));
        for (i = 0; i < idem_stats_type_count(stats); ++i) {
          CHECK(idem_stats_type_name(stats, i, &len) != NULL);
          by_type += idem_stats_type_records(stats, i);
        }
        CHECK(idem_stats_type_name(stats, i, &len) == NULL);
        CHECK(by_type == idem_stats_records(stats));
        CHECK(idem_stats_precision_ms(stats) == 0);
        CHECK(idem_stats_at_us(stats) > 0);
        CHECK(idem_stats_engine_known(stats) == 1);
        CHECK(idem_stats_writes_stopped(stats) == 0);
        CHECK(idem_stats_total_table_bytes(stats) >= idem_stats_live_table_bytes(stats));
        CHECK(idem_stats_damaged_table_files(stats) == 0);
        if (idem_stats_oldest_pending_key(stats, &len) == NULL) {
          CHECK(idem_stats_oldest_pending_created_us(stats) == 0);
        }
      }
      idem_stats_destroy(stats);
      idem_stats_destroy(NULL);
    }
    /* Check: the files read (nobody owns the store), nothing wrong. */
    {
      idem_check_t* check = idem_check(store, &err);
      CHECK_NO_ERROR(err);
      CHECK(check != NULL);
      if (check != NULL) {
        size_t len = 7;
        CHECK(idem_check_clean(check) == 1);
        CHECK(idem_check_records(check) >= 1);
        CHECK(idem_check_index_entries(check) == idem_check_records(check));
        CHECK(idem_check_took_ms(check) >= 0);
        CHECK(idem_check_finding_count(check) == 0);
        CHECK(idem_check_findings_left_out(check) == 0);
        CHECK(idem_check_finding_part(check, 0) == NULL);
        CHECK(idem_check_finding_subject(check, 0, &len) == NULL && len == 0);
        CHECK(idem_check_finding_problem(check, 0) == NULL);
      }
      idem_check_destroy(check);
      idem_check_destroy(NULL);
    }
    record = idem_get(store, "exec-1", 6, &err);
    CHECK_NO_ERROR(err);
    CHECK(record != NULL && idem_record_state(record) == IDEM_STATE_DONE);
    idem_record_destroy(record);
    idem_close(store);
  }

  /* A device profile: a small memory budget, periodic syncs, and a disk quota that any store
   * is past: a new claim is refused as unavailable, naming the quota. */
  options = idem_options_create();
  idem_options_set_memory_budget(options, (size_t)8 << 20);
  idem_options_set_durability(options, IDEM_PERIODIC);
  idem_options_set_sync_interval_ms(options, 100);
  idem_options_set_max_disk_bytes(options, 1);
  store = idem_open(path, options, &err);
  idem_options_destroy(options);
  CHECK_NO_ERROR(err);
  if (store != NULL) {
    claim = idem_begin(store, "quota-1", 7, NULL, NULL, 0, 0, &err);
    CHECK(claim == NULL);
    CHECK_ERROR(err, IDEM_UNAVAILABLE, "Unavailable: store ");
    {
      /* The refusal is what health says of writes, and the last error. */
      idem_health_t* health = idem_health(store, &err);
      CHECK_NO_ERROR(err);
      if (health != NULL) {
        CHECK(idem_health_can_read(health) == 1);
        CHECK(idem_health_can_write(health) == 0);
        CHECK(idem_health_problem_code(health) == IDEM_UNAVAILABLE);
        CHECK(strstr(idem_health_problem(health), "max_disk_bytes 1") != NULL);
        CHECK(idem_health_last_error_code(health) == IDEM_UNAVAILABLE);
        CHECK(idem_health_last_error_at_us(health) > 0);
      }
      idem_health_destroy(health);
    }
    /* A replay is still answered. */
    record = idem_get(store, "exec-1", 6, &err);
    CHECK_NO_ERROR(err);
    CHECK(record != NULL && idem_record_state(record) == IDEM_STATE_DONE);
    idem_record_destroy(record);
    idem_close(store);
  }

  test_clock_log_and_setters(dir_template);
  test_scan_backup_import(dir_template);

  nftw(dir_template, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (failures != 0) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
