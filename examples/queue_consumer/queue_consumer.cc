// The queue consumer demo: an at-least-once message queue that redelivers, and several consumer
// processes that still apply each message's effect exactly once, by deduplicating through one
// idem store path that they share.
//
//   queue_consumer run DIR [--consumers N] [--messages M] [--seed S] [--work-ms W]
//                          [--timeout-s T] [--kill-every-ms K] [--store postgresql://...]
//
// `run` is the broker. It starts N consumer processes (this binary again, `queue_consumer
// consume ...`; each opens the store DIR/store after its exec) and feeds them M messages
// ("credit <amount> cents" to one of 8 accounts, each with a unique message id) over one socket
// per consumer. Like
// any at-least-once queue it delivers some messages more than once:
//
//   - random duplicates: about 10% of messages are delivered twice, usually to two consumers at
//     the same time;
//   - a missing ack: consumers "lose" about 3% of their acks; the broker redelivers a message
//     whose ack has not arrived within 500 ms;
//   - a consumer crash: consumer c1 kills itself (SIGKILL) right after applying an effect and
//     before recording it in the store, the worst moment; and when half the messages are acked,
//     the broker SIGKILLs the consumer with the most unacked deliveries. Their unacked messages
//     are redelivered to the others, and a new consumer process replaces each dead one;
//   - with --kill-every-ms K, a kill storm besides: every K ms or so (between K/2 and 3K/2) the
//     broker SIGKILLs a consumer picked at random, whatever it is doing, and replaces it.
//
// Each consumer handles a delivery with store->Execute(message_id, ...), whose function has two
// effects. The local one: the account's balance, a row of the store's application table
// "balances", read and written through the Attempt, so that it commits with the message's record
// or not at all (and, when two consumers credit one account at once, the later commit conflicts
// and Execute runs the function again on the fresh balance). With --store postgresql://...
// the store is kept in PostgreSQL and the balance is a row of the application's own table
// queue_consumer_accounts, credited by an UPDATE in the transaction that completes the record
// (Store::ExecuteInTransaction): the same promise, from the database. The external one: one line
// appended (O_APPEND, one write) to DIR/effects.log, which no transaction covers. Then it acks. A
// duplicate finds the record done (a replay) or in progress (Execute waits for the owner), and
// only acks. A delivery whose earlier attempt died is taken over at once (the store sees that
// the holder's process is gone); the checkpoint saved before the effect tells the new owner to
// look in the effects file before applying it again.
//
// At the end the broker counts the lines of DIR/effects.log per message id and checks, for
// every message, exactly one effect line and a done store record holding that line, and for
// every account a balance equal to the sum of its messages, written once per message. It prints
// deliveries against effects and exits 0 when every message took effect exactly once, 1
// otherwise (2: usage, 3: setup error).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "idem/idem.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const Clock::time_point kStart = Clock::now();

// How many deliveries a consumer may hold unacked.
constexpr std::size_t kWindow = 4;
// How long the broker waits for an ack before delivering the message again.
constexpr auto kAckTimeout = 500ms;
constexpr int kDuplicatePercent = 10;
// The accounts the messages credit: few, so that consumers credit one account at once often.
constexpr int kAccounts = 8;
constexpr int kLostAckPercent = 3;
// A bound on replacement consumers, so that a consumer that dies at once cannot loop forever.
constexpr int kMaxReplacements = 8;
// What a consumer saves before applying an effect: whoever takes over after a crash must look
// in the effects file before applying it again.
constexpr std::string_view kCheckpointApplying = "applying the effect";

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

// Sends one datagram of the queue protocol; false when the peer is gone.
bool SendPacket(int fd, std::string_view packet) {
  for (;;) {
    const ssize_t sent = ::send(fd, packet.data(), packet.size(), MSG_NOSIGNAL);
    if (sent >= 0) return true;
    if (errno != EINTR) return false;
  }
}

// Receives one datagram; nullopt at end of stream (the peer closed or died) or on an error.
std::optional<std::string> ReceivePacket(int fd) {
  char buffer[512];
  for (;;) {
    const ssize_t received = ::recv(fd, buffer, sizeof(buffer), 0);
    if (received > 0) return std::string(buffer, static_cast<std::size_t>(received));
    if (received < 0 && errno == EINTR) continue;
    return std::nullopt;
  }
}

std::vector<std::string_view> SplitWords(std::string_view text, std::size_t max_words) {
  std::vector<std::string_view> words;
  while (!text.empty() && words.size() + 1 < max_words) {
    const std::size_t space = text.find(' ');
    if (space == std::string_view::npos) break;
    words.push_back(text.substr(0, space));
    text.remove_prefix(space + 1);
  }
  words.push_back(text);
  return words;
}

template <class Int>
bool ParseInt(std::string_view text, Int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

// The protocol between broker and consumers, one datagram each (SOCK_SEQPACKET):
//   broker -> consumer   "D <delivery> <message id> <amount>"  a delivery
//   consumer -> broker   "A <delivery> <how>"                   an ack; how: applied, replayed,
//                                                                reconciled, reapplied
//   consumer -> broker   "N <delivery> <error>"                 a nack: deliver it again

// ---------------------------------------------------------------------------------------------
// The consumer process.

struct ConsumerConfig {
  int fd = -1;
  std::string store_path;
  std::string effects_path;
  std::string name;
  uint32_t seed = 0;
  int crash_after_effects = 0;  // 0: never
  std::chrono::milliseconds work{0};
};

bool IsPostgresUri(std::string_view store) {
  return store.starts_with("postgresql://") || store.starts_with("postgres://");
}

// On PostgreSQL, the balances are the application's own table, in the store's database.
constexpr const char* kMakeAccountsSql =
    "CREATE TABLE IF NOT EXISTS queue_consumer_accounts (account text PRIMARY KEY, "
    "balance bigint NOT NULL, version bigint NOT NULL)";
// $1: the account, $2: the amount. A version one more a credit, as in the store's tables.
constexpr const char* kCreditAccountSql =
    "INSERT INTO queue_consumer_accounts AS a VALUES ($1, $2, 1) ON CONFLICT (account) DO UPDATE "
    "SET balance = a.balance + EXCLUDED.balance, version = a.version + 1";

// Runs `sql` in a transaction of the store's database (under the key `key`, a record of its
// own): the table's making and the final check.
idem::Result<idem::SqlRows> RunSql(idem::Store& store, const std::string& key, const char* sql) {
  idem::SqlRows rows;
  IDEM_RETURN_IF_ERROR(
      store
          .ExecuteInTransaction(
              key,
              [&](idem::Attempt&, idem::SqlTransaction& transaction) -> idem::Result<std::string> {
                IDEM_ASSIGN_OR_RETURN(rows, transaction.Exec(sql));
                return std::string();
              })
          .status());
  return rows;
}

// The effect line recorded for `message_id`, if the effects file holds one.
std::optional<std::string> FindEffect(const std::string& effects_path,
                                      std::string_view message_id) {
  std::ifstream effects(effects_path);
  std::string line;
  while (std::getline(effects, line)) {
    if (line.size() > message_id.size() && line.compare(0, message_id.size(), message_id) == 0 &&
        line[message_id.size()] == ' ') {
      return line;
    }
  }
  return std::nullopt;
}

int RunConsumer(const ConsumerConfig& config) {
  const int effects_fd = ::open(config.effects_path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (effects_fd < 0) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", config.name.c_str(),
                 config.effects_path.c_str(), std::strerror(errno));
    return 3;
  }
  idem::Options options;
  // The consumers' crashes are process crashes, which kBuffered survives; kSync would also
  // survive a power loss, at the cost of an fsync per claim and result.
  options.durability = idem::Durability::kBuffered;
  options.default_lease = 2s;  // a dead consumer's claim is taken over at once anyway
  options.execute_wait = 20s;  // how long a duplicate waits for the owner of its message
  // The store's own warnings, such as a failover after the consumer that owned it died.
  options.log = [prefix = "          " + config.name + " (pid " + std::to_string(::getpid()) +
                          "): idem: "](std::string_view message) {
    const std::string line = prefix + std::string(message) + "\n";
    [[maybe_unused]] const ssize_t written = ::write(STDOUT_FILENO, line.data(), line.size());
  };
  auto opened = idem::Store::Open(config.store_path, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s: cannot open the store %s: %s\n", config.name.c_str(),
                 config.store_path.c_str(), opened.status().ToString().c_str());
    return 3;
  }
  idem::Store& store = **opened;
  const bool in_postgres = IsPostgresUri(config.store_path);
  std::mt19937 random(config.seed);
  std::uniform_int_distribution<int> percent(0, 99);
  const std::string pid = std::to_string(::getpid());
  int effects_applied = 0;

  while (std::optional<std::string> packet = ReceivePacket(config.fd)) {
    const std::vector<std::string_view> words = SplitWords(*packet, 5);
    if (words.size() != 5 || words[0] != "D") {
      std::fprintf(stderr, "%s: malformed delivery \"%s\"\n", config.name.c_str(), packet->c_str());
      return 1;
    }
    const std::string_view delivery = words[1];
    const std::string message_id(words[2]);
    const std::string_view amount = words[3];
    const std::string account(words[4]);
    const std::string payload = "credit " + std::string(amount) + " to " + account;

    std::string_view how = "applied";
    // The external effect, once appended in this call: a run of the function again after a
    // conflict on the balance must not append it twice.
    std::optional<std::string> appended;
    // After the local effect, staged or in the transaction: the external one.
    const auto apply = [&](idem::Attempt& attempt) -> idem::Result<std::string> {
      if (appended) return *appended;
      if (!attempt.checkpoint.empty()) {
        // An earlier attempt died after it began applying the effect: it may be in the file.
        if (std::optional<std::string> effect = FindEffect(config.effects_path, message_id)) {
          how = "reconciled";
          return *effect;
        }
      }
      if (attempt.took_over) how = "reapplied";
      std::this_thread::sleep_for(config.work);
      IDEM_RETURN_IF_ERROR(attempt.SaveCheckpoint(kCheckpointApplying));
      const std::string effect = message_id + " " + payload + " by " + config.name + " pid " + pid;
      const std::string line = effect + "\n";
      // One write with O_APPEND: concurrent consumers never interleave within a line.
      if (::write(effects_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        return idem::Status::IOError("cannot append to " + config.effects_path + ": " +
                                     std::strerror(errno));
      }
      appended = effect;
      if (++effects_applied == config.crash_after_effects) {
        const std::string last_words = "          " + config.name + " (pid " + pid +
                                       "): crashing after applying the effect of " + message_id +
                                       ", before recording it in the store\n";
        [[maybe_unused]] const ssize_t written =
            ::write(STDOUT_FILENO, last_words.data(), last_words.size());
        ::kill(::getpid(), SIGKILL);
      }
      return effect;
    };
    const std::string fingerprint = idem::Fingerprint(payload);
    const idem::BeginOptions begin{.type = "credit", .fingerprint = fingerprint};
    auto execution =
        in_postgres
            ? store.ExecuteInTransaction(
                  message_id, begin,
                  [&](idem::Attempt& attempt,
                      idem::SqlTransaction& sql) -> idem::Result<std::string> {
                    // The local effect, a row of the application's own table, in the
                    // transaction that completes this message's record: it commits with it or
                    // not at all. The row lock orders consumers crediting one account at once.
                    IDEM_RETURN_IF_ERROR(
                        sql.Exec(kCreditAccountSql, {account, std::string(amount)}).status());
                    return apply(attempt);
                  })
            : store.Execute(
                  message_id, begin, [&](idem::Attempt& attempt) -> idem::Result<std::string> {
                    // The local effect, staged: it commits with this message's record
                    // or not at all, so it needs no reconciliation after a crash.
                    IDEM_ASSIGN_OR_RETURN(idem::TableValue balance,
                                          attempt.Read("balances", account));
                    const long credited =
                        std::stol(balance.value.value_or("0")) + std::stol(std::string(amount));
                    IDEM_RETURN_IF_ERROR(
                        attempt.Put("balances", account, std::to_string(credited)));
                    return apply(attempt);
                  });

    std::string answer;
    if (execution.ok()) {
      if (execution->replayed) how = "replayed";
      if (percent(random) < kLostAckPercent) continue;  // the ack is lost on its way
      answer = "A " + std::string(delivery) + " " + std::string(how);
    } else {
      answer = "N " + std::string(delivery) + " " + execution.status().ToString();
    }
    if (!SendPacket(config.fd, answer)) break;  // the broker is gone
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The broker.

enum class Reason { kFirst, kDuplicate, kAckTimeout, kCrash, kNack };
constexpr int kReasons = 5;

struct Message {
  std::string id;
  long amount = 0;
  std::string account;
  bool acked = false;
  int deliveries = 0;
};

struct Delivery {
  std::size_t message = 0;
  Clock::time_point sent;
};

struct Consumer {
  std::string name;
  pid_t pid = -1;
  int fd = -1;
  std::map<uint64_t, Delivery> in_flight;  // by delivery id
  bool will_crash = false;                 // started to crash by itself after an effect
};

struct Queued {
  std::size_t message;
  Reason reason;
};

struct BrokerConfig {
  std::filesystem::path dir;
  int consumers = 3;
  int messages = 500;
  uint32_t seed = 0;
  std::chrono::milliseconds work{2};
  std::chrono::seconds timeout{60};
  std::chrono::milliseconds kill_every{0};  // 0: no kill storm
  std::string store;  // a PostgreSQL URI; empty: the store directory DIR/store
};

class Broker {
 public:
  explicit Broker(const BrokerConfig& config)
      : config_(config),
        store_path_(config.store.empty() ? (config.dir / "store").string() : config.store),
        effects_path_((config.dir / "effects.log").string()),
        random_(config.seed) {}

  int Run() {
    std::error_code error;
    std::filesystem::create_directories(config_.dir, error);
    if (error) {
      std::fprintf(stderr, "queue_consumer: cannot create %s: %s\n", config_.dir.c_str(),
                   error.message().c_str());
      return 3;
    }
    // Truncated for this run; message ids are new each run, so the store may be reused.
    if (!std::ofstream(effects_path_, std::ios::trunc)) {
      std::fprintf(stderr, "queue_consumer: cannot create %s\n", effects_path_.c_str());
      return 3;
    }
    std::uniform_int_distribution<long> amount(1, 999);
    // Accounts named for this run, so that a store reused from an earlier run starts them at 0.
    const std::string run = idem::NewRequestId();
    run_ = run;
    if (IsPostgresUri(store_path_)) {
      auto opened = idem::Store::Open(store_path_);
      const idem::Status made = opened.ok()
                                    ? RunSql(**opened, "setup-" + run, kMakeAccountsSql).status()
                                    : opened.status();
      if (!made.ok()) {
        std::fprintf(stderr, "queue_consumer: cannot make the accounts' table in %s: %s\n",
                     idem::DisplayStoreName(store_path_).c_str(), made.ToString().c_str());
        return 3;
      }
    }
    for (int i = 0; i < config_.messages; ++i) {
      messages_.push_back({idem::NewRequestId(), amount(random_),
                           "acct" + std::to_string(i % kAccounts) + "-" + run, false, 0});
      queue_.push_back({static_cast<std::size_t>(i), Reason::kFirst});
    }
    std::printf(
        "queue consumer demo: %d messages, %d consumer processes, store %s, effects %s, seed %u\n",
        config_.messages, config_.consumers, idem::DisplayStoreName(store_path_).c_str(),
        effects_path_.c_str(), config_.seed);
    std::fflush(stdout);

    // c1 crashes at the worst moment, after applying an effect and before recording it.
    const int crash_after = std::max(1, config_.messages / (8 * config_.consumers));
    for (int i = 0; i < config_.consumers; ++i) {
      if (!Spawn(i == 0 ? crash_after : 0)) return 3;
    }
    const bool delivered = DeliverAll();
    StopConsumers();
    if (!delivered) return 1;
    return Check() ? 0 : 1;
  }

 private:
  bool Spawn(int crash_after_effects) {
    const std::string name = "c" + std::to_string(++spawned_);
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
      std::fprintf(stderr, "queue_consumer: socketpair: %s\n", std::strerror(errno));
      return false;
    }
    const std::vector<std::string> args = {
        "queue_consumer",
        "consume",
        "--fd",
        std::to_string(fds[1]),
        "--store",
        store_path_,
        "--effects",
        effects_path_,
        "--name",
        name,
        "--seed",
        std::to_string(config_.seed + static_cast<uint32_t>(spawned_)),
        "--crash-after-effects",
        std::to_string(crash_after_effects),
        "--work-ms",
        std::to_string(config_.work.count()),
    };
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "queue_consumer: fork: %s\n", std::strerror(errno));
      return false;
    }
    if (pid == 0) {
      // The consumer is this binary again: it opens the store after its exec, never inheriting
      // anything of it. Only its own end of its socket survives the exec.
      ::fcntl(fds[1], F_SETFD, 0);
      std::vector<char*> argv;
      for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "queue_consumer: exec: %s\n", std::strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    consumers_.push_back({name, pid, fds[0], {}, crash_after_effects > 0});
    Say("broker: started consumer %s (pid %d)%s", name.c_str(), static_cast<int>(pid),
        crash_after_effects > 0
            ? (", which will crash after its effect number " + std::to_string(crash_after_effects))
                  .c_str()
            : "");
    return true;
  }

  // Sends queued messages to consumers with room in their window.
  void Dispatch() {
    bool sent_any = true;
    while (!queue_.empty() && sent_any) {
      sent_any = false;
      for (Consumer& consumer : consumers_) {
        if (queue_.empty()) break;
        if (consumer.fd < 0 || consumer.in_flight.size() >= kWindow) continue;
        const Queued next = queue_.front();
        queue_.pop_front();
        Message& message = messages_[next.message];
        const uint64_t delivery = ++deliveries_;
        const std::string packet = "D " + std::to_string(delivery) + " " + message.id + " " +
                                   std::to_string(message.amount) + " " + message.account;
        if (!SendPacket(consumer.fd, packet)) {
          queue_.push_front(next);  // the consumer died; its end of stream says so soon
          continue;
        }
        consumer.in_flight[delivery] = {next.message, Clock::now()};
        ++message.deliveries;
        ++by_reason_[static_cast<int>(next.reason)];
        sent_any = true;
        if (next.reason == Reason::kFirst && percent_(random_) < kDuplicatePercent) {
          // An at-least-once queue delivers it again, usually while the first is in flight.
          const std::size_t at = std::min<std::size_t>(queue_.size(), random_() % 3);
          queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(at),
                        {next.message, Reason::kDuplicate});
        }
      }
    }
  }

  void OnPacket(Consumer& consumer, const std::string& packet) {
    const std::vector<std::string_view> words = SplitWords(packet, 3);
    uint64_t delivery = 0;
    if (words.size() != 3 || !ParseInt(words[1], delivery)) {
      Say("broker: ignoring a malformed packet from %s: \"%s\"", consumer.name.c_str(),
          packet.c_str());
      return;
    }
    auto it = consumer.in_flight.find(delivery);
    if (it == consumer.in_flight.end()) return;  // late: already redelivered after its timeout
    const std::size_t index = it->second.message;
    consumer.in_flight.erase(it);
    Message& message = messages_[index];
    if (words[0] == "N") {
      Say("broker: %s could not handle %s (%.*s): delivering it again", consumer.name.c_str(),
          message.id.c_str(), static_cast<int>(words[2].size()), words[2].data());
      queue_.push_back({index, Reason::kNack});
      return;
    }
    ++answers_[std::string(words[2])];
    if (words[2] == "reconciled") {
      Say("broker: %s took %s over from a dead consumer, found its effect already applied, and "
          "recorded it without applying it again",
          consumer.name.c_str(), message.id.c_str());
    } else if (words[2] == "reapplied") {
      Say("broker: %s took %s over from a dead consumer that died before applying it, and "
          "applied it",
          consumer.name.c_str(), message.id.c_str());
    }
    if (!message.acked) {
      message.acked = true;
      ++acked_;
    }
  }

  void OnDeath(Consumer& consumer) {
    ::close(consumer.fd);
    consumer.fd = -1;
    int wait_status = 0;
    ::waitpid(consumer.pid, &wait_status, 0);
    const std::string how = WIFSIGNALED(wait_status)
                                ? "killed by signal " + std::to_string(WTERMSIG(wait_status))
                                : "exit status " + std::to_string(WEXITSTATUS(wait_status));
    ++crashes_;
    Say("broker: consumer %s (pid %d) died (%s) holding %zu unacked deliveries: delivering them "
        "again",
        consumer.name.c_str(), static_cast<int>(consumer.pid), how.c_str(),
        consumer.in_flight.size());
    for (const auto& [id, delivery] : consumer.in_flight) {
      queue_.push_front({delivery.message, Reason::kCrash});
    }
    consumer.in_flight.clear();
    if (replacements_ < kMaxReplacements + storm_kills_) {
      ++replacements_;
      Spawn(0);
    }
  }

  void RedeliverUnacked() {
    const auto now = Clock::now();
    for (Consumer& consumer : consumers_) {
      for (auto it = consumer.in_flight.begin(); it != consumer.in_flight.end();) {
        if (now - it->second.sent < kAckTimeout) {
          ++it;
          continue;
        }
        queue_.push_back({it->second.message, Reason::kAckTimeout});
        it = consumer.in_flight.erase(it);
      }
    }
  }

  // Kills, once, the live consumer holding the most unacked deliveries (but not the one due to
  // crash by itself: both crashes should happen).
  void KillOneConsumer() {
    Consumer* victim = nullptr;
    for (Consumer& consumer : consumers_) {
      if (consumer.fd >= 0 && !consumer.will_crash &&
          (!victim || consumer.in_flight.size() > victim->in_flight.size())) {
        victim = &consumer;
      }
    }
    if (!victim) return;
    Say("broker: %d of %d messages acked: killing consumer %s (pid %d), which holds %zu unacked "
        "deliveries",
        acked_, config_.messages, victim->name.c_str(), static_cast<int>(victim->pid),
        victim->in_flight.size());
    ::kill(victim->pid, SIGKILL);
  }

  // The kill storm's next victim: a live consumer picked at random.
  void KillRandomConsumer() {
    std::vector<Consumer*> live;
    for (Consumer& consumer : consumers_) {
      if (consumer.fd >= 0) live.push_back(&consumer);
    }
    if (live.empty()) return;
    Consumer& victim = *live[random_() % live.size()];
    ++storm_kills_;
    Say("broker: kill storm: killing consumer %s (pid %d), which holds %zu unacked deliveries",
        victim.name.c_str(), static_cast<int>(victim.pid), victim.in_flight.size());
    ::kill(victim.pid, SIGKILL);
  }

  Clock::time_point NextStormKill() {
    const auto k = config_.kill_every.count();
    return Clock::now() + std::chrono::milliseconds(
                              std::uniform_int_distribution<long>(k / 2, k + k / 2)(random_));
  }

  // Runs the queue until every message is acked; false on the time limit.
  bool DeliverAll() {
    const auto give_up_at = Clock::now() + config_.timeout;
    bool killed = false;
    Clock::time_point storm_kill_at = NextStormKill();
    while (acked_ < config_.messages) {
      if (config_.kill_every.count() > 0 && Clock::now() >= storm_kill_at) {
        KillRandomConsumer();
        storm_kill_at = NextStormKill();
      }
      if (Clock::now() > give_up_at) {
        Say("broker: FAILED: only %d of %d messages acked after %lld s", acked_, config_.messages,
            static_cast<long long>(config_.timeout.count()));
        return false;
      }
      if (!killed && acked_ >= config_.messages / 2) {
        KillOneConsumer();
        killed = true;
      }
      Dispatch();
      std::vector<pollfd> polled;
      std::vector<std::size_t> owners;
      for (std::size_t i = 0; i < consumers_.size(); ++i) {
        if (consumers_[i].fd < 0) continue;
        polled.push_back({consumers_[i].fd, POLLIN, 0});
        owners.push_back(i);
      }
      if (polled.empty()) {
        Say("broker: FAILED: no consumer left (replaced %d already)", replacements_);
        return false;
      }
      if (::poll(polled.data(), polled.size(), 10) < 0 && errno != EINTR) {
        Say("broker: FAILED: poll: %s", std::strerror(errno));
        return false;
      }
      // Indexes, not references: OnDeath may start a consumer, which grows consumers_.
      for (std::size_t i = 0; i < polled.size(); ++i) {
        if (polled[i].revents == 0) continue;
        std::optional<std::string> packet = ReceivePacket(consumers_[owners[i]].fd);
        if (packet) {
          OnPacket(consumers_[owners[i]], *packet);
        } else {
          OnDeath(consumers_[owners[i]]);
        }
      }
      RedeliverUnacked();
    }
    Say("broker: all %d messages acked after %llu deliveries", config_.messages,
        static_cast<unsigned long long>(deliveries_));
    return true;
  }

  // Closes every consumer's socket (they exit at its end) and reaps them.
  void StopConsumers() {
    for (Consumer& consumer : consumers_) {
      if (consumer.fd >= 0) ::shutdown(consumer.fd, SHUT_WR);
    }
    const auto kill_at = Clock::now() + 10s;
    for (Consumer& consumer : consumers_) {
      if (consumer.fd < 0) continue;
      // Drain late acks until the consumer's end of stream, so it never blocks on a send.
      while (Clock::now() < kill_at) {
        pollfd polled{consumer.fd, POLLIN, 0};
        if (::poll(&polled, 1, 100) > 0 && !ReceivePacket(consumer.fd)) break;
      }
      if (Clock::now() >= kill_at) ::kill(consumer.pid, SIGKILL);
      ::close(consumer.fd);
      consumer.fd = -1;
      ::waitpid(consumer.pid, nullptr, 0);
    }
  }

  // The proof: one effect line per message, and a done record that holds it.
  bool Check() {
    std::map<std::string, std::vector<std::string>> effects;  // message id -> its lines
    std::size_t lines = 0;
    {
      std::ifstream file(effects_path_);
      std::string line;
      while (std::getline(file, line)) {
        ++lines;
        effects[line.substr(0, line.find(' '))].push_back(line);
      }
    }
    auto opened = idem::Store::Open(store_path_);
    if (!opened.ok()) {
      std::printf("FAILED: cannot open the store to check it: %s\n",
                  opened.status().ToString().c_str());
      return false;
    }
    idem::Store& store = **opened;

    int exactly_once = 0, never = 0, more = 0, records_match = 0;
    long expected_total = 0, credited_total = 0;
    bool ok = true;
    for (const Message& message : messages_) {
      expected_total += message.amount;
      auto found = effects.find(message.id);
      const std::size_t count = found == effects.end() ? 0 : found->second.size();
      if (count == 1) ++exactly_once;
      if (count == 0) ++never;
      if (count > 1) ++more;
      if (count != 1) {
        std::printf("FAILED: message %s (credit %ld) has %zu effect lines\n", message.id.c_str(),
                    message.amount, count);
        ok = false;
      }
      if (count > 0) credited_total += message.amount * static_cast<long>(count);
      auto record = store.Get(message.id);
      if (count == 1 && record.ok() && record->has_value() &&
          (*record)->state == idem::State::kDone && (*record)->result == found->second.front()) {
        ++records_match;
      } else if (count == 1) {
        std::printf("FAILED: the store's record of %s does not hold its effect line\n",
                    message.id.c_str());
        ok = false;
      }
      if (found != effects.end()) effects.erase(found);
    }
    for (const auto& [id, stray] : effects) {
      std::printf("FAILED: %zu effect lines for %s, which is no message of this run\n",
                  stray.size(), id.c_str());
      ok = false;
    }

    auto answers = [this](const char* how) {
      auto it = answers_.find(how);
      return it == answers_.end() ? 0 : it->second;
    };
    const auto reason = [this](Reason r) { return by_reason_[static_cast<int>(r)]; };
    int delivered_more_than_once = 0;
    for (const Message& message : messages_) delivered_more_than_once += message.deliveries > 1;

    std::printf("\n== Deliveries against effects\n");
    std::printf("messages                          %6d\n", config_.messages);
    std::printf("deliveries                        %6llu\n",
                static_cast<unsigned long long>(deliveries_));
    std::printf("  first deliveries                %6d\n", reason(Reason::kFirst));
    std::printf("  random duplicates               %6d\n", reason(Reason::kDuplicate));
    std::printf("  after a missing ack             %6d\n", reason(Reason::kAckTimeout));
    std::printf("  after a consumer crash          %6d\n", reason(Reason::kCrash));
    std::printf("  after a nack                    %6d\n", reason(Reason::kNack));
    std::printf("messages delivered more than once %6d\n", delivered_more_than_once);
    std::printf("consumer crashes                  %6d (replaced by new processes)\n", crashes_);
    std::printf(
        "acks received: applied %d, replayed %d, reconciled after a takeover %d, "
        "reapplied after a takeover %d\n",
        answers("applied"), answers("replayed"), answers("reconciled"), answers("reapplied"));
    std::printf("effect lines in effects.log       %6zu\n", lines);
    std::printf("messages with exactly one effect  %6d\n", exactly_once);
    std::printf("messages with no effect           %6d\n", never);
    std::printf("messages with several effects     %6d\n", more);
    std::printf("done records holding their effect %6d\n", records_match);
    std::printf("credited %ld cents; the messages add up to %ld cents\n", credited_total,
                expected_total);
    if (credited_total != expected_total) ok = false;

    // The local effect: each account's balance in the store is the sum of its messages, each
    // written once (a key's version rises by one a write).
    std::map<std::string, std::pair<long, uint64_t>> accounts;  // account -> sum, messages
    for (const Message& message : messages_) {
      auto& [sum, count] = accounts[message.account];
      sum += message.amount;
      ++count;
    }
    // On PostgreSQL, the rows of the application's own table.
    std::map<std::string, idem::TableValue> rows;
    if (IsPostgresUri(store_path_)) {
      auto read = RunSql(store, "check-" + run_,
                         "SELECT account, balance, version FROM queue_consumer_accounts");
      if (!read.ok()) {
        std::printf("FAILED: cannot read the accounts: %s\n", read.status().ToString().c_str());
        return false;
      }
      for (int row = 0; row < read->size(); ++row) {
        rows[std::string(read->Get(row, 0).value_or(""))] = {
            std::string(read->Get(row, 1).value_or("")),
            std::stoull(std::string(read->Get(row, 2).value_or("0")))};
      }
    }
    int balances_exact = 0;
    for (const auto& [account, expected] : accounts) {
      auto balance = IsPostgresUri(store_path_) ? idem::Result<idem::TableValue>(rows[account])
                                                : store.GetValue("balances", account);
      if (balance.ok() && balance->value == std::to_string(expected.first) &&
          balance->version == expected.second) {
        ++balances_exact;
      } else {
        std::printf(
            "FAILED: account %s should hold %ld cents from %llu messages; the store has "
            "%s\n",
            account.c_str(), expected.first, static_cast<unsigned long long>(expected.second),
            balance.ok() ? (balance->value.value_or("nothing") + " at version " +
                            std::to_string(balance->version))
                               .c_str()
                         : balance.status().ToString().c_str());
        ok = false;
      }
    }
    std::printf("accounts whose balance is exactly the sum of their messages %d of %zu\n",
                balances_exact, accounts.size());
    if (ok && delivered_more_than_once == 0) {
      std::printf("(no message was delivered twice in this run: it proves little)\n");
    }
    std::printf("\n%s\n", ok ? "OK: every message took effect exactly once"
                             : "FAILED: see the lines marked FAILED above");
    return ok;
  }

  const BrokerConfig config_;
  const std::string store_path_;
  const std::string effects_path_;
  std::mt19937 random_;
  std::uniform_int_distribution<int> percent_{0, 99};

  std::string run_;  // this run's id, in its accounts' names and its keys
  std::vector<Message> messages_;
  std::deque<Queued> queue_;
  std::vector<Consumer> consumers_;
  uint64_t deliveries_ = 0;
  int storm_kills_ = 0;  // consumers killed by the kill storm: each may be replaced
  int by_reason_[kReasons] = {};
  std::map<std::string, int> answers_;
  int acked_ = 0;
  int spawned_ = 0;
  int replacements_ = 0;
  int crashes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Command line.

int Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: queue_consumer run DIR [--consumers N] [--messages M] [--seed S] [--work-ms W]\n"
      "                              [--timeout-s T] [--kill-every-ms K] [--store URI]\n"
      "Runs a redelivering message queue and N consumer processes (default 3) that share the\n"
      "idem store DIR/store, over M messages (default 500), and checks that every message took\n"
      "effect exactly once (one line per message in DIR/effects.log). W: milliseconds of work\n"
      "per message (default 2). T: time limit in seconds (default 60). K: SIGKILL a random\n"
      "consumer about every K ms and replace it (default 0: only the two planned crashes).\n"
      "Each message also credits one of 8 accounts in the store's table \"balances\"; every\n"
      "balance must be the sum of its messages. --store URI: a store in PostgreSQL instead\n"
      "(postgresql://...), the accounts in the application's own table\n"
      "queue_consumer_accounts, credited in the transaction that completes each record.\n"
      "Exit 0: exactly once;\n"
      "1: not; 2: usage; 3: setup error.\n");
  return out == stdout ? 0 : 2;
}

// Reads "--name value" pairs into `values`; false on anything else.
bool ParseFlags(int argc, char** argv, int first, std::map<std::string, std::string>& values) {
  for (int i = first; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag.substr(0, 2) != "--" || i + 1 >= argc || !values.contains(std::string(flag))) {
      std::fprintf(stderr, "queue_consumer: unexpected argument \"%s\"\n", argv[i]);
      return false;
    }
    values[std::string(flag)] = argv[i + 1];
  }
  return true;
}

int ConsumeMain(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"--fd", ""},
                                              {"--store", ""},
                                              {"--effects", ""},
                                              {"--name", ""},
                                              {"--seed", ""},
                                              {"--work-ms", "0"},
                                              {"--crash-after-effects", "0"}};
  ConsumerConfig config;
  int work_ms = 0;
  if (!ParseFlags(argc, argv, 2, flags) || !ParseInt(flags["--fd"], config.fd) ||
      !ParseInt(flags["--seed"], config.seed) || !ParseInt(flags["--work-ms"], work_ms) ||
      !ParseInt(flags["--crash-after-effects"], config.crash_after_effects) ||
      flags["--store"].empty() || flags["--effects"].empty() || flags["--name"].empty()) {
    std::fprintf(stderr, "queue_consumer consume: started by `queue_consumer run`, not by hand\n");
    return 2;
  }
  config.store_path = flags["--store"];
  config.effects_path = flags["--effects"];
  config.name = flags["--name"];
  config.work = std::chrono::milliseconds(work_ms);
  return RunConsumer(config);
}

int RunMain(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[2]).starts_with("-")) return Usage(stderr);
  std::map<std::string, std::string> flags = {
      {"--consumers", "3"},     {"--messages", "500"},
      {"--work-ms", "2"},       {"--timeout-s", "60"},
      {"--kill-every-ms", "0"}, {"--seed", std::to_string(std::random_device()())},
      {"--store", ""}};
  BrokerConfig config;
  config.dir = argv[2];
  int work_ms = 0, timeout_s = 0, kill_every_ms = 0;
  if (!ParseFlags(argc, argv, 3, flags) || !ParseInt(flags["--consumers"], config.consumers) ||
      !ParseInt(flags["--messages"], config.messages) || !ParseInt(flags["--seed"], config.seed) ||
      !ParseInt(flags["--work-ms"], work_ms) || !ParseInt(flags["--timeout-s"], timeout_s) ||
      !ParseInt(flags["--kill-every-ms"], kill_every_ms) || config.consumers < 1 ||
      config.consumers > 32 || config.messages < 1 || work_ms < 0 || timeout_s < 1 ||
      kill_every_ms < 0) {
    return Usage(stderr);
  }
  config.work = std::chrono::milliseconds(work_ms);
  config.timeout = std::chrono::seconds(timeout_s);
  config.kill_every = std::chrono::milliseconds(kill_every_ms);
  config.store = flags["--store"];
  if (!config.store.empty() && !IsPostgresUri(config.store)) {
    std::fprintf(stderr, "queue_consumer: --store takes a postgresql:// URI\n");
    return 2;
  }
  return Broker(config).Run();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "--help" || mode == "-h" || mode == "help") return Usage(stdout);
  if (mode == "run") return RunMain(argc, argv);
  if (mode == "consume") return ConsumeMain(argc, argv);
  return Usage(stderr);
}
