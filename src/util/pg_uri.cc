#include "util/pg_uri.h"

#include <algorithm>

#include "util/hex.h"

namespace idem::util {
namespace {

constexpr std::string_view kSchemes[] = {"postgresql://", "postgres://"};

std::size_t SchemeLength(std::string_view uri) {
  for (const std::string_view scheme : kSchemes) {
    if (uri.starts_with(scheme)) return scheme.size();
  }
  return 0;
}

// What lies between the scheme and the query: user information, hosts, ports, database.
std::string_view Body(std::string_view uri) {
  const std::string_view rest = uri.substr(SchemeLength(uri));
  return rest.substr(0, rest.find('?'));
}

std::string_view Query(std::string_view uri) {
  const std::size_t mark = uri.find('?');
  return mark == std::string_view::npos ? std::string_view() : uri.substr(mark + 1);
}

}  // namespace

bool IsPostgresUri(std::string_view path) { return SchemeLength(path) != 0; }

std::string UriWithoutSecrets(std::string_view uri) {
  std::string_view body = Body(uri);
  if (const std::size_t at = body.rfind('@'); at != std::string_view::npos) {
    body.remove_prefix(at + 1);
  }
  return std::string(uri.substr(0, SchemeLength(uri))) + std::string(body);
}

std::size_t UserInfoEnd(std::string_view uri) {
  const std::string_view body = Body(uri);
  const std::size_t at = body.find('@');
  if (at == std::string_view::npos) return std::string_view::npos;
  const std::size_t slash = body.find('/');
  if (body.find('@', at + 1) != std::string_view::npos || slash < at) return kAmbiguousAt;
  return SchemeLength(uri) + at;
}

std::vector<std::string> SecretCandidates(std::string_view uri,
                                          const std::vector<std::string>& secret_keywords) {
  std::vector<std::string> found;
  const auto add = [&found](std::string_view raw) {
    if (raw.empty()) return;
    found.emplace_back(raw);
    if (std::optional<std::string> decoded = PercentDecode(raw); decoded && !decoded->empty()) {
      found.push_back(std::move(*decoded));
    }
  };
  const std::string_view body = Body(uri);
  for (const std::size_t at : {body.find('@'), body.rfind('@')}) {
    if (at == std::string_view::npos) continue;
    const std::string_view user_info = body.substr(0, at);
    if (const std::size_t colon = user_info.find(':'); colon != std::string_view::npos) {
      add(user_info.substr(colon + 1));
    }
  }
  std::string_view query = Query(uri);
  while (!query.empty()) {
    const std::string_view parameter = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), parameter.size() + 1));
    const std::size_t equals = parameter.find('=');
    if (equals == std::string_view::npos) continue;
    const std::optional<std::string> name = PercentDecode(parameter.substr(0, equals));
    if (!name ||
        std::find(secret_keywords.begin(), secret_keywords.end(), *name) != secret_keywords.end()) {
      add(parameter.substr(equals + 1));
    }
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

std::optional<std::string> PercentDecode(std::string_view text) {
  std::string decoded;
  decoded.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      decoded += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = HexDigitValue(text[i + 1]);
    const int low = HexDigitValue(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    decoded += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return decoded;
}

}  // namespace idem::util
