// The payment demo: a card charge that is retried in every way a real one is, and that the bank
// still sees exactly once per request.
//
//   payment STORE_DIR
//
// A simulated, in-process bank charges cards. It counts its charges per request id, and does NOT
// deduplicate them itself: every Charge call moves money. The payment service in front of it
// runs each charge through idem's Store::Execute keyed by the client's request id, so:
//
//   1. a client whose reply got lost retries, and gets the first answer replayed;
//   2. the bank charges but its reply times out: the attempt fails (retryable), and the retry
//      finds the checkpoint left before the charge and asks the bank instead of charging again;
//   3. a worker charges, then dies before recording the result: once its lease runs out, a retry
//      takes the claim over (took_over), reads the checkpoint and reconciles with the bank;
//   4. eight threads send the same request at once: one charges, the others get its answer;
//   5. the same request id with a different amount is rejected (fingerprint mismatch);
//   6. a declined card is recorded as a terminal failure: retries get the decline, not a charge.
//
// At the end it checks, for every request id, that the bank charged exactly once (never for the
// declined card), and exits 1 if not. Each run uses new request ids, so a store directory may be
// reused; scripts/demo.sh uses a fresh one and lists it afterwards with `idem dump`.

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "idem/idem.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const Clock::time_point kStart = Clock::now();

// Prints one line of the story, prefixed with the time since the start.
__attribute__((format(printf, 1, 2))) void Say(const char* format, ...) {
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - kStart);
  std::printf("[%5lld ms] ", static_cast<long long>(elapsed.count()));
  std::va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Heading(const char* title) { std::printf("\n== %s\n", title); }

// ---------------------------------------------------------------------------------------------
// The bank: an in-process stand-in for a card processor. Thread-safe.

struct BankReply {
  enum class Kind { kCharged, kDeclined, kTimedOut };
  Kind kind;
  std::string charge_id;  // kCharged
  std::string reason;     // kDeclined
};

class Bank {
 public:
  static constexpr std::string_view kDeclinedCard = "4000-0000-0000-0002";

  // Charges `card` unless it is declined. Each call that is not declined moves money: the bank
  // does not deduplicate by reference. After LoseNextReply(), the next charge goes through but
  // its reply is lost (the caller sees a timeout).
  BankReply Charge(const std::string& reference, std::string_view card, long amount_cents) {
    std::lock_guard lock(mu_);
    ++calls_[reference];
    if (card == kDeclinedCard) {
      return {BankReply::Kind::kDeclined, "", "insufficient funds"};
    }
    std::string charge_id = "ch_" + std::to_string(++next_charge_);
    charges_[reference].push_back(charge_id);
    total_cents_ += amount_cents;
    if (lose_next_reply_) {
      lose_next_reply_ = false;
      return {BankReply::Kind::kTimedOut, "", ""};
    }
    return {BankReply::Kind::kCharged, std::move(charge_id), ""};
  }

  // The charge made with this reference, if any: how a payment service reconciles.
  std::optional<std::string> FindCharge(const std::string& reference) const {
    std::lock_guard lock(mu_);
    auto it = charges_.find(reference);
    if (it == charges_.end() || it->second.empty()) return std::nullopt;
    return it->second.front();
  }

  void LoseNextReply() {
    std::lock_guard lock(mu_);
    lose_next_reply_ = true;
  }

  // How many times money moved for this reference.
  std::size_t Charges(const std::string& reference) const {
    std::lock_guard lock(mu_);
    auto it = charges_.find(reference);
    return it == charges_.end() ? 0 : it->second.size();
  }

  // How many Charge calls reached the bank for this reference, declined ones included.
  int Calls(const std::string& reference) const {
    std::lock_guard lock(mu_);
    auto it = calls_.find(reference);
    return it == calls_.end() ? 0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::string>> charges_;
  std::map<std::string, int> calls_;
  long next_charge_ = 0;
  long total_cents_ = 0;
  bool lose_next_reply_ = false;
};

// ---------------------------------------------------------------------------------------------
// The payment service: charges a card at most once per request id.

struct PaymentRequest {
  std::string name;        // for the story only, e.g. "order-1001"
  std::string request_id;  // the client's idempotency key
  std::string card;
  long amount_cents = 0;

  // What must not change between retries of one request id.
  std::string Payload() const { return card + "|" + std::to_string(amount_cents); }
};

constexpr std::string_view kCheckpointChargeSent = "charge sent to the bank";

class PaymentService {
 public:
  PaymentService(idem::Store& store, Bank& bank) : store_(store), bank_(bank) {}

  // Returns the charge id; the first answer is replayed to every retry of the request id.
  idem::Result<idem::Execution> Pay(const PaymentRequest& request) {
    const std::string fingerprint = idem::Fingerprint(request.Payload());
    return store_.Execute(request.request_id,
                          idem::BeginOptions{.type = "pay", .fingerprint = fingerprint},
                          [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                            runs_.fetch_add(1);
                            return ChargeOnce(attempt, request);
                          });
  }

  // How many times Execute ran the charging function (not the replays).
  int runs() const { return runs_.load(); }

 private:
  idem::Result<std::string> ChargeOnce(idem::Attempt& attempt, const PaymentRequest& request) {
    if (!attempt.checkpoint.empty()) {
      // An earlier attempt got as far as the bank and died or lost the reply: the money may have
      // moved. Ask the bank before charging again.
      Say("  service: attempt %u on %s (took_over=%s) finds checkpoint \"%.*s\": asking the bank",
          attempt.attempts, request.name.c_str(), attempt.took_over ? "true" : "false",
          static_cast<int>(attempt.checkpoint.size()), attempt.checkpoint.data());
      if (std::optional<std::string> charge = bank_.FindCharge(request.request_id)) {
        Say("  service: the bank already has %s for %s: recording it, not charging again",
            charge->c_str(), request.name.c_str());
        return *charge;
      }
      Say("  service: the bank has no charge for %s: charging now", request.name.c_str());
    }

    // Saved before the side effect, so whoever comes next knows to reconcile. If our lease was
    // lost meanwhile, this fails and we do not charge.
    IDEM_RETURN_IF_ERROR(attempt.SaveCheckpoint(kCheckpointChargeSent));
    const BankReply reply = bank_.Charge(request.request_id, request.card, request.amount_cents);
    switch (reply.kind) {
      case BankReply::Kind::kCharged:
        Say("  service: attempt %u charged %s: %s", attempt.attempts, request.name.c_str(),
            reply.charge_id.c_str());
        return reply.charge_id;
      case BankReply::Kind::kDeclined:
        Say("  service: the bank declined %s (%s): recording a terminal failure",
            request.name.c_str(), reply.reason.c_str());
        return idem::Terminal("card declined: " + reply.reason);
      case BankReply::Kind::kTimedOut:
        Say("  service: the bank did not answer for %s: recording a retryable failure",
            request.name.c_str());
        return idem::Status::TimedOut("the bank did not answer within its timeout");
    }
    return idem::Status::Unavailable("unknown bank reply");
  }

  idem::Store& store_;
  Bank& bank_;
  std::atomic<int> runs_{0};
};

// ---------------------------------------------------------------------------------------------
// The client side.

std::string Describe(const idem::Result<idem::Execution>& execution) {
  if (!execution.ok()) return "error " + execution.status().ToString();
  return execution->result +
         (execution->replayed ? " (replayed from the store" : " (recorded now") + ", attempts " +
         std::to_string(execution->attempts) + ")";
}

// Sends the request; on a timeout or a retryable error sends it again with the same request id,
// as an HTTP client with an Idempotency-Key header would. Stops on success, on a terminal answer
// (kFailed, kMismatch) or after `tries`.
idem::Result<idem::Execution> PayWithRetries(PaymentService& service, const PaymentRequest& request,
                                             int tries) {
  for (int attempt = 1;; ++attempt) {
    idem::Result<idem::Execution> execution = service.Pay(request);
    Say("client: try %d for %s -> %s", attempt, request.name.c_str(), Describe(execution).c_str());
    const auto code = execution.status().code();
    const bool retryable = code == idem::Status::Code::kTimedOut ||
                           code == idem::Status::Code::kInProgress ||
                           code == idem::Status::Code::kUnavailable;
    if (execution.ok() || !retryable || attempt == tries) return execution;
    std::this_thread::sleep_for(50ms);
  }
}

struct Expectation {
  const PaymentRequest* request;
  std::size_t charges;  // how many times the bank may have moved money
  idem::State state;    // the record's final state
  std::string result;   // the stored result (kDone: the charge id); empty: not checked
};

int Usage() {
  std::fprintf(stderr,
               "usage: payment STORE_DIR\n"
               "Runs the payment demo against an idem store in STORE_DIR (created if missing).\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Usage();
  const std::string_view arg = argv[1];
  if (arg == "--help" || arg == "-h") {
    Usage();
    return 0;
  }
  const std::filesystem::path store_dir = argv[1];
  std::error_code error;
  std::filesystem::create_directories(store_dir, error);
  if (error) {
    std::fprintf(stderr, "payment: cannot create %s: %s\n", store_dir.c_str(),
                 error.message().c_str());
    return 3;
  }

  idem::Options options;
  options.default_lease = 200ms;  // short, so a dead worker is taken over quickly in the demo
  options.execute_wait = 5s;      // how long a retry waits for a live attempt before giving up
  auto opened = idem::Store::Open(store_dir.string(), options);
  if (!opened.ok()) {
    std::fprintf(stderr, "payment: cannot open the store %s: %s\n", store_dir.c_str(),
                 opened.status().ToString().c_str());
    return 3;
  }
  idem::Store& store = **opened;
  Bank bank;
  PaymentService service(store, bank);
  std::printf("payment demo: store %s, lease %lld ms\n", store_dir.c_str(),
              static_cast<long long>(options.default_lease.count()));

  const PaymentRequest lost_reply{"order-1001", idem::NewRequestId(), "4242-4242-4242-4242", 2500};
  const PaymentRequest bank_timeout{"order-1002", idem::NewRequestId(), "5555-5555-5555-4444",
                                    4999};
  const PaymentRequest dead_worker{"order-1003", idem::NewRequestId(), "4242-4242-4242-4242", 1200};
  const PaymentRequest double_click{"order-1004", idem::NewRequestId(), "3782-822463-10005", 899};
  const PaymentRequest declined{"order-1005", idem::NewRequestId(),
                                std::string(Bank::kDeclinedCard), 15000};
  bool ok = true;
  auto expect = [&ok](bool condition, const char* what) {
    if (!condition) {
      Say("UNEXPECTED: %s", what);
      ok = false;
    }
  };

  Heading("1. The client's reply is lost: it retries with the same request id");
  {
    auto first = service.Pay(lost_reply);
    Say("client: sent %s (request %s, %ld cents) -> %s, but the reply is lost on the way back",
        lost_reply.name.c_str(), lost_reply.request_id.c_str(), lost_reply.amount_cents,
        Describe(first).c_str());
    expect(first.ok() && !first->replayed, "the first try charges");
    for (int retry = 1; retry <= 2; ++retry) {
      auto again = service.Pay(lost_reply);
      Say("client: retry %d after its timeout -> %s", retry, Describe(again).c_str());
      expect(again.ok() && again->replayed && first.ok() && again->result == first->result,
             "a retry replays the first charge id");
    }
  }

  Heading("2. The bank charges but its reply times out");
  {
    bank.LoseNextReply();
    auto execution = PayWithRetries(service, bank_timeout, 3);
    expect(execution.ok(), "the retry after the bank's timeout succeeds");
    auto again = service.Pay(bank_timeout);
    Say("client: one more retry -> %s", Describe(again).c_str());
    expect(again.ok() && again->replayed, "a later retry is a replay");
  }

  Heading("3. A worker charges, then dies before recording the result");
  {
    const std::string fingerprint = idem::Fingerprint(dead_worker.Payload());
    std::thread worker([&] {
      // The low-level calls, as a worker process would make them. Its lease is not renewed
      // once it dies (Execute renews it only while its function runs).
      auto claim = store.Begin(dead_worker.request_id,
                               {.type = "pay", .fingerprint = fingerprint, .lease = 200ms});
      if (!claim.ok() || claim->outcome != idem::Outcome::kAcquired) {
        Say("worker: unexpected Begin answer: %s",
            claim.ok() ? std::string(idem::OutcomeName(claim->outcome)).c_str()
                       : claim.status().ToString().c_str());
        return;
      }
      Say("worker: claimed %s with token %llu, lease 200 ms", dead_worker.name.c_str(),
          static_cast<unsigned long long>(claim->token));
      idem::Status saved =
          store.SaveCheckpoint(dead_worker.request_id, claim->token, kCheckpointChargeSent);
      if (!saved.ok()) {
        Say("worker: SaveCheckpoint failed: %s", saved.ToString().c_str());
        return;
      }
      const BankReply reply =
          bank.Charge(dead_worker.request_id, dead_worker.card, dead_worker.amount_cents);
      Say("worker: the bank charged %s (%s) ... and the worker crashes before Complete",
          dead_worker.name.c_str(), reply.charge_id.c_str());
    });
    worker.join();

    const auto before = Clock::now();
    auto execution = PayWithRetries(service, dead_worker, 3);
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - before);
    Say("client: answered after %lld ms (the retry waited for the dead worker's lease to run out)",
        static_cast<long long>(waited.count()));
    expect(execution.ok() && execution->attempts == 2,
           "the retry takes over the dead worker's claim (attempt 2)");
    expect(execution.ok() && execution->result == bank.FindCharge(dead_worker.request_id),
           "the retry records the dead worker's charge");
  }

  Heading("4. Eight threads send the same request at once (a double-clicked pay button)");
  {
    const int runs_before = service.runs();
    std::vector<std::thread> threads;
    std::vector<idem::Result<idem::Execution>> answers(8, idem::Status::Unavailable("not run"));
    for (std::size_t i = 0; i < answers.size(); ++i) {
      threads.emplace_back([&, i] { answers[i] = service.Pay(double_click); });
    }
    for (std::thread& thread : threads) thread.join();
    int replayed = 0;
    for (const auto& answer : answers) {
      expect(answer.ok(), "every concurrent caller gets an answer");
      if (answer.ok()) {
        replayed += answer->replayed ? 1 : 0;
        expect(answers.front().ok() && answer->result == answers.front()->result,
               "every caller gets the same charge id");
      }
    }
    Say("client: 8 concurrent sends of %s -> %s; the charge ran %d time(s), %d callers got a "
        "replay",
        double_click.name.c_str(), Describe(answers.front()).c_str(), service.runs() - runs_before,
        replayed);
    expect(service.runs() - runs_before == 1, "the charge runs once for 8 concurrent sends");
  }

  Heading("5. The same request id with a different amount is rejected");
  {
    PaymentRequest tampered = lost_reply;
    tampered.amount_cents = 250000;
    auto execution = service.Pay(tampered);
    Say("client: %s again but for %ld cents -> %s", tampered.name.c_str(), tampered.amount_cents,
        Describe(execution).c_str());
    expect(execution.status().code() == idem::Status::Code::kMismatch,
           "a changed payload under the same request id is a mismatch");
  }

  Heading("6. A declined card is a terminal failure: retries do not reach the bank");
  {
    const int runs_before = service.runs();
    for (int retry = 0; retry < 3; ++retry) {
      auto execution = service.Pay(declined);
      Say("client: %s %s -> %s", retry == 0 ? "sent" : "retried", declined.name.c_str(),
          Describe(execution).c_str());
      expect(execution.status().code() == idem::Status::Code::kFailed,
             "a declined card answers kFailed");
    }
    expect(service.runs() - runs_before == 1, "only the first send of the declined card runs");
    expect(bank.Calls(declined.request_id) == 1, "the bank sees the declined card once");
  }

  Heading("One charge per request");
  const std::vector<Expectation> expectations = {
      {&lost_reply, 1, idem::State::kDone, bank.FindCharge(lost_reply.request_id).value_or("")},
      {&bank_timeout, 1, idem::State::kDone, bank.FindCharge(bank_timeout.request_id).value_or("")},
      {&dead_worker, 1, idem::State::kDone, bank.FindCharge(dead_worker.request_id).value_or("")},
      {&double_click, 1, idem::State::kDone, bank.FindCharge(double_click.request_id).value_or("")},
      {&declined, 0, idem::State::kFailed, ""},
  };
  std::printf("%-11s %-36s %7s %8s %-8s %s\n", "order", "request id", "charges", "attempts",
              "state", "stored result");
  for (const Expectation& expectation : expectations) {
    const PaymentRequest& request = *expectation.request;
    const std::size_t charges = bank.Charges(request.request_id);
    auto record = store.Get(request.request_id);
    const bool found = record.ok() && record->has_value();
    std::printf("%-11s %-36s %7zu %8u %-8s %s\n", request.name.c_str(), request.request_id.c_str(),
                charges, found ? (*record)->attempts : 0u,
                found ? std::string(idem::DisplayState(**record)).c_str() : "absent",
                found ? (*record)->result.c_str() : "");
    const bool good = charges == expectation.charges && found &&
                      (*record)->state == expectation.state &&
                      (expectation.result.empty() || (*record)->result == expectation.result);
    if (!good) {
      std::printf("  ^ FAILED: expected %zu charge(s) and state %s\n", expectation.charges,
                  std::string(idem::StateName(expectation.state)).c_str());
      ok = false;
    }
  }
  std::printf("\n%s\n", ok ? "OK: every request was charged exactly once (the declined card never)"
                           : "FAILED: see the lines marked UNEXPECTED or FAILED above");
  return ok ? 0 : 1;
}
