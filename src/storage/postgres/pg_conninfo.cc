#include "storage/postgres/pg_conninfo.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "util/escape.h"
#include "util/pg_uri.h"

namespace idem::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr std::string_view kRedacted = "[redacted]";

// The keywords whose values libpq marks secret (dispchar "*": password, sslpassword), asked of
// libpq once, so that a keyword added by a later libpq is covered too.
const std::vector<std::string>& SecretKeywords() {
  static const std::vector<std::string> keywords = [] {
    std::vector<std::string> found;
    if (PQconninfoOption* defaults = PQconndefaults(); defaults != nullptr) {
      for (const PQconninfoOption* option = defaults; option->keyword != nullptr; ++option) {
        if (option->dispchar != nullptr && option->dispchar[0] == '*') {
          found.emplace_back(option->keyword);
        }
      }
      PQconninfoFree(defaults);
    }
    if (found.empty()) found = {"password", "sslpassword"};  // libpq out of memory
    return found;
  }();
  return keywords;
}

// libpq's comma-separated lists (host, hostaddr, port); empty entries are kept (libpq gives
// them the default).
std::vector<std::string> Split(std::string_view list) {
  std::vector<std::string> items;
  if (list.empty()) return items;
  for (std::size_t start = 0;;) {
    const std::size_t comma = list.find(',', start);
    items.emplace_back(list.substr(start, comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// Percent-encodes all but RFC 3986's unreserved characters.
std::string Encode(std::string_view text) {
  std::string encoded;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '-' || c == '.' || c == '_' || c == '~') {
      encoded += c;
    } else {
      encoded += fmt::format("%{:02X}", byte);
    }
  }
  return encoded;
}

std::string Seconds(milliseconds duration, int64_t at_least) {
  const int64_t whole = std::chrono::ceil<seconds>(duration).count();
  return std::to_string(std::max(whole, at_least));
}

// Longest first, so that a secret inside a longer one does not leave the rest of it shown.
void SortLongestFirst(std::vector<std::string>& secrets) {
  std::sort(secrets.begin(), secrets.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  secrets.erase(std::unique(secrets.begin(), secrets.end()), secrets.end());
}

// libpq's message, one line, without its trailing newline.
std::string Tidy(std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return EscapeControls(message);
}

// The values libpq accepts for the options whose values it checks only when connecting (libpq
// 15's connectOptions2 and PQconnectPoll), where a bad one looks like a server that cannot be
// reached and would be retried for the whole failover_timeout. PQconninfoParse checks only the
// keywords. An option a later libpq adds is left to it.
const std::vector<std::string_view>* AllowedValues(std::string_view keyword) {
  static const auto* const allowed =
      new std::vector<std::pair<std::string_view, std::vector<std::string_view>>>{
          {"sslmode", {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}},
          {"gssencmode", {"disable", "prefer", "require"}},
          {"channel_binding", {"disable", "prefer", "require"}},
          {"target_session_attrs",
           {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"}},
          {"ssl_min_protocol_version", {"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"}},
          {"ssl_max_protocol_version", {"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"}},
      };
  for (const auto& [name, values] : *allowed) {
    if (name == keyword) return &values;
  }
  return nullptr;
}
// Integers as libpq's parse_int_param reads them (blanks around them allowed).
constexpr std::string_view kIntegerOptions[] = {"connect_timeout",  "keepalives",
                                                "keepalives_idle",  "keepalives_interval",
                                                "keepalives_count", "tcp_user_timeout"};

std::string_view TrimBlanks(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

bool IsInteger(std::string_view text) {
  text = TrimBlanks(text);
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  int value = 0;  // libpq's range
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && error == std::errc() && end == text.data() + text.size();
}

// A port as PQconnectPoll takes it: empty (the default), or 1 to 65535.
bool IsPort(std::string_view text) {
  if (text.empty()) return true;
  text = TrimBlanks(text);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value >= 1 && value <= 65535;
}

// A numeric address as libpq resolves hostaddr (getaddrinfo with AI_NUMERICHOST); empty: none.
bool IsNumericAddress(const std::string& text) {
  if (text.empty()) return true;
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(text.c_str(), nullptr, &hints, &found) != 0) return false;
  freeaddrinfo(found);
  return true;
}

// Why the value of `keyword` cannot be used, or nothing.
std::optional<std::string> BadValue(std::string_view keyword, std::string_view value) {
  const auto quoted = [](std::string_view text) { return "\"" + EscapeControls(text) + "\""; };
  // An empty value is libpq's to judge (for most options it means the default).
  if (value.empty()) return std::nullopt;
  if (const std::vector<std::string_view>* allowed = AllowedValues(keyword)) {
    if (std::find(allowed->begin(), allowed->end(), value) != allowed->end()) return std::nullopt;
    std::string listed;
    for (const std::string_view one : *allowed) {
      listed += (listed.empty() ? "" : ", ") + std::string(one);
    }
    return fmt::format("{}={} is not one of {}", keyword, quoted(value), listed);
  }
  if (std::find(std::begin(kIntegerOptions), std::end(kIntegerOptions), keyword) !=
          std::end(kIntegerOptions) &&
      !IsInteger(value)) {
    return fmt::format("{}={} is not an integer", keyword, quoted(value));
  }
  if (keyword == "port") {
    for (const std::string& port : Split(value)) {
      if (!IsPort(port)) {
        return fmt::format("port {} is not a number from 1 to 65535", quoted(port));
      }
    }
  }
  if (keyword == "hostaddr") {
    for (const std::string& address : Split(value)) {
      if (!IsNumericAddress(address)) {
        return fmt::format("hostaddr {} is not a numeric IPv4 or IPv6 address", quoted(address));
      }
    }
  }
  return std::nullopt;
}

// How many hosts a URI's host, hostaddr and port values name (lists of the same length, or one
// port for all); an error when they do not pair up. libpq would refuse these only when
// connecting, where they would pass for an outage.
Result<std::size_t> CountHosts(std::string_view host, std::string_view hostaddr,
                               std::string_view port) {
  const std::size_t hosts = Split(host).size();
  const std::size_t addresses = Split(hostaddr).size();
  const std::size_t ports = Split(port).size();
  const std::size_t count = std::max({hosts, addresses, std::size_t{1}});
  if (hosts != 0 && addresses != 0 && hosts != addresses) {
    return Status::InvalidArgument(
        fmt::format("{} host names but {} hostaddr values", hosts, addresses));
  }
  if (ports > 1 && ports != count) {
    return Status::InvalidArgument(
        fmt::format("{} port numbers for {} hosts (give one, or one per host)", ports, count));
  }
  return count;
}

}  // namespace

Result<PgConninfo> PgConninfo::Parse(std::string_view uri, const PgConnDefaults& defaults) {
  if (!util::IsPostgresUri(uri)) {
    return Status::InvalidArgument(
        "not a PostgreSQL connection URI: it must start with postgresql:// or postgres://");
  }
  PgConninfo info;
  info.raw_uri_ = std::string(uri);
  info.secrets_ = util::SecretCandidates(uri, SecretKeywords());
  SortLongestFirst(info.secrets_);
  const std::string invalid = fmt::format("invalid PostgreSQL connection URI {}: ",
                                          EscapeControls(util::UriWithoutSecrets(uri)));
  if (uri.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(invalid + "it contains a NUL byte");
  }
  if (util::UserInfoEnd(uri) == util::kAmbiguousAt) {
    return Status::InvalidArgument(
        invalid +
        "an '@' besides the one that ends the user name and password; write '@' as %40 "
        "in a user name, password or database name");
  }
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(
      PQconninfoParse(info.raw_uri_.c_str(), &error), &PQconninfoFree);
  if (parsed == nullptr) {
    const std::string reason = error != nullptr ? error : "libpq ran out of memory";
    PQfreemem(error);
    return Status::InvalidArgument(invalid + Tidy(info.Redact(reason)));
  }
  for (const PQconninfoOption* option = parsed.get(); option->keyword != nullptr; ++option) {
    if (option->val == nullptr) continue;
    const bool secret = option->dispchar != nullptr && option->dispchar[0] == '*';
    info.options_.push_back({option->keyword, option->val, secret, /*given=*/true});
    if (secret && option->val[0] != '\0') info.secrets_.emplace_back(option->val);
  }
  SortLongestFirst(info.secrets_);
  for (const Option& option : info.options_) {
    if (option.secret) continue;  // never quoted; libpq checks none of them before connecting
    if (std::optional<std::string> bad = BadValue(option.keyword, option.value)) {
      return Status::InvalidArgument(invalid + info.Redact(*bad));
    }
  }

  const Result<std::size_t> hosts =
      CountHosts(info.Value("host"), info.Value("hostaddr"), info.Value("port"));
  if (!hosts.ok()) return Status::InvalidArgument(invalid + hosts.status().message());
  info.host_count_ = static_cast<int>(*hosts);
  info.AddDefaults(defaults);
  info.display_name_ = info.DisplayName();
  return info;
}

bool PgConninfo::Given(std::string_view keyword) const {
  return std::any_of(options_.begin(), options_.end(), [&](const Option& option) {
    return option.given && option.keyword == keyword;
  });
}

void PgConninfo::Add(std::string keyword, std::string value) {
  options_.push_back({std::move(keyword), std::move(value), /*secret=*/false, /*given=*/false});
}

void PgConninfo::AddDefaults(const PgConnDefaults& defaults) {
  if (host_count_ > 1 && !Given("target_session_attrs")) {
    Add("target_session_attrs", "read-write");
  }
  if (!Given("application_name") && !Given("fallback_application_name")) {
    Add("fallback_application_name", "idem");
  }
  if (!Given("connect_timeout")) Add("connect_timeout", Seconds(defaults.connect_timeout, 2));
  const milliseconds dead = defaults.dead_peer_timeout;
  if (!Given("keepalives")) Add("keepalives", "1");
  if (!Given("keepalives_idle")) Add("keepalives_idle", Seconds(dead * 2 / 5, 1));
  if (!Given("keepalives_interval")) Add("keepalives_interval", Seconds(dead / 5, 1));
  if (!Given("keepalives_count")) Add("keepalives_count", "3");
  if (!Given("tcp_user_timeout")) {
    Add("tcp_user_timeout", std::to_string(std::max<int64_t>(dead.count(), 1)));
  }
}

std::string PgConninfo::DisplayName() const {
  const std::vector<std::string> hosts = Split(Value("host"));
  const std::vector<std::string> ports = Split(Value("port"));
  const bool in_authority =
      !hosts.empty() && !Given("hostaddr") && (ports.size() <= 1 || ports.size() == hosts.size()) &&
      std::none_of(hosts.begin(), hosts.end(),
                   [](const std::string& host) { return host.find('/') != std::string::npos; });
  std::string name = "postgresql://";
  if (Given("user")) name += Encode(Value("user")) + "@";
  for (std::size_t i = 0; in_authority && i < hosts.size(); ++i) {
    if (i > 0) name += ',';
    const std::string& host = hosts[i];
    name += host.find(':') != std::string::npos ? "[" + host + "]" : Encode(host);
    const std::string_view port =
        ports.empty() ? std::string_view() : std::string_view(ports[ports.size() == 1 ? 0 : i]);
    if (!port.empty()) name += ":" + Encode(port);
  }
  if (Given("dbname")) name += "/" + Encode(Value("dbname"));
  char separator = '?';
  for (const Option& option : options_) {
    if (!option.given || option.secret || option.keyword == "user" || option.keyword == "dbname" ||
        (in_authority && (option.keyword == "host" || option.keyword == "port"))) {
      continue;
    }
    name += fmt::format("{}{}={}", separator, option.keyword, Encode(option.value));
    separator = '&';
  }
  return name;
}

PgConnectParams PgConninfo::ForHost(int host) const {
  PgConnectParams params;
  for (const Option& option : options_) {
    std::string value = option.value;
    const bool listed =
        option.keyword == "host" || option.keyword == "hostaddr" || option.keyword == "port";
    if (host_count_ > 1 && listed) {
      const std::vector<std::string> items = Split(value);
      value = items.size() == 1 ? items[0] : items[host];
    }
    params.keywords.push_back(option.keyword);
    params.values.push_back(std::move(value));
  }
  return params;
}

std::string_view PgConninfo::Value(std::string_view keyword) const {
  for (const Option& option : options_) {
    if (option.keyword == keyword) return option.value;
  }
  return {};
}

milliseconds PgConninfo::connect_timeout() const {
  const std::string_view text = Value("connect_timeout");
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value <= 0) return {};
  return seconds(std::max<int64_t>(value, 2));
}

std::string PgConninfo::Redact(std::string_view message) const {
  std::string redacted(message);
  ReplaceAll(redacted, raw_uri_, util::UriWithoutSecrets(raw_uri_));
  for (const std::string& secret : secrets_) ReplaceAll(redacted, secret, kRedacted);
  return redacted;
}

}  // namespace idem::storage
