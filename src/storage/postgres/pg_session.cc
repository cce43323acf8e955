#include "storage/postgres/pg_session.h"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>

#include "util/deadline.h"
#include "util/escape.h"

namespace idem::storage {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Cancel requests sent at once, at most (CancelAndCloseSession).
constexpr int kMaxCancelsInFlight = 4;

struct ResultClear {
  void operator()(PGresult* result) const { PQclear(result); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultClear>;

enum class SocketWait { kReady, kTimedOut, kFailed };

// Waits until `conn`'s socket is readable (`read`) or writable (`write`), or `deadline`.
SocketWait WaitForSocket(PGconn* conn, bool read, bool write, PgDeadline deadline) {
  pollfd socket{.fd = PQsocket(conn), .events = 0, .revents = 0};
  if (socket.fd < 0) return SocketWait::kFailed;
  socket.events = static_cast<short>((read ? POLLIN : 0) | (write ? POLLOUT : 0));
  for (;;) {
    const milliseconds left = util::TimeLeft(deadline);
    if (left == milliseconds(0)) return SocketWait::kTimedOut;
    const int ready = ::poll(&socket, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
    if (ready > 0) return SocketWait::kReady;  // POLLERR and POLLHUP too: libpq reads the why
    if (ready < 0 && errno != EINTR) return SocketWait::kFailed;
  }
}

void IgnoreNotice(void*, const char*) {}  // a library does not write to stderr

enum class Got { kResult, kEnd, kNoAnswer, kBroken };

// The next result of the pipeline (kEnd: a statement's results are over), sending what is
// still buffered meanwhile.
Got NextResult(PGconn* conn, PgDeadline deadline, ResultPtr& result) {
  for (;;) {
    if (PQstatus(conn) != CONNECTION_OK) return Got::kBroken;
    const int unsent = PQflush(conn);
    if (unsent < 0) return Got::kBroken;
    if (PQisBusy(conn) == 0) {
      result.reset(PQgetResult(conn));
      return result != nullptr ? Got::kResult : Got::kEnd;
    }
    const SocketWait wait = WaitForSocket(conn, true, unsent == 1, deadline);
    if (wait == SocketWait::kTimedOut) return Got::kNoAnswer;
    if (wait == SocketWait::kFailed || PQconsumeInput(conn) == 0) return Got::kBroken;
  }
}

// The parameters of a statement as libpq takes them (pointing into `params`).
struct WireParams {
  explicit WireParams(const std::vector<PgParam>& params) {
    for (const PgParam& param : params) {
      formats.push_back(param.text ? 0 : 1);
      types.push_back(param.type);
      values.push_back(param.value ? param.value->data() : nullptr);
      lengths.push_back(param.value ? static_cast<int>(param.value->size()) : 0);
    }
  }
  int count() const { return static_cast<int>(types.size()); }
  std::vector<Oid> types;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
};

bool Send(PGconn* conn, const char* sql, const std::vector<PgParam>& params,
          bool text_results = false) {
  const WireParams wire(params);
  return PQsendQueryParams(conn, sql, wire.count(), wire.types.data(), wire.values.data(),
                           wire.lengths.data(), wire.formats.data(),
                           /*resultFormat=*/text_results ? 0 : 1) == 1;
}

// The name of `statement` when prepared: a digest of its text and parameter types.
std::string PreparedName(const PgStatement& statement) {
  std::string key = statement.sql;
  for (const PgParam& param : statement.params) key += fmt::format(",{}", param.type);
  return fmt::format("idem_{:016x}_{}", std::hash<std::string>{}(key), key.size());
}

// Sends `statement` as the named prepared statement `name`, after preparing it when `prepare`.
// Returns how many queries it queued (each gives its own results), 0 when it could not.
int SendPrepared(PGconn* conn, const PgStatement& statement, const std::string& name,
                 bool prepare) {
  const WireParams wire(statement.params);
  if (prepare && PQsendPrepare(conn, name.c_str(), statement.sql.c_str(), wire.count(),
                               wire.types.data()) != 1) {
    return 0;
  }
  if (PQsendQueryPrepared(conn, name.c_str(), wire.count(), wire.values.data(), wire.lengths.data(),
                          wire.formats.data(),
                          /*resultFormat=*/statement.text_results ? 0 : 1) != 1) {
    return 0;
  }
  return prepare ? 2 : 1;
}

std::string ErrorText(const PGresult* result) {
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const char* detail = PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL);
  std::string text = primary != nullptr ? primary : PQresultErrorMessage(result);
  if (detail != nullptr) text += fmt::format(" ({})", detail);
  return text;
}

PgPipelineOutcome Lost(PGconn* conn, PgPipelineOutcome outcome) {
  outcome.failure = PgFailure::kConnectionLost;
  if (outcome.message.empty()) outcome.message = PQerrorMessage(conn);
  return outcome;
}

// Reads the answers up to the sync. `statement_of[q]`: the caller's statement that query q
// (in the order sent: BEGIN, SET LOCAL, preparations, the statements, COMMIT) executes, or -1.
PgPipelineOutcome ReadAnswers(PGconn* conn, const std::vector<int>& statement_of,
                              PgDeadline deadline) {
  PgPipelineOutcome outcome;
  for (std::size_t query = 0;;) {
    ResultPtr result;
    const Got got = NextResult(conn, deadline, result);
    if (got == Got::kEnd) {
      ++query;
      continue;
    }
    if (got == Got::kBroken) return Lost(conn, std::move(outcome));
    if (got == Got::kNoAnswer) {
      outcome.failure = PgFailure::kNoAnswer;
      return outcome;
    }
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_PIPELINE_SYNC) return outcome;
    const int statement = query < statement_of.size() ? statement_of[query] : -1;
    const bool mine = statement >= 0;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      if (mine) outcome.rows.emplace_back(result.release());
    } else if (status != PGRES_PIPELINE_ABORTED && outcome.failure == PgFailure::kNone) {
      if (PQstatus(conn) != CONNECTION_OK) return Lost(conn, std::move(outcome));
      const char* sqlstate = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
      outcome.sqlstate = sqlstate != nullptr ? sqlstate : "";
      outcome.failure = ClassifySqlState(outcome.sqlstate);
      outcome.message = ErrorText(result.get());
      outcome.statement = statement;
      outcome.query = static_cast<int>(query);
    }
  }
}

// Ends the failed transaction the pipeline left open, so that the connection can serve again.
void RollBack(PGconn* conn, PgDeadline deadline) {
  if (PQtransactionStatus(conn) != PQTRANS_INERROR &&
      PQtransactionStatus(conn) != PQTRANS_INTRANS) {
    return;
  }
  if (!Send(conn, "ROLLBACK", {}) || PQpipelineSync(conn) != 1) return;
  for (ResultPtr result;;) {
    const Got got = NextResult(conn, deadline, result);
    if (got == Got::kBroken || got == Got::kNoAnswer) return;  // not idle: the pool closes it
    if (got == Got::kResult && PQresultStatus(result.get()) == PGRES_PIPELINE_SYNC) return;
  }
}

}  // namespace

PgFailure ClassifySqlState(std::string_view sqlstate) {
  if (sqlstate.size() != 5) return PgFailure::kOther;
  if (sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03" || sqlstate == "25006") {
    return PgFailure::kConnectionLost;
  }
  if (sqlstate == "57014") return PgFailure::kStatementTimeout;
  if (sqlstate == "40001" || sqlstate == "40P01") return PgFailure::kRetry;
  if (sqlstate.starts_with("28") || sqlstate == "3D000") return PgFailure::kRefused;
  return PgFailure::kOther;
}

std::string SqlStateInMessage(std::string_view message) {
  std::string found;
  for (const std::string_view severity : {"FATAL:  ", "ERROR:  ", "PANIC:  "}) {
    for (std::size_t at = message.find(severity); at != std::string_view::npos;
         at = message.find(severity, at + 1)) {
      const std::string_view code = message.substr(at + severity.size(), 6);
      const bool valid = code.size() == 6 && code[5] == ':' &&
                         std::all_of(code.begin(), code.end() - 1, [](char c) {
                           return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z');
                         });
      if (valid) found = code.substr(0, 5);
    }
  }
  return found;
}

std::string OneLine(std::string_view message) {
  std::string line;
  while (!message.empty()) {
    std::string_view piece = message.substr(0, message.find('\n'));
    message.remove_prefix(std::min(message.size(), piece.size() + 1));
    while (!piece.empty() && (piece.back() == ' ' || piece.back() == '\r')) piece.remove_suffix(1);
    while (!piece.empty() && (piece.front() == ' ' || piece.front() == '\t'))
      piece.remove_prefix(1);
    if (piece.empty() || piece.starts_with("LOCATION:")) continue;
    if (!line.empty()) line += ' ';
    line += piece;
  }
  return EscapeControls(line);
}

PgConnectResult ConnectSession(const PgConnectParams& params, PgDeadline deadline) {
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (std::size_t i = 0; i < params.keywords.size(); ++i) {
    keywords.push_back(params.keywords[i].c_str());
    values.push_back(params.values[i].c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn = PQconnectStartParams(keywords.data(), values.data(), /*expand_dbname=*/0);
  if (conn == nullptr) return {.message = "libpq could not allocate a connection"};
  // Verbose: the message then carries the SQLSTATE, which tells a refusal from a server that
  // is starting up. libpq keeps no other trace of it for a connection that failed.
  PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
  PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  PostgresPollingStatusType state =
      PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  while (state == PGRES_POLLING_READING || state == PGRES_POLLING_WRITING) {
    const SocketWait wait = WaitForSocket(conn, state == PGRES_POLLING_READING,
                                          state == PGRES_POLLING_WRITING, deadline);
    if (wait != SocketWait::kReady) {
      std::string message = fmt::format(
          "connection to server at \"{}\", port {} {}", PQhost(conn), PQport(conn),
          wait == SocketWait::kTimedOut ? "timed out" : fmt::format("failed: {}", strerror(errno)));
      PQfinish(conn);
      return {.message = std::move(message)};
    }
    state = PQconnectPoll(conn);
  }
  if (state == PGRES_POLLING_OK) {
    PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
    if (PQsetnonblocking(conn, 1) == 0 && PQenterPipelineMode(conn) == 1) return {.conn = conn};
  }
  std::string message = PQerrorMessage(conn);
  PQfinish(conn);
  return {.message = std::move(message)};
}

void CloseSession(pg_conn* conn) { PQfinish(conn); }

void CancelAndCloseSession(pg_conn* conn) {
  // PQcancel blocks with no deadline of its own: against a frozen server it waits until the
  // server runs again (the kernel accepts its connection, nobody answers), against a network
  // that drops packets until the connect gives up. So it runs on a thread of its own, and only
  // so many at once: while they hang, a cancel more would only add a stuck thread, and the
  // query is ended anyway when the server finds its connection closed.
  static std::atomic<int> in_flight{0};
  PGcancel* cancel = in_flight.fetch_add(1) < kMaxCancelsInFlight ? PQgetCancel(conn) : nullptr;
  if (cancel == nullptr) {
    --in_flight;
  } else {
    try {
      std::thread([cancel] {
        char error[256];
        PQcancel(cancel, error, sizeof error);  // best effort: the connection is gone either way
        PQfreeCancel(cancel);
        --in_flight;
      }).detach();
    } catch (const std::system_error&) {  // no thread to spare: the server finds out later
      PQfreeCancel(cancel);
      --in_flight;
    }
  }
  PQfinish(conn);  // the connection is nonblocking: its farewell is not waited for either
}

bool SessionIdle(pg_conn* conn) {
  return PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE;
}

bool SessionReusable(pg_conn* conn) {
  if (!SessionIdle(conn)) return false;
  pollfd socket{.fd = PQsocket(conn), .events = POLLIN, .revents = 0};
  return socket.fd >= 0 && ::poll(&socket, 1, 0) == 0;
}

PgPipelineOutcome RunPipeline(pg_conn* conn, PgPreparedNames* prepared,
                              const PgTransaction& transaction, milliseconds statement_timeout,
                              PgDeadline deadline) {
  std::vector<int> statement_of;  // per query queued
  // The statements prepared by this pipeline, and the query that prepares each.
  std::vector<std::pair<std::string, int>> preparing;
  bool sent = true;
  if (!transaction.alone) {
    const std::string set_timeout = fmt::format("SET LOCAL statement_timeout = {}",
                                                std::max<int64_t>(statement_timeout.count(), 1));
    sent = Send(conn, transaction.read_only ? "BEGIN READ ONLY" : "BEGIN", {}) &&
           Send(conn, set_timeout.c_str(), {});
    statement_of = {-1, -1};
  }
  for (std::size_t i = 0; i < transaction.statements.size() && sent; ++i) {
    const PgStatement& statement = transaction.statements[i];
    if (prepared == nullptr || !statement.prepare) {
      sent = Send(conn, statement.sql.c_str(), statement.params, statement.text_results);
    } else {
      std::string name = PreparedName(statement);
      // A statement twice in one transaction is prepared once.
      const bool prepare =
          !prepared->contains(name) &&
          std::none_of(preparing.begin(), preparing.end(),
                       [&name](const auto& queued) { return queued.first == name; });
      const int queued = SendPrepared(conn, statement, name, prepare);
      sent = queued > 0;
      if (prepare) {
        preparing.emplace_back(std::move(name), static_cast<int>(statement_of.size()));
        statement_of.push_back(-1);
      }
    }
    statement_of.push_back(static_cast<int>(i));
  }
  if (!transaction.alone && !transaction.keep_open) {
    sent = sent && Send(conn, "COMMIT", {});
    statement_of.push_back(-1);
  }
  sent = sent && PQpipelineSync(conn) == 1;
  if (!sent) {
    // Only a broken connection (or no memory) refuses to queue; either way it is not reused.
    return Lost(conn, {});
  }
  PgPipelineOutcome outcome = ReadAnswers(conn, statement_of, deadline);
  if (prepared != nullptr) {
    // A preparation stays when the transaction fails after it: the server skips only what
    // follows an error.
    for (auto& [name, query] : preparing) {
      if (outcome.failure == PgFailure::kNone || (outcome.query >= 0 && query < outcome.query)) {
        prepared->insert(std::move(name));
      }
    }
    if (outcome.sqlstate == "26000" || outcome.sqlstate == "42P05") {
      outcome.failure = PgFailure::kNotPrepared;
    }
  }
  if (outcome.failure != PgFailure::kNone && outcome.failure != PgFailure::kConnectionLost &&
      outcome.failure != PgFailure::kNoAnswer) {
    RollBack(conn, deadline);
  }
  return outcome;
}

}  // namespace idem::storage
