#include "storage/postgres/pg_rows.h"

#include <fmt/format.h>

#include <bit>
#include <limits>

#include "util/escape.h"
#include "util/time.h"

namespace idem::storage {
namespace {

constexpr int kVersionColumn = PgColumnIndex("version");
static_assert(kVersionColumn < kPgRecordColumnCount);
// DecodePgRow and PgRowParams take the fields in this order, by position.
static_assert(PgColumnIndex("key") == 0 && PgColumnIndex("checkpoint") == 4 &&
              PgColumnIndex("state") == 5 && PgColumnIndex("holder_took_over") == 13 &&
              PgColumnIndex("created") == 14 && PgColumnIndex("expires") == 17);

}  // namespace

// The record in row `row` of `rows` (its columns in kPgRecordColumns' order), or nullopt when its
// key is NULL (the outer join of a read that found none). `version` receives the row's version.
Result<std::optional<Record>> DecodePgRow(const PgRows& rows, int row, int64_t* version) {
  if (rows.IsNull(row, 0)) return std::optional<Record>();
  std::optional<Record> record(std::in_place);
  Record& r = *record;
  r.key = std::string(rows.Bytes(row, 0));
  r.type = std::string(rows.Bytes(row, 1));
  r.fingerprint = std::string(rows.Bytes(row, 2));
  r.result = std::string(rows.Bytes(row, 3));
  r.checkpoint = std::string(rows.Bytes(row, 4));
  IDEM_ASSIGN_OR_RETURN(int64_t state, rows.Int(row, 5));
  if (state < 0 || state > static_cast<int64_t>(State::kFailed)) {
    return Status::Corruption(
        fmt::format("record {} has state {}, which no idem writes", EscapeKey(r.key), state));
  }
  r.state = static_cast<State>(state);
  IDEM_ASSIGN_OR_RETURN(r.retryable, rows.Bool(row, 6));
  IDEM_ASSIGN_OR_RETURN(int64_t token, rows.Int(row, 7));
  IDEM_ASSIGN_OR_RETURN(int64_t attempts, rows.Int(row, 8));
  IDEM_ASSIGN_OR_RETURN(int64_t pid, rows.Int(row, 9));
  IDEM_ASSIGN_OR_RETURN(int64_t start, rows.Int(row, 10));
  IDEM_ASSIGN_OR_RETURN(int64_t scope, rows.Int(row, 11));
  IDEM_ASSIGN_OR_RETURN(int64_t request, rows.Int(row, 12));
  IDEM_ASSIGN_OR_RETURN(r.holder.took_over, rows.Bool(row, 13));
  if (token < 0 || attempts < 0 || attempts > std::numeric_limits<uint32_t>::max() || pid < 0 ||
      pid > std::numeric_limits<uint32_t>::max()) {
    return Status::Corruption(
        fmt::format("record {} has a token, attempt count or pid out of range", EscapeKey(r.key)));
  }
  r.token = static_cast<uint64_t>(token);
  r.attempts = static_cast<uint32_t>(attempts);
  r.holder.pid = static_cast<uint32_t>(pid);
  r.holder.process_start = std::bit_cast<uint64_t>(start);
  r.holder.pid_scope = std::bit_cast<uint64_t>(scope);
  r.holder.request_id = std::bit_cast<uint64_t>(request);
  Record::TimePoint* times[] = {&r.created, &r.updated, &r.lease_deadline, &r.expires};
  for (int i = 0; i < 4; ++i) {
    IDEM_ASSIGN_OR_RETURN(int64_t micros, rows.Timestamp(row, 14 + i));
    *times[i] = util::FromMicros(micros);
  }
  IDEM_ASSIGN_OR_RETURN(*version, rows.Int(row, kVersionColumn));
  return record;
}

// The parameters $1.. of a row's columns but the version: key, then the record's fields.
std::vector<PgParam> PgRowParams(std::string_view key, const Record& r) {
  return {PgParam::Bytea(key),
          PgParam::Bytea(r.type),
          PgParam::Bytea(r.fingerprint),
          PgParam::Bytea(r.result),
          PgParam::Bytea(r.checkpoint),
          PgParam::Int2(static_cast<int16_t>(r.state)),
          PgParam::Bool(r.retryable),
          PgParam::Int8(static_cast<int64_t>(r.token)),
          PgParam::Int8(r.attempts),
          PgParam::Int8(r.holder.pid),
          PgParam::Int8(std::bit_cast<int64_t>(r.holder.process_start)),
          PgParam::Int8(std::bit_cast<int64_t>(r.holder.pid_scope)),
          PgParam::Int8(std::bit_cast<int64_t>(r.holder.request_id)),
          PgParam::Bool(r.holder.took_over),
          PgParam::Timestamp(util::ToMicros(r.created)),
          PgParam::Timestamp(util::ToMicros(r.updated)),
          PgParam::Timestamp(util::ToMicros(r.lease_deadline)),
          PgParam::Timestamp(util::ToMicros(r.expires))};
}

}  // namespace idem::storage
