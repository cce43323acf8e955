// DisplayStoreName (idem/store.h): a store's name as messages, logs and the `idem` command show
// it, without the secrets a PostgreSQL connection URI may hold.

#include "idem/store.h"
#include "util/escape.h"
#include "util/pg_uri.h"
#if IDEM_WITH_POSTGRESQL
#include "storage/postgres/pg_conninfo.h"
#endif

namespace idem {

std::string DisplayStoreName(std::string_view path) {
  if (!util::IsPostgresUri(path)) return std::string(path);
#if IDEM_WITH_POSTGRESQL
  if (Result<storage::PgConninfo> parsed = storage::PgConninfo::Parse(path); parsed.ok()) {
    return parsed->display_name();
  }
#endif
  return EscapeControls(util::UriWithoutSecrets(path));
}

}  // namespace idem
