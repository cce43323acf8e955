// The HTTP service demo: `POST /payments` made safe to retry with the Idempotency-Key header
// (IETF httpapi draft "The Idempotency-Key HTTP Header Field"), on an idem store.
//
//   http_service STORE_DIR [--port N] [--work-ms W] [--faults]
//
// It listens on 127.0.0.1 only, on port N (0, the default: a free port), and prints
// "http_service: listening on http://127.0.0.1:PORT" once it accepts connections. SIGINT or
// SIGTERM stops it. test.sh in this directory drives it with curl.
//
//   POST /payments   body {"amount": <cents, integer > 0>, "currency": "<3 letters>"}
//     headers  Idempotency-Key: "<1 to 255 printable characters>"   (required; quotes optional)
//              Authorization: ... or X-Client-Id: <name>            (who the client is)
//     201  the payment, {"id": "pay_...", "amount": ..., "currency": ..., "status": "succeeded"}
//     402  declined (amounts above 100000): a problem, stored and replayed like a success
//     400  no Idempotency-Key, a malformed one, more than one, or a malformed body
//          (problem+json, not stored)
//     401  neither Authorization nor X-Client-Id
//     409  a request with this key is still in progress (Retry-After says when to try again)
//     422  the key was used before with a different body
//     A retry of a completed request gets the first response's status and body again, with the
//     header "Idempotent-Replayed: true"; the payment is not made again.
//   GET /ledger      the effects, one line per payment attempt that ran:
//                    "<client>\t<idempotency key>\t<charged|declined>\t<payment id>\t<amount>"
//   GET /healthz     "ok"
//
// Keys are scoped per client: the store key is the client's identity, a NUL byte, and the
// Idempotency-Key, so two clients using the same key get separate requests and can never read
// each other's responses. The identity is a digest of the Authorization header when there is
// one (the credential itself is not stored), else the X-Client-Id header.
//
// Each request uses the low-level calls: Begin, then Complete with the response. A duplicate
// that arrives while the first is running gets 409 at once, rather than waiting as Execute
// would. W (default 200) is how long a payment takes, so that duplicates can overlap it.
//
// --faults enables a header for tests: "X-Fault: lose-reply" makes the server complete the
// payment and then answer 503 instead of its response, as a proxy that timed out would; a
// client retrying with the same key (curl --retry) then gets the replay.

#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include "idem/idem.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr std::size_t kMaxIdempotencyKey = 255;
constexpr std::size_t kMaxClientId = 64;
constexpr long kDeclineAbove = 100000;  // cents
constexpr auto kRetention = std::chrono::hours(24);

// Writes one line of the request log.
void Log(const std::string& line) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// A response as it is sent and as it is stored for replays.
struct Response {
  int status = 500;
  std::string content_type;
  std::string body;

  // "<status>\n<content type>\n<body>": what Complete stores.
  std::string Encode() const { return std::to_string(status) + "\n" + content_type + "\n" + body; }

  static std::optional<Response> Decode(std::string_view stored) {
    const std::size_t first = stored.find('\n');
    const std::size_t second =
        first == std::string_view::npos ? first : stored.find('\n', first + 1);
    if (second == std::string_view::npos) return std::nullopt;
    Response response;
    const auto [end, error] =
        std::from_chars(stored.data(), stored.data() + first, response.status);
    if (error != std::errc() || end != stored.data() + first) return std::nullopt;
    response.content_type = std::string(stored.substr(first + 1, second - first - 1));
    response.body = std::string(stored.substr(second + 1));
    return response;
  }

  void WriteTo(httplib::Response& out) const {
    out.status = status;
    out.set_content(body, content_type);
  }
};

// An RFC 9457 problem document.
Response Problem(int status, std::string_view type, std::string_view title,
                 std::string_view detail) {
  const json body = {{"type", "https://idem.example/problems/" + std::string(type)},
                     {"title", title},
                     {"status", status},
                     {"detail", detail}};
  return {status, "application/problem+json", body.dump() + "\n"};
}

// Who the client is, or nullopt. The Authorization credential is reduced to a digest, so the
// store never holds it.
std::optional<std::string> ClientIdentity(const httplib::Request& request) {
  if (request.has_header("Authorization")) {
    return "auth:" + idem::Fingerprint(request.get_header_value("Authorization")).substr(0, 16);
  }
  if (!request.has_header("X-Client-Id")) return std::nullopt;
  const std::string id = request.get_header_value("X-Client-Id");
  const bool valid = !id.empty() && id.size() <= kMaxClientId &&
                     std::all_of(id.begin(), id.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                     });
  if (!valid) return std::nullopt;
  return "client:" + id;
}

// The Idempotency-Key: a Structured Field sf-string ("..." with \" and \\ escapes), or for
// lenient clients the bare text. nullopt when malformed.
std::optional<std::string> ParseIdempotencyKey(std::string_view field) {
  std::string key;
  if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
    for (std::size_t i = 1; i + 1 < field.size(); ++i) {
      char c = field[i];
      if (c == '\\') {
        if (i + 2 >= field.size() || (field[i + 1] != '"' && field[i + 1] != '\\')) {
          return std::nullopt;
        }
        c = field[++i];
      } else if (c == '"') {
        return std::nullopt;
      }
      key.push_back(c);
    }
  } else {
    key = std::string(field);
  }
  const bool printable =
      std::all_of(key.begin(), key.end(), [](unsigned char c) { return c >= 0x20 && c <= 0x7e; });
  if (key.empty() || key.size() > kMaxIdempotencyKey || !printable) return std::nullopt;
  return key;
}

struct Payment {
  long amount = 0;
  std::string currency;
};

std::optional<Payment> ParsePayment(const std::string& body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return std::nullopt;
  const auto amount = parsed.find("amount");
  const auto currency = parsed.find("currency");
  if (amount == parsed.end() || !amount->is_number_integer() || currency == parsed.end() ||
      !currency->is_string()) {
    return std::nullopt;
  }
  Payment payment{amount->get<long>(), currency->get<std::string>()};
  const bool currency_ok =
      payment.currency.size() == 3 && std::all_of(payment.currency.begin(), payment.currency.end(),
                                                  [](unsigned char c) { return std::isupper(c); });
  if (payment.amount <= 0 || !currency_ok) return std::nullopt;
  return payment;
}

// The effects: every payment attempt that ran, in memory. Thread-safe.
class Ledger {
 public:
  void Add(std::string line) {
    std::lock_guard lock(mu_);
    lines_.push_back(std::move(line));
  }
  std::string Text() const {
    std::lock_guard lock(mu_);
    std::string text;
    for (const std::string& line : lines_) text += line + "\n";
    return text;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// A payment request that passed the checks: who sent it, its Idempotency-Key, the payment.
struct PaymentRequest {
  std::string client;
  std::string key;
  Payment payment;
};

// A request refused before it reaches the store: the problem to answer, and the client and key
// ("-" when unknown) it is logged under.
struct Rejection {
  std::string client;
  std::string key;
  Response problem;
};

// The client, the Idempotency-Key and the payment of POST /payments, or why it is refused.
std::variant<PaymentRequest, Rejection> ReadPaymentRequest(const httplib::Request& request) {
  const std::optional<std::string> client = ClientIdentity(request);
  if (!client) {
    return Rejection{"-", "-",
                     Problem(401, "client-unknown", "The client is not identified",
                             "Send an Authorization header, or an X-Client-Id header of 1 to 64 "
                             "letters, digits, '-', '_' or '.'.")};
  }
  const std::size_t keys = request.get_header_value_count("Idempotency-Key");
  if (keys == 0) {
    return Rejection{*client, "-",
                     Problem(400, "idempotency-key-missing", "Idempotency-Key is missing",
                             "This operation is idempotent and it requires correct usage of "
                             "Idempotency Key.")};
  }
  // Two header lines are one field whose value is a list of two keys (RFC 9110, section 5.3),
  // not the single sf-string the draft requires: which one the client meant is unknown.
  if (keys > 1) {
    return Rejection{
        *client, "-",
        Problem(400, "idempotency-key-repeated", "Idempotency-Key is sent more than once",
                fmt::format("The request has {} Idempotency-Key header lines; send exactly one, "
                            "holding one key.",
                            keys))};
  }
  const std::optional<std::string> key =
      ParseIdempotencyKey(request.get_header_value("Idempotency-Key"));
  if (!key) {
    return Rejection{*client, "-",
                     Problem(400, "idempotency-key-malformed", "Idempotency-Key is malformed",
                             "The Idempotency-Key must be a string of 1 to 255 printable "
                             "characters.")};
  }
  const std::optional<Payment> payment = ParsePayment(request.body);
  if (!payment) {
    return Rejection{*client, *key,
                     Problem(400, "payment-malformed", "The payment is malformed",
                             "Send a JSON object with an integer \"amount\" in cents, above 0, "
                             "and a 3-letter upper-case \"currency\".")};
  }
  return PaymentRequest{*client, *key, *payment};
}

class PaymentService {
 public:
  PaymentService(idem::Store& store, std::chrono::milliseconds work, bool faults)
      : store_(store), work_(work), faults_(faults) {}

  void Pay(const httplib::Request& request, httplib::Response& out) {
    std::variant<PaymentRequest, Rejection> read = ReadPaymentRequest(request);
    if (const Rejection* rejection = std::get_if<Rejection>(&read)) {
      return Answer(out, rejection->client, rejection->key, rejection->problem);
    }
    const auto& [client, key, payment] = std::get<PaymentRequest>(read);

    // The client's identity first: another client's identical key is another record.
    const std::string store_key = client + std::string(1, '\0') + key;
    const std::string fingerprint = idem::Fingerprint(request.body);
    auto claim =
        store_.Begin(store_key, {.type = "payment",
                                 .fingerprint = fingerprint,
                                 .lease = std::max<std::chrono::milliseconds>(10s, 4 * work_),
                                 .retention = kRetention});
    if (!claim.ok()) {
      const bool bad_request = claim.status().code() == idem::Status::Code::kInvalidArgument;
      return Answer(out, client, key,
                    Problem(bad_request ? 400 : 503, "store-error",
                            "The request could not be recorded", claim.status().ToString()));
    }
    switch (claim->outcome) {
      case idem::Outcome::kAcquired:
        return Run(out, client, key, store_key, claim->token, claim->took_over, payment,
                   request.get_header_value("X-Fault") == "lose-reply");
      case idem::Outcome::kReplay: {
        std::optional<Response> first = Response::Decode(claim->record.result);
        if (!first) {
          return Answer(
              out, client, key,
              Problem(500, "stored-response-unreadable", "The stored response cannot be read", ""));
        }
        out.set_header("Idempotent-Replayed", "true");
        return Answer(out, client, key, *first, " (replayed)");
      }
      case idem::Outcome::kInProgress: {
        // retry_after is what is left of the first request's lease, a bound for a request whose
        // server died; a live one usually answers within its work time.
        const auto wait = std::min(claim->retry_after, work_);
        const auto seconds =
            std::max<long long>(1, std::chrono::ceil<std::chrono::seconds>(wait).count());
        out.set_header("Retry-After", std::to_string(seconds));
        return Answer(
            out, client, key,
            Problem(409, "request-in-progress", "A request is outstanding for this Idempotency-Key",
                    "A request with the same Idempotency-Key is being processed; "
                    "retry later to get its response."));
      }
      case idem::Outcome::kMismatch:
        return Answer(out, client, key,
                      Problem(422, "idempotency-key-reused", "Idempotency-Key is already used",
                              "This operation is idempotent and it requires correct usage of "
                              "Idempotency Key. Idempotency Key MUST not be reused across "
                              "different payloads of this operation."));
      case idem::Outcome::kFailed:  // this service stores every outcome with Complete
        return Answer(out, client, key,
                      Problem(500, "request-failed", "The request failed", claim->record.result));
    }
  }

  void LedgerText(httplib::Response& out) const { out.set_content(ledger_.Text(), "text/plain"); }

 private:
  // Makes the payment for an acquired claim, stores the response, and sends it.
  void Run(httplib::Response& out, const std::string& client, const std::string& key,
           const std::string& store_key, uint64_t token, bool took_over, const Payment& payment,
           bool lose_reply) {
    if (took_over) {
      Log("  taking over " + client + " key=" + key + " from an attempt that died");
    }
    std::this_thread::sleep_for(work_);  // the payment provider's latency
    Response response;
    std::string outcome;
    std::string payment_id;
    if (payment.amount > kDeclineAbove) {
      outcome = "declined";
      response = Problem(402, "payment-declined", "The payment was declined",
                         "Amounts above " + std::to_string(kDeclineAbove) + " are declined.");
    } else {
      outcome = "charged";
      payment_id = "pay_" + idem::NewRequestId();
      const json body = {{"id", payment_id},
                         {"amount", payment.amount},
                         {"currency", payment.currency},
                         {"status", "succeeded"}};
      response = {201, "application/json", body.dump() + "\n"};
    }
    ledger_.Add(client + "\t" + key + "\t" + outcome + "\t" +
                (payment_id.empty() ? "-" : payment_id) + "\t" + std::to_string(payment.amount) +
                " " + payment.currency);
    // Every response from here on is the request's answer: stored, then replayed to retries.
    const idem::Status completed = store_.Complete(store_key, token, response.Encode());
    if (!completed.ok()) {
      return Answer(
          out, client, key,
          Problem(500, "store-error", "The response could not be recorded", completed.ToString()));
    }
    if (faults_ && lose_reply) {
      return Answer(out, client, key,
                    Problem(503, "reply-lost", "Simulated: the reply was lost",
                            "The payment was made; retry with the same Idempotency-Key."),
                    " (fault: the real reply was lost)");
    }
    Answer(out, client, key, response);
  }

  void Answer(httplib::Response& out, const std::string& client, const std::string& key,
              const Response& response, std::string_view note = "") {
    response.WriteTo(out);
    Log("POST /payments " + client + " key=" + key + " -> " + std::to_string(response.status) +
        std::string(note));
  }

  idem::Store& store_;
  const std::chrono::milliseconds work_;
  const bool faults_;
  Ledger ledger_;
};

int Usage(FILE* out) {
  std::fprintf(out,
               "usage: http_service STORE_DIR [--port N] [--work-ms W] [--faults]\n"
               "Serves POST /payments with Idempotency-Key support on 127.0.0.1:N (default 0: a\n"
               "free port, printed), keeping idempotency records in the idem store STORE_DIR.\n"
               "W: milliseconds a payment takes (default 200). --faults: honour the test header\n"
               "\"X-Fault: lose-reply\". Stops on SIGINT or SIGTERM.\n");
  return out == stdout ? 0 : 2;
}

bool ParseNumber(std::string_view text, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  if (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    return Usage(stdout);
  }
  const std::string store_dir = argv[1];
  int port = 0;
  int work_ms = 200;
  bool faults = false;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--faults") {
      faults = true;
    } else if (arg == "--port" && i + 1 < argc && ParseNumber(argv[i + 1], port) && port <= 65535) {
      ++i;
    } else if (arg == "--work-ms" && i + 1 < argc && ParseNumber(argv[i + 1], work_ms)) {
      ++i;
    } else {
      std::fprintf(stderr, "http_service: unexpected argument \"%s\"\n", argv[i]);
      return Usage(stderr);
    }
  }

  // SIGINT and SIGTERM are taken by one thread that stops the server; blocked before any other
  // thread starts (the store starts some), so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::error_code error;
  std::filesystem::create_directories(store_dir, error);
  if (error) {
    std::fprintf(stderr, "http_service: cannot create %s: %s\n", store_dir.c_str(),
                 error.message().c_str());
    return 3;
  }
  auto opened = idem::Store::Open(store_dir);
  if (!opened.ok()) {
    std::fprintf(stderr, "http_service: cannot open the store %s: %s\n", store_dir.c_str(),
                 opened.status().ToString().c_str());
    return 3;
  }
  PaymentService service(**opened, std::chrono::milliseconds(work_ms), faults);

  httplib::Server server;
  // Enough threads that the duplicates of a slow request are all answered while it runs.
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };
  server.set_payload_max_length(64 << 10);
  server.Post("/payments", [&service](const httplib::Request& request, httplib::Response& out) {
    service.Pay(request, out);
  });
  server.Get("/ledger", [&service](const httplib::Request&, httplib::Response& out) {
    service.LedgerText(out);
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& out) {
    out.set_content("ok\n", "text/plain");
  });
  // The store's counters for Prometheus (the text exposition format), one per row of
  // idem::kCounters. A store shared by several processes reports its owner's counts.
  server.Get("/metrics", [&store = **opened](const httplib::Request&, httplib::Response& out) {
    const idem::Result<idem::Counters> counters = store.GetCounters();
    if (!counters.ok()) {
      out.status = 503;
      out.set_content(counters.status().ToString() + "\n", "text/plain");
      return;
    }
    std::string text;
    for (const idem::CounterInfo& counter : idem::kCounters) {
      const std::string metric = "idem_" + std::string(counter.name) + "_total";
      text += "# HELP " + metric + " " + std::string(counter.help) + "\n";
      text += "# TYPE " + metric + " counter\n";
      text += metric + " " + std::to_string((*counters).*counter.field) + "\n";
    }
    out.set_content(text, "text/plain; version=0.0.4");
  });

  // Loopback only: this is a demo, not a service for the network.
  const int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                              : (server.bind_to_port("127.0.0.1", port) ? port : -1);
  if (bound < 0) {
    std::fprintf(stderr, "http_service: cannot listen on 127.0.0.1:%d\n", port);
    return 3;
  }
  std::thread stopper([&server, &stop_signals] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  std::printf("http_service: listening on http://127.0.0.1:%d (store %s, work %d ms%s)\n", bound,
              store_dir.c_str(), work_ms, faults ? ", faults on" : "");
  std::fflush(stdout);
  const bool listened = server.listen_after_bind();
  ::kill(::getpid(), SIGTERM);  // wakes the stopper if the server stopped by itself
  stopper.join();
  std::printf("http_service: stopped\n");
  return listened ? 0 : 3;
}
