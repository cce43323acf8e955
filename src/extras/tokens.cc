// One-time tokens (Store::IssueToken, Store::ConsumeToken), built on Begin/Complete/Fail/Forget so
// that they behave alike for the owner of a store and for the processes that share it.
//
// A token's record goes through the ordinary state machine:
//   issued     Begin (attempts 1) then Fail(kRetryable, "issued"): "failed, may be acquired again"
//   consuming  Begin acquires it again (attempts 2): exactly one caller gets kAcquired
//   consumed   Complete("consumed"): every later Begin replays
// A Begin that acquires a key with attempts 1 created the record: the token was never issued (or
// its record is gone), so the record is forgotten again.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <optional>

#include "idem/store.h"
#include "util/hex.h"
#include "util/random.h"
#include "util/time.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

constexpr std::string_view kTokenType = "idem.token";
constexpr std::string_view kPrefix = "tok_";
constexpr std::size_t kRandomBytes = 16;  // 32 hex digits
// How often IssueToken draws again when a fresh token's key is taken (2^-128: never, in practice).
constexpr int kIssueDraws = 3;

TimePoint Now(const Store& store) {
  const auto& clock = store.options().clock;
  return clock ? clock->Now() : std::chrono::system_clock::now();
}

std::string NewTokenText(const std::array<char, kRandomBytes>& random, int64_t expiry) {
  std::string text(kPrefix);
  util::AppendHex(text, std::string_view(random.data(), random.size()));
  text += '_';
  std::array<char, 16> digits{};
  auto [end, error] = std::to_chars(digits.data(), digits.data() + digits.size(),
                                    static_cast<uint64_t>(expiry), 16);
  static_cast<void>(error);  // 16 hex digits hold any uint64_t
  text.append(digits.data(), end);
  return text;
}

bool IsLowerHex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The expiry written in a token's text, or nullopt when the text is not a token.
std::optional<TimePoint> ParseExpiry(std::string_view token) {
  if (token.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  token.remove_prefix(kPrefix.size());
  if (token.size() < 2 * kRandomBytes + 2 || !IsLowerHex(token.substr(0, 2 * kRandomBytes)) ||
      token[2 * kRandomBytes] != '_') {
    return std::nullopt;
  }
  const std::string_view expiry = token.substr(2 * kRandomBytes + 1);
  if (expiry.size() > 16 || !IsLowerHex(expiry)) return std::nullopt;
  uint64_t micros = 0;
  auto [end, error] = std::from_chars(expiry.data(), expiry.data() + expiry.size(), micros, 16);
  if (error != std::errc() || end != expiry.data() + expiry.size() ||
      micros > static_cast<uint64_t>(INT64_MAX)) {
    return std::nullopt;
  }
  return util::FromMicros(static_cast<int64_t>(micros));
}

}  // namespace

Result<std::string> Store::IssueToken(milliseconds ttl) {
  if (ttl <= milliseconds(0)) {
    return Status::InvalidArgument(
        fmt::format("token ttl is {} ms; it must be positive", ttl.count()));
  }
  // The record's retention is the token's life (ConsumeToken asks the record, not the text), so
  // the lease, which retention never ends before, is no longer than the ttl.
  const BeginOptions options{.type = kTokenType,
                             .fingerprint = {},
                             .lease = std::min(ttl, this->options().default_lease),
                             .retention = ttl};
  for (int draw = 0; draw < kIssueDraws; ++draw) {
    std::array<char, kRandomBytes> random{};
    const Status drawn = util::RandomBytes(random.data(), random.size());
    if (!drawn.ok()) {
      return Status::Unavailable(fmt::format("no random bytes for a token: {}", drawn.message()));
    }
    const std::string token =
        NewTokenText(random, util::ToMicros(Now(*this) + std::chrono::microseconds(ttl)));
    IDEM_ASSIGN_OR_RETURN(Claim claim, Begin(token, options));
    if (claim.outcome != Outcome::kAcquired) continue;  // the key exists already: draw another
    if (claim.record.attempts != 1) {
      // It acquired an issued token of the same text: put it back as it was, draw another.
      static_cast<void>(Fail(token, claim.token, "issued", Failure::kRetryable));
      continue;
    }
    Status issued = Fail(token, claim.token, "issued", Failure::kRetryable);
    // A ttl shorter than the write took: the record is already gone, and the token is issued
    // expired, as ConsumeToken will say.
    if (issued.code() == Status::Code::kNotFound) return token;
    if (!issued.ok()) {
      // Nobody learns this token, so its record only has to go; it expires with the ttl anyway.
      static_cast<void>(Forget(token));
      return issued;
    }
    return token;
  }
  return Status::Unavailable(
      fmt::format("could not draw an unused token in {} tries", kIssueDraws));
}

Status Store::ConsumeToken(std::string_view token) {
  const std::optional<TimePoint> expiry = ParseExpiry(token);
  if (!expiry) {
    return Status::InvalidArgument("malformed token: expected tok_<32 hex digits>_<hex expiry>");
  }
  // Whether the token lives is the record's to say: its retention ends at the token's expiry by
  // the store's clock, which on a shared store may differ from this host's. The expiry in the
  // text and this host's clock only word the answer for a token that has no record. A read
  // first, so that guessed or forged tokens cost no write.
  IDEM_ASSIGN_OR_RETURN(std::optional<Record> stored, Get(token));
  if (!stored || stored->type != kTokenType) {
    const TimePoint now = Now(*this);
    if (now >= *expiry) {
      return Status::NotFound(
          fmt::format("token expired {} ms ago",
                      std::chrono::duration_cast<milliseconds>(now - *expiry).count()));
    }
    return Status::NotFound("unknown token");
  }

  // Retention up to the token's expiry, not beyond; at least a moment on a host whose clock is
  // ahead of the store's. The claim's default lease still keeps the record until the Complete
  // below when the token is about to expire.
  const milliseconds remaining =
      std::max(std::chrono::ceil<milliseconds>(*expiry - Now(*this)), milliseconds(1));
  const BeginOptions options{
      .type = kTokenType, .fingerprint = {}, .lease = milliseconds(0), .retention = remaining};
  IDEM_ASSIGN_OR_RETURN(Claim claim, Begin(token, options));
  switch (claim.outcome) {
    case Outcome::kAcquired:
      if (claim.record.attempts <= 1) {
        // This Begin created the record: the token's record was purged or forgotten meanwhile.
        static_cast<void>(Forget(token));
        return Status::NotFound("unknown token");
      }
      {
        Status consumed = Complete(token, claim.token, "consumed");
        // Our lease ran out and another consumer took the token over.
        if (consumed.code() == Status::Code::kLeaseLost) {
          return Status::Failed("token already consumed");
        }
        if (consumed.code() == Status::Code::kNotFound) {
          return Status::NotFound("unknown token: its record was removed while being consumed");
        }
        return consumed;
      }
    case Outcome::kReplay:
      return Status::Failed("token already consumed");
    case Outcome::kInProgress:
      return Status::Failed("token is being consumed by another caller");
    case Outcome::kFailed:
    case Outcome::kMismatch:
      return Status::Failed("token cannot be consumed: its record is " +
                            std::string(OutcomeName(claim.outcome)));
  }
  return Status::Failed("token cannot be consumed");
}

}  // namespace idem
