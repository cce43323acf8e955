// `idem`'s command line: the subcommands and their flags (CLI11), usage errors, and the call of
// the command chosen (commands.h).

#include "cli.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "commands.h"
#include "flag_values.h"
#include "summary.h"
#include "text.h"
#include "util/escape.h"
#include "util/pg_uri.h"

#ifndef IDEM_VERSION
#define IDEM_VERSION "0.1.0"
#endif

namespace idem::cli {
namespace {

// One line of a CLI11 message.
std::string OneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  TrimTrailingSpaces(text);
  return text;
}

constexpr const char* kFormatHelp =
    "table (aligned columns, local times) or jsonl (one JSON object a line, UTC times). "
    "Default: table on a terminal, jsonl otherwise";
constexpr const char* kKeyHelp = "Key bytes as given (use -- before a key starting with -)";
constexpr const char* kHexKeyHelp = "KEY is written in hex (for binary keys)";

// --timeout, which every command has.
void AddTimeout(CLI::App* command, std::string& timeout) {
  command
      ->add_option("--timeout", timeout,
                   "How long to wait for an answer of the store's owner or server, each time "
                   "(500ms, 2s, 1m, 1h; a bare number is seconds). Default: 10s. For ping: the "
                   "whole command")
      ->check(DurationValidator(kLongestTimeout, "1ms to 24h"));
}

// PATH, --table and --timeout, which every command but backup (store directories only) has.
void AddStore(CLI::App* command, std::string& path, std::string& table, std::string& timeout) {
  command->add_option("PATH", path, "Store directory, or a postgresql:// connection URI")
      ->required();
  command->add_option("--table", table,
                      "The store's table, for a postgresql:// PATH (default idem_records; "
                      "SCHEMA.TABLE names its schema); for "
                      "dump and get of a store directory, an application table to show");
  AddTimeout(command, timeout);
}

// The arguments of every subcommand; Parse fills the one given.
struct Arguments {
  std::string table;     // --table
  std::string timeout;   // --timeout, checked by DurationValidator; empty: the library's default
  bool verbose = false;  // --verbose
  DumpArgs dump;
  CLI::Option* dump_type = nullptr;  // --type given, even as empty
  GetArgs get;
  StatsArgs stats;
  PurgeArgs purge;
  ForgetArgs forget;
  CLI::Option* forget_type = nullptr;  // --type given, even as empty
  BackupArgs backup;
  ExportArgs export_;
  ImportArgs import;
  PingArgs ping;
  CheckArgs check;
};

CLI::App* AddDump(CLI::App& app, Arguments& args) {
  DumpArgs& dump = args.dump;
  CLI::App* command = app.add_subcommand(
      "dump",
      "List records in key order. Never writes; reads the store as of the moment it opens.");
  AddStore(command, dump.path, args.table, args.timeout);
  command
      ->add_option("--state", dump.state,
                   "Only records in this state (pending: lease live; timeout: lease passed)")
      ->check(CLI::IsMember({"pending", "done", "failed", "timeout"}));
  args.dump_type = command->add_option("--type", dump.type, "Only records of this type label");
  command->add_option("--prefix", dump.prefix, "Only keys that start with these bytes");
  command->add_option("--format", dump.format, kFormatHelp)
      ->check(CLI::IsMember({"table", "jsonl"}));
  command->add_option("--limit", dump.limit, "Stop after N records (N >= 1). Default: no limit")
      ->check(LimitValidator());
  return command;
}

CLI::App* AddGet(CLI::App& app, Arguments& args) {
  GetArgs& get = args.get;
  CLI::App* command =
      app.add_subcommand("get", "Show one record; exit 1 when there is none. Never writes.");
  AddStore(command, get.path, args.table, args.timeout);
  command->add_option("KEY", get.key, kKeyHelp)->required();
  command->add_flag("--hex-key", get.hex_key, kHexKeyHelp);
  command->add_option("--format", get.format, kFormatHelp)
      ->check(CLI::IsMember({"table", "jsonl"}));
  return command;
}

CLI::App* AddStats(CLI::App& app, Arguments& args) {
  StatsArgs& stats = args.stats;
  CLI::App* command = app.add_subcommand(
      "stats", "Count records by state and type; disk size; counters. Never writes.");
  AddStore(command, stats.path, args.table, args.timeout);
  command
      ->add_option("--format", stats.format,
                   "table, jsonl (one JSON object) or prometheus (text exposition format, for "
                   "node_exporter's textfile collector). Default: table on a terminal, jsonl "
                   "otherwise")
      ->check(CLI::IsMember({"table", "jsonl", "prometheus"}));
  command->add_option("--output", stats.output,
                      "Write to FILE instead of standard output, replacing it atomically (a "
                      "temporary file in the same directory, then a rename; none is left behind "
                      "on failure), as node_exporter's textfile collector needs");
  return command;
}

// --format and --quiet of the commands whose output is a summary (summary.h).
void AddSummaryOptions(CLI::App* command, SummaryArgs& summary) {
  command
      ->add_option("--format", summary.format,
                   "The summary: text (a sentence, the default) or json (one object of the same "
                   "figures, for scripts)")
      ->check(CLI::IsMember({std::string(kSummaryText), std::string(kSummaryJson)}));
  command->add_flag("--quiet", summary.quiet,
                    "Print nothing on success (errors still go to stderr)");
}

CLI::App* AddPurge(CLI::App& app, Arguments& args) {
  PurgeArgs& purge = args.purge;
  CLI::App* command = app.add_subcommand(
      "purge",
      "Remove records whose retention has expired, then compact what was removed. Last line: "
      "'purged N records' ('would purge N records' with --dry-run).");
  AddStore(command, purge.path, args.table, args.timeout);
  command->add_flag("--dry-run", purge.dry_run, "Count what would be removed; remove nothing");
  AddSummaryOptions(command, purge.summary);
  return command;
}

CLI::App* AddForget(CLI::App& app, Arguments& args) {
  ForgetArgs& forget = args.forget;
  CLI::App* command = app.add_subcommand(
      "forget",
      "Remove one record whatever its state (after reconciling a stuck request by hand), the "
      "records a selection matches, or the keys listed in a file; exit 1 when none was removed. "
      "A selected record that changes before its removal is kept.");
  AddStore(command, forget.path, args.table, args.timeout);
  command->add_option("KEY", forget.key, kKeyHelp);
  command->add_flag("--hex-key", forget.hex_key,
                    std::string(kHexKeyHelp) + " (also the lines of --keys-from)");
  command->add_option("--state", forget.state, "Select the records in this state")
      ->check(CLI::IsMember({"pending", "done", "failed", "timeout"}));
  args.forget_type = command->add_option("--type", forget.type, "Select records of this type");
  command->add_option("--prefix", forget.prefix, "Select keys that start with these bytes");
  command->add_option("--older-than", forget.older_than, "Select records last written over D ago")
      ->check(DurationValidator(kLongestAge, "1ms to 3650d"));
  command->add_option("--keys-from", forget.keys_from,
                      "Remove the keys of FILE, one a line (-: stdin)");
  command->add_flag("--dry-run", forget.dry_run, "Count what would be removed; remove nothing");
  AddSummaryOptions(command, forget.summary);
  return command;
}

CLI::App* AddBackup(CLI::App& app, BackupArgs& backup, std::string& timeout) {
  CLI::App* command = app.add_subcommand(
      "backup",
      "Copy the store, consistent as of one moment, into the new directory DEST while "
      "applications use it (taken by the store's owner; table files hard-linked when DEST is on "
      "the same file system). DEST must not exist. Restore: stop the applications, move DEST "
      "into the store's place.");
  command->add_option("PATH", backup.path, "Store directory")->required();
  command->add_option("DEST", backup.destination, "New directory for the copy")->required();
  command->add_flag("--verify", backup.verify,
                    "Then read the whole copy as 'idem check' does; exit 7, listing the "
                    "problems, when it is not clean (the copy is kept, to be looked at)");
  AddSummaryOptions(command, backup.summary);
  AddTimeout(command, timeout);
  return command;
}

CLI::App* AddExport(CLI::App& app, Arguments& args) {
  ExportArgs& export_args = args.export_;
  CLI::App* command = app.add_subcommand(
      "export",
      "Write every record with every field as JSON Lines, which 'idem import' reads back. Never "
      "writes to the store.");
  AddStore(command, export_args.path, args.table, args.timeout);
  command->add_option("--output", export_args.output,
                      "Write to FILE (mode 0600) instead of standard output, replacing it "
                      "atomically once complete");
  AddSummaryOptions(command, export_args.summary);
  return command;
}

CLI::App* AddImport(CLI::App& app, Arguments& args) {
  ImportArgs& import = args.import;
  CLI::App* command = app.add_subcommand(
      "import",
      "Write the records of a JSON Lines file (from 'idem export', or converted) into the store, "
      "with their states, tokens and times. Needs a store directory to itself. "
      "Every line is checked first: a bad line, or a key the store holds, is named with its line "
      "number and nothing is imported (exit 6).");
  AddStore(command, import.path, args.table, args.timeout);
  command->add_option("FILE", import.input, "JSON Lines to read; - (the default): standard input")
      ->check(CLI::Validator(
          [](std::string& file) -> std::string {
            if (file == "-") return "";
            return CLI::ExistingFile(file);
          },
          "FILE or -"));
  command->add_flag("--create", import.create,
                    "Make the store when PATH has none (a restore into a new directory)");
  command->add_flag("--finish", import.finish,
                    "Finish an import into the store directory PATH that was stopped part way "
                    "(the store refuses to open until then), from the checked input it left in "
                    "PATH/import-staging; FILE is not read");
  command->add_flag("--skip-existing", import.skip_existing,
                    "Leave a record the store holds as it is and go on, instead of refusing "
                    "the input");
  AddSummaryOptions(command, import.summary);
  return command;
}

CLI::App* AddPing(CLI::App& app, Arguments& args) {
  CLI::App* command = app.add_subcommand(
      "ping",
      "Check that the store answers a read (through its owner when a process owns it), within "
      "--timeout: exit 0 when it does, 5 when its owner or server does not answer in time, 3 "
      "when the store cannot be used. For health checks and watchdogs. Never writes.");
  AddStore(command, args.ping.path, args.table, args.timeout);
  command->add_flag("--quiet", args.ping.quiet, "Print nothing on success");
  return command;
}

CLI::App* AddCheck(CLI::App& app, Arguments& args) {
  CLI::App* command = app.add_subcommand(
      "check",
      "Read the whole store and list what is wrong with it: table files whose checksums do not "
      "match, records and table values that do not decode, the expiry index against the "
      "records, tokens against the token ceiling. Exit 0 when clean, 7 when problems were "
      "found, 3 when it could not be checked. A store that a process owns is checked through a "
      "backup its owner takes. Never writes to the store.");
  AddStore(command, args.check.path, args.table, args.timeout);
  command->add_option("--format", args.check.format, kFormatHelp)
      ->check(CLI::IsMember({"table", "jsonl"}));
  command->add_option("--scratch", args.check.scratch,
                      "Where the backup of a store that a process owns is made, and removed "
                      "after the check (default: beside the store, so that its table files are "
                      "linked, not copied)");
  return command;
}

// dump, get, stats, purge, forget, backup, export, import, ping, check
using Commands = std::array<CLI::App*, 10>;

// Parses argv into `args`; returns the exit code when the command must not run (--help,
// --version, a usage error, reported on `out` or `err`), nullopt when it may.
std::optional<int> Parse(CLI::App& app, const Commands& commands, int argc, char** argv,
                         std::ostream& out, std::ostream& err) {
  // CLI11 would report an unknown command as "A subcommand is required".
  if (argc >= 2 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(),
                   [&](const CLI::App* sub) { return sub->get_name() == argv[1]; })) {
    fmt::print(err,
               "idem: unknown command '{}'; the commands are dump, get, stats, purge, forget, "
               "backup, export, import, ping, check (see 'idem --help')\n",
               DisplayEscape(argv[1]));
    err.flush();
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, out, err);  // --help, --version
    }
    std::string command = "idem";
    for (CLI::App* sub : commands) {
      if (sub->parsed()) command = fmt::format("{} {}", command, sub->get_name());
    }
    fmt::print(err, "{}: {} (see '{} --help')\n", command, OneLine(e.what()), command);
    err.flush();
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(err, "idem: {}\n", OneLine(e.what()));
    err.flush();
    return kExitUsage;
  }
  return std::nullopt;
}

// forget's arguments, with what CLI11 leaves to work out: whether --type was given (even as
// empty), and --older-than's duration.
const ForgetArgs& FinishForgetArgs(Arguments& args) {
  args.forget.has_type = args.forget_type->count() > 0;
  if (!args.forget.older_than.empty()) {
    args.forget.age = ParseDuration(args.forget.older_than, kLongestAge).value();
  }
  return args.forget;
}

// Runs the command that was parsed.
int Dispatch(const Commands& commands, Arguments& args, std::ostream& out, std::ostream& err,
             const std::shared_ptr<const Clock>& clock) {
  const auto& [dump, get, stats, purge, forget, backup, export_, import, ping, check] = commands;
  // With a store directory, --table names an application table for dump and get: their
  // context has no PostgreSQL table.
  if (dump->parsed() && !util::IsPostgresUri(args.dump.path)) {
    args.dump.app_table = std::exchange(args.table, {});
  }
  if (get->parsed() && !util::IsPostgresUri(args.get.path)) {
    args.get.app_table = std::exchange(args.table, {});
  }
  const std::chrono::milliseconds timeout =
      args.timeout.empty() ? std::chrono::milliseconds(0)
                           : ParseDuration(args.timeout, kLongestTimeout).value();
  const auto context = [&](std::string command) {
    return Context{std::move(command), out, err, clock, args.table, timeout, args.verbose};
  };
  // For the other commands --table names a table of a PostgreSQL store: with a directory it
  // would be ignored.
  const std::array<std::pair<CLI::App*, const std::string*>, 9> paths = {
      {{dump, &args.dump.path},
       {get, &args.get.path},
       {stats, &args.stats.path},
       {purge, &args.purge.path},
       {forget, &args.forget.path},
       {export_, &args.export_.path},
       {import, &args.import.path},
       {ping, &args.ping.path},
       {check, &args.check.path}}};
  for (const auto& [command, path] : paths) {
    if (command->parsed() && !args.table.empty() && !util::IsPostgresUri(*path)) {
      return context(command->get_name())
          .Usage(
              "--table applies to a postgresql:// store, or to dump and get of an application "
              "table; PATH is a directory");
    }
  }
  try {
    if (dump->parsed()) {
      args.dump.has_type = args.dump_type->count() > 0;
      return Dump(context("dump"), args.dump);
    }
    if (get->parsed()) return Get(context("get"), args.get);
    if (stats->parsed()) return Stats(context("stats"), args.stats);
    if (purge->parsed()) return Purge(context("purge"), args.purge);
    if (forget->parsed()) return Forget(context("forget"), FinishForgetArgs(args));
    if (backup->parsed()) return Backup(context("backup"), args.backup);
    if (export_->parsed()) return Export(context("export"), args.export_);
    if (import->parsed()) return Import(context("import"), args.import);
    if (ping->parsed()) return Ping(context("ping"), args.ping);
    if (check->parsed()) return Check(context("check"), args.check);
  } catch (const std::exception& e) {  // std::bad_alloc, a filesystem error, ...
    fmt::print(err, "idem: {}\n", OneLine(e.what()));
    err.flush();
    return kExitStoreError;
  }
  err << "idem: no command (see 'idem --help')\n";
  return kExitUsage;
}

}  // namespace

int Run(int argc, char** argv, std::ostream& out, std::ostream& err,
        std::shared_ptr<const Clock> clock) {
  CLI::App app{"Inspect and maintain an idem idempotency store.", "idem"};
  app.set_version_flag("--version", std::string(IDEM_VERSION));
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success, 1 not found (get, forget) or nothing listed (dump), 2 usage error,\n"
      "3 store error (missing, unreadable, corrupt or busy), 4 written by a newer idem,\n"
      "5 stats: the store's owner could not be asked (stopped, overloaded or exclusive),\n"
      "or whether one runs could not be told (its lock file cannot be opened),\n"
      "6 import: a line was refused (its number and why on stderr); nothing was imported.\n"
      "ping: 0 the store answered, 5 its owner or server did not answer within --timeout,\n"
      "3 it cannot be used. check: 0 clean, 7 problems found (each listed).\n"
      "Run 'idem COMMAND --help' for a command's flags. See 'man idem' and\n"
      "docs/operations.md.\n");

  Arguments args;
  const Commands commands = {AddDump(app, args),   AddGet(app, args),
                             AddStats(app, args),  AddPurge(app, args),
                             AddForget(app, args), AddBackup(app, args.backup, args.timeout),
                             AddExport(app, args), AddImport(app, args),
                             AddPing(app, args),   AddCheck(app, args)};
  for (CLI::App* command : commands) {
    command->add_flag("--verbose", args.verbose,
                      "Also show the store's info lines (a failover, a recovery), each with its "
                      "event name; warnings and errors are always shown");
    command->footer("Exit codes and examples: 'man idem' (docs/idem.1) and docs/operations.md.");
  }
  if (const std::optional<int> code = Parse(app, commands, argc, argv, out, err)) return *code;
  // The store's log writes to err from the store's own threads too (Context::StoreOptions).
  // std::cerr may be written from several threads at once; another stream (a test's) is made so.
  LockedStreamBuf locked(err.rdbuf());
  std::ostream shared_err(&locked);
  return Dispatch(commands, args, out, &err == &std::cerr ? err : shared_err, clock);
}

}  // namespace idem::cli
