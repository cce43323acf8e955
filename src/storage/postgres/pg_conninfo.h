// PgConninfo: a PostgreSQL connection URI parsed once, by libpq's PQconninfoParse, with idem's
// defaults added where the user gave none, and a name for it without secrets.
//
// libpq quotes the connection string in some of its errors, password included, so the raw URI
// goes to libpq once, here; connections are made from the parsed keyword/value pairs
// (PQconnectStartParams with expand_dbname = 0), and every message that leaves idem shows
// display_name() and passes libpq's text through Redact(). docs/design/postgresql.md, sec. 7.
//
// This header needs no libpq: core reaches it (DisplayStoreName, the PostgreSQL store's
// registry). A PgConninfo is an immutable value: copy it, share it between threads.

#ifndef IDEM_STORAGE_POSTGRES_PG_CONNINFO_H_
#define IDEM_STORAGE_POSTGRES_PG_CONNINFO_H_

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::storage {

// What idem adds to a connection URI that does not say otherwise.
struct PgConnDefaults {
  // connect_timeout, in whole seconds rounded up (at least 2, libpq's minimum): how long one
  // host may take to accept a connection before the next host is tried. Default: 10 s.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // How soon a server that vanished without closing its connections (a dead primary, a cut
  // network) is noticed: tcp_user_timeout (unacknowledged data) and TCP keepalives (idle
  // connections: keepalives_idle = 2/5, keepalives_interval = 1/5 of it, keepalives_count = 3).
  // Default: 10 s.
  std::chrono::milliseconds dead_peer_timeout{std::chrono::seconds(10)};
};

// The keyword/value pairs to give PQconnectStartParams (with expand_dbname = 0).
struct PgConnectParams {
  std::vector<std::string> keywords;
  std::vector<std::string> values;
};

class PgConninfo {
 public:
  // Parses `uri` ("postgresql://..." or "postgres://...") and adds the defaults the user left
  // out: target_session_attrs=read-write with several hosts (connect only to a primary),
  // fallback_application_name=idem (so PGAPPNAME and application_name still win),
  // connect_timeout, keepalives and tcp_user_timeout from `defaults`. Adds no startup `options`
  // (PgBouncer refuses them).
  // Errors: kInvalidArgument "invalid PostgreSQL connection URI <scheme://hosts/db>: <reason>",
  // libpq's reason with every piece of the URI that may be secret replaced; also for a value
  // libpq would refuse only when connecting (a port, hostaddr or integer that does not parse,
  // an sslmode, gssencmode, channel_binding, target_session_attrs or TLS version it does not
  // know, host, hostaddr and port lists of different lengths); for an '@'
  // that libpq would read as part of a host or port ("u:p@ss@host": write '@' as %40), and for
  // a string that is not such a URI (it is not quoted: a keyword=value string may hold a
  // password).
  static Result<PgConninfo> Parse(std::string_view uri, const PgConnDefaults& defaults = {});

  // The URI rebuilt from what the user gave, without the fields libpq marks secret (password,
  // sslpassword) and without idem's defaults: "postgresql://app@db1:5432,db2:5432/orders?
  // sslmode=require". Spellings of one connection (postgres://, percent-escapes, the order of
  // parameters) give one name. For messages, logs, the `idem` command and registry keys.
  const std::string& display_name() const { return display_name_; }

  // How many hosts the URI lists (at least 1). Connections try them in order, one at a time, so
  // that a host that does not answer costs at most connect_timeout().
  int host_count() const { return host_count_; }

  // The options to connect to host number `host` (0 <= host < host_count()) with: everything,
  // defaults included, with host, hostaddr and port narrowed to that host's entry.
  PgConnectParams ForHost(int host) const;

  // The value of option `keyword` as connections use it (the user's or a default); empty when
  // neither gave one.
  std::string_view Value(std::string_view keyword) const;

  // connect_timeout as libpq reads it (1 counts as 2); 0 when there is none (wait for ever).
  std::chrono::milliseconds connect_timeout() const;

  // `message` (libpq's, or the server's) with the raw URI replaced by a form without secrets and
  // every password this URI holds, as written or decoded, replaced by "[redacted]".
  std::string Redact(std::string_view message) const;

 private:
  struct Option {
    std::string keyword;
    std::string value;
    bool secret = false;  // libpq's dispchar "*"
    bool given = false;   // in the URI (false: one of idem's defaults)
  };

  PgConninfo() = default;
  bool Given(std::string_view keyword) const;
  void Add(std::string keyword, std::string value);
  void AddDefaults(const PgConnDefaults& defaults);
  std::string DisplayName() const;

  std::vector<Option> options_;  // in libpq's order, then the defaults
  std::string raw_uri_;
  std::vector<std::string> secrets_;  // longest first
  std::string display_name_;
  int host_count_ = 1;
};

}  // namespace idem::storage

#endif  // IDEM_STORAGE_POSTGRES_PG_CONNINFO_H_
