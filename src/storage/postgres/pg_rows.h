// A record as a row of a PostgreSQL store's records table (pg_schema.h, kPgRecordColumns): the
// row read back, and the parameters that write one. What record_codec.h is to the RocksDB store.
#ifndef IDEM_STORAGE_POSTGRES_PG_ROWS_H_
#define IDEM_STORAGE_POSTGRES_PG_ROWS_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "idem/record.h"
#include "idem/status.h"
#include "storage/postgres/pg_pool.h"
#include "storage/postgres/pg_schema.h"

namespace idem::storage {

// A whole row is read as kPgRecordColumns lists its columns (PgRecordColumnList), and the
// statements that read one add the server's time after them, at this position.
inline constexpr int kPgRecordColumnCount = static_cast<int>(kPgRecordColumns.size());

// The record in row `row` of `rows` (its columns in kPgRecordColumns' order), or nullopt when its
// key is NULL (the outer join of a read that found none); kCorruption for values no idem writes.
// `version` receives the row's version.
Result<std::optional<Record>> DecodePgRow(const PgRows& rows, int row, int64_t* version);

// How PgRowParams gives the times: as timestamptz values, or as int8 microseconds since the Unix
// epoch (for a statement that makes them relative to the server's clock).
enum class PgTimes { kTimestamps, kMicros };

// The parameters $1.. of a row's columns but the version, in kPgRecordColumns' order: `key`, then
// the record's fields (util::kRecordFields).
std::vector<PgParam> PgRowParams(std::string_view key, const Record& record,
                                 PgTimes times = PgTimes::kTimestamps);

// The values of a row's columns but the version, for INSERT ... VALUES or SELECT:
// "$first, $first+1, ...", one a column in kPgRecordColumns' order, as PgRowParams gives them from
// parameter `first` on. `time` (when not null) makes each timestamptz column's value from its
// parameter ("$15").
std::string PgRowValues(int first, std::string (*time)(std::string_view parameter) = nullptr);
// "type = $(first+1), ..., expires = $(first+17)": an UPDATE's assignments of every column but the
// key and the version, from PgRowParams' parameters given from `first` on.
std::string PgRowAssignments(int first);

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_ROWS_H_
