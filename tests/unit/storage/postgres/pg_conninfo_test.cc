// PgConninfo (storage/postgres/pg_conninfo.h) and DisplayStoreName, without a server: a connection
// URI is parsed once, gets idem's defaults only where it has none, and no password it holds, in any
// of the forms a user can write one, appears in a display name or an error message.

#include "storage/postgres/pg_conninfo.h"

#include <gtest/gtest.h>

#include <map>
#include <ranges>
#include <string>
#include <vector>

#include "idem/store.h"
#include "util/pg_uri.h"

namespace idem::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using util::IsPostgresUri;
using util::UriWithoutSecrets;

// Two halves, so that a URI that splits the password at an '@' is caught showing either.
constexpr std::string_view kFirstHalf = "Sup3r";
constexpr std::string_view kSecondHalf = "Kept5ecret";

std::map<std::string, std::string> ParamsOf(const PgConninfo& conninfo, int host = 0) {
  const PgConnectParams params = conninfo.ForHost(host);
  std::map<std::string, std::string> options;
  for (std::size_t i = 0; i < params.keywords.size(); ++i) {
    EXPECT_EQ(options.count(params.keywords[i]), 0u) << "repeated " << params.keywords[i];
    options[params.keywords[i]] = params.values[i];
  }
  return options;
}

void ExpectNoSecret(std::string_view text, std::string_view uri) {
  EXPECT_EQ(text.find(kFirstHalf), std::string_view::npos) << uri << "\n  shows: " << text;
  EXPECT_EQ(text.find(kSecondHalf), std::string_view::npos) << uri << "\n  shows: " << text;
}

TEST(PgConninfo, ParsesAUriAndNamesItWithoutThePassword) {
  const std::string uri = "postgresql://app:Sup3r%4BKept5ecret@db1:5432/orders?sslmode=require";
  Result<PgConninfo> parsed = PgConninfo::Parse(uri);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->display_name(), "postgresql://app@db1:5432/orders?sslmode=require");
  const std::map<std::string, std::string> params = ParamsOf(*parsed);
  EXPECT_EQ(params.at("password"), "Sup3rKKept5ecret");  // decoded, given to libpq only
  EXPECT_EQ(params.at("user"), "app");
  EXPECT_EQ(params.at("host"), "db1");
  EXPECT_EQ(params.at("port"), "5432");
  EXPECT_EQ(params.at("dbname"), "orders");
  EXPECT_EQ(params.at("sslmode"), "require");
  EXPECT_EQ(parsed->host_count(), 1);
  EXPECT_EQ(DisplayStoreName(uri), parsed->display_name());
  // libpq's messages may quote the URI or the password: Redact takes both out.
  const std::string redacted =
      parsed->Redact("bad \"" + uri + "\" and password Sup3rKKept5ecret and Sup3r%4BKept5ecret");
  ExpectNoSecret(redacted, uri);
  EXPECT_NE(redacted.find("postgresql://db1:5432/orders"), std::string::npos) << redacted;
}

// Every way a URI can carry a password, well-formed or not: no display name and no message
// shows any part of it.
TEST(PgConninfo, NoFormOfPasswordReachesANameOrAMessage) {
  const std::vector<std::string> uris = {
      "postgresql://u:Sup3rKept5ecret@h/db",                   // user information
      "postgres://u@h/db?password=Sup3rKept5ecret",            // query parameter
      "postgresql://u:Sup3r%4b%65pt5ecret@h/db",               // percent-escaped
      "postgresql://u@h/db?pass%77ord=Sup3rKept5ecret",        // escaped keyword
      "postgresql://u@h/db?sslpassword=Sup3rKept5ecret",       // the key's passphrase
      "postgresql://u:Sup3rKept5ecret@[::1/db",                // malformed host
      "postgresql://u:Sup3rKept5ecret%zz@h/db",                // bad escape in the password
      "postgresql://u:Sup3r%00Kept5ecret@h/db",                // %00 in the password
      "postgresql://u@h/db?password=Sup3rKept5ecret%zz",       // bad escape in the query
      "postgresql://u@h/db?pass%77ord=Sup3rKept5ecret%zz",     // both
      "postgresql://u@h/db?password=Sup3rKept5ecret&bogus=1",  // unknown parameter after it
      "postgresql://u:Sup3rKept5ecret@h/db?password",          // parameter without '='
      "postgresql://u:Sup3r@Kept5ecret@h/db",                  // '@' in the password
      "postgresql://u:Sup3rKept5ecret/db@h",                   // '@' after the host
      "postgresql://u:Sup3rKept5ecret@h:port/db",              // bad port, found on connect
      "postgresql://u:Sup3rKept5ecret@h/db\n",                 // a control character
  };
  int refused = 0;
  for (const std::string& uri : uris) {
    SCOPED_TRACE(uri);
    Result<PgConninfo> parsed = PgConninfo::Parse(uri);
    if (parsed.ok()) {
      ExpectNoSecret(parsed->display_name(), uri);
      ExpectNoSecret(parsed->Redact("libpq said: \"" + uri + "\""), uri);
      for (const std::string& value : ParamsOf(*parsed) | std::views::values) {
        ExpectNoSecret(parsed->Redact("libpq quoted \"" + value + "\""), uri);
      }
    } else {
      ++refused;
      EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidArgument);
      ExpectNoSecret(parsed.status().message(), uri);
      EXPECT_NE(parsed.status().message().find("invalid PostgreSQL connection URI"),
                std::string::npos)
          << parsed.status().message();
    }
    ExpectNoSecret(DisplayStoreName(uri), uri);
    ExpectNoSecret(UriWithoutSecrets(uri), uri);
  }
  EXPECT_GE(refused, 9);  // the malformed ones, not just the well-formed ones, were tried
}

// A keyword=value string is not a URI: refused without quoting it (it may hold a password).
TEST(PgConninfo, RefusesAKeywordStringWithoutQuotingIt) {
  const std::string conninfo = "host=h user=u password=Sup3rKept5ecret";
  Result<PgConninfo> parsed = PgConninfo::Parse(conninfo);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "not a PostgreSQL connection URI: it must start with postgresql:// or postgres://");
  EXPECT_FALSE(IsPostgresUri(conninfo));
  EXPECT_FALSE(IsPostgresUri("POSTGRESQL://h/db"));  // libpq's schemes are lowercase
}

TEST(PgConninfo, MalformedUriNamesTheReasonAndTheHost) {
  Result<PgConninfo> parsed = PgConninfo::Parse("postgresql://u:pw@h/db?bogus=1");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(),
            "invalid PostgreSQL connection URI postgresql://h/db: invalid URI query parameter: "
            "\"bogus\"");
  parsed = PgConninfo::Parse("postgresql://u:p@ss@h/db");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("write '@' as %40"), std::string::npos)
      << parsed.status().message();
}

TEST(PgConninfo, AddsDefaultsOnlyWhereTheUriHasNone) {
  Result<PgConninfo> bare =
      PgConninfo::Parse("postgresql://h/db",
                        {.connect_timeout = milliseconds(2500), .dead_peer_timeout = seconds(10)});
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  const std::map<std::string, std::string> defaults = ParamsOf(*bare);
  EXPECT_EQ(defaults.at("fallback_application_name"), "idem");
  EXPECT_EQ(defaults.at("connect_timeout"), "3");  // rounded up to whole seconds
  EXPECT_EQ(defaults.at("keepalives"), "1");
  EXPECT_EQ(defaults.at("keepalives_idle"), "4");
  EXPECT_EQ(defaults.at("keepalives_interval"), "2");
  EXPECT_EQ(defaults.at("keepalives_count"), "3");
  EXPECT_EQ(defaults.at("tcp_user_timeout"), "10000");
  EXPECT_EQ(defaults.count("target_session_attrs"), 0u);  // one host: nothing to choose from
  EXPECT_EQ(defaults.count("options"), 0u);               // PgBouncer refuses it
  EXPECT_EQ(defaults.count("application_name"), 0u);      // PGAPPNAME may still name it
  EXPECT_EQ(bare->display_name(), "postgresql://h/db");   // defaults are not part of the name
  EXPECT_EQ(bare->connect_timeout(), seconds(3));

  Result<PgConninfo> given = PgConninfo::Parse(
      "postgresql://h/db?application_name=billing&connect_timeout=1&keepalives=0&"
      "tcp_user_timeout=500&keepalives_idle=60");
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  const std::map<std::string, std::string> kept = ParamsOf(*given);
  EXPECT_EQ(kept.at("application_name"), "billing");
  EXPECT_EQ(kept.count("fallback_application_name"), 0u);
  EXPECT_EQ(kept.at("connect_timeout"), "1");
  EXPECT_EQ(given->connect_timeout(), seconds(2));  // libpq's minimum
  EXPECT_EQ(kept.at("keepalives"), "0");
  EXPECT_EQ(kept.at("tcp_user_timeout"), "500");
  EXPECT_EQ(kept.at("keepalives_idle"), "60");
  EXPECT_EQ(kept.at("keepalives_interval"), "2");  // not given: the default
  EXPECT_EQ(PgConninfo::Parse("postgresql://h/db?connect_timeout=0")->connect_timeout(),
            milliseconds(0));
}

TEST(PgConninfo, SeveralHostsAreTriedOneByOneOnlyOnAPrimary) {
  Result<PgConninfo> parsed = PgConninfo::Parse("postgresql://u@h1:5432,h2:5433/db");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->host_count(), 2);
  EXPECT_EQ(parsed->display_name(), "postgresql://u@h1:5432,h2:5433/db");
  const std::map<std::string, std::string> first = ParamsOf(*parsed, 0);
  const std::map<std::string, std::string> second = ParamsOf(*parsed, 1);
  EXPECT_EQ(first.at("host"), "h1");
  EXPECT_EQ(first.at("port"), "5432");
  EXPECT_EQ(second.at("host"), "h2");
  EXPECT_EQ(second.at("port"), "5433");
  EXPECT_EQ(second.at("target_session_attrs"), "read-write");

  // One port for every host; the user's target_session_attrs kept.
  parsed = PgConninfo::Parse("postgresql:///db?host=h1,h2&port=6000&target_session_attrs=any");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->host_count(), 2);
  EXPECT_EQ(ParamsOf(*parsed, 1).at("host"), "h2");
  EXPECT_EQ(ParamsOf(*parsed, 1).at("port"), "6000");
  EXPECT_EQ(ParamsOf(*parsed, 1).at("target_session_attrs"), "any");
  EXPECT_EQ(parsed->display_name(), "postgresql://h1:6000,h2:6000/db?target_session_attrs=any");

  // Counts that do not match are refused here: libpq would refuse them only when connecting.
  parsed = PgConninfo::Parse("postgresql:///db?host=h1,h2,h3&port=1,2");
  EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "invalid PostgreSQL connection URI postgresql:///db: 2 port numbers for 3 hosts "
            "(give one, or one per host)");
}

// libpq checks these values only when it connects, where a bad one passed for an unreachable
// server (kUnavailable after failover_timeout of retries). Parse refuses them, naming the option.
TEST(PgConninfo, RefusesAValueLibpqWouldRefuseOnlyWhenConnecting) {
  const std::map<std::string, std::string> refused = {
      {"postgresql://u:Sup3rKept5ecret@h:notaport/db",
       "port \"notaport\" is not a number from 1 to 65535"},
      {"postgresql://h/db?port=70000", "port \"70000\" is not a number from 1 to 65535"},
      {"postgresql://h1:5432,h2:x/db", "port \"x\" is not a number from 1 to 65535"},
      {"postgresql://h/db?sslmode=bogus",
       "sslmode=\"bogus\" is not one of disable, allow, prefer, require, verify-ca, verify-full"},
      {"postgresql://h/db?gssencmode=maybe",
       "gssencmode=\"maybe\" is not one of disable, prefer, require"},
      {"postgresql://h/db?channel_binding=yes",
       "channel_binding=\"yes\" is not one of disable, prefer, require"},
      {"postgresql://h/db?target_session_attrs=writable",
       "target_session_attrs=\"writable\" is not one of any, read-write, read-only, primary, "
       "standby, prefer-standby"},
      {"postgresql://h/db?ssl_min_protocol_version=TLSv9",
       "ssl_min_protocol_version=\"TLSv9\" is not one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"},
      {"postgresql://h/db?connect_timeout=soon", "connect_timeout=\"soon\" is not an integer"},
      {"postgresql://h/db?keepalives_idle=1.5", "keepalives_idle=\"1.5\" is not an integer"},
      {"postgresql://h/db?tcp_user_timeout=99999999999",
       "tcp_user_timeout=\"99999999999\" is not an integer"},
      {"postgresql://h/db?hostaddr=not.an.address",
       "hostaddr \"not.an.address\" is not a numeric IPv4 or IPv6 address"},
      {"postgresql:///db?host=h1,h2&hostaddr=10.0.0.1", "2 host names but 1 hostaddr values"},
  };
  for (const auto& [uri, reason] : refused) {
    SCOPED_TRACE(uri);
    Result<PgConninfo> parsed = PgConninfo::Parse(uri);
    EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(reason), std::string::npos)
        << parsed.status().ToString();
    ExpectNoSecret(parsed.status().message(), uri);
  }
  for (const std::string uri :
       {"postgresql://h:5432/db?sslmode=verify-full&gssencmode=disable&channel_binding=require",
        "postgresql://h/db?connect_timeout=%205%20&keepalives=0&tcp_user_timeout=-1",
        "postgresql://h/db?target_session_attrs=prefer-standby&ssl_max_protocol_version=TLSv1.3",
        "postgresql://h1,h2/db?port=&hostaddr=10.0.0.1,::1", "postgresql://h/db?sslmode="}) {
    EXPECT_TRUE(PgConninfo::Parse(uri).ok())
        << uri << ": " << PgConninfo::Parse(uri).status().ToString();
  }
}

TEST(PgConninfo, SpellingsOfOneConnectionShareOneName) {
  const std::string name = "postgresql://u@h:5432/db?connect_timeout=5&sslmode=require";
  for (const std::string uri :
       {"postgres://u:pw@h:5432/db?sslmode=require&connect_timeout=5",
        "postgresql://u@h:5432/db?connect_timeout=5&password=other&sslmode=require",
        "postgresql://%75@h:5432/d%62?sslmode=require&connect_timeout=5"}) {
    Result<PgConninfo> parsed = PgConninfo::Parse(uri);
    ASSERT_TRUE(parsed.ok()) << uri << ": " << parsed.status().ToString();
    EXPECT_EQ(parsed->display_name(), name) << uri;
  }
}

TEST(PgConninfo, SocketDirectoriesAndAddressesStayInTheQuery) {
  Result<PgConninfo> parsed = PgConninfo::Parse("postgresql://%2Fvar%2Frun%2Fpostgresql/db");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(ParamsOf(*parsed).at("host"), "/var/run/postgresql");
  EXPECT_EQ(parsed->display_name(), "postgresql:///db?host=%2Fvar%2Frun%2Fpostgresql");
  parsed = PgConninfo::Parse("postgresql://u@[::1]:5432/db");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->display_name(), "postgresql://u@[::1]:5432/db");
  parsed = PgConninfo::Parse("postgresql://db.example/db?hostaddr=10.0.0.1");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->display_name(), "postgresql:///db?host=db.example&hostaddr=10.0.0.1");
}

TEST(DisplayStoreName, KeepsDirectoryPaths) {
  EXPECT_EQ(DisplayStoreName("/var/lib/app/idem"), "/var/lib/app/idem");
  EXPECT_EQ(DisplayStoreName("relative/store"), "relative/store");
  EXPECT_EQ(DisplayStoreName("host=h password=x"), "host=h password=x");  // a directory name
  EXPECT_EQ(DisplayStoreName("postgresql://u:pw@h/db?bogus=1"), "postgresql://h/db");
}

}  // namespace
}  // namespace idem::storage
