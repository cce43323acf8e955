// SQL pieces shared by PgStorage's files (pg_storage.cc, pg_storage_reads.cc): how a statement
// sent alone sets its transaction's durability, and times relative to the server's.
#ifndef IDEM_STORAGE_POSTGRES_PG_STORAGE_SQL_H_
#define IDEM_STORAGE_POSTGRES_PG_STORAGE_SQL_H_

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "idem/options.h"
#include "storage/postgres/pg_pool.h"

namespace idem::storage {

// SQL that sets the durability of a statement sent alone (PgTransaction::alone), from its
// parameter $2, which SynchronousCommitParam gives.
inline constexpr std::string_view kSetSynchronousCommit =
    "set_config('synchronous_commit', $2, true)";
inline PgParam SynchronousCommitParam(Durability durability) {
  return PgParam::Text(durability == Durability::kSync ? "on" : "off");
}

// SQL: the time `micros` microseconds after the time `now` names.
inline std::string PgTimeAfter(std::string_view now, std::string_view micros) {
  return fmt::format("{} + {} * interval '1 microsecond'", now, micros);
}

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_STORAGE_SQL_H_
