#include "storage/pg_conninfo.h"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <memory>

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

  const std::size_t hosts = Split(info.Value("host")).size();
  const std::size_t addresses = Split(info.Value("hostaddr")).size();
  const std::size_t ports = Split(info.Value("port")).size();
  const std::size_t count = std::max({hosts, addresses, std::size_t{1}});
  // Counts that do not match are left to libpq, which names the mismatch when connecting.
  if ((hosts == 0 || hosts == count) && (addresses == 0 || addresses == count) &&
      (ports <= 1 || ports == count)) {
    info.host_count_ = static_cast<int>(count);
  }
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
