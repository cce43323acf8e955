// PostgreSQL connection URIs without libpq: telling one from a store directory, and a form of
// one that is safe to show whatever it holds. Built with or without IDEM_WITH_POSTGRESQL, so a
// build without PostgreSQL still never prints a password it was given. Parsing proper is
// PgConninfo's (pg_conninfo.h), with libpq.

#ifndef IDEM_UTIL_PG_URI_H_
#define IDEM_UTIL_PG_URI_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idem::util {

// True when `path` starts with "postgresql://" or "postgres://" (lowercase, as libpq requires):
// Store::Open gives such a path to the PostgreSQL store rather than taking it for a directory.
bool IsPostgresUri(std::string_view path);

// `uri` reduced to what cannot hold a secret: its scheme and what follows the last '@' before
// the query (the hosts, ports and database), without the query. For URIs that cannot be parsed
// and for builds without PostgreSQL; a parsed URI shows PgConninfo::display_name() instead.
//   "postgresql://app:pw@db1:5432/orders?sslmode=require" -> "postgresql://db1:5432/orders"
std::string UriWithoutSecrets(std::string_view uri);

// Every piece of `uri` that may be a secret, as written and percent-decoded: the password of
// the user information (read both as libpq does, up to the first '@', and up to the last), and
// the value of each query parameter named in `secret_keywords` or whose name cannot be decoded.
// libpq's parse errors quote such pieces ("invalid percent-encoded token: \"p%zzw\""); they are
// replaced before a message leaves idem.
std::vector<std::string> SecretCandidates(std::string_view uri,
                                          const std::vector<std::string>& secret_keywords);

// The '@' of `uri` that ends its user information, or npos when it has none. kAmbiguousAt when
// an '@' other than that one appears before the query: libpq splits "user:p@ss@host" at the
// first '@' and "host/db@x" not at all, so an unencoded '@' in a password or a database name
// would put part of it in a host name or a port, where messages show it.
inline constexpr std::size_t kAmbiguousAt = std::string_view::npos - 1;
std::size_t UserInfoEnd(std::string_view uri);

// `text` with each "%XX" decoded, or nullopt when an escape is malformed.
std::optional<std::string> PercentDecode(std::string_view text);

}  // namespace idem::util

#endif  // IDEM_UTIL_PG_URI_H_
