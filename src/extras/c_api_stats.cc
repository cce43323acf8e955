// The C API's stats and check (idem::Store::GetStats, idem::Store::Check). The rest is in c_api.cc
// and c_api_records.cc; what they share is in c_api_internal.h.

#include <string>

#include "extras/c_api_internal.h"
#include "idem/c.h"
#include "idem/store.h"
#include "util/time.h"

using idem::c_api::Guard;
using idem::c_api::Out;
using idem::c_api::SaveError;

idem_stats_t* idem_stats(idem_store_t* store, char** errptr) {
  return Guard(errptr, static_cast<idem_stats_t*>(nullptr), [&]() -> idem_stats_t* {
    auto stats = store->store->GetStats();
    if (SaveError(errptr, stats.status())) return nullptr;
    auto* out = new idem_stats_t{std::move(*stats), {}};
    out->types.assign(out->stats.by_type.begin(), out->stats.by_type.end());
    return out;
  });
}

void idem_stats_destroy(idem_stats_t* stats) { delete stats; }

uint64_t idem_stats_records(const idem_stats_t* stats) { return stats->stats.records; }

uint64_t idem_stats_records_in_state(const idem_stats_t* stats, const char* state) {
  if (state == nullptr) return 0;
  const auto found = stats->stats.by_state.find(std::string_view(state));
  return found == stats->stats.by_state.end() ? 0 : found->second;
}

size_t idem_stats_type_count(const idem_stats_t* stats) { return stats->types.size(); }

const char* idem_stats_type_name(const idem_stats_t* stats, size_t index, size_t* len) {
  if (index >= stats->types.size()) return nullptr;
  return Out(stats->types[index].first, len);
}

uint64_t idem_stats_type_records(const idem_stats_t* stats, size_t index) {
  return index < stats->types.size() ? stats->types[index].second : 0;
}

const char* idem_stats_oldest_pending_key(const idem_stats_t* stats, size_t* len) {
  if (!stats->stats.oldest_pending) {
    if (len != nullptr) *len = 0;
    return nullptr;
  }
  return Out(stats->stats.oldest_pending->key, len);
}

int64_t idem_stats_oldest_pending_created_us(const idem_stats_t* stats) {
  return stats->stats.oldest_pending ? idem::util::ToMicros(stats->stats.oldest_pending->created)
                                     : 0;
}

int64_t idem_stats_at_us(const idem_stats_t* stats) {
  return idem::util::ToMicros(stats->stats.at);
}

int64_t idem_stats_precision_ms(const idem_stats_t* stats) {
  return stats->stats.precision.count();
}

unsigned char idem_stats_engine_known(const idem_stats_t* stats) {
  return stats->stats.engine ? 1 : 0;
}

unsigned char idem_stats_writes_stopped(const idem_stats_t* stats) {
  return stats->stats.engine && stats->stats.engine->writes_stopped ? 1 : 0;
}

uint64_t idem_stats_pending_compaction_bytes(const idem_stats_t* stats) {
  return stats->stats.engine ? stats->stats.engine->pending_compaction_bytes : 0;
}

uint64_t idem_stats_live_table_bytes(const idem_stats_t* stats) {
  return stats->stats.engine ? stats->stats.engine->live_table_bytes : 0;
}

uint64_t idem_stats_total_table_bytes(const idem_stats_t* stats) {
  return stats->stats.engine ? stats->stats.engine->total_table_bytes : 0;
}

uint64_t idem_stats_damaged_table_files(const idem_stats_t* stats) {
  return stats->stats.engine ? stats->stats.engine->damaged_table_files : 0;
}

idem_check_t* idem_check(idem_store_t* store, char** errptr) {
  return Guard(errptr, static_cast<idem_check_t*>(nullptr), [&]() -> idem_check_t* {
    auto report = store->store->Check();
    if (SaveError(errptr, report.status())) return nullptr;
    return new idem_check_t{std::move(*report)};
  });
}

void idem_check_destroy(idem_check_t* check) { delete check; }

unsigned char idem_check_clean(const idem_check_t* check) { return check->report.clean() ? 1 : 0; }

uint64_t idem_check_files(const idem_check_t* check) { return check->report.files; }
uint64_t idem_check_records(const idem_check_t* check) { return check->report.records; }
uint64_t idem_check_index_entries(const idem_check_t* check) { return check->report.index_entries; }
uint64_t idem_check_table_values(const idem_check_t* check) { return check->report.table_values; }
int64_t idem_check_took_ms(const idem_check_t* check) { return check->report.took.count(); }

size_t idem_check_finding_count(const idem_check_t* check) { return check->report.findings.size(); }

uint64_t idem_check_findings_left_out(const idem_check_t* check) {
  return check->report.findings_left_out;
}

const char* idem_check_finding_part(const idem_check_t* check, size_t index) {
  return index < check->report.findings.size() ? check->report.findings[index].part.c_str()
                                               : nullptr;
}

const char* idem_check_finding_subject(const idem_check_t* check, size_t index, size_t* len) {
  if (index >= check->report.findings.size()) {
    if (len != nullptr) *len = 0;
    return nullptr;
  }
  return Out(check->report.findings[index].subject, len);
}

const char* idem_check_finding_problem(const idem_check_t* check, size_t index) {
  return index < check->report.findings.size() ? check->report.findings[index].problem.c_str()
                                               : nullptr;
}
