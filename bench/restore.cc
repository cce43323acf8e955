#include "restore.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "idem/idem.h"
#include "pg.h"

extern char** environ;

namespace idem::bench {
namespace {

namespace fs = std::filesystem;

// Runs `args` (the program first) with its standard output in `output` (/dev/null when empty),
// its standard error the benchmark's, and returns its wall time. Fails unless it exits 0.
Result<double> TimedRun(const std::vector<std::string>& args, const std::string& output = "") {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                   output.empty() ? "/dev/null" : output.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  std::string command;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
    command += (command.empty() ? "" : " ") + arg;
  }
  argv.push_back(nullptr);
  const auto start = Clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::IOError("cannot start " + args[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const double seconds = SecondsSince(start);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Failed(command + " failed (wait status " + std::to_string(status) + ")");
  }
  return seconds;
}

Status LoadDoneRecords(const std::string& path, uint64_t records) {
  Options options;
  options.durability = Durability::kBuffered;
  options.auto_purge_interval = std::chrono::milliseconds(0);
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(path, options));
  constexpr int kLoaders = 2;
  return RunOnThreads(kLoaders, [&](int thread) -> Status {
    KeyGenerator keys;
    for (uint64_t i = thread; i < records; i += kLoaders) {
      const std::string_view key = keys.Next();
      IDEM_ASSIGN_OR_RETURN(Claim claim, store->Begin(key));
      IDEM_RETURN_IF_ERROR(store->Complete(key, claim.token, ResultPayload()));
    }
    return Status::OK();
  });
}

Result<uint64_t> CountRecords(const std::string& path) {
  IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(path));
  uint64_t count = 0;
  IDEM_RETURN_IF_ERROR(store->Scan({}, [&](const Record&) {
    ++count;
    return true;
  }));
  return count;
}

// COPY's text format: backslash, tab, newline and carriage return escaped.
void AppendText(std::string& row, std::string_view text) {
  for (char c : text) {
    if (c == '\\' || c == '\t' || c == '\n' || c == '\r') {
      row += '\\';
      row += c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : '\\';
    } else {
      row += c;
    }
  }
  row += '\t';
}

// A bytea in COPY's text format: \\x and hex digits (the backslash doubled for COPY).
void AppendBytes(std::string& row, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  row += "\\\\x";
  for (unsigned char c : bytes) {
    row += kHex[c >> 4];
    row += kHex[c & 15];
  }
  row += '\t';
}

void AppendNumber(std::string& row, int64_t number) { row += std::to_string(number) + '\t'; }

int64_t Micros(Record::TimePoint time) {
  return std::chrono::duration_cast<std::chrono::microseconds>(time.time_since_epoch()).count();
}

// One row of the anchor's table: the record's export fields as columns.
void AppendRow(std::string& rows, const Record& r) {
  AppendText(rows, r.key);
  AppendText(rows, r.type);
  AppendNumber(rows, static_cast<int64_t>(r.state));
  AppendBytes(rows, r.result);
  AppendBytes(rows, r.fingerprint);
  AppendBytes(rows, r.checkpoint);
  AppendNumber(rows, static_cast<int64_t>(r.token));
  AppendNumber(rows, r.attempts);
  AppendText(rows, r.retryable ? "t" : "f");
  for (Record::TimePoint time : {r.created, r.updated, r.lease_deadline, r.expires}) {
    AppendNumber(rows, Micros(time));
  }
  AppendNumber(rows, r.holder.pid);
  AppendNumber(rows, static_cast<int64_t>(r.holder.process_start));
  AppendNumber(rows, static_cast<int64_t>(r.holder.pid_scope));
  AppendNumber(rows, static_cast<int64_t>(r.holder.request_id));
  rows += r.holder.took_over ? "t\n" : "f\n";
}

// The same rows as the store at `source`, in a table of PostgreSQL, dumped with pg_dump and
// restored with pg_restore into the same server after the table is dropped.
Status RestorePostgres(const RestoreConfig& config, const std::string& source,
                       ResultsFile& results) {
  const std::string table = PgTableName("restore");
  IDEM_ASSIGN_OR_RETURN(auto admin, PgConnection::Connect(config.postgres));
  IDEM_RETURN_IF_ERROR(DropPgTables(*admin, table));
  IDEM_RETURN_IF_ERROR(
      admin
          ->Exec("CREATE TABLE " + table +
                 " (key text PRIMARY KEY, type text NOT NULL, state smallint NOT NULL, "
                 "result bytea NOT NULL, fingerprint bytea NOT NULL, checkpoint bytea NOT NULL, "
                 "token bigint NOT NULL, attempts bigint NOT NULL, retryable boolean NOT NULL, "
                 "created bigint NOT NULL, updated bigint NOT NULL, lease_deadline bigint NOT "
                 "NULL, expires bigint NOT NULL, holder_pid bigint NOT NULL, "
                 "holder_process_start bigint NOT NULL, holder_pid_scope bigint NOT NULL, "
                 "holder_request_id bigint NOT NULL, took_over boolean NOT NULL)")
          .status());
  {
    IDEM_ASSIGN_OR_RETURN(auto store, Store::Open(source));
    IDEM_RETURN_IF_ERROR(admin->CopyIn(table, [&](const PgConnection::SendRows& send) -> Status {
      std::string rows;
      Status sent;
      IDEM_RETURN_IF_ERROR(store->Scan({}, [&](const Record& record) {
        AppendRow(rows, record);
        if (rows.size() < (1 << 20)) return true;
        sent = send(rows);
        rows.clear();
        return sent.ok();
      }));
      IDEM_RETURN_IF_ERROR(sent);
      return rows.empty() ? Status::OK() : send(rows);
    }));
  }
  const std::string dump = config.directory + "/restore.pgdump";
  IDEM_ASSIGN_OR_RETURN(const double dump_seconds,
                        TimedRun({config.pg_bin + "/pg_dump", "--format=custom", "--table", table,
                                  "--file", dump, config.postgres}));
  IDEM_RETURN_IF_ERROR(admin->Exec("DROP TABLE " + table).status());
  // The restore starts with no dirty pages of the load to write back.
  IDEM_RETURN_IF_ERROR(admin->Exec("CHECKPOINT").status());
  IDEM_ASSIGN_OR_RETURN(const double restore_seconds,
                        TimedRun({config.pg_bin + "/pg_restore", "--single-transaction",
                                  "--no-owner", "--dbname", config.postgres, dump}));
  IDEM_ASSIGN_OR_RETURN(const double restored, admin->Number("SELECT count(*) FROM " + table));
  IDEM_RETURN_IF_ERROR(DropPgTables(*admin, table));
  if (restored != static_cast<double>(config.records)) {
    return Status::Failed("pg_restore restored " + std::to_string(restored) + " rows of " +
                          std::to_string(config.records));
  }
  results.AddFigure("restore", "postgresql", "dump_seconds", dump_seconds, "s");
  results.AddFigure("restore", "postgresql", "restore_seconds", restore_seconds, "s");
  results.AddFigure("restore", "postgresql", "file_bytes", static_cast<double>(fs::file_size(dump)),
                    "bytes");
  return Status::OK();
}

}  // namespace

Status Restore(const RestoreConfig& config, ResultsFile& results) {
  const std::string source = config.directory + "/source";
  const std::string restored = config.directory + "/restored";
  const std::string exported = config.directory + "/export.jsonl";
  IDEM_RETURN_IF_ERROR(LoadDoneRecords(source, config.records));
  // The load's compactions would slow whatever runs next: both sides start from a quiet machine.
  WaitUntilQuiet(std::chrono::minutes(5));
  IDEM_ASSIGN_OR_RETURN(const double export_seconds,
                        TimedRun({config.idem_command, "export", source, "--output", exported}));
  IDEM_ASSIGN_OR_RETURN(
      const double import_seconds,
      TimedRun({config.idem_command, "import", restored, exported, "--create", "--quiet"}));
  IDEM_ASSIGN_OR_RETURN(const uint64_t imported, CountRecords(restored));
  if (imported != config.records) {
    return Status::Failed("idem import restored " + std::to_string(imported) + " records of " +
                          std::to_string(config.records));
  }
  results.AddFigure("restore", "idem", "records", static_cast<double>(config.records), "records");
  results.AddFigure("restore", "idem", "export_seconds", export_seconds, "s");
  results.AddFigure("restore", "idem", "import_seconds", import_seconds, "s");
  results.AddFigure("restore", "idem", "file_bytes", static_cast<double>(fs::file_size(exported)),
                    "bytes");
  if (!config.postgres.empty()) {
    WaitUntilQuiet(std::chrono::minutes(5));
    IDEM_RETURN_IF_ERROR(RestorePostgres(config, source, results));
  }
  return Status::OK();
}

}  // namespace idem::bench
