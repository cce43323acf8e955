// The restore workload (issue 43, item 4): an operator's export and restore of a store, timed as
// the operator runs them, beside PostgreSQL's pg_dump and pg_restore of the same rows.

#ifndef IDEM_BENCH_RESTORE_H_
#define IDEM_BENCH_RESTORE_H_

#include <cstdint>
#include <string>

#include "harness.h"
#include "idem/status.h"

namespace idem::bench {

struct RestoreConfig {
  std::string directory;     // a fresh directory for the stores and the files
  uint64_t records = 0;      // done records in the exported store
  std::string idem_command;  // the idem command built with the benchmark
  std::string postgres;      // a libpq URI; empty: idem's side only
  std::string pg_bin;        // the directory of pg_dump and pg_restore
};

// Loads a store of `records` done records, then times `idem export STORE --output FILE` and
// `idem import NEW FILE --create` (each its own process, each ending durable), and, with a
// server, pg_dump -Fc and pg_restore --single-transaction of a table of the same rows (the
// export's fields as columns, the key its primary key). Figures: workload "restore", systems
// "idem" (export_seconds, import_seconds, file_bytes) and "postgresql" (dump_seconds,
// restore_seconds, file_bytes), and "records". Each restore is checked: every record is there.
Status Restore(const RestoreConfig& config, ResultsFile& results);

}  // namespace idem::bench

#endif  // IDEM_BENCH_RESTORE_H_
